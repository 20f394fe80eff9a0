// The rank <-> (dp, pp, tp) map and the groups, against an explicit enumeration.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "distributed/grid.hpp"

using namespace trainer::distributed;

TEST_CASE("grid mapping matches an explicit enumeration (tp fastest - then dp - then pp)", "[grid]") {
  const std::vector<std::array<int, 3>> shapes = {{1, 1, 1}, {8, 1, 1}, {1, 8, 1}, {1, 1, 8}, {2, 2, 2},
                                                  {2, 4, 1}, {4, 2, 1}, {1, 2, 4}, {3, 2, 2}};
  for (auto [dp, pp, tp] : shapes) {
    Grid g(dp, pp, tp);
    int rank = 0;
    for (int p = 0; p < pp; ++p)
      for (int d = 0; d < dp; ++d)
        for (int t = 0; t < tp; ++t, ++rank) {
          CHECK((g.rank_of({d, p, t}) == rank));
          CHECK((g.coord_of(rank) == Coord{d, p, t}));
        }
    CHECK(rank == g.world());
  }
}

TEST_CASE("groups partition the world and hold exactly the ranks that share coordinates", "[grid]") {
  for (auto [dp, pp, tp] : std::vector<std::array<int, 3>>{{1, 1, 1}, {2, 2, 2}, {2, 4, 1}, {1, 2, 4}, {4, 2, 1}}) {
    Grid g(dp, pp, tp);
    for (auto kind : {GroupKind::TP, GroupKind::PP, GroupKind::DP, GroupKind::ModelParallel}) {
      std::set<int> seen;
      for (const auto& group : g.groups(kind)) {
        for (int r : group) CHECK(seen.insert(r).second);
        const Coord c0 = g.coord_of(group.front());
        for (int r : group) {
          const Coord c = g.coord_of(r);
          if (kind == GroupKind::TP) CHECK((c.dp == c0.dp && c.pp == c0.pp));
          if (kind == GroupKind::PP) CHECK((c.dp == c0.dp && c.tp == c0.tp));
          if (kind == GroupKind::DP) CHECK((c.pp == c0.pp && c.tp == c0.tp));
          if (kind == GroupKind::ModelParallel) CHECK(c.dp == c0.dp);
        }
        CHECK(std::is_sorted(group.begin(), group.end()));
      }
      CHECK(static_cast<int>(seen.size()) == g.world());
    }
    // The embedding group joins the first and the last stage of each (dp, tp) pipeline.
    for (const auto& group : g.groups(GroupKind::Embedding)) {
      CHECK(static_cast<int>(group.size()) == (pp > 1 ? 2 : 1));
      CHECK(g.coord_of(group.front()).pp == 0);
      CHECK(g.coord_of(group.back()).pp == pp - 1);
    }
  }
}

TEST_CASE("Megatron's documented example: 16 ranks - tp=2 - pp=4 - dp=2", "[grid]") {
  Grid g(2, 4, 2);
  CHECK((g.group_of(GroupKind::TP, 0) == std::vector<int>{0, 1}));
  CHECK((g.group_of(GroupKind::DP, 0) == std::vector<int>{0, 2}));
  CHECK((g.group_of(GroupKind::DP, 5) == std::vector<int>{5, 7}));
  CHECK((g.group_of(GroupKind::PP, 0) == std::vector<int>{0, 4, 8, 12}));
  CHECK((g.group_of(GroupKind::Embedding, 0) == std::vector<int>{0, 12}));
  CHECK(g.group_of(GroupKind::Embedding, 4).empty());
}
