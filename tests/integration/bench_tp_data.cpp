// Not a unit test: a measurement behind a hidden tag, so CTest never runs it (run it with
// `build/trainer_tests "[.measure]"`). Tensor-parallel peers need identical batches. Each can
// read its own from the memory-mapped dataset (what trainer does), or TP rank 0 can read and
// broadcast (Megatron-LM's choice). This times both per step for the small benchmark config on
// two processes over Gloo and prints the medians; the README quotes a result.
#include "catch_torch.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>

#include "config/config.hpp"
#include "data/batches.hpp"
#include "data/indexed_dataset.hpp"
#include "distributed/comm.hpp"
#include "distributed/job_env.hpp"
#include "helpers.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e6;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int tp_data_worker() {
  using namespace trainer;
  const std::string dir = testing::env_or("TEST_OUT", ".");
  const distributed::JobEnv job = distributed::detect_job_env(distributed::current_environment());
  distributed::Comm comm(job, distributed::Grid(1, 1, 2), std::chrono::seconds(30));
  Config cfg = load_config(testing::source_dir() + "/configs/small.yaml",
                           {"parallel.tp=2", "data.source=indexed", "data.path=" + dir + "/corpus"});
  auto source = data::make_source(cfg);
  const int batch = cfg.train.global_batch_size;  // dp = 1: this rank's samples of the step
  std::vector<double> read, broadcast_total;
  for (int step = 0; step < 300; ++step) {
    distributed::barrier(comm.tp());
    auto t0 = Clock::now();
    at::Tensor local = source->samples(static_cast<std::int64_t>(step) * batch, batch);  // every peer reads
    read.push_back(seconds_since(t0));
    distributed::barrier(comm.tp());
    t0 = Clock::now();  // rank 0 reads and sends the same [batch, seq_len + 1] block
    at::Tensor sent = comm.tp().index() == 0 ? source->samples(static_cast<std::int64_t>(step) * batch, batch)
                                             : at::empty_like(local);
    distributed::broadcast(comm.tp(), sent, 0);
    broadcast_total.push_back(seconds_since(t0));
    if (!sent.equal(local)) return 1;
  }
  std::ofstream(dir + "/rank" + std::to_string(job.rank)) << median_us(read) << " " << median_us(broadcast_total);
  return 0;
}
testing::RegisterWorker reg("tp_data", tp_data_worker);

}  // namespace

TEST_CASE("measure: TP peers reading batches locally vs rank 0 broadcasting them", "[.measure]") {
  testing::TempDir dir;
  {
    trainer::data::IndexedDatasetWriter w(dir.file("corpus.bin"), trainer::data::TokenType::kUInt16);
    std::mt19937 rng(1);
    for (int d = 0; d < 2000; ++d) {
      std::vector<std::int32_t> doc(1000);
      for (auto& t : doc) t = static_cast<std::int32_t>(rng() % 8192);
      w.add_document(doc);
    }
    w.finish(dir.file("corpus.idx"));
  }
  REQUIRE(testing::launch_workers("tp_data", 2, {{"TEST_OUT", dir.path}, {"OMP_NUM_THREADS", "1"}}) == 0);
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir.file("rank" + std::to_string(r)));
    double read_us = 0, broadcast_us = 0;
    in >> read_us >> broadcast_us;
    std::printf("rank %d, small config (8 samples x 257 tokens per step): local read %.1f us/step, "
                "rank-0 read + broadcast %.1f us/step\n", r, read_us, broadcast_us);
  }
}
