#include "model/gpt.hpp"

#include <torch/torch.h>

#include <cmath>

#include "context_parallel/context_parallel.hpp"
#include "model/recompute.hpp"
#include "ops/cpu_ops.hpp"
#include "runtime/device.hpp"

namespace trainer::model {

using tensor_parallel::ColumnParallelLinear;
using tensor_parallel::RowParallelLinear;
using tensor_parallel::TPContext;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType param_dtype(const Config& cfg) {
  return runtime::scalar_type(cfg.runtime.precision);
}

at::ScalarType residual_dtype(const Config& cfg) {
  return cfg.runtime.fp32_residual ? at::kFloat : param_dtype(cfg);
}

// ---------------------------------------------------------------- forward pass ------------

namespace {

// RMSNorm x·w/sqrt(mean(x²) + eps), computed in fp32 whatever x's dtype and returned in w's.
// Backward keeps x and one fp32 scale per token, what a fused kernel keeps (autograd over the
// composite would keep x², the scaled x and more, each the size of x).
struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double eps) {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor inv_rms = at::rsqrt(xf.pow(2).mean(-1, true) + eps);
    ctx->save_for_backward({x, w, inv_rms});
    return (xf * inv_rms * w.to(at::kFloat)).to(w.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor& inv_rms = saved[2];
    const at::Tensor normed = x.to(at::kFloat) * inv_rms;
    const at::Tensor g = grads[0].to(at::kFloat);
    const at::Tensor gw = g * w.to(at::kFloat);
    // d/dx of x·r(x)·w with r = (mean x² + eps)^(-1/2): r·(g·w − normed·mean(g·w·normed)).
    const at::Tensor dx = inv_rms * (gw - normed * (gw * normed).mean(-1, true));
    const at::Tensor dw = (g * normed).reshape({-1, g.size(-1)}).sum(0);
    return {dx.to(x.scalar_type()), dw.to(w.scalar_type()), at::Tensor()};
  }
};

}  // namespace

// Norms compute in fp32 internally and return the weights' dtype, the input of the matmuls.
at::Tensor Chunk::norm(const Norm& n, const at::Tensor& x) const {
  if (cfg_->norm == trainer::Norm::LayerNorm)
    return at::layer_norm(x.to(n.weight.scalar_type()), {x.size(-1)}, n.weight, n.bias, cfg_->norm_eps);
  return RmsNorm::apply(x, n.weight, cfg_->norm_eps);
}

at::Tensor Chunk::dropout(const at::Tensor& x, bool training) const {
  return training && cfg_->dropout > 0 ? at::dropout(x, cfg_->dropout, true) : x;
}

at::Tensor Chunk::rope(const at::Tensor& x) const {
  // Rotate-half form (as in Llama): pairs (i, i + D/2) are rotated by position-dependent angles.
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  const int64_t s = x.size(-2);  // the table's first s rows (inputs may be shorter than seq_len)
  // The tables are fp32, so the rotation is computed in fp32 and rounded once to x's dtype.
  return (x * rope_cos_.narrow(0, 0, s) + rotated * rope_sin_.narrow(0, 0, s)).to(x.scalar_type());
}

