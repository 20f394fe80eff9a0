#include "distributed/grid.hpp"

#include <algorithm>
#include <stdexcept>

namespace trainer::distributed {

std::string group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return "tp";
    case GroupKind::CP: return "cp";
    case GroupKind::PP: return "pp";
    case GroupKind::DP: return "dp";
    case GroupKind::ModelParallel: return "mp";
    case GroupKind::Embedding: return "embedding";
    case GroupKind::KvReplicas: return "kv";
  }
  return "?";
}

Grid::Grid(int dp, int pp, int tp, int kv_replicas, int cp)
    : dp_(dp), pp_(pp), tp_(tp), kv_replicas_(kv_replicas), cp_(cp) {
  if (dp < 1 || pp < 1 || tp < 1 || cp < 1) throw std::invalid_argument("grid sizes must be >= 1");
  if (kv_replicas < 1 || tp % kv_replicas != 0) throw std::invalid_argument("kv_replicas must divide tp");
}

int Grid::rank_of(Coord c) const { return c.tp + tp_ * (c.cp + cp_ * (c.dp + dp_ * c.pp)); }

Coord Grid::coord_of(int rank) const {
  if (rank < 0 || rank >= world()) throw std::out_of_range("rank outside the grid");
  Coord c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.dp = (rank / (tp_ * cp_)) % dp_;
  c.pp = rank / (tp_ * cp_ * dp_);
  return c;
}

std::vector<std::vector<int>> Grid::groups(GroupKind kind) const {
  // A group is the set of ranks that agree on the coordinates the group does not span.
  // Keys below are mixed-radix numbers of the coordinates kept fixed.
  auto key = [&](Coord c) {
    const int replica = c.cp + cp_ * c.dp;  // which copy of the model, and which part of the sequence
    switch (kind) {
      case GroupKind::TP: return replica + cp_ * dp_ * c.pp;         // spans tp
      case GroupKind::CP: return c.tp + tp_ * (c.dp + dp_ * c.pp);   // spans cp
      case GroupKind::PP: return c.tp + tp_ * replica;               // spans pp
      case GroupKind::DP: return c.tp + tp_ * c.pp;                  // spans dp and cp
      case GroupKind::ModelParallel: return replica;                 // spans pp and tp
      case GroupKind::Embedding: return c.tp + tp_ * replica;        // first+last stage of a PP group
      case GroupKind::KvReplicas:                                     // a block of one TP group
        return c.tp / kv_replicas_ + (tp_ / kv_replicas_) * (replica + cp_ * dp_ * c.pp);
    }
    return 0;
  };
  std::vector<std::vector<int>> out;
  std::vector<int> index_of_key(world(), -1);
  for (int r = 0; r < world(); ++r) {
    const Coord c = coord_of(r);
    if (kind == GroupKind::Embedding && c.pp != 0 && c.pp != pp_ - 1) continue;
    const int k = key(c);
    if (index_of_key[k] < 0) {
      index_of_key[k] = static_cast<int>(out.size());
      out.emplace_back();
    }
    out[index_of_key[k]].push_back(r);
  }
  return out;
}

std::vector<int> Grid::group_of(GroupKind kind, int rank) const {
  for (auto& g : groups(kind))
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  return {};
}

}  // namespace trainer::distributed
