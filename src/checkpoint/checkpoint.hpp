// Checkpoints a cluster user can trust: sharded, atomic, resumable at any layout.
//
//   <checkpoint.dir>/step_00000010/rank<R>.{pt,index}   every rank's parameters and AdamW moments
//                                /meta.yaml            step, samples consumed, layout (rank 0)
//                                /config.yaml          the run's resolved config (rank 0)
//   <checkpoint.dir>/latest                            "step_00000010", replaced last
//
// Each rank writes into step_N.tmp/ (temporary names, fsync, rename); after a barrier rank 0
// renames the directory and only then replaces `latest`. A crash or kill at any point leaves
// the previous checkpoint and the pointer to it untouched. Loading assembles full tensors from
// the pieces (checksummed) and keeps this rank's shard, so the layout may change between runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/shards.hpp"
#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "data_parallel/data_parallel.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"

namespace trainer::checkpoint {

struct TrainState {
  int step = 0;         // optimizer steps completed
  int skipped = 0;      // of which skipped (non-finite)
  std::int64_t consumed_samples = 0;
};

// The checkpoint directory `latest` points to, if any.
std::optional<std::string> latest(const std::string& root);

// Saves (all ranks call it). Returns the directory written.
std::string save(const Config& cfg, distributed::Comm& comm, optim::AdamW& optimizer, data_parallel::DataParallel& dp,
                 const TrainState& state);

// Loads `dir` into this rank's parameters and optimizer shard; the saved model must have the
// same architecture (the parallel layout may differ). All ranks call it.
TrainState load(const std::string& dir, const Config& cfg, std::vector<model::Param>& params,
                optim::AdamW& optimizer, data_parallel::DataParallel& dp);

// checkpoint.init_from: the weights of a trainer checkpoint (a run's directory, then its latest
// step, or one step's) or of a Hugging Face model directory into this rank's parameters (and,
// given `dp`, its fp32 master weights). The saved model must be the config's in every model key
// (a mismatch names it); dropout, init_std and, with RoPE, seq_len may differ.
void load_weights(const std::string& source, const Config& cfg, std::vector<model::Param>& params,
                  data_parallel::DataParallel* dp = nullptr);

// Loads only the parameters (e.g. for generation or export at another layout).
void load_params(const std::string& dir, const Config& cfg, std::vector<model::Param>& params);
// Full tensors of `names` (parameters, or "<name>.exp_avg"...), checking the model matches.
std::map<std::string, at::Tensor> load_full(const std::string& dir, const Config& cfg,
                                            const std::set<std::string>& names);

// What `train --dump` writes per rank: the fp32 master weights and the summed gradients
// ("<name>.grad") of this rank's optimizer shard (full tensors via read_full).
std::vector<Piece> dump_pieces(data_parallel::DataParallel& dp);

// Removes leftovers of interrupted saves (rank 0, before training).
void remove_partial_saves(const std::string& root);

}  // namespace trainer::checkpoint
