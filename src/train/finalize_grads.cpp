#include "train/finalize_grads.hpp"

#include <ATen/ATen.h>

#include "tensor_parallel/parallel_linear.hpp"

namespace trainer {

void finalize_dp_grads(data_parallel::DataParallel& dp) { dp.finish(); }

void finalize_pp_grads(std::vector<model::Param>& params, distributed::Comm& comm) {
  if (comm.embedding().size() == 1) return;
  for (auto& p : params)
    if (p.info.tied_embedding) {
      at::Tensor grad = model::grad_of(p);
      distributed::all_reduce(comm.embedding(), grad);
    }
}

void finalize_tp_grads(std::vector<model::Param>& params, distributed::Comm& comm) {
  std::vector<at::Tensor> sequence_parallel, kv_replicas;
  for (auto& p : params) {
    if (p.info.sequence_parallel_grad) sequence_parallel.push_back(model::grad_of(p));
    if (p.info.tp_replicas > 1) kv_replicas.push_back(model::grad_of(p));
  }
  tensor_parallel::sum_replica_grads(sequence_parallel, comm.tp());
  tensor_parallel::sum_replica_grads(kv_replicas, comm.kv_replicas());
}

void finalize_grads(data_parallel::DataParallel& dp, std::vector<model::Param>& params, distributed::Comm& comm) {
  finalize_dp_grads(dp);
  // The main gradients are views into the DP buckets, so the sums below land where the
  // optimizer reads them.
  finalize_pp_grads(params, comm);
  finalize_tp_grads(params, comm);
}

}  // namespace trainer
