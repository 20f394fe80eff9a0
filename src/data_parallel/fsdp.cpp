#include "data_parallel/fsdp.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "ops/mapped.hpp"

namespace trainer::data_parallel {

ParameterGathers::ParameterGathers(DataParallel& dp, const std::vector<std::vector<const model::Param*>>& units,
                                   distributed::Comm& comm, bool per_unit, bool reshard_after_forward)
    : dp_(dp),
      comm_(comm),
      active_(dp.zero() == ZeroStage::Parameters),
      per_unit_(per_unit),
      reshard_after_forward_(reshard_after_forward) {
  if (!active_) return;
  std::map<const model::Param*, size_t> bucket_of;
  for (size_t i = 0; i < dp.buckets().size(); ++i)
    for (const auto& s : dp.buckets()[i].segments) bucket_of[s.param] = i;
  std::map<const model::Param*, std::vector<int>> units_of;
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<size_t> buckets;
    for (const auto* p : units[u]) {
      buckets.push_back(bucket_of.at(p));
      units_of[p].push_back(static_cast<int>(u));
    }
    std::sort(buckets.begin(), buckets.end());
    buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
    unit_buckets_.push_back(buckets);
    unit_params_.push_back(static_cast<int>(units[u].size()));
  }
  held_.assign(units.size(), false);
  in_backward_.assign(units.size(), false);
  grads_left_.assign(units.size(), 0);
  const size_t n = dp.buckets().size();
  state_.assign(n, State::Sharded);  // DataParallel let go of the full buffers once it had the shards
  holders_.assign(n, 0);
  gathers_.resize(n);
  if (!per_unit_) return;
  // Per unit, a unit is freed once its last parameter's gradient is in (after DataParallel's
  // hook has taken that gradient into the bucket).
  for (const auto& [param, its_units] : units_of) {
    auto acc = torch::autograd::impl::grad_accumulator(param->tensor);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, its_units = its_units](const torch::autograd::variable_list& outputs,
                                      const torch::autograd::variable_list&) {
          on_grad(its_units);
          return outputs;
        }));
    hooks_.push_back(acc);
  }
}

ParameterGathers::~ParameterGathers() = default;

void ParameterGathers::begin_step() {
  if (!active_ || per_unit_) return;
  for (size_t u = 0; u < unit_buckets_.size(); ++u)
    for (size_t i : unit_buckets_[u]) start_gather(i);  // all in flight together
  for (size_t u = 0; u < unit_buckets_.size(); ++u) acquire(static_cast<int>(u));
}

void ParameterGathers::end_step() {
  if (!active_) return;
  for (size_t u = 0; u < unit_buckets_.size(); ++u) {
    release(static_cast<int>(u));
    in_backward_[u] = false;
  }
  for (size_t i = 0; i < state_.size(); ++i)  // prefetched, never used
    if (holders_[i] == 0) free(i);
}

void ParameterGathers::before_forward(int unit) {
  if (!per_unit() || in_backward_[unit]) return;  // (a recomputed forward runs inside backward)
  acquire(unit);
  prefetch(unit + 1);
}

void ParameterGathers::after_forward(int unit) {
  if (!per_unit() || in_backward_[unit] || !reshard_after_forward_) return;
  release(unit);
}

void ParameterGathers::before_backward(int unit) {
  if (!per_unit()) return;
  in_backward_[unit] = true;
  grads_left_[unit] = unit_params_[unit];
  acquire(unit);
  prefetch(unit - 1);
}

void ParameterGathers::on_grad(const std::vector<int>& units_of_param) {
  for (int u : units_of_param)
    if (in_backward_[u] && --grads_left_[u] == 0) {
      in_backward_[u] = false;
      release(u);
    }
}

void ParameterGathers::acquire(int unit) {
  if (held_[unit]) return;
  held_[unit] = true;
  for (size_t i : unit_buckets_[unit]) {
    finish_gather(i);
    ++holders_[i];
  }
}

void ParameterGathers::release(int unit) {
  if (!held_[unit]) return;
  held_[unit] = false;
  for (size_t i : unit_buckets_[unit])
    if (--holders_[i] == 0) free(i);
}

void ParameterGathers::prefetch(int unit) {
  if (unit < 0 || unit >= static_cast<int>(unit_buckets_.size())) return;
  for (size_t i : unit_buckets_[unit]) start_gather(i);
}

void ParameterGathers::start_gather(size_t i) {
  if (state_[i] != State::Sharded) return;
  Bucket& b = dp_.buckets()[i];
  ops::give_memory(b.params);
  gathers_[i] = distributed::all_gather_async(comm_.dp(), b.param_shard, b.params);
  state_[i] = State::Gathering;
}

void ParameterGathers::finish_gather(size_t i) {
  start_gather(i);
  if (state_[i] != State::Gathering) return;
  gathers_[i].wait();
  state_[i] = State::Gathered;
}

void ParameterGathers::free(size_t i) {
  if (state_[i] == State::Sharded) return;
  if (state_[i] == State::Gathering) gathers_[i].wait();
  ops::drop_memory(dp_.buckets()[i].params);
  state_[i] = State::Sharded;
}

}  // namespace trainer::data_parallel
