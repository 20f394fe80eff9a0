// Data parallelism, and the mixed-precision bookkeeping that lives with it (Megatron-LM's
// DistributedDataParallel + contiguous gradient buffer, and its Float16 optimizer's masters).
//
// Every parameter of this rank becomes a view into a flat parameter buffer of the model's dtype
// (runtime.precision). Its gradients accumulate, microbatch after microbatch, into the matching
// flat buffer of *main gradients* (optim.main_grad_dtype): where the dtypes agree .grad is a
// view into that buffer and autograd adds in place; where they differ (a bf16 model with fp32
// main gradients) a hook adds each bf16 gradient into the fp32 buffer as soon as autograd makes
// it and drops it, so no second full-size gradient stays alive. Param::main_grad is the view.
//
// Buckets (about optim.bucket_mb each, in backward order, never across model chunks) count
// their parameters' gradients as they arrive; during the last backward of a step each full
// bucket starts its all-reduce at once (autograd post-hooks), and finish() waits for all of them
// just before the optimizer (train/finalize_grads). Earlier microbatches only accumulate.
//
// The optimizer updates fp32 *master weights*: each bucket's main_params, this rank's optimizer
// shard of it (the whole bucket without ZeRO-1, 1/dp of it with). In an fp32 model they are a
// view of the parameters themselves; in bf16 a copy of their own. publish_params() writes the
// updated masters back into the model's parameters and, under ZeRO-1, all-gathers the shards.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "distributed/comm.hpp"
#include "model/params.hpp"

namespace trainer::data_parallel {

struct Segment {
  model::Param* param;
  int64_t offset;  // in the bucket's flat buffers
  int64_t numel;
};

struct Bucket {
  at::Tensor params;       // flat parameter values, in the model's dtype
  at::Tensor grads;        // flat main gradients, in the main-gradient dtype
  at::Tensor main_params;  // fp32 masters of [shard_begin, shard_begin + shard_numel)
  std::vector<Segment> segments;
  int chunk = 0;
  int64_t shard_begin = 0, shard_numel = 0;  // this rank's optimizer shard
  // bookkeeping during backward
  int ready = 0;
  bool launched = false;
  distributed::Pending reduction;
  // Whether main_params is a copy of its own (a bf16 model) rather than a view of `params`.
  bool own_masters() const { return params.scalar_type() != main_params.scalar_type(); }
  at::Tensor wire;  // bf16 copy of fp32 `grads` being reduced (optim.grad_reduce_dtype = bf16)
};

// Calls fn(segment, begin, n) for the part of each segment inside the bucket's optimizer
// shard: flat buffer elements [begin, begin + n).
template <typename Fn>
void for_each_in_shard(const Bucket& b, Fn&& fn) {
  const int64_t lo = b.shard_begin, hi = b.shard_begin + b.shard_numel;
  for (const auto& s : b.segments) {
    const int64_t begin = std::max(lo, s.offset), end = std::min(hi, s.offset + s.numel);
    if (begin < end) fn(s, begin, end - begin);
  }
}

class DataParallel {
 public:
  struct Options {
    double bucket_mb = 25.0;                  // optim.bucket_mb
    bool zero1 = false;                       // optim.zero_stage = 1
    at::ScalarType main_grad_dtype = at::kFloat;  // optim.main_grad_dtype
    bool bf16_reduction = false;  // fp32 main gradients travel (and are summed) in bf16, then land in fp32
  };
  DataParallel(std::vector<model::Param>& params, distributed::Comm& comm, const Options& opts);
  ~DataParallel();

  void zero_grad();
  // From now on, a bucket of `chunk` whose gradients are all in starts reducing at once.
  void enable_sync(int chunk);
  // Starts what has not started and waits for every reduction over DP.
  void finish();
  // After the optimizer updated the masters: the model's parameters take their values (rounded
  // to bf16 in a bf16 model) and, under ZeRO-1, every DP rank shares its shard.
  void publish_params();

  std::vector<Bucket>& buckets() { return buckets_; }
  bool zero1() const { return zero1_; }
  // Buckets whose reduction started from an autograd hook in the last step (i.e. while
  // backward was still running), of how many.
  int launched_in_backward() const { return launched_in_backward_; }

 private:
  void on_grad_ready(size_t bucket);
  void launch(Bucket& b);

  distributed::Comm& comm_;
  bool zero1_;
  bool bf16_reduction_;
  std::vector<Bucket> buckets_;
  std::vector<bool> sync_enabled_;  // per chunk
  std::vector<std::shared_ptr<void>> hooks_;  // keeps the grad accumulators (and hooks) alive
  int launched_in_backward_ = 0;
};

}  // namespace trainer::data_parallel