at::Tensor rope_inverse_frequencies(const ModelConfig& m) {
  const int64_t D = m.hidden / m.heads;
  // In float32 and in Hugging Face's order of operations, so that the tables are bitwise its
  // (angles at position 8192 would otherwise differ by ~1e-3 rad).
  at::Tensor inv = 1.0 / at::pow(m.rope_theta, at::arange(0, D, 2, at::kLong).to(at::kFloat) / static_cast<double>(D));
  if (m.rope_scaling == RopeScaling::Llama3) {
    // Wavelengths longer than original / low_freq_factor are slowed by `factor`, shorter than
    // original / high_freq_factor kept, and those between blended linearly in original/wavelength.
    const double original = m.rope_original_max_positions;
    at::Tensor wavelength = 2 * M_PI / inv;
    at::Tensor smooth = (original / wavelength - m.rope_low_freq_factor) / (m.rope_high_freq_factor - m.rope_low_freq_factor);
    at::Tensor blended = (1 - smooth) * inv / m.rope_factor + smooth * inv;
    at::Tensor scaled = at::where(wavelength > original / m.rope_low_freq_factor, inv / m.rope_factor, inv);
    const at::Tensor medium = (wavelength >= original / m.rope_high_freq_factor) & (wavelength <= original / m.rope_low_freq_factor);
    inv = at::where(medium, blended, scaled);
  }
  return inv;
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout) {
  // LibTorch picks a flash kernel where the device and dtype have one (CPU fp32/bf16, CUDA
  // bf16/fp16/fp32), which keeps no [S, S] scores or probabilities for backward, and its own
  // math (which does) elsewhere. Dropout on the probabilities is drawn inside the kernel. The
  // scale is the default 1/sqrt(head_dim). enable_gqa lets query heads share key/value heads
  // inside the kernel, so the repeated keys and values are never materialised (Hugging Face's
  // repeat_kv copies them). Where CPU bf16 products compute in fp32 (src/ops/cpu_ops.hpp), so
  // does attention: LibTorch's CPU flash kernel in bf16 is 4x slower than in fp32 there (forward
  // and backward of [8, 6, 256, 64] under the AVX2 kernels: 81 ms against 19 ms).
  if (ops::computes_in_fp32(q))
    return causal_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), dropout).to(q.scalar_type());
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true, /*scale=*/{},
                                          /*enable_gqa=*/q.size(1) != k.size(1));
}

// RoPE on queries and keys, then attention: over this rank's sequence, or under context
// parallelism over the whole sequence spread over the CP group.
at::Tensor Chunk::attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool training) const {
  const bool rotary = cfg_->positions == Positions::Rope;
  const at::Tensor qr = rotary ? rope(q) : q, kr = rotary ? rope(k) : k;
  if (cp_->size() == 1) return causal_attention(qr, kr, v, training ? cfg_->dropout : 0.0);
  // In fp32 where CPU bf16 products compute in fp32, as causal_attention does (it says why).
  if (ops::computes_in_fp32(q))
    return context_parallel::attention(qr.to(at::kFloat), kr.to(at::kFloat), v.to(at::kFloat), *cp_).to(q.scalar_type());
  return context_parallel::attention(qr, kr, v, *cp_);
}

at::Tensor Chunk::attention(const Block& b, const at::Tensor& x, bool training) const {
  const at::Tensor input = tensor_parallel::column_input(x, tp_);
  at::Tensor q = b.q.apply(input, tp_);    // [B, S, local heads * D]
  at::Tensor kv = b.kv.apply(input, tp_);  // [B, S, local kv heads * 2 * D]
  const int64_t B = q.size(0), S = q.size(1);
  q = q.view({B, S, local_heads_, head_dim_}).transpose(1, 2);  // [B, h, S, D]
  // unbind, not kv[i]: its backward stacks both gradients in one copy, where two selects would
  // each zero a full-size buffer and add them up.
  const std::vector<at::Tensor> k_v = kv.view({B, S, local_kv_heads_, 2, head_dim_}).permute({3, 0, 2, 1, 4}).unbind(0);
  at::Tensor out = recompute_ == Recompute::Selective
                       ? recompute([this, training](const std::vector<at::Tensor>& in) {
                                     return attention_core(in[0], in[1], in[2], training);
                                   }, {q, k_v[0], k_v[1]})
                       : attention_core(q, k_v[0], k_v[1], training);  // [B, h, S, D]
  out = out.transpose(1, 2).reshape({B, S, local_heads_ * head_dim_});
  return b.proj.forward(out, tp_);
}

at::Tensor Chunk::mlp(const Block& b, const at::Tensor& x) const {
  const at::Tensor input = tensor_parallel::column_input(x, tp_);
  at::Tensor h = b.fc1.apply(input, tp_);
  if (cfg_->mlp == Mlp::SwiGlu) h = at::silu(b.gate.apply(input, tp_)) * h;
  else h = ops::gelu_tanh(h);
  return b.fc2.forward(h, tp_);
}

