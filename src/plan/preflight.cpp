#include "plan/preflight.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "plan/measure.hpp"
#include "runtime/device.hpp"

namespace trainer::plan {
namespace {

// The pre-flight always judges the trainer's own memory, whatever plan.assumptions says.
Config trainer_assumptions(Config cfg) {
  cfg.plan.assumptions = PlanAssumptions::Trainer;
  return for_planning(cfg);
}

// A layout of the same size that fits, with the fewest changed settings, then the one that uses
// the most of the memory (the least recomputation and sharding given up), as --set overrides.
std::string fitting_alternative(const Config& cfg, const Layout& layout, const Hardware& hw) {
  const int world = layout.world();
  std::vector<Prediction> fitting;
  for (auto& q : search(cfg, world, hw, false))
    if (q.fits) fitting.push_back(q);
  auto changes = [&](const Layout& to) { return overrides_between(with_layout(cfg, layout), with_layout(cfg, to)); };
  auto cost = [&](const Prediction& q) { return std::make_pair(changes(q.layout).size(), -q.memory.total()); };
  const auto best = std::min_element(fitting.begin(), fitting.end(), [&](auto& a, auto& b) { return cost(a) < cost(b); });
  if (best == fitting.end())
    return "no layout of " + std::to_string(world) + " processes fits: use more processes, more memory, or a smaller model";
  std::string sets;
  for (const auto& c : changes(best->layout)) sets += std::string(sets.empty() ? "" : " ") + "--set " + c;
  return fmt::format("a layout that fits: {} (predicted {:.2f} GB)", sets, best->memory.total() / 1e9);
}

}  // namespace

std::optional<Hardware> local_memory(const Config& cfg, int local_rank, int local_ranks) {
  Hardware hw;
  hw.gpus_per_node = local_ranks;
  const int gpus = runtime::gpu_count();
  if (cfg.runtime.gpu_memory_gb > 0) {
    hw.name = "gpu (runtime.gpu_memory_gb)";
    hw.memory_gb = cfg.runtime.gpu_memory_gb;
    return hw;
  }
  if (cfg.runtime.device != DeviceKind::Cpu && gpus > 0) {
    // Ranks beyond the GPU count share devices (runtime/device.hpp: local_rank % gpus).
    hw.name = "cuda";
    hw.memory_gb = runtime::gpu_total_memory(local_rank % gpus) / 1e9 / std::max(1, (local_ranks + gpus - 1) / gpus);
    return hw;
  }
  if (cfg.runtime.device == DeviceKind::Cuda) return std::nullopt;  // a GPU run checked from a machine without one
  const double available = runtime::available_memory_bytes();
  if (available <= 0) return std::nullopt;
  hw.name = "cpu";
  hw.is_cpu = true;
  hw.memory_gb = available / 1e9;
  return hw;
}

Prediction predict_own_layout(const Config& cfg, const Hardware& hw) {
  return predict(trainer_assumptions(cfg), layout_of(cfg), hw, false);
}

std::optional<Prediction> check_memory(const Config& cfg, int local_rank, int local_ranks) {
  if (cfg.plan.preflight == Preflight::Off) return std::nullopt;
  const std::optional<Hardware> hw = local_memory(cfg, local_rank, local_ranks);
  if (!hw) return std::nullopt;
  const Prediction p = predict_own_layout(cfg, *hw);
  if (p.fits) return p;
  const auto [term, bytes] = p.memory.biggest();
  const std::string where = hw->is_cpu ? fmt::format("this machine has {:.2f} GB available for its {} local processes",
                                                     hw->memory_gb, local_ranks)
                                       : fmt::format("a rank has {:.2f} GB ({})", p.available / 1e9, hw->name);
  const std::string message = fmt::format(
      "parallel: {} is predicted to need {:.2f} GB on the most loaded rank (pipeline stage {}) but {}; the biggest "
      "term is {} at {:.2f} GB; {}; see `trainer plan` (or plan.preflight=warn)",
      describe(p.layout), p.memory.total() / 1e9, p.memory.stage, where, term, bytes / 1e9,
      fitting_alternative(trainer_assumptions(cfg), p.layout, *hw));
  if (cfg.plan.preflight == Preflight::Error) throw ConfigError(message);
  spdlog::warn("{}", message);
  return p;
}

}  // namespace trainer::plan
