#include "model/recompute.hpp"

#include <ATen/Context.h>
#include <torch/torch.h>

namespace trainer::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Saved : torch::CustomClassHolder {
  TensorFn fn;
  at::Tensor rng_state;  // the generator's state before the first run
  c10::Device device = c10::Device(c10::kCPU);
};

at::Generator generator_for(const c10::Device& device) { return at::globalContext().defaultGenerator(device); }

struct Recomputed : torch::autograd::Function<Recomputed> {
  static at::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<Saved> saved, at::TensorList inputs) {
    saved->device = inputs.front().device();
    {
      auto gen = generator_for(saved->device);
      std::lock_guard<std::mutex> lock(gen.mutex());
      saved->rng_state = gen.get_state();
    }
    ctx->saved_data["fn"] = c10::IValue::make_capsule(saved);
    ctx->save_for_backward(inputs.vec());
    at::NoGradGuard no_grad;
    return saved->fn(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = c10::static_intrusive_pointer_cast<Saved>(ctx->saved_data["fn"].toCapsule());
    std::vector<at::Tensor> inputs;
    for (const auto& t : ctx->get_saved_variables()) inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
    // Run fn again from the state the first run started in, and leave the generator where the
    // first run left it... which is where the caller's later draws already continued from:
    // put back the state it has now.
    auto gen = generator_for(saved->device);
    at::Tensor now;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      now = gen.get_state();
      gen.set_state(saved->rng_state);
    }
    at::Tensor out;
    {
      at::AutoGradMode grad(true);
      out = saved->fn(inputs);
    }
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(now);
    }
    torch::autograd::backward({out}, {grad_outputs[0]});
    variable_list grads{at::Tensor()};  // none for the function itself
    for (const auto& in : inputs) grads.push_back(in.requires_grad() ? in.grad() : at::Tensor());
    return grads;
  }
};

}  // namespace

at::Tensor recompute(const TensorFn& fn, const std::vector<at::Tensor>& inputs) {
  bool needs_grad = false;
  for (const auto& t : inputs) needs_grad |= t.requires_grad();
  if (!at::GradMode::is_enabled() || !needs_grad) return fn(inputs);
  auto saved = c10::make_intrusive<Saved>();
  saved->fn = fn;
  // As a TensorList, not a vector: apply() finds the tensors that need gradients by type.
  return Recomputed::apply(saved, at::TensorList(inputs));
}

}  // namespace trainer::model
