// Pieces of named tensors on disk, and their reassembly at any layout.
//
// A piece is the part of one tensor that one rank holds: its TP shard (where along which
// dimension of the full tensor it sits) and, under ZeRO-1, only a range of that shard's
// flattened elements. Each rank writes its pieces as <base>.pt (the data) and <base>.index (one
// line per piece plus a checksum of the .pt file). A reader at any layout collects the pieces
// of the names it needs and rebuilds full tensors, checking that copies held by several ranks
// (DP replicas, TP-replicated norms, the two tied-embedding copies) agree bitwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/params.hpp"

namespace trainer::checkpoint {

struct Piece {
  std::string name;
  std::vector<int64_t> full_shape;
  int shard_dim = -1;
  int64_t shard_offset = 0;
  std::vector<int64_t> local_shape;  // shape of the TP shard
  int64_t flat_begin = 0;            // elements [flat_begin, flat_end) of the flattened shard
  int64_t flat_end = 0;
  at::Tensor data;  // flat_end - flat_begin values
};

// Whole local tensors as pieces (with gradients as "<name>.grad" when asked).
std::vector<Piece> param_pieces(const std::vector<model::Param>& params, bool with_grads);
// A piece covering `flat` elements [begin, end) of parameter `p`'s local tensor.
Piece range_piece(const model::Param& p, const std::string& name, int64_t begin, int64_t end,
                  const at::Tensor& flat);

// Writes <base>.pt and <base>.index, each published by runtime::publish (runtime/files.hpp).
void write_pieces(const std::string& base, const std::vector<Piece>& pieces);
// Reads them back; a .pt whose checksum differs from the index is an error naming the file.
std::vector<Piece> read_pieces(const std::string& base);
// Every rank<R> of a directory.
std::vector<Piece> read_all_pieces(const std::string& dir);

// Full tensors by name, from pieces (only the names in `only`, if given).
std::map<std::string, at::Tensor> assemble(const std::vector<Piece>& pieces,
                                           const std::set<std::string>* only = nullptr);
std::map<std::string, at::Tensor> read_full(const std::string& dir);

}  // namespace trainer::checkpoint
