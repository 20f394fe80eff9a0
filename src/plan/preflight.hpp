// The memory pre-flight of `train` and `check-config`: before any process group or tensor
// exists, the planner's memory model for this config's layout against what each rank has
// (CPU: available memory ÷ local ranks; GPU: runtime.gpu_memory_gb or the device's memory).
#pragma once

#include "config/config.hpp"
#include "plan/plan.hpp"

namespace trainer::plan {

// This machine's memory as the pre-flight sees it (`local_ranks` processes share it).
Hardware local_memory(const Config& cfg, int local_ranks);

// The prediction for cfg's own layout; throws ConfigError when it does not fit, naming the
// biggest term and the settings of a layout of the same size that fits (if one does).
Prediction check_memory(const Config& cfg, int local_ranks);

}  // namespace trainer::plan
