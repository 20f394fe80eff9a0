// Parameters with the facts every parallel feature needs about them: the full (unsharded)
// shape, how this rank's piece sits in it, and how it is treated by decay, norm and sync.
//
// Initialisation does not depend on the layout: every parameter's full tensor is generated on
// the CPU from a seed derived from (run seed, parameter name), and each rank keeps its shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::model {

enum class Init { Normal, Ones, Zeros };

struct ParamInfo {
  std::string name;                // global name, e.g. "layers.3.attn.qkv.weight"
  std::vector<int64_t> full_shape;  // shape at tp = 1, vocab padded to this run's padding
  int64_t real_rows = -1;          // rows that carry the model (vocab before padding); -1 = all
  int shard_dim = -1;              // dimension split over TP; -1 = replicated over TP
  int64_t shard_offset = 0;        // where this rank's shard starts along shard_dim
  // TP ranks holding the same shard: consecutive blocks of this many (key/value heads when tp
  // exceeds model.kv_heads). Their gradients are partial sums, summed over the kv group.
  int tp_replicas = 1;
  bool decay = true;               // AdamW weight decay applies
  // Either copy of a tied embedding (the first stage's input embedding, the last stage's head):
  // their gradients are summed over the embedding group so both take the same step.
  bool tied_embedding = false;
  // The last stage's copy of a tied embedding: left out of the global norm.
  bool tied_copy = false;
  // Replicated over TP but fed different tokens under sequence parallelism: its gradients are
  // partial sums to be all-reduced over TP.
  bool sequence_parallel_grad = false;
  int chunk = 0;  // which local model chunk (virtual stage) owns it
  int unit = 0;   // the first unit (GPT::units) that uses it: what ZeRO-3 gathers it with
};

struct Param {
  at::Tensor tensor;     // what the model computes with (runtime.precision's dtype)
  // Its accumulated gradient in the DP bucket (data_parallel.hpp); undefined without one. Under
  // ZeRO-2/3, once the step's reduction is done, only its part inside this rank's gradient
  // shard (flat, possibly empty).
  at::Tensor main_grad;
  ParamInfo info;
};

// The gradient the optimizer will read: the DP bucket's main gradient when the parameter has
// one, else autograd's (a model without data parallelism, in tests).
inline at::Tensor grad_of(const Param& p) { return p.main_grad.defined() ? p.main_grad : p.tensor.grad(); }

struct InitSpec {
  Init kind = Init::Normal;
  double std = 0.02;
};

// Builds the full tensor for `info` from (seed, name) and returns this rank's shard, with
// padding rows (beyond info.real_rows) set to zero. `tp_rank/tp_size` select the shard (the
// same for each block of info.tp_replicas ranks).
at::Tensor init_shard(const ParamInfo& info, const InitSpec& init, std::int64_t seed, int tp_rank,
                      int tp_size);

}  // namespace trainer::model
