#include "train/finalize_grads.hpp"

#include <ATen/ATen.h>

#include "tensor_parallel/parallel_linear.hpp"

namespace trainer {

void finalize_grads(data_parallel::DataParallel& dp, std::vector<model::Param>& params, distributed::Comm& comm) {
  dp.finish();
  // The main gradients are views into the DP buckets, so the sums below land where the
  // optimizer reads them.
  std::vector<at::Tensor> sequence_parallel, kv_replicas;
  for (auto& p : params) {
    at::Tensor grad = p.main_grad;
    if (p.info.tied_embedding && comm.embedding().size() > 1) distributed::all_reduce(comm.embedding(), grad);
    if (p.info.sequence_parallel_grad) sequence_parallel.push_back(grad);
    if (p.info.tp_replicas > 1) kv_replicas.push_back(grad);
  }
  tensor_parallel::sum_replica_grads(sequence_parallel, comm.tp());
  tensor_parallel::sum_replica_grads(kv_replicas, comm.kv_replicas());
}

}  // namespace trainer
