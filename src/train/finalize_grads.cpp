#include "train/finalize_grads.hpp"

#include <ATen/ATen.h>

#include "tensor_parallel/parallel_linear.hpp"

namespace trainer {

void finalize_grads(data_parallel::DataParallel& dp, std::vector<model::Param>& params, distributed::Comm& comm) {
  dp.finish();
  // The gradients are views into the DP buckets, so the sums below land where the optimizer
  // reads them.
  std::vector<at::Tensor> sequence_parallel;
  for (auto& p : params) {
    at::Tensor grad = p.tensor.grad();
    if (p.info.tied_embedding && comm.embedding().size() > 1) distributed::all_reduce(comm.embedding(), grad);
    if (p.info.sequence_parallel_grad) sequence_parallel.push_back(grad);
  }
  tensor_parallel::reduce_sequence_parallel_grads(sequence_parallel, comm.tp());
}

}  // namespace trainer
