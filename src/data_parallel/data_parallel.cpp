#include "data_parallel/data_parallel.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include "ops/mapped.hpp"

namespace trainer::data_parallel {
namespace {

// Groups parameters into buckets: reverse creation order (the order backward produces them),
// a new bucket per chunk or when the size limit is reached, and a tied embedding alone so that
// its two pipeline copies are sharded identically under ZeRO. `by_unit` (ZeRO-3): a new bucket
// per unit too, so that gathering a unit gathers nothing else.
std::vector<std::vector<model::Param*>> plan_buckets(std::vector<model::Param>& params, int64_t max_numel,
                                                     bool by_unit) {
  std::vector<std::vector<model::Param*>> plan;
  int64_t size = 0;
  int chunk = -1, unit = -1;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    model::Param* p = &*it;
    const bool alone = p->info.tied_embedding;
    if (plan.empty() || p->info.chunk != chunk || (by_unit && p->info.unit != unit) || size >= max_numel || alone ||
        plan.back().front()->info.tied_embedding) {
      plan.emplace_back();
      size = 0;
    }
    plan.back().push_back(p);
    size += p->tensor.numel();
    chunk = p->info.chunk;
    unit = p->info.unit;
  }
  return plan;
}

// ZeRO-2/3's full main-gradient buffer of bucket `b`, which lives for one microbatch (one step
// under PP) and is dropped once its reduce-scatter lands: pages of its own, so that each cycle
// gives its memory back (ops/mapped.hpp).
at::Tensor full_grads(const Bucket& b, at::ScalarType dtype) {
  return ops::zeros_mapped(b.numel(), b.params.options().dtype(dtype));
}

}  // namespace

DataParallel::DataParallel(std::vector<model::Param>& params, distributed::Comm& comm, const Options& opts)
    : comm_(comm),
      zero_(opts.zero),
      bf16_reduction_(opts.bf16_reduction && comm.dp().size() > 1 && opts.main_grad_dtype == at::kFloat),
      reduce_every_microbatch_(opts.reduce_every_microbatch && zero_ >= ZeroStage::Gradients),
      main_grad_dtype_(opts.main_grad_dtype) {
  const int dp_size = comm.dp().size();
  const auto max_numel = static_cast<int64_t>(opts.bucket_mb * 1024 * 1024 / sizeof(float));
  int chunks = 0;
  for (auto& group : plan_buckets(params, max_numel, zero_ == ZeroStage::Parameters)) {
    Bucket b;
    b.chunk = group.front()->info.chunk;
    chunks = std::max(chunks, b.chunk + 1);
    int64_t numel = 0;
    for (auto* p : group) {
      b.segments.push_back({p, numel, p->tensor.numel()});
      numel += p->tensor.numel();
    }
    const int64_t padded = (numel + dp_size - 1) / dp_size * dp_size;  // equal shards for ZeRO
    // On the rank's device: the parameters move there as they move into the bucket.
    const auto on_device = at::TensorOptions().device(comm.device());
    // ZeRO-3 lets go of this buffer and takes it again at every gather: pages of its own.
    const auto param_options = on_device.dtype(group.front()->tensor.scalar_type());
    b.params = zero_ == ZeroStage::Parameters ? ops::zeros_mapped(padded, param_options)
                                              : at::zeros({padded}, param_options);
    if (!shards_grads()) b.grads = at::zeros({padded}, on_device.dtype(main_grad_dtype_));
    for (auto& s : b.segments) {
      at::Tensor& t = s.param->tensor;
      at::Tensor pview = b.params.narrow(0, s.offset, s.numel).view(t.sizes());
      pview.copy_(t.detach());
      t.set_data(pview);  // the parameter now lives in the flat buffer
      if (shards_grads()) continue;  // main gradients come with the step's first gradient
      s.param->main_grad = b.grads.narrow(0, s.offset, s.numel).view(t.sizes());
      // Same dtype: autograd accumulates straight into the bucket.
      if (t.scalar_type() == main_grad_dtype_) t.mutable_grad() = s.param->main_grad;
    }
    b.shard_numel = sharded() ? padded / dp_size : padded;
    b.shard_begin = sharded() ? comm.dp().index() * b.shard_numel : 0;
    if (shards_grads()) b.grad_shard = at::zeros({b.shard_numel}, on_device.dtype(main_grad_dtype_));
    // Masters from the model's values (in a bf16 model, the bf16-rounded initial values, as
    // Megatron-LM makes them); a checkpoint then overwrites them with its fp32 masters.
    at::Tensor shard = b.params.narrow(0, b.shard_begin, b.shard_numel);
    if (zero_ == ZeroStage::Parameters) shard = b.param_shard = shard.clone();
    b.main_params = shard.scalar_type() == at::kFloat ? shard : shard.to(at::kFloat);
    // ZeRO-3 keeps the shard only, from here on (fsdp.hpp gathers the rest when it is used):
    // bucket by bucket, so that setup never holds a second full copy of the model.
    if (zero_ == ZeroStage::Parameters) ops::drop_memory(b.params);
    buckets_.push_back(std::move(b));
  }
  sync_enabled_.assign(chunks, false);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    for (auto& s : buckets_[i].segments) {
      model::Param* p = s.param;
      auto acc = torch::autograd::impl::grad_accumulator(p->tensor);
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i, p](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            add_grad(i, *p);
            on_grad_ready(i);
            return outputs;
          }));
      hooks_.push_back(acc);
    }
  }
}

