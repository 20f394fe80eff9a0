// The single authority for rank <-> (dp, pp, tp, cp) coordinates (Megatron's parallel_state).
//
//   rank = tp + TP * (cp + CP * (dp + DP * pp))
//
// TP varies fastest so tensor-parallel peers are neighbours (same node, fastest links), then
// CP (context parallelism: the ranks that split one sequence, whose attention gathers keys and
// values every layer), then DP, then PP: Megatron's tp-cp-dp-pp order. Example, dp 2 × cp 2
// × tp 2 (pp 1): ranks 0,1 = (dp0 cp0 tp0..1), 2,3 = (dp0 cp1), 4,5 = (dp1 cp0), 6,7 = (dp1 cp1).
//
// The DP group spans dp *and* cp: every rank in it holds the same parameters (CP ranks differ only
// in the tokens they see), so gradients, ZeRO shards and the loss reduce over that one group in one
// collective instead of DP then CP. The CP group is used by attention alone. Every group the
// trainer uses is enumerated here as lists of global ranks; this file is pure arithmetic so it is
// tested without processes.
#pragma once

#include <string>
#include <vector>

namespace trainer::distributed {

struct Coord {
  int dp = 0, pp = 0, tp = 0, cp = 0;
  bool operator==(const Coord& o) const { return dp == o.dp && pp == o.pp && tp == o.tp && cp == o.cp; }
};

// KvReplicas: the ranks of one TP group that hold the same key/value heads (grouped-query
// attention with fewer key/value heads than TP ranks): consecutive blocks of `kv_replicas`.
// DP spans dp and cp (see above); ModelParallel spans pp and tp.
enum class GroupKind { TP, CP, PP, DP, ModelParallel, Embedding, KvReplicas };
std::string group_kind_name(GroupKind kind);

class Grid {
 public:
  Grid(int dp, int pp, int tp, int kv_replicas = 1, int cp = 1);

  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int world() const { return dp_ * pp_ * tp_ * cp_; }
  int kv_replicas() const { return kv_replicas_; }

  int rank_of(Coord c) const;
  Coord coord_of(int rank) const;

  // Every group of a kind, each as its member ranks in ascending order. Each rank is in exactly
  // one group of every kind except Embedding, which holds only first and last pipeline stages.
  std::vector<std::vector<int>> groups(GroupKind kind) const;
  // The group of `kind` that `rank` belongs to (empty for Embedding on middle stages).
  std::vector<int> group_of(GroupKind kind, int rank) const;

 private:
  int dp_, pp_, tp_, kv_replicas_, cp_;
};

}  // namespace trainer::distributed
