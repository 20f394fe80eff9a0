#include "tensor_parallel/parallel_linear.hpp"

#include <torch/torch.h>

#include "distributed/autograd_group.hpp"
#include "ops/cpu_ops.hpp"

namespace trainer::tensor_parallel {

using distributed::group_of;
using distributed::save_group;
using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

namespace {

at::Tensor summed(const at::Tensor& x, distributed::Group& g) {
  at::Tensor y = x.contiguous().clone();
  distributed::all_reduce(g, y);
  return y;
}

struct CopyToTP : Function<CopyToTP> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, distributed::Group* g) {
    save_group(ctx, g);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(grads[0], group_of(ctx)), at::Tensor()};
  }
};

struct ReduceFromTP : Function<ReduceFromTP> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, distributed::Group* g) {
    return summed(x, *g);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct GatherFromSP : Function<GatherFromSP> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, distributed::Group* g) {
    save_group(ctx, g);
    return distributed::all_gather(*g, x, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {distributed::reduce_scatter(group_of(ctx), grads[0], 1), at::Tensor()};
  }
};

struct ScatterToSP : Function<ScatterToSP> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, distributed::Group* g) {
    save_group(ctx, g);
    return distributed::reduce_scatter(*g, x, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {distributed::all_gather(group_of(ctx), grads[0], 1), at::Tensor()};
  }
};

struct GatherLastDim : Function<GatherLastDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, distributed::Group* g) {
    save_group(ctx, g);
    return distributed::all_gather(*g, x, x.dim() - 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& g = group_of(ctx);
    auto piece = grads[0].chunk(g.size(), grads[0].dim() - 1)[g.index()];
    return {piece.contiguous(), at::Tensor()};
  }
};

// The cross-entropy works on blocks of rows of the [N, V/tp] slice in fp32, about 4M logits
// (16 MB) at a time, so that no fp32 copy of the whole slice ever exists.
int64_t block_rows(int64_t local_vocab) {
  constexpr int64_t kBlockElements = int64_t(1) << 22;
  return std::max<int64_t>(1, kBlockElements / std::max<int64_t>(1, local_vocab));
}

