// AdamW over the data-parallel buckets, with the learning-rate schedule and global gradient
// clipping. Each rank updates its shard of every bucket (the whole bucket without ZeRO).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "config/config.hpp"
#include "data_parallel/data_parallel.hpp"

namespace trainer::optim {

// Linear warm-up to optim.lr, then cosine or linear decay to optim.min_lr at train.steps.
double learning_rate(const OptimConfig& o, int step, int total_steps);

class AdamW {
 public:
  AdamW(const OptimConfig& cfg, data_parallel::DataParallel& dp, distributed::Comm& comm);

  // The global L2 norm of the gradients, equal to the 1x1x1 norm: TP-replicated parameters
  // count on tp rank 0 only, the tied embedding's second copy not at all, and each DP rank
  // adds only its own shard (the whole bucket without ZeRO).
  double grad_norm();
  // Scales gradients so the global norm is at most optim.grad_clip; returns the factor.
  double clip(double norm);
  void step(double lr);

  std::int64_t state_bytes() const;  // optimizer memory of this rank: m, v and a bf16 model's fp32 masters
  int steps_taken() const { return t_; }
  // For checkpoints: the first and second moments of each bucket's shard, and the step count.
  std::vector<at::Tensor>& exp_avg() { return m_; }
  std::vector<at::Tensor>& exp_avg_sq() { return v_; }
  void set_steps_taken(int t) { t_ = t; }

 private:
  OptimConfig cfg_;
  data_parallel::DataParallel& dp_;
  distributed::Comm& comm_;
  std::vector<at::Tensor> m_, v_;  // per bucket shard
  int t_ = 0;
};

}  // namespace trainer::optim
