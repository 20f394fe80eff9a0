#include "tensor_parallel/parallel_linear.hpp"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "ops/cpu_ops.hpp"

namespace trainer::tensor_parallel {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

namespace {

// The group travels through autograd's saved data as an integer: it outlives every graph.
void save_group(AutogradContext* ctx, distributed::Group* g) {
  ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
}
distributed::Group& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<distributed::Group*>(ctx->saved_data["group"].toInt());
}

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

struct VocabParallelCE : Function<VocabParallelCE> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_start, int64_t real_vocab, distributed::Group* g,
                            int64_t ignore_index) {
    const int64_t local_vocab = logits.size(1);
    at::Tensor x = logits.to(at::kFloat).clone();
    // Padding columns never take part: they get -inf, so exp() makes them exactly 0.
    const int64_t real_here = std::clamp<int64_t>(real_vocab - vocab_start, 0, local_vocab);
    if (real_here < local_vocab) x.narrow(1, real_here, local_vocab - real_here).fill_(-INFINITY);

    at::Tensor max = x.amax(1);
    distributed::all_reduce_max(*g, max);
    x.sub_(max.unsqueeze(1));

    const at::Tensor valid = targets.ne(ignore_index);
    const at::Tensor in_range = targets.ge(vocab_start).logical_and(targets.lt(vocab_start + local_vocab));
    const at::Tensor local_target = (targets - vocab_start).clamp(0, local_vocab - 1);
    at::Tensor target_logit = x.gather(1, local_target.unsqueeze(1)).squeeze(1) * in_range;
    distributed::all_reduce(*g, target_logit);

    at::Tensor exp = x.exp_();
    at::Tensor sum_exp = exp.sum(1);
    distributed::all_reduce(*g, sum_exp);

    at::Tensor loss = (sum_exp.log() - target_logit) * valid;
    exp.div_(sum_exp.unsqueeze(1));  // now the local slice of the softmax
    ctx->save_for_backward({exp, local_target, in_range.logical_and(valid), valid});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor softmax = saved[0], local_target = saved[1], hit = saved[2], valid = saved[3];
    at::Tensor g = grads[0] * valid;  // [N]
    at::Tensor grad = softmax * g.unsqueeze(1);
    grad.scatter_add_(1, local_target.unsqueeze(1), (-(g * hit)).unsqueeze(1));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor copy_to_tp(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : CopyToTP::apply(x, &g);
}
at::Tensor reduce_from_tp(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : ReduceFromTP::apply(x, &g);
}
at::Tensor gather_from_sp(const at::Tensor& x, distributed::Group& g) {
  return g.size() == 1 ? x : GatherFromSP::apply(x, &g);
}
at::Tensor scatter_to_sp(const at::Tensor& x, distributed::Group& g) {
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

at::Tensor linear_in(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                     at::ScalarType dtype) {
  if (dtype == at::kFloat) return ops::linear(x, w, b);
  // Autocast by hand: the matmul runs in `dtype`; casts are differentiable, so the weight's
  // gradient arrives in fp32 for the fp32 master copy.
  at::Tensor y = at::linear(x.to(dtype), w.to(dtype), b.defined() ? b.to(dtype) : b);
  return y.to(at::kFloat);
}

at::Tensor column_input(const at::Tensor& x, const TPContext& tp) {
  return tp.sequence_parallel ? gather_from_sp(x, *tp.group) : copy_to_tp(x, *tp.group);
}

at::Tensor ColumnParallelLinear::apply(const at::Tensor& input, const TPContext& tp) const {
  at::Tensor y = linear_in(input, weight, bias, tp.compute_dtype);
  return gather_output ? gather_last_dim(y, *tp.group) : y;
}

at::Tensor RowParallelLinear::forward(const at::Tensor& x, const TPContext& tp) const {
  at::Tensor partial = linear_in(x, weight, at::Tensor(), tp.compute_dtype);
  at::Tensor y = tp.sequence_parallel ? scatter_to_sp(partial, *tp.group)
                                      : reduce_from_tp(partial, *tp.group);
  return bias.defined() ? y + bias : y;  // added once, after the reduction
}

at::Tensor VocabParallelEmbedding::forward(const at::Tensor& tokens, const TPContext& tp) const {
  if (tp.size() == 1) return at::embedding(weight, tokens);  // nothing to mask or reduce
  const int64_t rows = weight.size(0);
  at::Tensor local = tokens - vocab_start;
  at::Tensor outside = local.lt(0).logical_or(local.ge(rows));
  at::Tensor picked = at::embedding(weight, local.masked_fill(outside, 0));
  picked = picked.masked_fill(outside.unsqueeze(-1), 0.0);
  return tp.sequence_parallel ? scatter_to_sp(picked, *tp.group) : reduce_from_tp(picked, *tp.group);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t real_vocab, distributed::Group& g,
                                        int64_t ignore_index) {
  // Also at tp = 1, where it was measured faster than LibTorch's log_softmax + nll_loss
  // (docs/tuning.md).
  return VocabParallelCE::apply(logits, targets, vocab_start, real_vocab, &g, ignore_index);
}

}  // namespace trainer::tensor_parallel
