// The built-in local launcher: `trainer launch --nproc N -- SUBCOMMAND ARGS...` starts N copies
// of this binary with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1) and TRAINER_STORE_FILE, a store file in a private directory it removes
// at the end (so the job listens on no TCP port beyond Gloo's on 127.0.0.1), prefixes each
// output line with the rank, forwards SIGINT/SIGTERM (a second one kills the workers), and when
// one worker fails ends the others and returns that worker's exit code. A count the machine
// cannot hold is refused before anything starts (JobEnvError), workers die with the launcher
// (PR_SET_PDEATHSIG), and it returns only once every worker is reaped.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace trainer::distributed {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> args;  // arguments after the program name, e.g. {"train", "cfg.yaml"}
  double grace_seconds = 5.0;    // SIGTERM -> SIGKILL delay when ending workers
  std::map<std::string, std::string> env;  // extra variables for every worker
  double worker_bytes = 0;  // memory every worker needs at least, checked against MemAvailable (0: not checked)
};

// Returns 0 when every worker exits 0, else the first failing worker's code (128+signal for a
// signal). Blocks until all workers are gone.
int launch_local(const LaunchOptions& opts);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();
std::string self_executable();

}  // namespace trainer::distributed
