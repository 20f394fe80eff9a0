// Per-rank parameter shards on disk and their reassembly into full tensors. Each rank writes
// rank<R>.pt (its tensors) and rank<R>.index (one line per tensor: name, shard dim, offset,
// full shape), so a reader at any layout can put the pieces back together.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "model/params.hpp"

namespace trainer::checkpoint {

// Writes this rank's parameters (and, when `with_grads`, their gradients as "<name>.grad").
void write_shards(const std::string& dir, int rank, const std::vector<model::Param>& params,
                  bool with_grads);

// Reads every rank<R> file in `dir` and assembles full tensors by name. A replicated tensor
// found on several ranks must be bitwise identical everywhere, else this throws (that is how
// drift between copies, e.g. of the tied embedding, is caught).
std::map<std::string, at::Tensor> read_full(const std::string& dir);

}  // namespace trainer::checkpoint
