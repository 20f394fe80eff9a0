// Multi-process tests of the communication layer and the launcher: real processes over Gloo
// on 127.0.0.1, each with a time limit.
#include "catch_torch.hpp"

#include <ATen/ATen.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "distributed/comm.hpp"
#include "distributed/launcher.hpp"
#include "helpers.hpp"

using namespace trainer::distributed;

namespace {

std::string out_dir() { return testing::env_or("TEST_OUT", "/tmp"); }

// Each rank checks every group's collectives against the values it expects, itself: a
// mismatch, or a check that did not run, is a non-zero exit naming it.
int groups_worker() {
  JobEnv job = detect_job_env(current_environment());
  Grid grid(2, 2, 2);
  Comm comm(job, grid, std::chrono::seconds(30));
  int checks = 0, failures = 0;
  auto expect = [&](const std::string& what, double got, double want) {
    ++checks;
    if (got == want) return;
    ++failures;
    std::cerr << "rank " << comm.rank() << " " << what << ": got " << got << ", expected " << want << std::endl;
  };
  auto check_sum = [&](Group& g, const char* name) {
    at::Tensor t = at::full({3}, static_cast<double>(comm.rank() + 1), at::kDouble);
    all_reduce(g, t);
    double sum = 0;
    for (int r : g.members()) sum += r + 1;
    expect(std::string("all_reduce over ") + name, t[0].item<double>(), sum);
  };
  check_sum(comm.tp(), "tp");
  check_sum(comm.pp(), "pp");
  check_sum(comm.dp(), "dp");
  check_sum(comm.model_parallel(), "mp");
  check_sum(comm.world(), "world");
  if (comm.embedding().size() > 0) check_sum(comm.embedding(), "embedding");
  // Gather, reduce-scatter, broadcast over TP.
  at::Tensor mine = at::full({2}, static_cast<double>(comm.rank()), at::kDouble);
  at::Tensor gathered = all_gather(comm.tp(), mine, 0);
  expect("all_gather, first member", gathered[0].item<double>(), comm.tp().members()[0]);
  expect("all_gather, second member", gathered[3].item<double>(), comm.tp().members()[1]);
  at::Tensor full = at::arange(4, at::kDouble) + comm.rank();
  at::Tensor piece = reduce_scatter(comm.tp(), full, 0);
  const double base = comm.tp().members()[0] + comm.tp().members()[1];
  expect("reduce_scatter", piece[0].item<double>(), base + 2 * 2 * comm.tp().index());
  at::Tensor b = at::full({1}, static_cast<double>(comm.rank()), at::kDouble);
  broadcast(comm.dp(), b, 1);
  expect("broadcast", b[0].item<double>(), comm.dp().members()[1]);
  // Point-to-point along the pipeline: the two stages swap their ranks in one batch (a
  // crossing, as 1F1B's steady state makes).
  const int peer = 1 - comm.pp().index();
  at::Tensor out = at::full({4}, static_cast<double>(comm.rank()), at::kDouble);
  at::Tensor in = at::zeros({4}, at::kDouble);
  auto pending = start_transfers(comm.pp(), {{Transfer::Send, out, peer, 7 + peer}, {Transfer::Receive, in, peer, 7 + comm.pp().index()}});
  for (auto& p : pending) p.wait();
  expect("recv", in[3].item<double>(), comm.pp().members()[peer]);
  barrier(comm.world());
  // Every rank is a first or last stage at pp = 2, so in the embedding group: 6 sums and 4
  // more checks, and the receive.
  const int planned = 11;
  if (checks != planned) {
    std::cerr << "rank " << comm.rank() << " ran " << checks << " checks, not " << planned << std::endl;
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
testing::RegisterWorker reg_groups("groups", groups_worker);

// Rank 1 fails quickly; the others would sleep for a minute (they record their pid).
int fail_worker() {
  const int rank = std::stoi(testing::env_or("RANK", "0"));
  std::ofstream(out_dir() + "/pid" + std::to_string(rank)) << getpid();
  if (rank == 1) {
    usleep(300 * 1000);
    return 1;
  }
  sleep(60);
  return 0;
}
testing::RegisterWorker reg_fail("fail", fail_worker);

// Under torchrun's agent store: the rank's view of the job, and an all-reduce over it.
int agent_worker() {
  JobEnv job = detect_job_env(current_environment());
  Comm comm(job, Grid(job.world_size, 1, 1), std::chrono::seconds(20));
  at::Tensor t = at::full({1}, static_cast<double>(job.rank + 1), at::kDouble);
  all_reduce(comm.dp(), t);
  std::ofstream(out_dir() + "/agent" + std::to_string(job.rank)) << job.launcher << " " << job.rank << " "
      << job.world_size << " " << job.store_prefix() << " " << t.item<double>();
  return 0;
}
testing::RegisterWorker reg_agent("agent", agent_worker);

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(stat, s);
  return !s.empty() && s.find(") Z") == std::string::npos;
}

}  // namespace

TEST_CASE("8 processes at 2x2x2: every group's collectives sum exactly its members", "[comm][mp]") {
  // Each worker asserts its own results (see groups_worker): 0 = every check ran and passed.
  CHECK(testing::launch_workers("groups", 8, {}) == 0);
}

TEST_CASE("launcher: one failing worker ends the others and its code is returned", "[launcher][mp]") {
  testing::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  LaunchOptions o;
  o.nproc = 3;
  o.grace_seconds = 2;
  o.env = {{"TRAINER_TEST_WORKER", "fail"}, {"TEST_OUT", dir.path}};
  CHECK(launch_local(o) == 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 10);
  for (int r = 0; r < 3; ++r) {
    const pid_t pid = std::stoi(testing::read_file(dir.file("pid" + std::to_string(r))));
    CHECK_FALSE(alive(pid));
  }
}

TEST_CASE("launcher prefixes each worker line with its rank", "[launcher][mp]") {
  auto r = testing::trainer({"launch", "--nproc", "2", "--", "check-config", testing::source_dir() + "/configs/tiny.yaml"}, 60);
  CHECK(r.code == 0);
  CHECK(r.output.find("[rank 0] # ") != std::string::npos);
  CHECK(r.output.find("[rank 1] # ") != std::string::npos);
  auto bad = testing::trainer({"launch", "--nproc", "2", "--", "check-config", "/nonexistent.yaml"}, 60);
  CHECK(bad.code == 2);
}

TEST_CASE("torchrun agent store: workers join as clients under /worker/attempt_N", "[launcher][mp]") {
  testing::TempDir dir;
  const int port = free_port();
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = true;
  opts.waitWorkers = false;
  c10d::TCPStore agent("127.0.0.1", opts);  // stands in for torchrun's agent
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string cmd = "TRAINER_TEST_WORKER=agent TEST_OUT=" + dir.path +
        " TORCHELASTIC_RUN_ID=t1 TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=3"
        " RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
        " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
        " /proc/" + std::to_string(getpid()) + "/exe";
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", ("exec timeout 60 env " + cmd).c_str(), nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (int rank = 0; rank < 2; ++rank)
    CHECK(testing::read_file(dir.file("agent" + std::to_string(rank))) ==
          "torchrun " + std::to_string(rank) + " 2 /worker/attempt_3 3");
  // The workers' rendezvous keys landed in the agent's store (had they started their own
  // store on the agent's port, they would have failed with EADDRINUSE).
  CHECK(agent.getNumKeys() > 0);
}
