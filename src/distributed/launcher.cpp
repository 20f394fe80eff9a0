#include "distributed/launcher.hpp"

#include "distributed/job_env.hpp"

#include <fcntl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
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
  if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
  const std::string exe = self_executable();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork() failed");
  if (pid == 0) {
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

int launch_local(const LaunchOptions& given) {
  LaunchOptions opts = given;
  if (opts.nproc < 1) throw JobEnvError("--nproc " + std::to_string(opts.nproc) + ": must be 1 or more");
  const StoreDir store;
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<Worker> ws(opts.nproc);
  for (int r = 0; r < opts.nproc; ++r) ws[r].pid = spawn(r, opts, store.file(), &ws[r].out_fd);

  int result = 0;
  bool ending = false;
  auto end_deadline = std::chrono::steady_clock::time_point::max();
  int running = opts.nproc;
  while (running > 0) {
    if (int sig = g_forward_signal.exchange(0)) {
      signal_all(ws, sig);
      if (!ending) {
        ending = true;
        // Workers may take a while to save a checkpoint before leaving: give them the
        // collective timeout's worth, not the failure grace period.
        end_deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
      }
    }
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < opts.nproc; ++r)
      if (ws[r].out_fd >= 0) {
        pfds.push_back({ws[r].out_fd, POLLIN, 0});
        who.push_back(r);
      }
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 100);
    else usleep(100 * 1000);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = ws[who[i]];
      char buf[8192];
      ssize_t n = read(w.out_fd, buf, sizeof(buf));
      if (n > 0) {
        w.partial.append(buf, static_cast<size_t>(n));
        emit_lines(w, who[i], false);
      } else {
        close(w.out_fd);
        w.out_fd = -1;
        emit_lines(w, who[i], true);
      }
    }
    for (int r = 0; r < opts.nproc; ++r) {
      if (!ws[r].running) continue;
      int status = 0;
      if (waitpid(ws[r].pid, &status, WNOHANG) != ws[r].pid) continue;
      ws[r].running = false;
      ws[r].exit_code = code_of(status);
      --running;
      // A worker that fails while the job is ending on a forwarded signal still fails the job.
      if (ws[r].exit_code != 0 && result == 0) result = ws[r].exit_code;
      if (ws[r].exit_code != 0 && !ending) {
        std::cout << "[launcher] rank " << r << " exited with code " << ws[r].exit_code
                  << "; ending the other workers" << std::endl;
        ending = true;
        signal_all(ws, SIGTERM);
        end_deadline = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int>(opts.grace_seconds * 1000));
      }
    }
    if (ending && std::chrono::steady_clock::now() > end_deadline) {
      signal_all(ws, SIGKILL);
      end_deadline = std::chrono::steady_clock::time_point::max();
    }
  }
  for (int r = 0; r < opts.nproc; ++r) {
    if (ws[r].out_fd >= 0) {
      char buf[8192];
      ssize_t n;
      while ((n = read(ws[r].out_fd, buf, sizeof(buf))) > 0) ws[r].partial.append(buf, static_cast<size_t>(n));
      close(ws[r].out_fd);
      emit_lines(ws[r], r, true);
    }
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  return result;
}

}  // namespace trainer::distributed
