// Gradient finalisation: the one step between the last backward of a training step and the
// optimizer where the gradient traffic of the three parallelisms meets (Megatron-LM's
// finalize_model_grads), in this order:
//   1. data parallel: every bucket's reduction over DP (started while backward ran) is done;
//   2. pipeline parallel: the two copies of a tied embedding (first stage's input embedding,
//      last stage's head) get the sum of their gradients over the embedding group;
//   3. tensor parallel: under sequence parallelism, the gradients of TP-replicated parameters
//      are summed over TP; key/value heads replicated on several TP ranks (model.kv_heads < tp)
//      get the sum of their replicas' gradients over the kv group.
// Each piece can run on its own (a TP-only test calls finalize_tp_grads); finalize_grads runs
// all three, and is where the training loop calls them. The pieces act on model::grad_of(p):
// the DP bucket's main gradient, or autograd's .grad() without data parallelism.
#pragma once

#include <vector>

#include "data_parallel/data_parallel.hpp"
#include "distributed/comm.hpp"
#include "model/params.hpp"

namespace trainer {

void finalize_grads(data_parallel::DataParallel& dp, std::vector<model::Param>& params, distributed::Comm& comm);

void finalize_dp_grads(data_parallel::DataParallel& dp);
void finalize_pp_grads(std::vector<model::Param>& params, distributed::Comm& comm);
void finalize_tp_grads(std::vector<model::Param>& params, distributed::Comm& comm);

}  // namespace trainer
