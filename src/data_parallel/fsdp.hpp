// ZeRO-3 (fully sharded data parallelism): between uses each DP rank keeps only its shard of
// every parameter bucket (Bucket::param_shard, 1/dp), and a unit's buckets are all-gathered
// (in the model's dtype: bf16 gathers in a bf16 model) when the unit runs. The units are
// GPT::units(): the embedding, each layer, the final norm with the head.
//
// Without PP (per unit, as FSDP wraps each Transformer block):
//   forward   a unit is gathered just before it runs, while the next unit's gather starts
//             (prefetch), and freed after it (parallel.fsdp_reshard_after_forward; false keeps
//             it until its backward, as Llama 3 did);
//   backward  it is gathered again once the gradient of its output is complete (its backward
//             is next), while the previous unit's gather starts, and freed as soon as every one
//             of its parameters has its gradient.
//   Each microbatch repeats this.
// With PP: begin_step gathers the whole stage and end_step frees it, so every microbatch of the
// step uses the gathered stage (what PyTorch's pipeline stage does with FSDP): one gather per
// step instead of two per microbatch and unit, at the price of the stage's full parameters
// during the step.
// Gradients are ZeRO-2's (data_parallel.hpp): reduce-scattered into shards during each
// microbatch's backward without PP, during the last microbatch's under PP.
//
// Freeing keeps each parameter tensor (its shape, its autograd identity, what backward saved of
// it) and drops only its storage's memory; gathering gives the storage memory again and fills
// it. Gathers are collectives on the DP group: every DP rank runs the same model and schedule,
// so they make the same calls in the same order.
#pragma once

#include <memory>
#include <vector>

#include "data_parallel/data_parallel.hpp"
#include "model/gpt.hpp"

namespace trainer::data_parallel {

class ParameterGathers final : public model::UnitHooks {
 public:
  // Does nothing unless `dp` is at ZeRO-3. `per_unit`: the schedule without PP (see above).
  ParameterGathers(DataParallel& dp, const std::vector<std::vector<const model::Param*>>& units,
                   distributed::Comm& comm, bool per_unit, bool reshard_after_forward);
  ~ParameterGathers() override;

  bool per_unit() const { return active_ && per_unit_; }
  void begin_step();  // PP: gathers every unit of the stage
  void end_step();    // frees whatever is still gathered

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;

 private:
  enum class State { Sharded, Gathering, Gathered };
  void on_grad(const std::vector<int>& units_of_param);
  void acquire(int unit);
  void release(int unit);
  void prefetch(int unit);
  void start_gather(size_t bucket);
  void finish_gather(size_t bucket);
  void free(size_t bucket);

  DataParallel& dp_;
  distributed::Comm& comm_;
  bool active_, per_unit_, reshard_after_forward_;
  std::vector<std::vector<size_t>> unit_buckets_;  // per unit
  std::vector<int> unit_params_;                   // per unit: how many parameters it uses
  std::vector<bool> held_, in_backward_;           // per unit
  std::vector<int> grads_left_;                    // per unit, during its backward
  std::vector<State> state_;                       // per bucket
  std::vector<int> holders_;                       // per bucket: units holding it gathered
  std::vector<distributed::Pending> gathers_;      // per bucket
  std::vector<std::shared_ptr<void>> hooks_;
};

}  // namespace trainer::data_parallel
