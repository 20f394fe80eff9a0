// Rendezvous from each launcher's environment (pure: the environment is a map).
#include <catch2/catch.hpp>

#include "distributed/job_env.hpp"

using namespace trainer::distributed;

TEST_CASE("torchrun variables - agent store and restart count", "[env]") {
  EnvMap env = {{"TORCHELASTIC_RUN_ID", "none"}, {"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.0.0.7"},
                {"MASTER_PORT", "29611"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                {"TORCHELASTIC_RESTART_COUNT", "2"},
                {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}};  // torchrun wins
  JobEnv j = detect_job_env(env);
  CHECK(j.launcher == "torchrun");
  CHECK(j.rank == 5);
  CHECK(j.world_size == 8);
  CHECK(j.local_rank == 1);
  CHECK(j.local_world_size == 4);
  CHECK(j.node_rank == 1);
  CHECK(j.master_addr == "10.0.0.7");
  CHECK(j.master_port == 29611);
  CHECK(j.agent_store);
  CHECK(j.store_prefix() == "/worker/attempt_2");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  CHECK_FALSE(detect_job_env(env).agent_store);
}

TEST_CASE("srun step variables with a bracketed node list", "[env]") {
  EnvMap env = {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
                {"SLURM_NODEID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                {"SLURM_STEP_NODELIST", "gpu[07-08,11],login1"}, {"SLURM_JOB_ID", "123456"},
                {"RANK", "0"}, {"WORLD_SIZE", "1"}};  // leaked variables are ignored under srun
  JobEnv j = detect_job_env(env);
  CHECK(j.launcher == "slurm");
  CHECK(j.rank == 6);
  CHECK(j.world_size == 8);
  CHECK(j.local_rank == 2);
  CHECK(j.local_world_size == 4);
  CHECK(j.master_addr == "gpu07");
  CHECK(j.master_port == 20000 + 123456 % 10000);
  env["MASTER_PORT"] = "31000";
  env["MASTER_ADDR"] = "127.0.0.1";
  CHECK(detect_job_env(env).master_port == 31000);
  CHECK(detect_job_env(env).master_addr == "127.0.0.1");
}

TEST_CASE("an sbatch batch script (no step id) is not a rank of the job", "[env]") {
  JobEnv j = detect_job_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "9"}});
  CHECK(j.launcher == "single");
  CHECK(j.world_size == 1);
}

TEST_CASE("manual and single-process launches", "[env]") {
  JobEnv m = detect_job_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29555"}});
  CHECK(m.launcher == "manual");
  CHECK(m.rank == 1);
  CHECK(m.master_addr == "127.0.0.1");
  CHECK(m.master_port == 29555);
  JobEnv s = detect_job_env({});
  CHECK(s.launcher == "single");
  CHECK(s.rank == 0);
  CHECK(s.world_size == 1);
}

TEST_CASE("inconsistent or missing launcher variables are clear errors", "[env]") {
  CHECK_THROWS_WITH(detect_job_env({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), Catch::Contains("rank 4 is not below world size 4"));
  CHECK_THROWS_WITH(detect_job_env({{"RANK", "0"}}), Catch::Contains("WORLD_SIZE is not set"));
  CHECK_THROWS_WITH(detect_job_env({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), Catch::Contains("RANK='x'"));
  CHECK_THROWS_WITH(detect_job_env({{"TORCHELASTIC_RUN_ID", "1"}, {"RANK", "0"}}), Catch::Contains("torchrun"));
  CHECK_THROWS_WITH(detect_job_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}), Catch::Contains("MASTER_PORT"));
}

TEST_CASE("Slurm node lists and tasks per node", "[env]") {
  CHECK(first_host("vm") == "vm");
  CHECK(first_host("lnode[1-2]") == "lnode1");
  CHECK(first_host("node[03-05,9]") == "node03");
  CHECK(first_host("node[01-04,07],gpu5") == "node01");
  CHECK(first_host("a1,b[2-3]") == "a1");
  CHECK(tasks_on_node("4", 0) == 4);
  CHECK(tasks_on_node("3,1", 1) == 1);
  CHECK(tasks_on_node("2(x2)", 1) == 2);
  CHECK(tasks_on_node("2(x2),1", 2) == 1);
  CHECK_THROWS(tasks_on_node("2(x2)", 2));
}
