// trainer under a real one-node Slurm (munge, slurmctld, slurmd from Debian, started and
// stopped by this test): `srun -n 4` and an `sbatch --wait` job reproduce the built-in
// launcher's losses. trainer finds rank, world and the store's host from Slurm's variables.
#include "helpers.hpp"
#include "catch_torch.hpp"

namespace {

struct Cluster {
  std::string script = testing::source_dir() + "/scripts/slurm/local_cluster.sh";
  Cluster() {
    auto r = testing::run(script + " up", 300);
    INFO(r.output);
    REQUIRE(r.code == 0);
  }
  ~Cluster() { testing::run(script + " down", 60); }
};

std::vector<double> losses(const std::string& dir) {
  std::vector<double> out;
  for (const auto& l : testing::read_losses(dir)) out.push_back(l.loss);
  return out;
}

}  // namespace

TEST_CASE("srun -n 4 and sbatch --wait reproduce the built-in launcher's losses", "[slurm][mp]") {
  testing::TempDir dir;
  const std::vector<std::string> sets = {"train.steps=4", "parallel.dp=1", "parallel.pp=2", "parallel.tp=2"};
  std::string args;
  for (const auto& s : sets) args += " --set " + s;
  REQUIRE(testing::train_layout(1, 2, 2, dir.file("builtin"), {"train.steps=4"}).code == 0);
  const auto ref = losses(dir.file("builtin"));
  REQUIRE(ref.size() == 4);

  Cluster cluster;
  const std::string train = testing::trainer_bin() + " train " + testing::source_dir() + "/configs/tiny.yaml" + args;
  // Leaked launcher variables must not matter under srun.
  auto r = testing::run("env RANK=0 WORLD_SIZE=1 srun -O -n 4 --kill-on-bad-exit=1 " + train + " --dump " + dir.file("srun"), 180);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(losses(dir.file("srun")) == ref);

  testing::write_file(dir.file("job.sbatch"), "#!/bin/bash\n#SBATCH --ntasks=4\n#SBATCH --overcommit\n#SBATCH --output=" +
                      dir.file("job.out") + "\nsrun --kill-on-bad-exit=1 " + train + " --dump " + dir.file("sbatch") + "\n");
  auto b = testing::run("sbatch --wait " + dir.file("job.sbatch"), 240);
  INFO(b.output << testing::read_file(dir.file("job.out")));
  CHECK(b.code == 0);
  CHECK(losses(dir.file("sbatch")) == ref);
}
