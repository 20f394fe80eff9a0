// Faults: a rank that dies or hangs makes the others exit non-zero within the collective
// timeout, naming the peer; no process is left behind.
#include <chrono>
#include <sstream>

#include "dist/launcher.hpp"
#include "helpers.hpp"
#include "catch_torch.hpp"

namespace {

// Starts two ranks by hand, does `action` to rank 1 after 4 s, and reports rank 0's exit code,
// how long it took to exit after the action, and its log.
struct Outcome {
  int code = -1;
  int seconds = -1;
  std::string log;
};

Outcome two_ranks_then(const std::string& action) {
  testing::TempDir dir;
  const int port = trainer::dist::free_port();
  const std::string run = "env RANK=%R WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                          " " + testing::trainer_bin() + " train " + testing::source_dir() + "/configs/tiny.yaml" +
                          " --set parallel.dp=1 --set parallel.pp=2 --set parallel.tp=1 --set train.steps=100000" +
                          " --set runtime.collective_timeout_s=8";
  auto with_rank = [&](int r) {
    std::string s = run;
    s.replace(s.find("%R"), 2, std::to_string(r));
    return s;
  };
  const std::string script = with_rank(0) + " > " + dir.file("r0.log") + " 2>&1 & p0=$!; " + with_rank(1) +
                             " > " + dir.file("r1.log") + " 2>&1 & p1=$!; sleep 4; kill -" + action +
                             " $p1; t0=$(date +%s); wait $p0; rc=$?; t1=$(date +%s); kill -9 $p1 2>/dev/null;"
                             " wait $p1 2>/dev/null; echo \"rc=$rc seconds=$((t1-t0))\"";
  testing::write_file(dir.file("run.sh"), script);
  auto r = testing::run("sh " + dir.file("run.sh"), 120);
  Outcome o;
  const auto at = r.output.find("rc=");
  if (at != std::string::npos) std::sscanf(r.output.c_str() + at, "rc=%d seconds=%d", &o.code, &o.seconds);
  o.log = testing::read_file(dir.file("r0.log"));
  return o;
}

}  // namespace

TEST_CASE("a rank killed mid-run makes its peer exit non-zero naming it", "[faults][mp]") {
  const Outcome o = two_ranks_then("9");
  INFO(o.log);
  CHECK(o.code != 0);
  CHECK(o.seconds >= 0);
  CHECK(o.seconds <= 8 + 5);
  CHECK(o.log.find("peer rank 1") != std::string::npos);
}

TEST_CASE("a hung rank (SIGSTOP) makes its peer time out with a message", "[faults][mp]") {
  const Outcome o = two_ranks_then("STOP");
  INFO(o.log);
  CHECK(o.code != 0);
  CHECK(o.seconds <= 8 + 5);
  CHECK(o.log.find("peer rank 1") != std::string::npos);
}

TEST_CASE("a taken MASTER_PORT and a store nobody serves are clear errors within the timeout", "[faults][mp]") {
  const std::string cfg = testing::source_dir() + "/configs/tiny.yaml";
  const std::string layout = " --set parallel.dp=2 --set parallel.pp=1 --set parallel.tp=1 --set runtime.collective_timeout_s=5";
  // Rank 0 must serve the store, but something else already listens on the port.
  const int port = trainer::dist::free_port();
  auto taken = testing::run("/usr/bin/python3 -c \"import socket,subprocess,sys; s=socket.socket(); "
                            "s.bind(('127.0.0.1'," + std::to_string(port) + ")); s.listen(); "
                            "sys.exit(subprocess.call(sys.argv[1], shell=True))\" 'env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                            std::to_string(port) + " " + testing::trainer_bin() + " train " + cfg + layout + "'", 60);
  INFO(taken.output);
  CHECK(taken.code != 0);
  CHECK(taken.output.find("cannot join the job store at 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  // Rank 1 waits for a store that never comes: it gives up after the timeout, saying where.
  const int nobody = trainer::dist::free_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto lonely = testing::run("env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(nobody) + " " +
                             testing::trainer_bin() + " train " + cfg + layout, 60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(lonely.output);
  CHECK(lonely.code != 0);
  CHECK(seconds < 5 + 10);
  CHECK(lonely.output.find("cannot join the job store at 127.0.0.1:" + std::to_string(nobody)) != std::string::npos);
}
