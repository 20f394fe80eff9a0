#include "optim/adamw.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace trainer::optim {

double learning_rate(const OptimConfig& o, int step, int total_steps) {
  if (step < o.warmup_steps) return o.lr * (step + 1) / o.warmup_steps;
  if (o.decay == LrDecay::Constant) return o.lr;
  const double span = std::max(1, total_steps - o.warmup_steps);
  const double progress = std::min(1.0, (step - o.warmup_steps) / span);
  const double shape = o.decay == LrDecay::Cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return o.min_lr + (o.lr - o.min_lr) * shape;
}

AdamW::AdamW(const OptimConfig& cfg, data_parallel::DataParallel& dp, distributed::Comm& comm)
    : cfg_(cfg), dp_(dp), comm_(comm) {
  for (auto& b : dp_.buckets()) {
    m_.push_back(at::zeros({b.shard_numel}, b.main_params.options()));
    v_.push_back(at::zeros({b.shard_numel}, b.main_params.options()));
  }
}

double AdamW::grad_norm() {
  const int tp_rank = comm_.coord().tp;
  // Accumulated as a tensor: one host synchronisation per step, not one per parameter. Each
  // segment's norm is an fp32 reduction (also of bf16 main gradients; no float64 copy of the
  // gradients: that copy cost ~5% of the small benchmark model's step); the sum is in float64.
  at::Tensor total = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(comm_.device()));
  for (auto& b : dp_.buckets())
    data_parallel::for_each_in_shard(b, [&](const data_parallel::Segment& s, int64_t begin, int64_t n) {
      const auto& info = s.param->info;
      // Each distinct value once: TP-replicated tensors on TP rank 0, replicated shards on the
      // first rank of their block, the tied embedding on the first stage.
      const bool first_holder = info.shard_dim < 0 ? tp_rank == 0 : tp_rank % info.tp_replicas == 0;
      if (info.tied_copy || !first_holder) return;
      const at::Tensor g = b.shard_grads().narrow(0, begin - b.shard_begin, n);
      total += at::linalg_vector_norm(g, 2, {}, false, at::kFloat).to(at::kDouble).square();
    });
  // Without ZeRO every DP rank holds the same (full) gradients: sum over the model-parallel
  // ranks only. With ZeRO (any stage) the DP shards are disjoint: sum over everybody.
  distributed::all_reduce(dp_.sharded() ? comm_.world() : comm_.model_parallel(), total);
  return std::sqrt(total.item<double>());
}

double AdamW::clip(double norm) {
  if (cfg_.grad_clip <= 0) return 1.0;
  const double factor = cfg_.grad_clip / (norm + 1e-6);
  if (factor >= 1.0) return 1.0;
  for (auto& b : dp_.buckets()) b.shard_grads().mul_(factor);  // what the optimizer reads
  return factor;
}

void AdamW::step(double lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, t_);
  const double bc2 = 1.0 - std::pow(cfg_.beta2, t_);
  auto& buckets = dp_.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    auto& b = buckets[i];
    // Decoupled weight decay, only on the parameters that take it.
    data_parallel::for_each_in_shard(b, [&](const data_parallel::Segment& s, int64_t begin, int64_t n) {
      if (s.param->info.decay && cfg_.weight_decay > 0)
        b.main_params.narrow(0, begin - b.shard_begin, n).mul_(1.0 - lr * cfg_.weight_decay);
    });
    // On the fp32 masters; bf16 main gradients are read in fp32.
    at::Tensor p = b.main_params;
    at::Tensor g = b.shard_grads();
    m_[i].mul_(cfg_.beta1).add_(g, 1.0 - cfg_.beta1);
    v_[i].mul_(cfg_.beta2).addcmul_(g, g, 1.0 - cfg_.beta2);
    at::Tensor denom = (v_[i] / bc2).sqrt_().add_(cfg_.eps);
    p.addcdiv_(m_[i], denom, -lr / bc1);
  }
  dp_.publish_params();
}

std::int64_t AdamW::state_bytes() const {
  std::int64_t bytes = 0;
  for (size_t i = 0; i < m_.size(); ++i) bytes += (m_[i].numel() + v_[i].numel()) * 4;
  for (const auto& b : dp_.buckets())  // a bf16 model's fp32 masters live with the optimizer
    if (b.own_masters()) bytes += b.main_params.numel() * 4;
  return bytes;
}

}  // namespace trainer::optim
