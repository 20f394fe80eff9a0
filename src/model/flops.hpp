// Parameter count and model FLOPs per token, from the config alone (no torch), so
// check-config, the startup summary and MFU agree on one definition.
#pragma once

#include <cstdint>

#include "config/config.hpp"

namespace trainer::model {

// Parameters of one norm: its weight, and a bias for a LayerNorm with model.bias.
std::int64_t norm_parameters(const ModelConfig& m);

// Parameters of the unsharded model (real vocab, not padding; tied embedding counted once).
std::int64_t count_parameters(const ModelConfig& m);

// Training FLOPs per token, forward + backward (3x forward), PaLM/Megatron style:
//   6 * (matmul weights per token) + 12 * layers * seq_len * hidden   (attention scores and
// the weighted sum of values, no causal discount). Matmul weights: per layer queries h^2, keys
// and values 2 * kv_heads * head_dim * h, out projection h^2, MLP (2 or 3) * h * ffn, and the
// output head h * vocab.
double flops_per_token(const ModelConfig& m);

}  // namespace trainer::model
