// Every seed of a run comes from runtime.seed, here:
//   - seed_for(seed, name): a stable 64-bit seed per named thing (a parameter's init, a dataset's
//     sample order), so it does not depend on the layout, the build or the platform;
//   - seed_dropout: the default generators that dropout draws from.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::runtime {

std::uint64_t seed_for(std::int64_t run_seed, const std::string& name);

// Seeds the default (CPU and CUDA) generators for dropout. The TP ranks of one (dp, pp) pass the
// same `tp_group_index` (rank / tp): their replicated activations (the residual stream without
// sequence parallelism) must drop the same elements, or the replicas of norms and biases drift
// apart. The masks still depend on the layout, so layouts agree only without dropout.
void seed_dropout(std::int64_t run_seed, int tp_group_index);

}  // namespace trainer::runtime
