#include "plan/preflight.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "plan/measure.hpp"
#include "runtime/device.hpp"

namespace trainer::plan {
namespace {

// The --set overrides that turn layout `from` into `to`, and how many there are.
std::vector<std::string> changes(const Layout& from, const Layout& to) {
  std::vector<std::string> out;
  auto add = [&](bool differs, const std::string& key, const std::string& value) {
    if (differs) out.push_back("--set " + key + "=" + value);
  };
  add(from.dp != to.dp, "parallel.dp", std::to_string(to.dp));
  add(from.pp != to.pp, "parallel.pp", std::to_string(to.pp));
  add(from.tp != to.tp, "parallel.tp", std::to_string(to.tp));
  add(from.micro_batch_size != to.micro_batch_size, "parallel.micro_batch_size", std::to_string(to.micro_batch_size));
  add(from.schedule != to.schedule, "parallel.schedule", name_of(to.schedule));
  add(from.virtual_stages != to.virtual_stages, "parallel.virtual_stages", std::to_string(to.virtual_stages));
  add(from.recompute != to.recompute, "parallel.recompute", name_of(to.recompute));
  add(from.zero_stage != to.zero_stage, "optim.zero_stage", std::to_string(to.zero_stage));
  add(from.sequence_parallel != to.sequence_parallel, "parallel.sequence_parallel", to.sequence_parallel ? "true" : "false");
  return out;
}

}  // namespace

Hardware local_memory(const Config& cfg, int local_ranks) {
  Hardware hw;
  const bool gpu = cfg.runtime.device == DeviceKind::Cuda || (cfg.runtime.device == DeviceKind::Auto && runtime::gpu_count() > 0);
  if (gpu) {
    hw.name = "cuda";
    hw.memory_gb = cfg.runtime.gpu_memory_gb > 0 ? cfg.runtime.gpu_memory_gb : runtime::gpu_total_memory(0) / 1e9;
    hw.gpus_per_node = local_ranks;
  } else {
    hw.name = "cpu";
    hw.is_cpu = true;
    hw.memory_gb = available_memory_bytes() / 1e9;
    hw.gpus_per_node = local_ranks;
  }
  return hw;
}

Prediction check_memory(const Config& cfg, int local_ranks) {
  const Hardware hw = local_memory(cfg, local_ranks);
  const Layout layout = layout_of(cfg);
  const Prediction p = predict(cfg, layout, hw);
  if (p.fits) return p;
  const auto [term, bytes] = p.memory.biggest();
  std::string fix;
  // A layout of the same size that fits, preferring the fewest changed settings, then the one
  // that uses the most of the memory (the least recomputation and sharding given up).
  std::vector<Prediction> fitting;
  for (auto& q : search(cfg, layout.dp * layout.pp * layout.tp, hw))
    if (q.fits) fitting.push_back(q);
  auto cost = [&](const Prediction& q) { return std::make_pair(changes(layout, q.layout).size(), -q.memory.total()); };
  const auto best = std::min_element(fitting.begin(), fitting.end(), [&](auto& a, auto& b) { return cost(a) < cost(b); });
  if (best != fitting.end()) {
    for (const auto& c : changes(layout, best->layout)) fix += (fix.empty() ? "" : " ") + c;
    fix = "a layout that fits: " + fix + " (predicted " + fmt::format("{:.2f}", best->memory.total() / 1e9) + " GB)";
  } else {
    fix = "no layout of " + std::to_string(layout.dp * layout.pp * layout.tp) +
          " processes fits: use more processes, more memory, or a smaller model";
  }
  throw ConfigError(fmt::format(
      "parallel: {} is predicted to need {:.2f} GB on the most loaded rank (pipeline stage {}) but a rank has {:.2f} GB "
      "({}); the biggest term is {} at {:.2f} GB; {}; see `trainer plan`",
      describe(layout), p.memory.total() / 1e9, p.memory.stage, p.available / 1e9,
      hw.is_cpu ? "available memory / " + std::to_string(local_ranks) + " local processes" : "runtime.gpu_memory_gb or the device",
      term, bytes / 1e9, fix));
}

}  // namespace trainer::plan
