#include "runtime/seed.hpp"

#include <ATen/Context.h>

namespace trainer::runtime {

std::uint64_t seed_for(std::int64_t run_seed, const std::string& name) {
  // FNV-1a over the name, mixed with the run seed: stable across builds and platforms.
  std::uint64_t h = 1469598103934665603ull ^ static_cast<std::uint64_t>(run_seed);
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void seed_dropout(std::int64_t run_seed, int tp_group_index) {
  at::manual_seed(static_cast<std::uint64_t>(run_seed) + static_cast<std::uint64_t>(tp_group_index));
}

}  // namespace trainer::runtime
