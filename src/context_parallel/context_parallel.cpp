#include "context_parallel/context_parallel.hpp"

#include <torch/torch.h>

#include <array>

namespace trainer::context_parallel {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// The chunk half `half` (0 or 1) of CP rank `rank` holds.
int64_t chunk_of(int rank, int half, int size) { return half == 0 ? rank : 2 * size - 1 - rank; }

// Where each chunk of the sequence sits when every rank's two chunks are concatenated in rank
// order (what an all-gather gives): entry c is the slot of chunk c.
at::Tensor slots_in_rank_order(int size) {
  std::vector<int64_t> slot(2 * size);
  for (int r = 0; r < size; ++r)
    for (int half = 0; half < 2; ++half) slot[chunk_of(r, half, size)] = 2 * r + half;
  return at::tensor(slot, at::kLong);
}

// x with its `dim` cut into order.numel() equal chunks and chunk i of the result = chunk order[i].
at::Tensor reorder_chunks(const at::Tensor& x, int64_t dim, const at::Tensor& order) {
  const int64_t n = order.numel();
  return x.unflatten(dim, {n, x.size(dim) / n}).index_select(dim, order.to(x.device())).flatten(dim, dim + 1);
}

// One flash-kernel call: softmax(q kᵀ / sqrt(D)) v and its log-sum-exp per query, [B, h, L] fp32.
// `causal` is the kernel's own (top-left) mask, used only where q and k are the same tokens.
struct Part {
  at::Tensor out, lse;
};

Part flash(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  if (q.is_cuda()) {
    auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, causal);
    return {std::get<0>(r), std::get<1>(r)};
  }
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal);
  return {out, lse};
}

// The kernel's backward of one part, given the output and log-sum-exp of the softmax over *all*
// keys: it recomputes this part's probabilities as exp(q kᵀ/sqrt(D) − lse), so the parts' query
// gradients add up and their key/value gradients are those of the keys they saw.
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_backward(const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v, const at::Tensor& out,
                                                              const at::Tensor& lse, bool causal) {
  if (q.is_cuda()) {
    // Without dropout the random-state tensors are the empty ones the forward returns.
    const at::Tensor no_rng = at::empty({}, at::kLong);
    return at::_scaled_dot_product_flash_attention_backward(grad, q, k, v, out, lse, at::Tensor(), at::Tensor(), q.size(2),
                                                            k.size(2), 0.0, causal, no_rng, no_rng);
  }
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, out, lse, 0.0, causal);
}

// softmax over the union of two key sets from the parts over each: weights exp(lse_i − lse).
Part merge(const Part& a, const Part& b) {
  const at::Tensor lse = at::logaddexp(a.lse, b.lse);
  const at::Tensor out = a.out.to(at::kFloat) * (a.lse - lse).exp().unsqueeze(-1) +
                         b.out.to(at::kFloat) * (b.lse - lse).exp().unsqueeze(-1);
  return {out.to(a.out.scalar_type()), lse};
}

struct Attention : torch::autograd::Function<Attention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            distributed::Group* cp) {
    const int size = cp->size(), rank = cp->index();
    const int64_t L = q.size(2) / 2;  // tokens per chunk
    // Keys and values of the whole sequence, in sequence order: [2 (k|v), B, kv heads, S, D].
    const at::Tensor kv = reorder_chunks(distributed::all_gather(*cp, at::stack({k, v}), 3), 3, slots_in_rank_order(size));
    std::vector<at::Tensor> outs, lses;
    for (int half = 0; half < 2; ++half) {
      const int64_t c = chunk_of(rank, half, size);
      const at::Tensor qc = q.narrow(2, half * L, L);
      Part p = flash(qc, kv[0].narrow(2, c * L, L), kv[1].narrow(2, c * L, L), /*causal=*/true);
      if (c > 0) p = merge(flash(qc, kv[0].narrow(2, 0, c * L), kv[1].narrow(2, 0, c * L), false), p);
      outs.push_back(p.out);
      lses.push_back(p.lse);
    }
    const at::Tensor out = at::cat(outs, 2), lse = at::cat(lses, 2);
    ctx->save_for_backward({q, kv, out, lse});
    ctx->saved_data["cp"] = reinterpret_cast<int64_t>(cp);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* cp = reinterpret_cast<distributed::Group*>(ctx->saved_data["cp"].toInt());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kv = saved[1], &out = saved[2], &lse = saved[3];
    const int size = cp->size(), rank = cp->index();
    const int64_t L = q.size(2) / 2;
    const at::Tensor grad = grads[0].contiguous();
    // Every key chunk before a local chunk gets gradient from it: they add up in fp32.
    at::Tensor dkv = at::zeros(kv.sizes(), kv.options().dtype(at::kFloat));
    std::vector<at::Tensor> dq;
    for (int half = 0; half < 2; ++half) {
      const int64_t c = chunk_of(rank, half, size);
      const at::Tensor qc = q.narrow(2, half * L, L), gc = grad.narrow(2, half * L, L);
      const at::Tensor oc = out.narrow(2, half * L, L), lc = lse.narrow(2, half * L, L).contiguous();
      auto part = [&](int64_t begin, int64_t length, bool causal) {
        auto [dqi, dk, dv] = flash_backward(gc, qc, kv[0].narrow(2, begin, length), kv[1].narrow(2, begin, length), oc,
                                            lc, causal);
        dkv[0].narrow(2, begin, length).add_(dk);
        dkv[1].narrow(2, begin, length).add_(dv);
        return dqi.to(at::kFloat);
      };
      at::Tensor dqc = part(c * L, L, /*causal=*/true);
      if (c > 0) dqc += part(0, c * L, false);
      dq.push_back(dqc.to(q.scalar_type()));
    }
    // Back to rank order, summed over the group, and this rank's tokens kept.
    const at::Tensor to_rank_order = at::argsort(slots_in_rank_order(size));
    const at::Tensor mine = distributed::reduce_scatter(*cp, reorder_chunks(dkv.to(kv.scalar_type()), 3, to_rank_order), 3);
    return {at::cat(dq, 2), mine[0], mine[1], at::Tensor()};
  }
};

}  // namespace

at::Tensor local_positions(int64_t seq_len, int rank, int size) {
  const int64_t L = seq_len / (2 * size);
  return at::cat({at::arange(chunk_of(rank, 0, size) * L, (chunk_of(rank, 0, size) + 1) * L, at::kLong),
                  at::arange(chunk_of(rank, 1, size) * L, (chunk_of(rank, 1, size) + 1) * L, at::kLong)});
}

std::vector<data::MicroBatch> shard_microbatches(const std::vector<data::MicroBatch>& mbs, const distributed::Group& cp) {
  if (cp.size() == 1) return mbs;
  std::vector<data::MicroBatch> out;
  for (const auto& mb : mbs) {
    const at::Tensor mine = local_positions(mb.tokens.size(1), cp.index(), cp.size()).to(mb.tokens.device());
    out.push_back({mb.tokens.index_select(1, mine), mb.targets.index_select(1, mine)});
  }
  return out;
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, distributed::Group& cp) {
  return Attention::apply(q, k, v, &cp);
}

}  // namespace trainer::context_parallel
