#include "model/params.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "runtime/seed.hpp"

namespace trainer::model {

at::Tensor init_shard(const ParamInfo& info, const InitSpec& init, std::int64_t seed, int tp_rank,
                      int tp_size) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  at::Tensor full;
  switch (init.kind) {
    case Init::Ones: full = at::ones(info.full_shape, opts); break;
    case Init::Zeros: full = at::zeros(info.full_shape, opts); break;
    case Init::Normal: {
      // Only the real rows are drawn, so the padding (which depends on tp) cannot shift them.
      std::vector<int64_t> drawn_shape = info.full_shape;
      if (info.real_rows >= 0) drawn_shape[0] = info.real_rows;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(runtime::seed_for(seed, info.name));
      // Drawn in place (the same values as at::normal of that shape): no second fp32 copy.
      full = at::zeros(info.full_shape, opts);
      full.narrow(0, 0, drawn_shape[0]).normal_(0.0, init.std, gen);
      break;
    }
  }
  if (info.shard_dim < 0 || tp_size == 1) return full;
  return full.chunk(tp_size / info.tp_replicas, info.shard_dim)[tp_rank / info.tp_replicas].contiguous();
}

}  // namespace trainer::model
