// Data parallelism: gradients live in flat buckets that are reduced over the DP group while
// backward is still running.
//
// Every parameter of this rank becomes a view into a flat parameter buffer, and its .grad a
// view into the matching flat gradient buffer, so autograd accumulates microbatch after
// microbatch in place. Buckets (about optim.bucket_mb each, in backward order, never across
// model chunks) count their parameters' gradients as they arrive; during the last backward of a
// step each full bucket starts its all-reduce at once (autograd post-hooks), and finish() waits
// for all of them just before the optimizer (train/finalize_grads). Earlier microbatches only
// accumulate.
//
// With ZeRO-1 each DP rank owns a 1/dp shard of every bucket: the optimizer updates only that
// shard and all_gather_params() shares the result.
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
  at::Tensor params;  // flat fp32 parameter values
  at::Tensor grads;   // flat fp32 gradients
  std::vector<Segment> segments;
  int chunk = 0;
  int64_t shard_begin = 0, shard_numel = 0;  // this rank's optimizer shard
  // bookkeeping during backward
  int ready = 0;
  bool launched = false;
  distributed::Pending reduction;
  at::Tensor wire;  // bf16 copy of `grads` being reduced (optim.grad_reduce_dtype = bf16)
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
    double bucket_mb = 25.0;      // optim.bucket_mb
    bool zero1 = false;           // optim.zero_stage = 1
    bool bf16_reduction = false;  // gradients travel (and are summed) in bf16, then land in fp32
  };
  DataParallel(std::vector<model::Param>& params, distributed::Comm& comm, const Options& opts);
  ~DataParallel();

  void zero_grad();
  // From now on, a bucket of `chunk` whose gradients are all in starts reducing at once.
  void enable_sync(int chunk);
  // Starts what has not started and waits for every reduction over DP.
  void finish();
  // ZeRO-1: every DP rank shares its updated shard of each bucket.
  void all_gather_params();

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
