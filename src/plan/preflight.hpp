// The memory pre-flight of `train` and `check-config`: before any process group or tensor
// exists, the planner's memory model (trainer's own assumptions) for this config's layout
// against what the ranks have. The target is a GPU of runtime.gpu_memory_gb when that is set,
// else the visible GPU this rank would use (shared when ranks outnumber GPUs), else this
// machine's available memory for all its local ranks. plan.preflight: error | warn | off.
#pragma once

#include <optional>

#include "config/config.hpp"
#include "plan/plan.hpp"

namespace trainer::plan {

// The memory the pre-flight checks against, or nothing when it cannot know it (runtime.device
// cuda with no GPU visible and no runtime.gpu_memory_gb; an unreadable /proc/meminfo).
std::optional<Hardware> local_memory(const Config& cfg, int local_rank, int local_ranks);

// cfg's layout, predicted with trainer's assumptions (memory only) on `hw`.
Prediction predict_own_layout(const Config& cfg, const Hardware& hw);

// The pre-flight: the prediction for cfg's own layout (nothing when the target is unknown).
// With plan.preflight=error a layout that does not fit throws ConfigError naming the biggest
// term and the settings of a layout of the same size that fits (if one does); with warn the
// same message is logged and the run goes on.
std::optional<Prediction> check_memory(const Config& cfg, int local_rank, int local_ranks);

}  // namespace trainer::plan
