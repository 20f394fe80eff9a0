// A layout: the parallel settings of a run, the one type every part of trainer uses for them
// (the planner's search points, `--layout` / `--layouts` on the command line, verify's runs).
// Two spellings: the grid alone as DPxPPxTP or DPxPPxTPxCP ("2x2x2", "2x1x2x4": what the command
// line takes), and the whole layout for people ("dp2 pp4 tp2 cp2 v1 mb2 1f1b full zero1 sp").
#pragma once

#include <string>

#include "config/config.hpp"

namespace trainer {

// The ParallelConfig settings a layout search varies (plus optim.zero_stage), with the same
// meaning; sequence_parallel is only ever true with tp > 1 here, reshard_after_forward
// (parallel.fsdp_reshard_after_forward) only matters at zero stage 3 without PP.
struct Layout {
  int dp = 1, pp = 1, tp = 1, cp = 1, virtual_stages = 1, micro_batch_size = 1;
  Schedule schedule = Schedule::OneFOneB;
  Recompute recompute = Recompute::None;
  ZeroStage zero_stage = ZeroStage::None;
  bool sequence_parallel = false;
  bool reshard_after_forward = true;
  int world() const { return dp * cp * pp * tp; }
};

Layout layout_of(const Config& cfg);
// `cfg` run at `layout` (explicit stage_layers are dropped when the number of chunks changes).
Config with_layout(Config cfg, const Layout& layout);

// "DPxPPxTP" or "DPxPPxTPxCP" (without CP, `base`'s parallel.cp): a layout of those grid sizes
// with every other setting as `base` has it (its sequence_parallel setting too, which layout_of
// drops at tp 1); throws ConfigError naming `option`.
Layout parse_grid(const std::string& text, const std::string& option, const Config& base);
std::string grid_name(const Layout& layout);  // "2x2x2", "2x2x2x2" with cp 2
std::string describe(const Layout& layout);   // "dp2 pp4 tp2 cp2 v1 mb2 1f1b full zero1 sp"

}  // namespace trainer
