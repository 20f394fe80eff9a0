// trainer under the real torchrun of the project's torch 2.x (.venv): standalone, two "nodes"
// with static and c10d rendezvous, and a restart after a killed worker. Each must reproduce the
// built-in launcher's losses.
#include "distributed/launcher.hpp"
#include "helpers.hpp"
#include "catch_torch.hpp"

namespace {

const std::string kTorchrun = testing::python() + " -m torch.distributed.run";

std::string train_args(const std::string& dump, const std::string& extra = "") {
  return testing::trainer_bin() + " train " + testing::source_dir() + "/configs/tiny.yaml --set train.steps=6 --dump " +
         dump + " " + extra;
}

std::vector<double> losses(const std::string& dir) {
  std::vector<double> out;
  for (const auto& l : testing::read_losses(dir)) out.push_back(l.loss);
  return out;
}

std::vector<double> builtin_reference(const testing::TempDir& dir) {
  auto r = testing::train_layout(2, 2, 2, dir.file("builtin"), {"train.steps=6"});
  REQUIRE(r.code == 0);
  return losses(dir.file("builtin"));
}

}  // namespace

TEST_CASE("torchrun --standalone with 8 workers at 2x2x2 gives the built-in launcher's losses", "[torchrun][mp]") {
  testing::TempDir dir;
  const auto ref = builtin_reference(dir);
  auto r = testing::run(kTorchrun + " --standalone --nproc_per_node 8 --no-python " + train_args(dir.file("tr")), 300);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(losses(dir.file("tr")) == ref);
}

TEST_CASE("two torchrun nodes - static and c10d rendezvous - give the same losses", "[torchrun][mp]") {
  testing::TempDir dir;
  const auto ref = builtin_reference(dir);
  for (const std::string rdzv : {"static", "c10d"}) {
    INFO(rdzv);
    const int port = trainer::distributed::free_port();
    const std::string dump = dir.file("two_" + rdzv);
    std::string node_args;
    if (rdzv == "static") node_args = "--nnodes 2 --nproc_per_node 4 --master_addr 127.0.0.1 --master_port " + std::to_string(port);
    else node_args = "--nnodes 2 --nproc_per_node 4 --rdzv_backend c10d --rdzv_id t" + std::to_string(port) +
                     " --rdzv_endpoint 127.0.0.1:" + std::to_string(port);
    const std::string node0 = kTorchrun + " " + node_args + (rdzv == "static" ? " --node_rank 0" : "") + " --no-python " + train_args(dump);
    const std::string node1 = kTorchrun + " " + node_args + (rdzv == "static" ? " --node_rank 1" : "") + " --no-python " + train_args(dump);
    testing::write_file(dir.file("two.sh"), node0 + " > " + dir.file("n0.log") + " 2>&1 & a=$!\n" + node1 + " > " +
                        dir.file("n1.log") + " 2>&1 & b=$!\nwait $a; ra=$?; wait $b; rb=$?; echo \"rc=$ra,$rb\"\n");
    auto r = testing::run("sh " + dir.file("two.sh"), 300);
    INFO(r.output << testing::read_file(dir.file("n0.log")) << testing::read_file(dir.file("n1.log")));
    CHECK(r.output.find("rc=0,0") != std::string::npos);
    CHECK(losses(dump) == ref);
  }
}

TEST_CASE("torchrun --max_restarts 1: a killed worker is restarted and the run resumes to the same loss", "[torchrun][checkpoint][mp]") {
  testing::TempDir dir;
  const std::string common = " --set parallel.dp=1 --set parallel.pp=2 --set parallel.tp=1 --set train.steps=300"
                             " --set checkpoint.interval=20";
  // Uninterrupted reference.
  auto ref = testing::run(testing::trainer_bin() + " launch --nproc 2 -- train " + testing::source_dir() +
                          "/configs/tiny.yaml" + common + " --dump " + dir.file("ref"), 300);
  REQUIRE(ref.code == 0);
  const int port = trainer::distributed::free_port();
  const std::string ckpt = dir.file("ckpt_restart");
  const std::string run = kTorchrun + " --nproc_per_node 2 --max_restarts 1 --monitor_interval 1 --master_port " +
                          std::to_string(port) + " --no-python " + testing::trainer_bin() + " train " +
                          testing::source_dir() + "/configs/tiny.yaml" + common + " --set checkpoint.dir=" + ckpt +
                          " --dump " + dir.file("tr");
  // Kill one worker (the newest process naming our checkpoint dir) once a checkpoint exists.
  const std::string script = run + " > " + dir.file("tr.log") + " 2>&1 & t=$!\n"
                             "for i in $(seq 600); do [ -f " + ckpt + "/latest ] && break; sleep 0.1; done\n"
                             "sleep 1; pkill -9 -n -f 'checkpoint.dir=" + ckpt + "'\n"
                             "wait $t; echo rc=$?\n";
  testing::write_file(dir.file("restart.sh"), script);
  auto r = testing::run("sh " + dir.file("restart.sh"), 300);
  const std::string log = testing::read_file(dir.file("tr.log"));
  INFO(r.output << log);
  CHECK(r.output.find("rc=0") != std::string::npos);
  CHECK(log.find("resumed from " + ckpt) != std::string::npos);
  const auto a = testing::read_losses(dir.file("ref")), b = testing::read_losses(dir.file("tr"));
  REQUIRE(!a.empty());
  REQUIRE(!b.empty());
  CHECK(b.back().loss == a.back().loss);  // bitwise: same layout, exact resume
}
