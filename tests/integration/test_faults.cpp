// Faults: a rank that dies or hangs makes the others exit non-zero within the collective
// timeout, naming the peer; no process is left behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "distributed/launcher.hpp"
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
  const int port = trainer::distributed::free_port();
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

// Live processes whose command line mentions `marker` (zombies have an empty one).
std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = testing::read_file("/proc/" + name + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

struct TcpSocket {
  std::string local, state;  // address in hex as /proc/net/tcp{,6} print it; "0A" = LISTEN
};

// The TCP sockets `pid` holds.
std::vector<TcpSocket> tcp_sockets(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<TcpSocket> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(testing::read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (inodes.count(inode)) out.push_back({local.substr(0, local.find(':')), state});
    }
  }
  return out;
}

// 127.0.0.0/8 as IPv4 (little-endian hex), IPv4-mapped IPv6, or ::1.
bool loopback(const std::string& hex) {
  const bool v4 = hex.size() == 8 && hex.substr(6) == "7F";
  const bool mapped = hex.size() == 32 && hex.rfind("0000000000000000FFFF0000", 0) == 0 && hex.substr(30) == "7F";
  return v4 || mapped || hex == "00000000000000000000000001000000";
}

// Runs a shell command in a process group of its own: whatever a test checks, the guard below
// ends it all.
pid_t start_group(const std::string& command) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// `trainer launch --nproc 2` training the tiny model at dp=2 until stopped, output to `log`.
pid_t start_launcher(const testing::TempDir& dir, const std::string& log) {
  return start_group("exec " + testing::trainer_bin() + " launch --nproc 2 -- train " + testing::source_dir() +
                     "/configs/tiny.yaml --set parallel.dp=2 --set parallel.pp=1 --set parallel.tp=1"
                     " --set train.steps=100000 --set logging.interval=1 --set runtime.collective_timeout_s=8"
                     " --set checkpoint.dir=" + dir.file("ckpt") + " > " + log + " 2>&1");
}

struct KillGroupOnExit {
  pid_t leader;
  ~KillGroupOnExit() {
    kill(-leader, SIGKILL);
    waitpid(leader, nullptr, WNOHANG);
  }
};

