// The rank <-> (dp, pp, tp, cp) map and the groups, against an explicit enumeration.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "distributed/grid.hpp"

using namespace trainer::distributed;

TEST_CASE("grid mapping matches an explicit enumeration (tp fastest - then cp - then dp - then pp)", "[grid]") {
  const std::vector<std::array<int, 4>> shapes = {{1, 1, 1, 1}, {8, 1, 1, 1}, {1, 8, 1, 1}, {1, 1, 8, 1},
                                                  {2, 2, 2, 1}, {2, 4, 1, 1}, {4, 2, 1, 1}, {1, 2, 4, 1},
                                                  {3, 2, 2, 1}, {1, 1, 1, 4}, {2, 2, 2, 2}, {1, 3, 2, 2}};
  for (auto [dp, pp, tp, cp] : shapes) {
    Grid g(dp, pp, tp, 1, cp);
    int rank = 0;
    for (int p = 0; p < pp; ++p)
      for (int d = 0; d < dp; ++d)
        for (int c = 0; c < cp; ++c)
          for (int t = 0; t < tp; ++t, ++rank) {
            CHECK((g.rank_of({d, p, t, c}) == rank));
            CHECK((g.coord_of(rank) == Coord{d, p, t, c}));
          }
    CHECK(rank == g.world());
  }
}

TEST_CASE("groups partition the world and hold exactly the ranks that share coordinates", "[grid]") {
  for (auto [dp, pp, tp, cp] : std::vector<std::array<int, 4>>{
           {1, 1, 1, 1}, {2, 2, 2, 1}, {2, 4, 1, 1}, {1, 2, 4, 1}, {4, 2, 1, 1}, {2, 2, 2, 2}, {1, 1, 2, 4}, {3, 1, 1, 2}}) {
    Grid g(dp, pp, tp, 1, cp);
    for (auto kind : {GroupKind::TP, GroupKind::CP, GroupKind::PP, GroupKind::DP, GroupKind::ModelParallel}) {
      std::set<int> seen;
      for (const auto& group : g.groups(kind)) {
        for (int r : group) CHECK(seen.insert(r).second);
        const Coord c0 = g.coord_of(group.front());
        for (int r : group) {
          const Coord c = g.coord_of(r);
          if (kind == GroupKind::TP) CHECK((c.dp == c0.dp && c.pp == c0.pp && c.cp == c0.cp));
          if (kind == GroupKind::CP) CHECK((c.dp == c0.dp && c.pp == c0.pp && c.tp == c0.tp));
          if (kind == GroupKind::PP) CHECK((c.dp == c0.dp && c.tp == c0.tp && c.cp == c0.cp));
          if (kind == GroupKind::DP) CHECK((c.pp == c0.pp && c.tp == c0.tp));  // dp and cp vary
          if (kind == GroupKind::ModelParallel) CHECK((c.dp == c0.dp && c.cp == c0.cp));
        }
        const int spans[] = {tp, cp, pp, dp * cp, pp * tp};
        CHECK(static_cast<int>(group.size()) == spans[static_cast<int>(kind)]);
        CHECK(std::is_sorted(group.begin(), group.end()));
      }
      CHECK(static_cast<int>(seen.size()) == g.world());
    }
    // The embedding group joins the first and the last stage of each (dp, cp, tp) pipeline.
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

TEST_CASE("context parallelism: dp 2 x cp 2 x tp 2 in Megatron's tp-cp-dp-pp order", "[grid]") {
  Grid g(2, 1, 2, 1, 2);
  CHECK((g.coord_of(2) == Coord{0, 0, 0, 1}));
  CHECK((g.coord_of(5) == Coord{1, 0, 1, 0}));
  CHECK((g.group_of(GroupKind::CP, 0) == std::vector<int>{0, 2}));
  CHECK((g.group_of(GroupKind::CP, 5) == std::vector<int>{5, 7}));
  CHECK((g.group_of(GroupKind::TP, 2) == std::vector<int>{2, 3}));
  // Gradients reduce over every rank with the same parameters: all dp and cp coordinates.
  CHECK((g.group_of(GroupKind::DP, 0) == std::vector<int>{0, 2, 4, 6}));
  CHECK((g.group_of(GroupKind::DP, 3) == std::vector<int>{1, 3, 5, 7}));
}
