// The decoder-only Transformer (GPT-2 and Llama-style blocks), built as the model chunks this
// rank owns: a pipeline rank owns one chunk (or `virtual_stages` chunks, interleaved), and
// every linear layer inside is tensor-parallel over the TP group.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "tensor_parallel/parallel_linear.hpp"
#include "model/params.hpp"

namespace trainer::model {

struct Norm {
  at::Tensor weight, bias;  // bias undefined for rmsnorm or bias=false
};

struct Block {
  Norm norm1, norm2;
  tensor_parallel::ColumnParallelLinear q;   // [heads * head_dim, hidden], rows per head
  tensor_parallel::ColumnParallelLinear kv;  // [kv_heads * 2 * head_dim, hidden]: [kv head][k|v][head_dim]
  tensor_parallel::RowParallelLinear proj;
  tensor_parallel::ColumnParallelLinear fc1;
  tensor_parallel::ColumnParallelLinear gate;  // SwiGLU only
  tensor_parallel::RowParallelLinear fc2;
};

// RoPE inverse frequencies [head_dim / 2]: theta^(-2i/D), with Llama 3.1's scaling when
// model.rope_scaling = llama3 (Hugging Face's _compute_llama3_parameters).
at::Tensor rope_inverse_frequencies(const ModelConfig& m);

// Causal self-attention of q [B, heads, S, D] and k, v [B, kv heads, S, D] (kv heads dividing
// heads: query head j reads key/value head j / (heads / kv heads)) -> [B, heads, S, D], in the
// inputs' dtype, through LibTorch's fused scaled_dot_product_attention; `dropout` on the
// probabilities.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout);

// The dtype of the model's parameters and of the residual stream between layers (what the
// pipeline sends): bf16 for runtime.precision bf16 (the stream fp32 with runtime.fp32_residual).
at::ScalarType param_dtype(const Config& cfg);
at::ScalarType residual_dtype(const Config& cfg);

// Calls around each *unit* of the model (the embedding, each layer, the final norm with the head),
// through which ZeRO-3 gathers a unit's parameters just before they are used and frees them
// after (data_parallel/fsdp.hpp). before_backward runs once the gradient of the unit's output is
// complete: its backward is next.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int unit) = 0;
  virtual void after_forward(int unit) = 0;
  virtual void before_backward(int unit) = 0;
};

// A contiguous run of layers; chunk 0 also embeds tokens, the last chunk also holds the head.
class Chunk {
 public:
  bool first() const { return first_; }
  bool last() const { return last_; }

  // First chunk: `input` holds token ids [B, S]. Otherwise: hidden states from the previous
  // chunk, [B, S, H] (or [B, S/tp, H] under sequence parallelism). Under context parallelism S is
  // this rank's S/cp tokens (context_parallel.hpp). Dropout only when `training`.
  at::Tensor forward(const at::Tensor& input, bool training = true) const;
  // Last chunk only: the final norm and the head, giving this rank's vocab slice of the logits.
  at::Tensor logits(const at::Tensor& hidden) const;
  // Last chunk only: the sum of per-token losses of `hidden` against `targets` [B, S].
  at::Tensor loss_sum(const at::Tensor& hidden, const at::Tensor& targets) const;

 private:
  friend class GPT;
  // fn() as unit `unit`, with the hooks around it (when there are hooks).
  at::Tensor in_unit(int unit, const std::function<at::Tensor()>& fn) const;
  at::Tensor embed(const at::Tensor& tokens, bool training) const;
  at::Tensor block(const Block& b, const at::Tensor& x, bool training) const;
  at::Tensor attention(const Block& b, const at::Tensor& x, bool training) const;
  at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool training) const;
  at::Tensor mlp(const Block& b, const at::Tensor& x) const;
  at::Tensor norm(const Norm& n, const at::Tensor& x) const;
  at::Tensor rope(const at::Tensor& x) const;
  at::Tensor dropout(const at::Tensor& x, bool training) const;

  const ModelConfig* cfg_ = nullptr;
  Recompute recompute_ = Recompute::None;
  int recompute_layers_ = 0;  // under full: the first this many layers of the chunk
  tensor_parallel::TPContext tp_;
  distributed::Group* cp_ = nullptr;
  at::Tensor positions_;  // under context parallelism: the global positions of this rank's tokens
  bool first_ = false, last_ = false;
  at::ScalarType residual_dtype_ = at::kFloat;
  int local_heads_ = 0, local_kv_heads_ = 0, head_dim_ = 0;
  tensor_parallel::VocabParallelEmbedding embedding_;
  at::Tensor position_embedding_;  // learned positions, [S, H] (first chunk)
  std::vector<Block> blocks_;
  Norm final_norm_;
  at::Tensor head_weight_;  // [V/tp, H]: the embedding (tied) or its own weight
  at::Tensor rope_cos_, rope_sin_;  // [S (or S/cp), D]: the angles of this rank's positions
  int embedding_unit_ = -1, first_layer_unit_ = -1, head_unit_ = -1;
  UnitHooks* hooks_ = nullptr;
};

class GPT {
 public:
  // Builds the chunks this rank owns. `chunk_ids` are global chunk indices (0 .. chunks-1),
  // and `layer_ranges[c]` the [begin, end) layers of global chunk c.
  GPT(const Config& cfg, distributed::Comm& comm, const std::vector<int>& chunk_ids,
      const std::vector<std::pair<int, int>>& layer_ranges);

  std::vector<Chunk>& chunks() { return chunks_; }
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  // The parameters each unit uses, units in forward order over this rank's chunks (a tied
  // embedding on a rank with both ends is in the embedding's unit and the head's).
  std::vector<std::vector<const Param*>> units() const;
  void set_unit_hooks(UnitHooks* hooks);

 private:
  int begin_unit();  // the units' parameters are those add_param adds until the next one
  at::Tensor add_param(ParamInfo info, const InitSpec& init);
  Norm make_norm(const std::string& name, int chunk);
  tensor_parallel::ColumnParallelLinear make_column(const std::string& name, int64_t out, int64_t in, int chunk,
                                                    bool bias, int tp_replicas = 1);
  tensor_parallel::RowParallelLinear make_row(const std::string& name, int64_t out, int64_t in, double std, int chunk);
  Block make_block(int layer, int chunk);

  Config cfg_;
  distributed::Comm& comm_;
  tensor_parallel::TPContext tp_;
  std::vector<Param> params_;
  std::vector<std::vector<size_t>> units_;  // indices into params_
  std::vector<Chunk> chunks_;
};

}  // namespace trainer::model
