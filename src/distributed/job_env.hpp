// Where this process sits in the job, read from the launcher's environment. Pure: it takes the
// environment as a map so every launcher's variables are tested without launching anything.
//
// Order (see shared/docs/launch-facts.md): torchrun (TORCHELASTIC_RUN_ID) > an srun step
// (SLURM_STEP_ID + SLURM_PROCID + SLURM_NTASKS) > manual RANK/WORLD_SIZE > single process.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "config/bad_input.hpp"

namespace trainer::distributed {

struct JobEnv {
  std::string launcher = "single";  // torchrun | slurm | manual | single
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's static rendezvous: its agent already serves the TCPStore on MASTER_PORT, so
  // every worker (rank 0 included) connects as a client under /worker/attempt_<restart>.
  bool agent_store = false;
  int restart_count = 0;
  // TRAINER_STORE_FILE: rendezvous through a FileStore at this path (what `trainer launch`
  // does) instead of a TCPStore served by rank 0, so a single-node job listens on no port.
  std::string store_file;
  std::string store_prefix() const;
};

// Raised for inconsistent or missing launcher variables; the CLI exits 2 with it.
class JobEnvError : public BadInput {
 public:
  using BadInput::BadInput;
};

using EnvMap = std::map<std::string, std::string>;
EnvMap current_environment();
JobEnv detect_job_env(const EnvMap& env);

// "node[01-04,07],gpu5" -> "node01"; "vm" -> "vm".
std::string first_host(const std::string& nodelist);
// Slurm's tasks-per-node spec ("4", "3,1", "2(x2)") -> the count on node `node_id`.
int tasks_on_node(const std::string& spec, int node_id);

}  // namespace trainer::distributed
