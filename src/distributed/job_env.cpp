#include "distributed/job_env.hpp"

#include <unistd.h>

#include <vector>

extern char** environ;

namespace trainer::distributed {
namespace {

std::string get(const EnvMap& env, const std::string& key, const std::string& fallback = "") {
  auto it = env.find(key);
  return it == env.end() ? fallback : it->second;
}

bool has(const EnvMap& env, const std::string& key) { return env.count(key) > 0; }

int parse_int(const EnvMap& env, const std::string& key, int min_value) {
  const std::string text = get(env, key);
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < min_value)
    throw JobEnvError("environment variable " + key + "='" + text + "' is not an integer >= " +
                      std::to_string(min_value));
  return value;
}

void require(const EnvMap& env, const std::vector<std::string>& keys, const std::string& who) {
  for (const auto& k : keys)
    if (!has(env, k)) throw JobEnvError(who + " launch detected but " + k + " is not set");
}

void check_consistent(const JobEnv& job) {
  if (job.rank >= job.world_size)
    throw JobEnvError(job.launcher + " launch: rank " + std::to_string(job.rank) + " is not below world size " +
                      std::to_string(job.world_size));
  if (job.local_rank >= job.local_world_size)
    throw JobEnvError(job.launcher + " launch: local rank " + std::to_string(job.local_rank) +
                      " is not below local world size " + std::to_string(job.local_world_size));
}

void read_master(const EnvMap& env, JobEnv& job) {
  if (has(env, "MASTER_ADDR")) job.master_addr = get(env, "MASTER_ADDR");
  if (has(env, "MASTER_PORT")) {
    job.master_port = parse_int(env, "MASTER_PORT", 1);
    if (job.master_port > 65535)
      throw JobEnvError("environment variable MASTER_PORT='" + get(env, "MASTER_PORT") + "' is above 65535");
  }
}

}  // namespace

std::string JobEnv::store_prefix() const {
  // The same prefix torch.distributed.rendezvous uses, so we can share torchrun's agent store.
  return "/worker/attempt_" + std::to_string(restart_count);
}

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string first_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  const auto open = entry.find('[');
  if (open == std::string::npos) return entry;
  const std::string prefix = entry.substr(0, open);
  std::string range = entry.substr(open + 1, entry.find(']') - open - 1);
  range = range.substr(0, range.find(','));   // first element of the list
  range = range.substr(0, range.find('-'));   // first value of the range (keeps zero padding)
  return prefix + range;
}

int tasks_on_node(const std::string& spec, int node_id) {
  // Entries are "N" or "N(xK)", separated by commas.
  int node = 0;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int count = std::stoi(item);
    int repeat = 1;
    auto x = item.find("(x");
    if (x != std::string::npos) repeat = std::stoi(item.substr(x + 2));
    if (node_id < node + repeat) return count;
    node += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  throw JobEnvError("SLURM tasks-per-node '" + spec + "' has no entry for node " +
                    std::to_string(node_id));
}

JobEnv detect_job_env(const EnvMap& env) {
  JobEnv job;
  if (has(env, "TORCHELASTIC_RUN_ID")) {
    require(env, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"},
            "torchrun");
    job.launcher = "torchrun";
    job.rank = parse_int(env, "RANK", 0);
    job.world_size = parse_int(env, "WORLD_SIZE", 1);
    job.local_rank = parse_int(env, "LOCAL_RANK", 0);
    job.local_world_size = parse_int(env, "LOCAL_WORLD_SIZE", 1);
    if (has(env, "GROUP_RANK")) job.node_rank = parse_int(env, "GROUP_RANK", 0);
    job.agent_store = get(env, "TORCHELASTIC_USE_AGENT_STORE") == "True";
    if (has(env, "TORCHELASTIC_RESTART_COUNT"))
      job.restart_count = parse_int(env, "TORCHELASTIC_RESTART_COUNT", 0);
    read_master(env, job);
  } else if (has(env, "SLURM_STEP_ID") && has(env, "SLURM_PROCID") && has(env, "SLURM_NTASKS")) {
    job.launcher = "slurm";
    job.rank = parse_int(env, "SLURM_PROCID", 0);
    job.world_size = parse_int(env, "SLURM_NTASKS", 1);
    job.local_rank = has(env, "SLURM_LOCALID") ? parse_int(env, "SLURM_LOCALID", 0) : 0;
    job.node_rank = has(env, "SLURM_NODEID") ? parse_int(env, "SLURM_NODEID", 0) : 0;
    const std::string spec = get(env, "SLURM_STEP_TASKS_PER_NODE", get(env, "SLURM_TASKS_PER_NODE"));
    job.local_world_size = spec.empty() ? job.world_size : tasks_on_node(spec, job.node_rank);
    const std::string nodes = get(env, "SLURM_STEP_NODELIST", get(env, "SLURM_JOB_NODELIST"));
    if (!nodes.empty()) job.master_addr = first_host(nodes);
    // A port every task of the job derives identically, below the ephemeral range.
    if (has(env, "SLURM_JOB_ID")) job.master_port = 20000 + parse_int(env, "SLURM_JOB_ID", 0) % 10000;
    read_master(env, job);  // explicit MASTER_ADDR / MASTER_PORT win
  } else if (has(env, "RANK") || has(env, "WORLD_SIZE")) {
    require(env, {"RANK", "WORLD_SIZE"}, "manual");
    job.launcher = "manual";
    job.rank = parse_int(env, "RANK", 0);
    job.world_size = parse_int(env, "WORLD_SIZE", 1);
    job.local_rank = has(env, "LOCAL_RANK") ? parse_int(env, "LOCAL_RANK", 0) : job.rank;
    job.local_world_size =
        has(env, "LOCAL_WORLD_SIZE") ? parse_int(env, "LOCAL_WORLD_SIZE", 1) : job.world_size;
    read_master(env, job);
    job.store_file = get(env, "TRAINER_STORE_FILE");
  }
  check_consistent(job);
  return job;
}

}  // namespace trainer::distributed