DataParallel::~DataParallel() = default;

// A gradient autograd made that is not already in the bucket (a bf16 gradient of fp32 main
// gradients, or any gradient under ZeRO-2/3) is added into the main gradients and dropped, so
// no second full-size gradient stays alive.
void DataParallel::add_grad(size_t index, model::Param& p) {
  at::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined() || (p.main_grad.defined() && grad.is_same(p.main_grad))) return;
  Bucket& b = buckets_[index];
  if (shards_grads() && b.launched) land_now(index);  // the previous microbatch's reduction still reads the buffer
  if (!b.grads.defined()) {  // ZeRO-2/3: the bucket's first gradient (of the step, or of the microbatch)
    b.grads = full_grads(b, main_grad_dtype_);
    for (auto& s : b.segments) s.param->main_grad = b.grads.narrow(0, s.offset, s.numel).view(s.param->tensor.sizes());
  }
  p.main_grad.add_(grad);
  grad.reset();
}

void DataParallel::zero_grad() {
  for (auto& b : buckets_) {
    if (b.grads.defined()) b.grads.zero_();
    if (b.grad_shard.defined()) b.grad_shard.zero_();
    b.ready = 0;
    b.launched = b.overlapped = false;
  }
  std::fill(sync_enabled_.begin(), sync_enabled_.end(), reduce_every_microbatch_);
  launched_in_backward_ = 0;
}

void DataParallel::enable_sync(int chunk) {
  sync_enabled_.at(chunk) = true;
}

void DataParallel::on_grad_ready(size_t index) {
  Bucket& b = buckets_[index];
  if (!sync_enabled_[b.chunk] || b.launched) return;
  if (++b.ready == static_cast<int>(b.segments.size())) {
    launch(index);
    if (!b.overlapped) ++launched_in_backward_;
    b.overlapped = true;
  }
}

// Each rank's loss is already divided by the global token count, so the sum is the mean.
void DataParallel::launch(size_t index) {
  Bucket& b = buckets_[index];
  b.launched = true;
  if (!b.grads.defined()) b.grads = full_grads(b, main_grad_dtype_);
  if (bf16_reduction_) b.wire = b.grads.to(at::kBFloat16);  // half the bytes; land() copies the sum back
  at::Tensor& wire = bf16_reduction_ ? b.wire : b.grads;
  in_flight_.push_back(index);
  if (!shards_grads()) {
    b.reduction = distributed::all_reduce_async(comm_.dp(), wire);
    return;
  }
  b.summed = at::empty({b.shard_numel}, wire.options());
  b.reduction = distributed::reduce_scatter_async(comm_.dp(), wire, b.summed);
  // Bound the full-size buffers alive at once: the oldest reduction lands before another starts.
  if (in_flight_.size() > kReductionsInFlight) {
    land(in_flight_.front());
    in_flight_.erase(in_flight_.begin());
  }
}

void DataParallel::land(size_t index) {
  Bucket& b = buckets_[index];
  b.reduction.wait();
  if (!shards_grads()) {
    if (bf16_reduction_) b.grads.copy_(b.wire);
    b.wire = at::Tensor();
    return;
  }
  b.grad_shard.add_(b.summed);  // one microbatch's sum, or the step's (a bf16 sum lands in fp32)
  b.wire = b.grads = b.summed = at::Tensor();  // the full buffer goes with its views below
  b.launched = false;  // the next microbatch's gradients start a new buffer
  b.ready = 0;
  for (auto& s : b.segments) s.param->main_grad = b.grad_shard.narrow(0, 0, 0);
  for_each_in_shard(b, [&](const Segment& s, int64_t begin, int64_t n) {
    s.param->main_grad = b.grad_shard.narrow(0, begin - b.shard_begin, n);
  });
}

// Lands bucket `index` ahead of its turn.
void DataParallel::land_now(size_t index) {
  land(index);
  in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), index));
}

void DataParallel::finish() {
  // Every bucket still holding unreduced gradients reduces (a ZeRO-2/3 bucket that landed holds
  // none).
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (!buckets_[i].launched && (buckets_[i].grads.defined() || !shards_grads())) launch(i);
  for (size_t i : in_flight_) land(i);
  in_flight_.clear();
}

void DataParallel::publish_params() {
  for (auto& b : buckets_) {
    if (zero_ == ZeroStage::Parameters) {  // each rank keeps its shard; units are gathered when used
      if (b.own_masters()) b.param_shard.copy_(b.main_params);
      continue;
    }
    at::Tensor mine = b.params.narrow(0, b.shard_begin, b.shard_numel);
    if (b.own_masters()) mine.copy_(b.main_params);  // else the masters are the parameters themselves
    if (sharded() && comm_.dp().size() > 1) b.params.copy_(distributed::all_gather(comm_.dp(), mine, 0));
  }
}

}  // namespace trainer::data_parallel
