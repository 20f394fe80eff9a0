#include "distributed/launcher.hpp"

#include "distributed/job_env.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include "runtime/device.hpp"

namespace trainer::distributed {
namespace {

std::atomic<int> g_forward_signal{0};
void remember_signal(int sig) { g_forward_signal = sig; }

struct Worker {
  pid_t pid = -1;
  int out_fd = -1;  // read end of the worker's stdout+stderr pipe
  std::string partial;
  bool running = true;
  int exit_code = 0;
};

void emit_lines(Worker& w, int rank, bool flush_partial) {
  size_t nl;
  while ((nl = w.partial.find('\n')) != std::string::npos) {
    std::cout << "[rank " << rank << "] " << w.partial.substr(0, nl) << '\n';
    w.partial.erase(0, nl + 1);
  }
  if (flush_partial && !w.partial.empty()) {
    std::cout << "[rank " << rank << "] " << w.partial << '\n';
    w.partial.clear();
  }
  std::cout.flush();
}

pid_t spawn(int rank, const LaunchOptions& opts, const std::string& store_file, int* out_fd) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe() failed: ") + std::strerror(errno));
  const std::string exe = self_executable();
  const pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("fork() failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // A worker must not outlive its launcher, even one killed by SIGKILL.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    for (const auto& [k, v] : opts.env) setenv(k.c_str(), v.c_str(), 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(opts.nproc).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(opts.nproc).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("TRAINER_STORE_FILE", store_file.c_str(), 1);
    unsetenv("MASTER_PORT");
    // Our workers are not torchrun's or Slurm's, whatever the parent was started by.
    unsetenv("TORCHELASTIC_RUN_ID");
    unsetenv("SLURM_STEP_ID");
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : opts.args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    std::perror("execv");
    _exit(127);
  }
  close(fds[1]);
  *out_fd = fds[0];
  return pid;
}

// A directory only this user can enter, holding the workers' store file; removed with
// everything in it when the launcher returns.
class StoreDir {
 public:
  StoreDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/trainer-launch-XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot create a directory for the job store in " + pattern);
    dir_ = pattern;
  }
  ~StoreDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  StoreDir(const StoreDir&) = delete;
  StoreDir& operator=(const StoreDir&) = delete;
  std::string file() const { return dir_ + "/store"; }

 private:
  std::string dir_;
};

void signal_all(std::vector<Worker>& ws, int sig) {
  for (auto& w : ws)
    if (w.running) kill(w.pid, sig);
}

// Tasks (processes and threads) of user `uid`, which RLIMIT_NPROC counts.
long tasks_of_user(uid_t uid) {
  long n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    struct stat st {};
    if (name.find_first_not_of("0123456789") != std::string::npos || stat(entry.path().c_str(), &st) != 0 ||
        st.st_uid != uid)
      continue;
    for (const auto& task : std::filesystem::directory_iterator(entry.path() / "task", ec)) n += !task.path().empty();
  }
  return n;
}

long open_files() {
  long n = 0;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", ec)) n += !fd.path().empty();
  return n;
}

[[noreturn]] void refuse_nproc(int nproc, const std::string& why, long most) {
  throw JobEnvError("--nproc " + std::to_string(nproc) + ": this machine cannot hold that many workers: " + why +
                    "; at most " + std::to_string(std::max(0L, most)) + " fit. (Cores are not a limit: workers may share them.)");
}

// Refuses a worker count the machine cannot hold, before anything starts: the processes this
// user may still create (RLIMIT_NPROC, each worker at least one), the files the launcher may
// open (one pipe per worker) and MemAvailable against `worker_bytes` per worker.
void check_capacity(int nproc, double worker_bytes) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && geteuid() != 0) {
    const long free_tasks = static_cast<long>(limit.rlim_cur) - tasks_of_user(geteuid());
    if (nproc > free_tasks)
      refuse_nproc(nproc, "RLIMIT_NPROC (ulimit -u) is " + std::to_string(limit.rlim_cur) + " and this user runs " +
                              std::to_string(limit.rlim_cur - free_tasks) + " tasks", free_tasks);
  }
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const long free_files = static_cast<long>(limit.rlim_cur) - open_files() - 2;  // a pipe's two ends while spawning
    if (nproc > free_files)
      refuse_nproc(nproc, "the launcher keeps one pipe per worker and RLIMIT_NOFILE (ulimit -n) is " +
                              std::to_string(limit.rlim_cur), free_files);
  }
  const double available = runtime::available_memory_bytes();
  if (worker_bytes > 0 && available > 0 && nproc * worker_bytes > available) {
    char why[256];
    std::snprintf(why, sizeof why, "each needs at least %.0f MB (plan.cpu_process_mb) and MemAvailable is %.1f GB",
                  worker_bytes / 1e6, available / 1e9);
    refuse_nproc(nproc, why, static_cast<long>(available / worker_bytes));
  }
}

// Waits for every worker that is still running (after they were sent SIGKILL).
void reap(std::vector<Worker>& ws) {
  for (auto& w : ws) {
    if (w.running) waitpid(w.pid, nullptr, 0);
    w.running = false;
    if (w.out_fd >= 0) close(w.out_fd);
    w.out_fd = -1;
  }
}