bool wait_for_text(const std::string& file, const std::string& text, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (testing::read_file(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// The two workers of start_launcher's job, once it has logged step 2.
std::vector<pid_t> workers_at_step_2(const testing::TempDir& dir, pid_t launcher) {
  REQUIRE(wait_for_text(dir.file("log"), "step 2/", 90));
  auto pids = processes_with(dir.file("ckpt"));
  pids.erase(std::remove(pids.begin(), pids.end(), launcher), pids.end());
  REQUIRE(pids.size() == 2);
  return pids;
}

// Waits up to `seconds` for `pid` to exit; its exit code (128+signal), or -1 if it is still running.
int wait_exit(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

}  // namespace

TEST_CASE("under trainer launch nothing listens beyond 127.0.0.1 and SIGTERM leaves no process", "[faults][mp]") {
  testing::TempDir dir;
  const pid_t launcher = start_launcher(dir, dir.file("log"));
  const KillGroupOnExit guard{launcher};
  REQUIRE(wait_for_text(dir.file("log"), "step 2/", 90));
  const auto pids = processes_with(dir.file("ckpt"));
  CHECK(pids.size() == 3);  // the launcher and two workers
  size_t sockets = 0;
  for (pid_t pid : pids) {
    size_t listening = 0;
    for (const auto& socket : tcp_sockets(pid)) {
      INFO("pid " << pid << " has a socket on " << socket.local << " in state " << socket.state);
      CHECK(loopback(socket.local));
      ++sockets;
      listening += socket.state == "0A";
    }
    // The store is a file; what listens is Gloo's one listener per worker (LibTorch 2.x keeps
    // it open for the process's life), on 127.0.0.1.
    CHECK(listening <= 1);
  }
  CHECK(sockets >= 2);  // Gloo's connections between the workers: the scan does see sockets
  kill(launcher, SIGTERM);
  const int code = wait_exit(launcher, 60);
  INFO(testing::read_file(dir.file("log")));
  CHECK(code == 0);  // checkpoint, then exit 0
  CHECK(processes_with(dir.file("ckpt")).empty());
}

TEST_CASE("a launcher killed by SIGKILL takes its workers along", "[faults][mp]") {
  testing::TempDir dir;
  const pid_t launcher = start_launcher(dir, dir.file("log"));
  const KillGroupOnExit guard{launcher};
  REQUIRE(wait_for_text(dir.file("log"), "step 2/", 90));
  REQUIRE(processes_with(dir.file("ckpt")).size() == 3);
  kill(launcher, SIGKILL);  // nothing left to forward signals or reap: the kernel ends the workers
  waitpid(launcher, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = processes_with(dir.file("ckpt")).empty();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(gone);
}

TEST_CASE("a second SIGTERM or SIGINT kills workers that do not stop, and the launcher exits within seconds", "[faults][mp]") {
  testing::TempDir dir;
  const pid_t launcher = start_launcher(dir, dir.file("log"));
  const KillGroupOnExit guard{launcher};
  const auto pids = workers_at_step_2(dir, launcher);
  kill(pids.front(), SIGSTOP);  // a worker that cannot act on the forwarded signal
  const auto t0 = std::chrono::steady_clock::now();
  kill(launcher, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(launcher, SIGINT);
  const int code = wait_exit(launcher, 20);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = testing::read_file(dir.file("log"));
  INFO(log);
  CHECK(code != -1);
  CHECK(code != 0);
  CHECK(seconds < 5);  // not the collective timeout (8 s), nor the 10 minutes a checkpoint may take
  CHECK(log.find("second signal: killing the workers") != std::string::npos);
  CHECK(processes_with(dir.file("ckpt")).empty());
}

TEST_CASE("rank 0's store listens on MASTER_ADDR only - under a manual launch", "[faults][mp]") {
  testing::TempDir dir;
  const std::string port = std::to_string(trainer::distributed::free_port());
  auto rank = [&](int r) {
    return "env RANK=" + std::to_string(r) + " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " +
           testing::trainer_bin() + " train " + testing::source_dir() + "/configs/tiny.yaml" +
           " --set parallel.dp=2 --set parallel.pp=1 --set parallel.tp=1 --set train.steps=100000" +
           " --set logging.interval=1 --set checkpoint.dir= --set logging.dir=" + dir.file("r" + std::to_string(r)) +
           " > " + dir.file("r" + std::to_string(r) + ".log") + " 2>&1";
  };
  const pid_t group = start_group(rank(0) + " & " + rank(1) + " & wait");
  const KillGroupOnExit guard{group};
  REQUIRE(wait_for_text(dir.file("r0.log"), "step 2/", 90));
  std::vector<pid_t> rank0;  // the trainer process itself, not the shell that started it
  for (pid_t pid : processes_with("logging.dir=" + dir.file("r0")))
    if (testing::read_file("/proc/" + std::to_string(pid) + "/cmdline").rfind(testing::trainer_bin(), 0) == 0)
      rank0.push_back(pid);
  REQUIRE(rank0.size() == 1);
  size_t listening = 0;
  for (const auto& socket : tcp_sockets(rank0[0])) {
    INFO("rank 0 has a socket on " << socket.local << " in state " << socket.state);
    CHECK(loopback(socket.local));  // not 0.0.0.0 / :: (every interface)
    listening += socket.state == "0A";
  }
  CHECK(listening >= 1);  // the store, which serves the job for its whole life
}

TEST_CASE("a worker killed under trainer launch ends the job within the timeout and leaves no process", "[faults][mp]") {
  testing::TempDir dir;
  const pid_t launcher = start_launcher(dir, dir.file("log"));
  const KillGroupOnExit guard{launcher};
  const auto pids = workers_at_step_2(dir, launcher);
  const auto t0 = std::chrono::steady_clock::now();
  kill(pids.back(), SIGKILL);
  const int code = wait_exit(launcher, 8 + 10);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = testing::read_file(dir.file("log"));
  INFO(log);
  CHECK(code != 0);
  CHECK(code != -1);
  CHECK(seconds < 8 + 5);
  CHECK(log.find("exited with code 137") != std::string::npos);
  CHECK(processes_with(dir.file("ckpt")).empty());
}

TEST_CASE("a rank killed mid-run makes its peer exit non-zero naming it", "[faults][mp]") {
  const Outcome o = two_ranks_then("9");
  INFO(o.log);
  CHECK(o.code != 0);
  CHECK(o.seconds <= 8 + 5);  // within the collective timeout (8 s) and start-up
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
  const int port = trainer::distributed::free_port();
  auto taken = testing::run(testing::python() + " -c \"import socket,subprocess,sys; s=socket.socket(); "
                            "s.bind(('127.0.0.1'," + std::to_string(port) + ")); s.listen(); "
                            "sys.exit(subprocess.call(sys.argv[1], shell=True))\" 'env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                            std::to_string(port) + " " + testing::trainer_bin() + " train " + cfg + layout + "'", 60);
  INFO(taken.output);
  CHECK(taken.code != 0);
  CHECK(taken.output.find("cannot join the job store at 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  // Rank 1 waits for a store that never comes: it gives up after the timeout, saying where.
  const int nobody = trainer::distributed::free_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto lonely = testing::run("env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(nobody) + " " +
                             testing::trainer_bin() + " train " + cfg + layout, 60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(lonely.output);
  CHECK(lonely.code != 0);
  CHECK(seconds < 5 + 10);
  CHECK(lonely.output.find("cannot join the job store at 127.0.0.1:" + std::to_string(nobody)) != std::string::npos);
}