struct VocabParallelCE : Function<VocabParallelCE> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_start, int64_t real_vocab, distributed::Group* g,
                            int64_t ignore_index) {
    const int64_t N = logits.size(0), local_vocab = logits.size(1);
    // Padding columns (global ids >= real_vocab) never take part.
    const int64_t real_here = std::clamp<int64_t>(real_vocab - vocab_start, 0, local_vocab);
    const at::Tensor real = logits.narrow(1, 0, real_here);
    const auto f32 = logits.options().dtype(at::kFloat);

    at::Tensor max = real_here > 0 ? real.amax(1).to(at::kFloat) : at::full({N}, -INFINITY, f32);
    distributed::all_reduce_max(*g, max);

    const at::Tensor valid = targets.ne(ignore_index);
    const at::Tensor in_range = targets.ge(vocab_start).logical_and(targets.lt(vocab_start + local_vocab));
    const at::Tensor local_target = (targets - vocab_start).clamp(0, local_vocab - 1).unsqueeze(1);
    at::Tensor target_logit = logits.gather(1, local_target).squeeze(1).to(at::kFloat) * in_range;
    distributed::all_reduce(*g, target_logit);

    at::Tensor sum_exp = at::zeros({N}, f32);
    const int64_t rows = block_rows(local_vocab);
    for (int64_t r = 0; r < N && real_here > 0; r += rows) {
      const int64_t n = std::min(rows, N - r);
      at::Tensor x = real.narrow(0, r, n).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      sum_exp.narrow(0, r, n).copy_(x.sub_(max.narrow(0, r, n).unsqueeze(1)).exp_().sum(1));
    }
    distributed::all_reduce(*g, sum_exp);

    // log-sum-exp per position; backward recomputes the softmax from it and the logits, which the
    // head keeps anyway: nothing of the logits' size is saved besides them.
    const at::Tensor lse = sum_exp.log() + max;
    ctx->saved_data["real_here"] = real_here;
    ctx->save_for_backward({logits, lse, local_target, in_range.logical_and(valid), valid});
    return (lse - target_logit) * valid;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor logits = saved[0], lse = saved[1], local_target = saved[2], hit = saved[3], valid = saved[4];
    const int64_t real_here = ctx->saved_data["real_here"].toInt();
    const int64_t N = logits.size(0), local_vocab = logits.size(1);
    const at::Tensor g = grads[0] * valid;  // [N]
    // d loss / d logit = softmax · g, block by block in fp32, written in the logits' dtype.
    at::Tensor grad = real_here < local_vocab ? at::zeros_like(logits) : at::empty_like(logits);
    const int64_t rows = block_rows(local_vocab);
    for (int64_t r = 0; r < N && real_here > 0; r += rows) {
      const int64_t n = std::min(rows, N - r);
      at::Tensor p = logits.narrow(0, r, n).narrow(1, 0, real_here).to(at::kFloat, false, /*copy=*/true);
      p.sub_(lse.narrow(0, r, n).unsqueeze(1)).exp_().mul_(g.narrow(0, r, n).unsqueeze(1));
      grad.narrow(0, r, n).narrow(1, 0, real_here).copy_(p);
    }
    // The target's column is (p - 1) g, from its fp32 probability: p rounded to bf16 near 1
    // would lose most of p - 1.
    const at::Tensor target_p = (logits.gather(1, local_target).squeeze(1).to(at::kFloat) - lse).exp();
    const at::Tensor target_grad = at::where(hit, (target_p - 1) * g, grad.gather(1, local_target).squeeze(1).to(at::kFloat));
    grad.scatter_(1, local_target, target_grad.unsqueeze(1).to(grad.scalar_type()));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor identity_fwd_all_reduce_bwd(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : CopyToTP::apply(x, &g);
}
at::Tensor all_reduce_fwd_identity_bwd(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : ReduceFromTP::apply(x, &g);
}
at::Tensor all_gather_fwd_reduce_scatter_bwd(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : GatherFromSP::apply(x, &g);
}
at::Tensor reduce_scatter_fwd_all_gather_bwd(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : ScatterToSP::apply(x, &g);
}
at::Tensor gather_last_dim(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : GatherLastDim::apply(x, &g);
}

void sum_replica_grads(const std::vector<at::Tensor>& grads, distributed::Group& g) {
  if (grads.empty() || g.size() == 1) return;
  std::vector<at::Tensor> rows;
  for (const auto& grad : grads) rows.push_back(grad.reshape(-1));
  at::Tensor flat = at::cat(rows);
  distributed::all_reduce(g, flat);
  int64_t at = 0;
  for (const auto& grad : grads) {
    grad.view(-1).copy_(flat.narrow(0, at, grad.numel()));
    at += grad.numel();
  }
}

at::Tensor column_input(const at::Tensor& x, const TPContext& tp) {
  return tp.sequence_parallel ? all_gather_fwd_reduce_scatter_bwd(x, *tp.group) : identity_fwd_all_reduce_bwd(x, *tp.group);
}

at::Tensor ColumnParallelLinear::apply(const at::Tensor& input, const TPContext& tp) const {
  at::Tensor y = ops::linear(input, weight, bias);
  return gather_output ? gather_last_dim(y, *tp.group) : y;
}

at::Tensor RowParallelLinear::forward(const at::Tensor& x, const TPContext& tp) const {
  at::Tensor partial = ops::linear(x, weight, at::Tensor());
  at::Tensor y = tp.sequence_parallel ? reduce_scatter_fwd_all_gather_bwd(partial, *tp.group)
                                      : all_reduce_fwd_identity_bwd(partial, *tp.group);
  return bias.defined() ? y + bias : y;  // added once, after the reduction
}

at::Tensor VocabParallelEmbedding::forward(const at::Tensor& tokens, const TPContext& tp) const {
  if (tp.size() == 1) return at::embedding(weight, tokens);  // nothing to mask or reduce
  const int64_t rows = weight.size(0);
  at::Tensor local = tokens - vocab_start;
  at::Tensor outside = local.lt(0).logical_or(local.ge(rows));
  at::Tensor picked = at::embedding(weight, local.masked_fill(outside, 0));
  picked = picked.masked_fill(outside.unsqueeze(-1), 0.0);
  return tp.sequence_parallel ? reduce_scatter_fwd_all_gather_bwd(picked, *tp.group) : all_reduce_fwd_identity_bwd(picked, *tp.group);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t real_vocab, distributed::Group& g,
                                        int64_t ignore_index) {
  // Also at tp = 1, where it was measured faster than LibTorch's log_softmax + nll_loss
  // (docs/tuning.md).
  return VocabParallelCE::apply(logits, targets, vocab_start, real_vocab, &g, ignore_index);
}

}  // namespace trainer::tensor_parallel