at::Tensor Chunk::block(const Block& b, const at::Tensor& x, bool training) const {
  at::Tensor h = x + dropout(attention(b, norm(b.norm1, x), training), training);
  return h + dropout(mlp(b, norm(b.norm2, h)), training);
}

at::Tensor Chunk::in_unit(int unit, const std::function<at::Tensor()>& fn) const {
  if (!hooks_) return fn();
  hooks_->before_forward(unit);
  at::Tensor y = fn();
  hooks_->after_forward(unit);
  if (y.requires_grad()) y.register_hook([hooks = hooks_, unit](const at::Tensor&) { hooks->before_backward(unit); });
  return y;
}

at::Tensor Chunk::embed(const at::Tensor& tokens, bool training) const {
  at::Tensor x = embedding_.forward(tokens, tp_);
  if (position_embedding_.defined()) {
    // This rank's positions (its CP chunks), of which sequence parallelism keeps the tp_rank-th s.
    const at::Tensor table = positions_.defined() ? position_embedding_.index_select(0, positions_) : position_embedding_;
    const int64_t s = x.size(1);
    const int64_t start = tp_.sequence_parallel ? tp_.rank() * s : 0;
    x = x + table.narrow(0, start, s);
  }
  return dropout(x.to(residual_dtype_), training);
}

at::Tensor Chunk::forward(const at::Tensor& input, bool training) const {
  at::Tensor x = first_ ? in_unit(embedding_unit_, [&] { return embed(input, training); }) : input;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block* b = &blocks_[i];
    const bool full = recompute_ == Recompute::Full && (recompute_layers_ == 0 || static_cast<int>(i) < recompute_layers_);
    x = in_unit(first_layer_unit_ + static_cast<int>(i), [&] {
      return full ? recompute([this, b, training](const std::vector<at::Tensor>& in) { return block(*b, in[0], training); }, {x})
                  : block(*b, x, training);
    });
  }
  return x;
}

at::Tensor Chunk::logits(const at::Tensor& hidden) const {
  at::Tensor h = norm(final_norm_, hidden);
  h = tp_.sequence_parallel ? tensor_parallel::all_gather_fwd_reduce_scatter_bwd(h, *tp_.group)
                           : tensor_parallel::identity_fwd_all_reduce_bwd(h, *tp_.group);
  return ops::linear(h, head_weight_, at::Tensor());
}

at::Tensor Chunk::loss_sum(const at::Tensor& hidden, const at::Tensor& targets) const {
  return in_unit(head_unit_, [&] {
    at::Tensor l = logits(hidden);
    const int64_t vocab_start = tp_.rank() * head_weight_.size(0);
    at::Tensor per_token = tensor_parallel::vocab_parallel_cross_entropy(l.reshape({-1, l.size(-1)}),
                                                                         targets.reshape({-1}), vocab_start,
                                                                         cfg_->vocab_size, *tp_.group);
    return per_token.sum();
  });
}

// ---------------------------------------------------------------- construction -----------

int GPT::begin_unit() {
  units_.emplace_back();
  return static_cast<int>(units_.size()) - 1;
}

std::vector<std::vector<const Param*>> GPT::units() const {
  std::vector<std::vector<const Param*>> out;
  for (const auto& indices : units_) {
    out.emplace_back();
    for (size_t i : indices) out.back().push_back(&params_[i]);
  }
  return out;
}

void GPT::set_unit_hooks(UnitHooks* hooks) {
  for (auto& ch : chunks_) ch.hooks_ = hooks;
}

at::Tensor GPT::add_param(ParamInfo info, const InitSpec& init) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].info.name == info.name) {  // tied weights inside one rank: one tensor, in both units
      units_.back().push_back(i);
      return params_[i].tensor;
    }
  info.unit = static_cast<int>(units_.size()) - 1;
  units_.back().push_back(params_.size());
  const int tp_rank = tp_.rank(), tp_size = tp_.size();
  // Drawn in fp32 from the layout-independent full tensor, then rounded to the model's dtype.
  at::Tensor t = init_shard(info, init, cfg_.runtime.seed, tp_rank, tp_size).to(param_dtype(cfg_));
  if (info.shard_dim >= 0) info.shard_offset = tp_rank / info.tp_replicas * t.size(info.shard_dim);
  t.set_requires_grad(true);
  params_.push_back({t, at::Tensor(), info});
  return t;
}

