#include "data_parallel/data_parallel.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

namespace trainer::data_parallel {
namespace {

// Groups parameters into buckets: reverse creation order (the order backward produces them),
// a new bucket per chunk or when the size limit is reached, and a tied embedding alone so that
// its two pipeline copies are sharded identically under ZeRO-1.
std::vector<std::vector<model::Param*>> plan_buckets(std::vector<model::Param>& params,
                                                     int64_t max_numel) {
  std::vector<std::vector<model::Param*>> plan;
  int64_t size = 0;
  int chunk = -1;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    model::Param* p = &*it;
    const bool alone = p->info.tied_embedding;
    if (plan.empty() || p->info.chunk != chunk || size >= max_numel || alone ||
        plan.back().front()->info.tied_embedding) {
      plan.emplace_back();
      size = 0;
    }
    plan.back().push_back(p);
    size += p->tensor.numel();
    chunk = p->info.chunk;
  }
  return plan;
}

}  // namespace

DataParallel::DataParallel(std::vector<model::Param>& params, distributed::Comm& comm, const Options& opts)
    : comm_(comm),
      zero1_(opts.zero1),
      bf16_reduction_(opts.bf16_reduction && comm.dp().size() > 1 && opts.main_grad_dtype == at::kFloat) {
  const int dp_size = comm.dp().size();
  const auto max_numel = static_cast<int64_t>(opts.bucket_mb * 1024 * 1024 / sizeof(float));
  int chunks = 0;
  for (auto& group : plan_buckets(params, max_numel)) {
    Bucket b;
    b.chunk = group.front()->info.chunk;
    chunks = std::max(chunks, b.chunk + 1);
    int64_t numel = 0;
    for (auto* p : group) {
      b.segments.push_back({p, numel, p->tensor.numel()});
      numel += p->tensor.numel();
    }
    const int64_t padded = (numel + dp_size - 1) / dp_size * dp_size;  // equal shards for ZeRO-1
    // On the rank's device: the parameters move there as they move into the bucket.
    const auto on_device = at::TensorOptions().device(comm.device());
    b.params = at::zeros({padded}, on_device.dtype(group.front()->tensor.scalar_type()));
    b.grads = at::zeros({padded}, on_device.dtype(opts.main_grad_dtype));
    for (auto& s : b.segments) {
      at::Tensor& t = s.param->tensor;
      at::Tensor pview = b.params.narrow(0, s.offset, s.numel).view(t.sizes());
      pview.copy_(t.detach());
      t.set_data(pview);  // the parameter now lives in the flat buffer
      s.param->main_grad = b.grads.narrow(0, s.offset, s.numel).view(t.sizes());
      // Same dtype: autograd accumulates straight into the bucket.
      if (t.scalar_type() == opts.main_grad_dtype) t.mutable_grad() = s.param->main_grad;
    }
    b.shard_numel = zero1_ ? padded / dp_size : padded;
    b.shard_begin = zero1_ ? comm.dp().index() * b.shard_numel : 0;
    // Masters from the model's values (in a bf16 model, the bf16-rounded initial values, as
    // Megatron-LM makes them); a checkpoint then overwrites them with its fp32 masters.
    const at::Tensor shard = b.params.narrow(0, b.shard_begin, b.shard_numel);
    b.main_params = shard.scalar_type() == at::kFloat ? shard : shard.to(at::kFloat);
    buckets_.push_back(std::move(b));
  }
  sync_enabled_.assign(chunks, false);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    for (auto& s : buckets_[i].segments) {
      model::Param* p = s.param;
      const bool add_into_main = p->tensor.scalar_type() != p->main_grad.scalar_type();
      auto acc = torch::autograd::impl::grad_accumulator(p->tensor);
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i, p, add_into_main](const torch::autograd::variable_list& outputs,
                                      const torch::autograd::variable_list&) {
            if (add_into_main) {  // e.g. a bf16 gradient into fp32 main gradients, then freed
              p->main_grad.add_(p->tensor.grad());
              p->tensor.mutable_grad().reset();
            }
            on_grad_ready(i);
            return outputs;
          }));
      hooks_.push_back(acc);
    }
  }
}

DataParallel::~DataParallel() = default;

void DataParallel::zero_grad() {
  for (auto& b : buckets_) {
    b.grads.zero_();
    b.ready = 0;
    b.launched = false;
  }
  std::fill(sync_enabled_.begin(), sync_enabled_.end(), false);
  launched_in_backward_ = 0;
}

void DataParallel::enable_sync(int chunk) {
  sync_enabled_.at(chunk) = true;
}

void DataParallel::on_grad_ready(size_t index) {
  Bucket& b = buckets_[index];
  if (!sync_enabled_[b.chunk] || b.launched) return;
  if (++b.ready == static_cast<int>(b.segments.size())) {
    launch(b);
    ++launched_in_backward_;
  }
}

void DataParallel::launch(Bucket& b) {
  b.launched = true;
  // Each rank's loss is already divided by the global token count, so the sum is the mean.
  if (!bf16_reduction_) {
    b.reduction = distributed::all_reduce_async(comm_.dp(), b.grads);
    return;
  }
  b.wire = b.grads.to(at::kBFloat16);  // half the bytes; finish() copies the sum back
  b.reduction = distributed::all_reduce_async(comm_.dp(), b.wire);
}

void DataParallel::finish() {
  for (auto& b : buckets_)
    if (!b.launched) launch(b);
  for (auto& b : buckets_) {
    b.reduction.wait();
    if (bf16_reduction_) b.grads.copy_(b.wire);
  }
}

void DataParallel::publish_params() {
  for (auto& b : buckets_) {
    at::Tensor mine = b.params.narrow(0, b.shard_begin, b.shard_numel);
    if (b.own_masters()) mine.copy_(b.main_params);  // else the masters are the parameters themselves
    if (zero1_ && comm_.dp().size() > 1) b.params.copy_(distributed::all_gather(comm_.dp(), mine, 0));
  }
}

}  // namespace trainer::data_parallel
