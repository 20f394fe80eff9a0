#include "context_parallel/context_parallel.hpp"

#include <torch/torch.h>

#include <utility>

#include "distributed/autograd_group.hpp"

namespace trainer::context_parallel {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// The chunk half `half` (0 or 1) of CP rank `rank` holds.
int64_t chunk_of(int rank, int half, int size) { return half == 0 ? rank : 2 * size - 1 - rank; }

// The keys and values of the whole sequence, [2 (k|v), B, kv heads, S, D], in sequence order:
// each rank writes its two chunks into a zeroed buffer and the group sums it in place. Every
// chunk is written by one rank, so the sum is exact. An all-reduce moves twice an all-gather's
// bytes, but it lands each chunk where attention reads it with no staging copy: Gloo's all-gather
// stages its output per member and concatenates, and the copies, freed at each layer, left holes in
// the heap that cost ~1 gathered buffer per layer of peak RSS (small model, seq 8192, cp 4).
at::Tensor gather_sequence(const at::Tensor& k, const at::Tensor& v, distributed::Group& cp) {
  const int64_t L = k.size(2) / 2;
  std::vector<int64_t> shape = {2, k.size(0), k.size(1), 2 * cp.size() * L, k.size(3)};
  at::Tensor kv = at::zeros(shape, k.options());
  for (int half = 0; half < 2; ++half) {
    const int64_t c = chunk_of(cp.index(), half, cp.size());
    kv[0].narrow(2, c * L, L).copy_(k.narrow(2, half * L, L));
    kv[1].narrow(2, c * L, L).copy_(v.narrow(2, half * L, L));
  }
  distributed::all_reduce(cp, kv);
  return kv;
}

// The other way round: gradients of the whole sequence's keys and values summed over the group,
// and this rank's two chunks of the sum.
std::pair<at::Tensor, at::Tensor> reduce_to_own_chunks(at::Tensor dkv, distributed::Group& cp) {
  distributed::all_reduce(cp, dkv);
  const int64_t L = dkv.size(3) / (2 * cp.size());
  auto mine = [&](int kind) {
    return at::cat({dkv[kind].narrow(2, chunk_of(cp.index(), 0, cp.size()) * L, L),
                    dkv[kind].narrow(2, chunk_of(cp.index(), 1, cp.size()) * L, L)}, 2);
  };
  return {mine(0), mine(1)};
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
    const at::Tensor kv = gather_sequence(k, v, *cp);
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
    distributed::save_group(ctx, cp);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    distributed::Group& cp = distributed::group_of(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kv = saved[1], &out = saved[2], &lse = saved[3];
    const int size = cp.size(), rank = cp.index();
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
    auto [dk, dv] = reduce_to_own_chunks(dkv.to(kv.scalar_type()), cp);
    return {at::cat(dq, 2), dk, dv, at::Tensor()};
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