Norm GPT::make_norm(const std::string& name, int chunk) {
  const int64_t H = cfg_.model.hidden;
  ParamInfo w{name + ".weight", {H}};
  w.decay = cfg_.optim.decay_norms_and_biases;
  w.sequence_parallel_grad = cfg_.parallel.sequence_parallel;
  w.chunk = chunk;
  Norm n;
  n.weight = add_param(w, {Init::Ones});
  if (cfg_.model.norm == trainer::Norm::LayerNorm && cfg_.model.bias) {
    ParamInfo b = w;
    b.name = name + ".bias";
    n.bias = add_param(b, {Init::Zeros});
  }
  return n;
}

ColumnParallelLinear GPT::make_column(const std::string& name, int64_t out, int64_t in, int chunk, bool bias,
                                      int tp_replicas) {
  ParamInfo w{name + ".weight", {out, in}};
  w.shard_dim = 0;
  w.tp_replicas = tp_replicas;
  w.chunk = chunk;
  ColumnParallelLinear l;
  l.weight = add_param(w, {Init::Normal, cfg_.model.init_std});
  if (bias) {
    ParamInfo b{name + ".bias", {out}};
    b.shard_dim = 0;
    b.tp_replicas = tp_replicas;
    b.decay = cfg_.optim.decay_norms_and_biases;
    b.chunk = chunk;
    l.bias = add_param(b, {Init::Zeros});
  }
  return l;
}

RowParallelLinear GPT::make_row(const std::string& name, int64_t out, int64_t in, double std,
                                int chunk) {
  ParamInfo w{name + ".weight", {out, in}};
  w.shard_dim = 1;
  w.chunk = chunk;
  RowParallelLinear l;
  l.weight = add_param(w, {Init::Normal, std});
  if (cfg_.model.bias) {
    ParamInfo b{name + ".bias", {out}};
    b.decay = cfg_.optim.decay_norms_and_biases;
    b.sequence_parallel_grad = cfg_.parallel.sequence_parallel;
    b.chunk = chunk;
    l.bias = add_param(b, {Init::Zeros});
  }
  return l;
}

Block GPT::make_block(int layer, int chunk) {
  const auto& m = cfg_.model;
  const std::string p = "layers." + std::to_string(layer);
  // GPT-2's scaled init of the projections that write into the residual stream.
  const double out_std = m.init_std / std::sqrt(2.0 * m.layers);
  Block b;
  b.norm1 = make_norm(p + ".norm1", chunk);
  const int64_t head_dim = m.hidden / m.heads, kv_heads = kv_heads_of(m);
  const bool qkv_bias = m.bias || m.qkv_bias;
  b.q = make_column(p + ".attn.q", m.hidden, m.hidden, chunk, qkv_bias);
  // Fewer key/value heads than TP ranks: each is held by a block of tp / kv_heads ranks.
  b.kv = make_column(p + ".attn.kv", 2 * kv_heads * head_dim, m.hidden, chunk, qkv_bias, kv_replicas_of(m, tp_.size()));
  b.proj = make_row(p + ".attn.proj", m.hidden, m.hidden, out_std, chunk);
  b.norm2 = make_norm(p + ".norm2", chunk);
  b.fc1 = make_column(p + ".mlp.fc1", m.ffn, m.hidden, chunk, m.bias);
  if (m.mlp == Mlp::SwiGlu) b.gate = make_column(p + ".mlp.gate", m.ffn, m.hidden, chunk, m.bias);
  b.fc2 = make_row(p + ".mlp.fc2", m.hidden, m.ffn, out_std, chunk);
  return b;
}

