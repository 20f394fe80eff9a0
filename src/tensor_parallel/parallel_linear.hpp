// Tensor parallelism, all in one place (the scheme of Megatron-LM's tensor_parallel/).
//
// Two conjugate autograd functions carry every TP communication, each named after what it
// does in forward and in backward:
//   identity_fwd_all_reduce_bwd        (Megatron's copy_to_tensor_model_parallel_region)
//   all_reduce_fwd_identity_bwd        (Megatron's reduce_from_tensor_model_parallel_region)
// and their sequence-parallel forms, along the sequence dimension 1:
//   all_gather_fwd_reduce_scatter_bwd  (Megatron's gather_from_sequence_parallel_region)
//   reduce_scatter_fwd_all_gather_bwd  (Megatron's reduce_scatter_to_sequence_parallel_region)
//
// ColumnParallelLinear splits W[out, in] by output rows: each rank computes its slice of the
// outputs from the full input. RowParallelLinear splits W by input columns: each rank computes
// a partial sum that is reduced over TP, then the bias is added once.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "distributed/comm.hpp"

namespace trainer::tensor_parallel {

// What every TP layer needs to know about the run. Layers compute in their weights' dtype, and
// every collective carries what they compute (bf16 in a bf16 model).
struct TPContext {
  distributed::Group* group = nullptr;
  bool sequence_parallel = false;
  int rank() const { return group->index(); }
  int size() const { return group->size(); }
};

at::Tensor identity_fwd_all_reduce_bwd(const at::Tensor& x, distributed::Group& g);
at::Tensor all_reduce_fwd_identity_bwd(const at::Tensor& x, distributed::Group& g);
at::Tensor all_gather_fwd_reduce_scatter_bwd(const at::Tensor& x, distributed::Group& g);
at::Tensor reduce_scatter_fwd_all_gather_bwd(const at::Tensor& x, distributed::Group& g);
// Gathers a column-parallel output along the last dim (backward keeps our slice).
at::Tensor gather_last_dim(const at::Tensor& x, distributed::Group& g);
// Sums partial gradients of replicated parameters over `g`, in place, in one all-reduce: over
// TP for those that see only this rank's tokens under sequence parallelism (norms,
// row-parallel biases, learned positions), over the kv group for replicated key/value heads.
void sum_replica_grads(const std::vector<at::Tensor>& grads, distributed::Group& g);

// The full input of column-parallel layers: x itself (its gradient summed over TP in backward),
// or under sequence parallelism x gathered along the sequence. Layers that read the same input
// (q and kv, SwiGLU's fc1 and gate) share one.
at::Tensor column_input(const at::Tensor& x, const TPContext& tp);

struct ColumnParallelLinear {
  at::Tensor weight;  // [out / tp, in]
  at::Tensor bias;    // [out / tp] or undefined
  bool gather_output = false;
  // x: [B, S, in] (or [B, S/tp, in] under sequence parallelism).
  at::Tensor forward(const at::Tensor& x, const TPContext& tp) const { return apply(column_input(x, tp), tp); }
  // input: column_input(x, tp).
  at::Tensor apply(const at::Tensor& input, const TPContext& tp) const;
};

struct RowParallelLinear {
  at::Tensor weight;  // [out, in / tp]
  at::Tensor bias;    // [out] (replicated) or undefined
  // x: [B, S, in / tp] -> [B, S, out] (or [B, S/tp, out] under sequence parallelism).
  at::Tensor forward(const at::Tensor& x, const TPContext& tp) const;
};

// Each TP rank holds rows [vocab_start, vocab_start + rows) of the (padded) embedding table.
struct VocabParallelEmbedding {
  at::Tensor weight;  // [padded_vocab / tp, hidden]
  int64_t vocab_start = 0;
  // tokens [B, S] -> [B, S, hidden] (or [B, S/tp, hidden] under sequence parallelism).
  at::Tensor forward(const at::Tensor& tokens, const TPContext& tp) const;
};

// Cross-entropy over vocab-sharded logits without gathering them: three all-reduces (max,
// sum of exp, target logit). Columns at global ids >= real_vocab (padding) are excluded.
// logits: [N, V/tp] slice starting at vocab_start, in any float dtype (computed in fp32);
// targets: [N] global ids, ignore_index marks positions without a target. Returns the fp32
// per-position loss [N] (0 where ignored). It works in fp32 on blocks of rows, never on an fp32
// copy of the whole slice; backward keeps the logits themselves and an fp32 log-sum-exp per
// position, recomputes the softmax from them and returns the gradient in the logits' dtype.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t real_vocab, distributed::Group& g,
                                        int64_t ignore_index = -100);

}  // namespace trainer::tensor_parallel