int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::string self_executable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot find a free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {

// Starts the workers; a signal during start-up stops it, and a failed start ends the workers
// already started.
std::vector<Worker> start_workers(const LaunchOptions& opts, const std::string& store_file) {
  std::vector<Worker> ws;
  ws.reserve(opts.nproc);
  try {
    for (int r = 0; r < opts.nproc && g_forward_signal == 0; ++r) {
      ws.emplace_back();
      ws.back().pid = spawn(r, opts, store_file, &ws.back().out_fd);
    }
  } catch (const std::exception& e) {
    ws.pop_back();
    signal_all(ws, SIGKILL);
    reap(ws);
    throw std::runtime_error("cannot start worker " + std::to_string(ws.size()) + " of " + std::to_string(opts.nproc) +
                             ": " + e.what() + "; the workers already started were ended");
  }
  return ws;
}

// Relays what the workers wrote, line by line with their rank, waiting at most 100 ms.
void relay_output(std::vector<Worker>& ws) {
  std::vector<pollfd> pfds;
  std::vector<int> who;
  for (int r = 0; r < static_cast<int>(ws.size()); ++r)
    if (ws[r].out_fd >= 0) {
      pfds.push_back({ws[r].out_fd, POLLIN, 0});
      who.push_back(r);
    }
  if (pfds.empty()) {
    usleep(100 * 1000);
    return;
  }
  poll(pfds.data(), pfds.size(), 100);
  for (size_t i = 0; i < pfds.size(); ++i) {
    if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Worker& w = ws[who[i]];
    char buf[8192];
    const ssize_t n = read(w.out_fd, buf, sizeof(buf));
    if (n > 0) {
      w.partial.append(buf, static_cast<size_t>(n));
      emit_lines(w, who[i], false);
    } else {
      close(w.out_fd);
      w.out_fd = -1;
      emit_lines(w, who[i], true);
    }
  }
}

// The rest of what exited workers wrote.
void drain_output(std::vector<Worker>& ws) {
  for (int r = 0; r < static_cast<int>(ws.size()); ++r) {
    if (ws[r].out_fd < 0) continue;
    char buf[8192];
    ssize_t n;
    while ((n = read(ws[r].out_fd, buf, sizeof(buf))) > 0) ws[r].partial.append(buf, static_cast<size_t>(n));
    close(ws[r].out_fd);
    emit_lines(ws[r], r, true);
  }
}

// How the job ends: the first failing worker's code, and when the stragglers get SIGKILL.
struct Ending {
  bool started = false;
  int result = 0;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// A signal to the launcher goes to every worker; a second one kills them.
void forward_signal(std::vector<Worker>& ws, Ending& end) {
  const int sig = g_forward_signal.exchange(0);
  if (sig == 0) return;
  if (end.started) {  // the user will not wait for that checkpoint
    spdlog::warn("[launcher] second signal: killing the workers");
    signal_all(ws, SIGKILL);
    return;
  }
  signal_all(ws, sig);
  end.started = true;
  // Workers may take a while to save a checkpoint before leaving: give them the collective
  // timeout's worth, not the failure grace period.
  end.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
}

// Collects the workers that exited; returns how many did. One worker failing ends the job: the
// others get SIGTERM and the grace period, also when they were already ending on a signal (a
// failed peer will not checkpoint), and it fails the job.
int collect_exits(std::vector<Worker>& ws, Ending& end, double grace_seconds) {
  int exited = 0;
  for (int r = 0; r < static_cast<int>(ws.size()); ++r) {
    int status = 0;
    if (!ws[r].running || waitpid(ws[r].pid, &status, WNOHANG) != ws[r].pid) continue;
    ws[r].running = false;
    ws[r].exit_code = code_of(status);
    ++exited;
    if (ws[r].exit_code == 0) continue;
    if (end.result == 0) end.result = ws[r].exit_code;
    if (!end.started) {
      spdlog::warn("[launcher] rank {} exited with code {}; ending the other workers", r, ws[r].exit_code);
      signal_all(ws, SIGTERM);
    }
    end.started = true;
    end.deadline = std::min(end.deadline, std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(static_cast<int>(grace_seconds * 1000)));
  }
  return exited;
}

}  // namespace

int launch_local(const LaunchOptions& opts) {
  if (opts.nproc < 1) throw JobEnvError("--nproc " + std::to_string(opts.nproc) + ": must be 1 or more");
  check_capacity(opts.nproc, opts.worker_bytes);
  const StoreDir store;
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<Worker> ws = start_workers(opts, store.file());
  Ending end;
  for (int running = static_cast<int>(ws.size()); running > 0;) {
    forward_signal(ws, end);
    relay_output(ws);
    running -= collect_exits(ws, end, opts.grace_seconds);
    if (end.started && std::chrono::steady_clock::now() > end.deadline) {
      signal_all(ws, SIGKILL);
      end.deadline = std::chrono::steady_clock::time_point::max();
    }
  }
  drain_output(ws);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (static_cast<int>(ws.size()) < opts.nproc && end.result == 0) end.result = 128 + SIGTERM;  // stopped while starting
  return end.result;
}

}  // namespace trainer::distributed
