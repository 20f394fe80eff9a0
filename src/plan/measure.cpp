#include "plan/measure.hpp"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "distributed/comm.hpp"
#include "distributed/grid.hpp"
#include "distributed/launcher.hpp"
#include "metrics/peak.hpp"
#include "runtime/clock.hpp"
#include "runtime/device.hpp"
#include "runtime/files.hpp"

namespace trainer::plan {
namespace {

using runtime::Clock;
using runtime::seconds_since;

// Median seconds of `repeats` all-reduces of `bytes` (after one untimed).
double time_all_reduce(distributed::Group& world, std::int64_t bytes, int repeats) {
  at::Tensor t = at::ones({bytes / 4}, at::kFloat);
  distributed::all_reduce(world, t);
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    distributed::barrier(world);
    const auto t0 = Clock::now();
    distributed::all_reduce(world, t);
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Copy bandwidth: read + write of a buffer far larger than the caches, in GB/s.
double copy_gbs() {
  at::Tensor a = at::ones({64 << 20}, at::kFloat), b = at::empty_like(a);  // 256 MB each
  b.copy_(a);
  const auto t0 = Clock::now();
  int n = 0;
  do {
    b.copy_(a);
    ++n;
  } while (seconds_since(t0) < 0.5);
  return 2.0 * a.nbytes() * n / seconds_since(t0) / 1e9;
}

}  // namespace

CommFigures bench_comm(const distributed::JobEnv& job, const std::string& output) {
  distributed::Comm comm(job, distributed::Grid(job.world_size, 1, 1), std::chrono::seconds(60));
  // Small messages give the latency, large ones the bandwidth: t = a + bytes / b, least squares.
  std::vector<std::pair<double, double>> points;
  for (std::int64_t bytes = 4 << 10; bytes <= (32 << 20); bytes *= 4)
    points.emplace_back(static_cast<double>(bytes), time_all_reduce(comm.world(), bytes, bytes < (1 << 20) ? 50 : 10));
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double n = static_cast<double>(points.size());
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  if (!(slope > 0)) throw std::runtime_error("bench-comm: all-reduce time did not grow with size; run it again on a quieter machine");
  // A ring all-reduce over r ranks moves 2(r − 1)/r of the buffer in 2(r − 1) latency steps.
  const double r = job.world_size, ring = 2 * (r - 1) / r, steps = 2 * (r - 1);
  CommFigures f;
  f.gbs = ring / slope / 1e9;
  f.latency_us = std::max(points.front().second - points.front().first * slope, 0.0) / steps * 1e6;
  if (job.rank == 0) {
    const std::string json = nlohmann::ordered_json{{"latency_us", f.latency_us}, {"gbs", f.gbs}}.dump() + "\n";
    if (output.empty()) std::cout << json << std::flush;
    else runtime::write_file_atomic(output, json);
  }
  return f;
}

CommFigures measure_comm() {
  const std::string file = std::filesystem::temp_directory_path() / ("trainer-bench-comm-" + std::to_string(getpid()) + ".json");
  distributed::LaunchOptions o;
  o.nproc = 2;
  o.args = {"bench-comm", "--output", file};
  if (int rc = distributed::launch_local(o); rc != 0)
    throw std::runtime_error("bench-comm failed with exit code " + std::to_string(rc));
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(file);
  CommFigures f;
  try {
    const nlohmann::json figures = nlohmann::json::parse(text);
    f.latency_us = figures.at("latency_us").get<double>();
    f.gbs = figures.at("gbs").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("bench-comm wrote no figures: ") + e.what());
  }
  return f;
}

Hardware measure_cpu(const RuntimeConfig& runtime) {
  Hardware hw;
  hw.name = "cpu";
  hw.is_cpu = true;
  hw.cores = static_cast<int>(std::thread::hardware_concurrency());
  hw.memory_gb = runtime::available_memory_bytes() / 1e9;
  runtime::use_cpu_bf16(runtime);  // bf16's peak is that of the products the run will compute
  const double peak = metrics::measure_peak(runtime.precision, 2048, 1.0).model_tflops;
  hw.bf16_tflops = hw.fp32_tflops = hw.tf32_tflops = peak;  // the run's precision, measured
  hw.memory_gbs = copy_gbs();
  const CommFigures comm = measure_comm();
  hw.intra_gbs = hw.inter_gbs = comm.gbs;
  hw.intra_latency_us = hw.inter_latency_us = comm.latency_us;
  hw.gpus_per_node = 0;  // every rank is local
  return hw;
}

}  // namespace trainer::plan
