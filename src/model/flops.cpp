#include "model/flops.hpp"

namespace trainer::model {

std::int64_t norm_parameters(const ModelConfig& m) {
  return m.norm == Norm::LayerNorm && m.bias ? 2LL * m.hidden : m.hidden;
}

std::int64_t count_parameters(const ModelConfig& m) {
  const std::int64_t h = m.hidden, f = m.ffn, V = m.vocab_size, S = m.seq_len;
  const std::int64_t norm = norm_parameters(m);
  const std::int64_t mlp_in = (m.mlp == Mlp::SwiGlu ? 2 : 1);
  const std::int64_t kv = 2LL * kv_heads_of(m) * (h / m.heads);  // key and value rows
  std::int64_t layer = 2 * norm + h * h + kv * h + h * h + mlp_in * h * f + f * h;
  if (m.bias) layer += h + kv + h + mlp_in * f + h;
  else if (m.qkv_bias) layer += h + kv;
  std::int64_t total = V * h + m.layers * layer + norm;
  if (m.positions == Positions::Learned) total += S * h;
  if (!m.tied_embeddings) total += V * h;
  return total;
}

double flops_per_token(const ModelConfig& m) {
  const double h = m.hidden, f = m.ffn, V = m.vocab_size, S = m.seq_len, L = m.layers;
  const double mlp_mats = (m.mlp == Mlp::SwiGlu ? 3.0 : 2.0);
  const double kv = 2.0 * kv_heads_of(m) * (h / m.heads);
  const double matmul_weights = L * (2.0 * h * h + kv * h + mlp_mats * h * f) + h * V;
  return 6.0 * matmul_weights + 12.0 * L * S * h;
}

}  // namespace trainer::model
