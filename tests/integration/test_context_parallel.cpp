// Context parallelism's split and its attention on their own (the whole-model equivalence runs
// are in test_training.cpp, memory in test_plan.cpp): the chunk order, the attention of each CP
// rank's queries against 1x1x1's causal attention in values and gradients, and, behind a hidden
// tag, the measured balance of the attention work over the ranks.
#include "catch_torch.hpp"

#include <ATen/ATen.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <time.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "context_parallel/context_parallel.hpp"
#include "distributed/comm.hpp"
#include "distributed/job_env.hpp"
#include "helpers.hpp"
#include "model/gpt.hpp"

using namespace trainer;

TEST_CASE("context parallelism: rank r holds chunks r and 2cp-1-r, and every rank does the same attention work", "[cp]") {
  // cp 2, 8 tokens: rank 0 holds positions 0 1 6 7, rank 1 holds 2 3 4 5 (context_parallel.hpp).
  CHECK(context_parallel::local_positions(8, 0, 2).equal(at::tensor({0, 1, 6, 7}, at::kLong)));
  CHECK(context_parallel::local_positions(8, 1, 2).equal(at::tensor({2, 3, 4, 5}, at::kLong)));
  for (int cp : {1, 2, 3, 4, 8}) {
    const int64_t S = 16 * cp;
    std::vector<bool> seen(S, false);
    std::vector<int64_t> work;
    for (int r = 0; r < cp; ++r) {
      const at::Tensor p = context_parallel::local_positions(S, r, cp);
      REQUIRE(p.numel() == S / cp);
      int64_t pairs = 0;  // (query, key) pairs under the causal mask: key position <= query position
      for (int64_t i = 0; i < p.numel(); ++i) {
        const int64_t pos = p[i].item<int64_t>();
        CHECK(!seen[pos]);
        seen[pos] = true;
        pairs += pos + 1;
      }
      work.push_back(pairs);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
    INFO("cp " << cp);
    CHECK(*std::max_element(work.begin(), work.end()) == *std::min_element(work.begin(), work.end()));
  }
}

namespace {

// [B, heads, S, D] queries and [B, kv heads, S, D] keys and values, the same on every rank.
std::vector<at::Tensor> inputs(int64_t B, int64_t heads, int64_t kv_heads, int64_t S, int64_t D) {
  at::manual_seed(7);
  return {at::randn({B, heads, S, D}), at::randn({B, kv_heads, S, D}), at::randn({B, kv_heads, S, D}),
          at::randn({B, heads, S, D})};  // the last: the output's gradient
}

// Each rank's attention output and q, k, v gradients at its own positions, written for the test.
int cp_attention_worker() {
  const std::string out = testing::env_or("TEST_OUT", "/tmp");
  const int kv_heads = std::stoi(testing::env_or("TEST_KV_HEADS", "4"));
  auto job = distributed::detect_job_env(distributed::current_environment());
  distributed::Comm comm(job, distributed::Grid(1, 1, 1, 1, job.world_size), std::chrono::seconds(30));
  auto all = inputs(2, 4, kv_heads, 64, 16);
  const at::Tensor mine = context_parallel::local_positions(64, comm.cp().index(), comm.cp().size());
  std::vector<at::Tensor> local;
  for (const auto& t : all) local.push_back(t.index_select(2, mine).detach().requires_grad_(true));
  at::Tensor o = context_parallel::attention(local[0], local[1], local[2], comm.cp());
  o.backward(local[3]);
  std::vector<at::Tensor> result = {o.detach(), local[0].grad(), local[1].grad(), local[2].grad()};
  torch::save(result, out + "/rank" + std::to_string(comm.rank()) + ".pt");
  return 0;
}
testing::RegisterWorker reg("cp_attention", cp_attention_worker);

}  // namespace

TEST_CASE("context-parallel attention equals causal attention over the whole sequence: output and gradients", "[numerics][cp][gqa][mp]") {
  for (int cp : {2, 4}) {
    for (int kv_heads : {4, 2, 1}) {  // multi-head, grouped-query, multi-query
      INFO("cp " << cp << ", kv heads " << kv_heads);
      testing::TempDir dir;
      REQUIRE(testing::launch_workers("cp_attention", cp, {{"TEST_OUT", dir.path}, {"TEST_KV_HEADS", std::to_string(kv_heads)}}) == 0);
      auto all = inputs(2, 4, kv_heads, 64, 16);
      std::vector<at::Tensor> ref_in;
      for (int i = 0; i < 3; ++i) ref_in.push_back(all[i].detach().requires_grad_(true));
      at::Tensor ref = model::causal_attention(ref_in[0], ref_in[1], ref_in[2], 0.0);
      ref.backward(all[3]);
      const std::vector<at::Tensor> want = {ref.detach(), ref_in[0].grad(), ref_in[1].grad(), ref_in[2].grad()};
      for (int r = 0; r < cp; ++r) {
        std::vector<at::Tensor> got;
        torch::load(got, dir.file("rank" + std::to_string(r) + ".pt"));
        const at::Tensor mine = context_parallel::local_positions(64, r, cp);
        for (size_t i = 0; i < want.size(); ++i) {
          INFO("rank " << r << ", tensor " << i << " (output, dq, dk, dv)");
          // fp32 sums in another order: a few ulps of values of order 1.
          CHECK(at::allclose(got[i], want[i].index_select(2, mine), 1e-5, 1e-5));
        }
      }
    }
  }
}

namespace {

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// The attention of the small model's shape (6 heads of 64) at seq 8192 on one thread: each rank's
// forward+backward CPU time, without the time spent waiting on the other ranks.
int cp_balance_worker() {
  const std::string out = testing::env_or("TEST_OUT", "/tmp");
  auto job = distributed::detect_job_env(distributed::current_environment());
  at::set_num_threads(1);
  distributed::Comm comm(job, distributed::Grid(1, 1, 1, 1, job.world_size), std::chrono::seconds(120));
  const int64_t s = 8192 / job.world_size;
  std::vector<at::Tensor> local;
  for (int i = 0; i < 3; ++i) local.push_back(at::randn({1, 6, s, 64}).requires_grad_(true));
  std::vector<double> times;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = thread_seconds();
    context_parallel::attention(local[0], local[1], local[2], comm.cp()).sum().backward();
    times.push_back(thread_seconds() - t0);
  }
  std::sort(times.begin(), times.end());
  std::ofstream(out + "/rank" + std::to_string(job.rank)) << times[times.size() / 2];
  return 0;
}
testing::RegisterWorker reg_balance("cp_balance", cp_balance_worker);

}  // namespace

// Not a unit test (timed): run with `build/trainer_tests "[.measure]"`; docs/parallelism.md quotes it.
TEST_CASE("measure: context-parallel attention work per rank at cp 4, seq 8192", "[.measure][cp]") {
  testing::TempDir dir;
  REQUIRE(testing::launch_workers("cp_balance", 4, {{"TEST_OUT", dir.path}, {"OMP_NUM_THREADS", "1"}}) == 0);
  std::vector<double> seconds;
  for (int r = 0; r < 4; ++r) {
    std::ifstream in(dir.file("rank" + std::to_string(r)));
    double t = 0;
    in >> t;
    seconds.push_back(t);
    std::printf("cp rank %d: attention forward+backward %.3f s of CPU time (median of 5)\n", r, t);
  }
  const double ratio = *std::max_element(seconds.begin(), seconds.end()) / *std::min_element(seconds.begin(), seconds.end());
  std::printf("slowest / fastest: %.3f\n", ratio);
  CHECK(ratio <= 1.15);
}