GPT::GPT(const Config& cfg, distributed::Comm& comm, const std::vector<int>& chunk_ids,
         const std::vector<std::pair<int, int>>& layer_ranges)
    : cfg_(cfg), comm_(comm) {
  const auto& m = cfg_.model;
  tp_.group = &comm.tp();
  tp_.sequence_parallel = cfg_.parallel.sequence_parallel && comm.tp().size() > 1;
  auto long_options = at::TensorOptions().dtype(at::kLong).device(comm.device());
  const at::Tensor positions = comm.cp().size() > 1
                                   ? context_parallel::local_positions(m.seq_len, comm.cp().index(), comm.cp().size()).to(comm.device())
                                   : at::arange(m.seq_len, long_options);
  const int total_chunks = static_cast<int>(layer_ranges.size());
  const int64_t V = padded_vocab_size(m, comm.tp().size());
  const int64_t S = m.seq_len, H = m.hidden;

  ParamInfo emb{"embedding.weight", {V, H}};
  emb.real_rows = m.vocab_size;
  emb.shard_dim = 0;
  emb.decay = cfg_.optim.decay_embeddings;
  emb.tied_embedding = m.tied_embeddings;

  for (size_t local = 0; local < chunk_ids.size(); ++local) {
    const int id = chunk_ids[local];
    const int c = static_cast<int>(local);
    Chunk ch;
    ch.cfg_ = &cfg_.model;
    ch.tp_ = tp_;
    ch.cp_ = &comm.cp();
    if (comm.cp().size() > 1) ch.positions_ = positions;
    ch.first_ = id == 0;
    ch.last_ = id == total_chunks - 1;
    ch.residual_dtype_ = residual_dtype(cfg_);
    ch.recompute_ = cfg_.parallel.recompute;
    ch.recompute_layers_ = cfg_.parallel.recompute_layers;
    ch.local_heads_ = m.heads / tp_.size();
    ch.local_kv_heads_ = std::max(1, kv_heads_of(m) / tp_.size());
    ch.head_dim_ = m.hidden / m.heads;
    if (ch.first_) {
      ch.embedding_unit_ = begin_unit();
      ParamInfo e = emb;
      e.chunk = c;
      ch.embedding_.weight = add_param(e, {Init::Normal, m.init_std});
      ch.embedding_.vocab_start = tp_.rank() * ch.embedding_.weight.size(0);
      if (m.positions == Positions::Learned) {
        ParamInfo pos{"position_embedding.weight", {S, H}};
        pos.decay = cfg_.optim.decay_embeddings;
        pos.sequence_parallel_grad = tp_.sequence_parallel;
        pos.chunk = c;
        ch.position_embedding_ = add_param(pos, {Init::Normal, m.init_std});
      }
    }
    ch.first_layer_unit_ = static_cast<int>(units_.size());
    for (int layer = layer_ranges[id].first; layer < layer_ranges[id].second; ++layer) {
      begin_unit();
      ch.blocks_.push_back(make_block(layer, c));
    }
    if (ch.last_) {
      ch.head_unit_ = begin_unit();
      ch.final_norm_ = make_norm("final_norm", c);
      if (m.tied_embeddings) {
        ParamInfo e = emb;
        e.chunk = c;
        e.tied_copy = true;  // only used when chunk 0 (the original) lives on another rank
        ch.head_weight_ = add_param(e, {Init::Normal, m.init_std});
      } else {
        ParamInfo h{"head.weight", {V, H}};
        h.real_rows = m.vocab_size;
        h.shard_dim = 0;
        h.chunk = c;
        ch.head_weight_ = add_param(h, {Init::Normal, m.init_std});
      }
    }
    // RoPE tables for this rank's positions, built once.
    auto f32 = at::TensorOptions().dtype(at::kFloat).device(comm.device());
    if (m.positions == Positions::Rope) {
      at::Tensor angles = at::outer(positions.to(f32), rope_inverse_frequencies(m).to(f32));  // [S or S/cp, D/2]
      angles = at::cat({angles, angles}, -1);
      ch.rope_cos_ = angles.cos();
      ch.rope_sin_ = angles.sin();
    }
    chunks_.push_back(std::move(ch));
  }
}

}  // namespace trainer::model
