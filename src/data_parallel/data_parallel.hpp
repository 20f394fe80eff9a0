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
// shard of it (the whole bucket without ZeRO, 1/dp of it with). In an fp32 model they are a
// view of the parameters themselves; in bf16 a copy of their own. publish_params() writes the
// updated masters back into the model's parameters and, under ZeRO-1/2, all-gathers the shards.
//
// ZeRO stages (optim.zero_stage), what each DP rank keeps between steps:
//   0  all parameters, all gradients, all optimizer state (gradients all-reduced);
//   1  all parameters and gradients, its shard of masters and moments (Megatron-LM's
//      distributed optimizer; gradients all-reduced, updated shards all-gathered);
//   2  also only its shard of the gradients: a bucket's full main-gradient buffer exists from
//      its first gradient until its reduce-scatter has landed in `grad_shard` (at most
//      kReductionsInFlight buckets wait at once, so the full buffers never all coexist).
//      Without PP every microbatch's backward reduce-scatters and the shards accumulate (as
//      DeepSpeed's ZeRO-2 and FSDP do): no full buffer outlives its microbatch. Under PP the
//      full buffers accumulate over the step's microbatches and reduce-scatter once, in the
//      last one (issue 28's choice, what PyTorch's pipeline stage does with FSDP);
//   3  also only its shard of the parameters (`param_shard`): `params` has storage only while
//      fsdp.hpp's ParameterGathers holds the bucket gathered. Buckets never span two units.
// The gradient shard the optimizer reads is shard_grads(), whatever the stage.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "model/params.hpp"

namespace trainer::data_parallel {

struct Segment {
  model::Param* param;
  int64_t offset;  // in the bucket's flat buffers
  int64_t numel;
};

struct Bucket {
  at::Tensor params;       // flat parameter values, in the model's dtype (ZeRO-3: while gathered)
  at::Tensor param_shard;  // ZeRO-3: [shard_begin, shard_begin + shard_numel) of params, kept
  at::Tensor grads;        // flat main gradients, in the main-gradient dtype (ZeRO-2/3: during backward)
  at::Tensor grad_shard;   // ZeRO-2/3: this rank's shard of the gradients summed over DP
  at::Tensor main_params;  // fp32 masters of [shard_begin, shard_begin + shard_numel)
  std::vector<Segment> segments;
  int chunk = 0;
  int64_t shard_begin = 0, shard_numel = 0;  // this rank's optimizer shard
  // bookkeeping during backward
  int ready = 0;
  bool launched = false;
  bool overlapped = false;  // a reduction of it started from a hook this step
  distributed::Pending reduction;
  // Whether main_params is a copy of its own (a bf16 model) rather than a view of `params`.
  bool own_masters() const { return params.scalar_type() != main_params.scalar_type(); }
  at::Tensor wire;    // bf16 copy of fp32 `grads` being reduced (optim.grad_reduce_dtype = bf16)
  at::Tensor summed;  // ZeRO-2/3: a reduce-scatter's output, until it is added into grad_shard
  int64_t numel() const { return params.numel(); }  // padded to a multiple of dp
  // The summed gradients of [shard_begin, shard_begin + shard_numel), what the optimizer reads.
  at::Tensor shard_grads() const { return grad_shard.defined() ? grad_shard : grads.narrow(0, shard_begin, shard_numel); }
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
    ZeroStage zero = ZeroStage::None;         // optim.zero_stage
    bool reduce_every_microbatch = false;     // ZeRO-2/3 without PP (see above)
    at::ScalarType main_grad_dtype = at::kFloat;  // optim.main_grad_dtype
    bool bf16_reduction = false;  // fp32 main gradients travel (and are summed) in bf16, then land in fp32
  };
  DataParallel(std::vector<model::Param>& params, distributed::Comm& comm, const Options& opts);
  ~DataParallel();

  void zero_grad();
  // From now on, a bucket of `chunk` whose gradients are all in starts reducing at once (with
  // reduce_every_microbatch, always).
  void enable_sync(int chunk);
  // Starts what has not started and waits for every reduction over DP. Under ZeRO-2/3 each
  // parameter's main_grad is then its part inside this rank's gradient shard (flat, maybe empty).
  void finish();
  // After the optimizer updated the masters: the model's parameters take their values (rounded
  // to bf16 in a bf16 model) and, under ZeRO-1/2, every DP rank shares its shard (ZeRO-3 keeps
  // only its shard; units are gathered when used).
  void publish_params();

  std::vector<Bucket>& buckets() { return buckets_; }
  ZeroStage zero() const { return zero_; }
  // Whether the DP ranks hold disjoint optimizer shards (ZeRO-1 and up).
  bool sharded() const { return zero_ != ZeroStage::None; }
  // Buckets whose reduction started from an autograd hook in the last step (i.e. while
  // backward was still running), of how many.
  int launched_in_backward() const { return launched_in_backward_; }

 private:
  bool shards_grads() const { return zero_ >= ZeroStage::Gradients; }
  void on_grad_ready(size_t bucket);
  void add_grad(size_t bucket, model::Param& p);
  void launch(size_t bucket);
  void land(size_t bucket);  // waits for a bucket's reduction and keeps what this rank owns of it
  void land_now(size_t bucket);  // the same, out of turn

  static constexpr size_t kReductionsInFlight = 2;  // ZeRO-2/3: full buffers waiting to be reduced
  distributed::Comm& comm_;
  ZeroStage zero_;
  bool bf16_reduction_;
  bool reduce_every_microbatch_;
  at::ScalarType main_grad_dtype_;
  std::vector<size_t> in_flight_;  // ZeRO-2/3: launched buckets not yet landed, oldest first
  std::vector<Bucket> buckets_;
  std::vector<bool> sync_enabled_;  // per chunk
  std::vector<std::shared_ptr<void>> hooks_;  // keeps the grad accumulators (and hooks) alive
  int launched_in_backward_ = 0;
};

}  // namespace trainer::data_parallel
