// The one clock for durations in trainer: a steady clock, read as seconds.
#pragma once

#include <chrono>

namespace trainer::runtime {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace trainer::runtime
