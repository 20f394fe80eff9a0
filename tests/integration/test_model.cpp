// Tensor parallelism against the unsharded model: logits, loss and every gradient at
// tp = 2 and 4 equal tp = 1, for the GPT-2 and the Llama-style block, with and without sequence
// parallelism. "Equal" is bounded by measured noise (tests/helpers.hpp): the tp = 1 run again in
// another reduction order sets a floor per quantity (logits, loss, and the worst tensor, each
// relative to its largest entry), and tp > 1 may differ by kNoiseMultiple times it.
#include "catch_torch.hpp"

#include <ATen/ATen.h>
#include <fstream>
#include <iostream>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "checkpoint/shards.hpp"
#include "config/config.hpp"
#include "data/batches.hpp"
#include "distributed/comm.hpp"
#include "helpers.hpp"
#include "model/flops.hpp"
#include "model/gpt.hpp"
#include "tensor_parallel/parallel_linear.hpp"
#include "train/finalize_grads.hpp"

using namespace trainer;

namespace {

std::vector<std::string> split_sets(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string item; std::getline(s, item, ';');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// One forward and backward of the whole model at pp = 1, tp = world size.
int tp_model_worker() {
  const std::string out = testing::env_or("TEST_OUT", "/tmp");
  auto job = distributed::detect_job_env(distributed::current_environment());
  auto sets = split_sets(testing::env_or("TEST_SETS", ""));
  sets.insert(sets.end(), {"parallel.dp=1", "parallel.pp=1", "parallel.tp=" + std::to_string(job.world_size)});
  Config cfg = load_config(testing::source_dir() + "/configs/tiny.yaml", sets);
  validate(cfg, job.world_size);
  distributed::Comm comm(job, distributed::Grid(1, 1, job.world_size, kv_replicas_of(cfg.model, job.world_size)),
                         std::chrono::seconds(30));
  model::GPT gpt(cfg, comm, {0}, {{0, cfg.model.layers}});
  auto& chunk = gpt.chunks()[0];
  auto src = data::make_source(cfg);
  auto mb = data::local_microbatches(*src, cfg, 0, 0, c10::Device(c10::kCPU))[0];
  at::Tensor hidden = chunk.forward(mb.tokens);
  at::Tensor logits = tensor_parallel::gather_last_dim(chunk.logits(hidden), comm.tp());
  at::Tensor loss = chunk.loss_sum(hidden, mb.targets) / mb.targets.numel();
  loss.backward();
  finalize_tp_grads(gpt.params(), comm);  // tensor parallelism's own part, nothing of DP or PP
  if (comm.rank() == 0) {
    std::vector<at::Tensor> result = {logits.detach().narrow(-1, 0, cfg.model.vocab_size).contiguous(), loss.detach()};
    torch::save(result, out + "/logits.pt");
  }
  checkpoint::write_pieces(out + "/rank" + std::to_string(comm.rank()), checkpoint::param_pieces(gpt.params(), true));
  return 0;
}
testing::RegisterWorker reg_tp("tp_model", tp_model_worker);

struct TPRun {
  at::Tensor logits, loss;
  std::map<std::string, at::Tensor> full;
};

TPRun run_tp(int tp, const std::string& sets, testing::Env env = {}) {
  testing::TempDir dir;
  env.insert({{"TEST_OUT", dir.path}, {"TEST_SETS", sets}});
  REQUIRE((testing::launch_workers("tp_model", tp, env) == 0));
  std::vector<at::Tensor> lg;
  torch::load(lg, dir.file("logits.pt"));
  return {lg[0], lg[1], checkpoint::read_full(dir.path)};
}

// The reference: cross-entropy of the library on gathered, unpadded logits.
int vocab_ce_worker() {
  auto job = distributed::detect_job_env(distributed::current_environment());
  distributed::Comm comm(job, distributed::Grid(1, 1, job.world_size), std::chrono::seconds(30));
  const int64_t N = 12, real = 20, padded = 24;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  at::Tensor full = at::randn({N, padded}, gen, at::kFloat) * 3;
  at::Tensor targets = at::randint(0, real, {N}, gen, at::kLong);
  targets[2] = -100;
  targets[7] = -100;
  targets[5] = real - 1;  // lives in the last shard, next to the padding
  const int64_t local = padded / job.world_size;
  at::Tensor mine = full.narrow(1, comm.tp().index() * local, local).clone().requires_grad_(true);
  at::Tensor loss = tensor_parallel::vocab_parallel_cross_entropy(mine, targets, comm.tp().index() * local, real, comm.tp()).sum();
  loss.backward();
  at::Tensor grad = distributed::all_gather(comm.tp(), mine.grad(), 1);

  at::Tensor ref_logits = full.narrow(1, 0, real).clone().requires_grad_(true);
  at::Tensor ref = at::cross_entropy_loss(ref_logits, targets, {}, at::Reduction::Sum, -100);
  ref.backward();
  const double loss_diff = std::abs(loss.item<double>() - ref.item<double>()) / ref.item<double>();
  const double grad_diff = testing::max_rel_diff(ref_logits.grad(), grad.narrow(1, 0, real));
  const double pad_grad = grad.narrow(1, real, padded - real).abs().max().item<double>();
  if (comm.rank() == 0)
    std::ofstream(testing::env_or("TEST_OUT", "/tmp") + "/ce.txt") << loss_diff << " " << grad_diff << " " << pad_grad;
  return 0;
}
testing::RegisterWorker reg_ce("vocab_ce", vocab_ce_worker);

}  // namespace

// How far a run is from the reference: logits, loss, and the worst parameter or gradient
// tensor, each as max |a - b| / max |a|.
struct TPDistance {
  double logits = 0, loss = 0, tensors = 0;
  std::string worst;
};

std::ostream& operator<<(std::ostream& out, const TPDistance& d) {
  return out << "logits " << d.logits << ", loss " << d.loss << ", tensors " << d.tensors << " (" << d.worst << ")";
}

// A tensor without its vocabulary padding rows, which are not part of the model.
at::Tensor unpadded(const std::string& name, const at::Tensor& t, const Config& cfg) {
  const bool vocab_rows = name.rfind("embedding", 0) == 0 || name.rfind("head", 0) == 0;
  return vocab_rows ? t.narrow(0, 0, cfg.model.vocab_size) : t;
}

TPDistance tp_distance(const TPRun& ref, const TPRun& run, const Config& cfg) {
  TPDistance d;
  d.logits = testing::max_rel_diff(ref.logits, run.logits);
  d.loss = std::abs(ref.loss.item<double>() - run.loss.item<double>()) / ref.loss.item<double>();
  REQUIRE(ref.full.size() == run.full.size());
  for (const auto& [pname, tensor] : ref.full) {
    INFO(pname);
    REQUIRE(run.full.count(pname));
    const double diff = testing::max_rel_diff(unpadded(pname, tensor, cfg), unpadded(pname, run.full.at(pname), cfg));
    if (diff >= d.tensors) d.tensors = diff, d.worst = pname;
  }
  return d;
}

// The floor of a reference: the tp = 1 run again in another reduction order.
TPDistance tp_floor(const TPRun& ref, const std::string& sets) {
  const Config cfg = load_config(testing::source_dir() + "/configs/tiny.yaml", split_sets(sets));
  return tp_distance(ref, run_tp(1, sets, testing::reordered_env()), cfg);
}

// Logits, loss and every parameter and gradient of `run` equal `ref` within kNoiseMultiple of
// their floors, and the shards put back together hold exactly the model's parameters.
void check_same_as_tp1(const TPRun& ref, const TPRun& run, const std::string& sets, const TPDistance& floor) {
  Config cfg = load_config(testing::source_dir() + "/configs/tiny.yaml", split_sets(sets));
  const TPDistance d = tp_distance(ref, run, cfg);
  std::cout << "noise: distance " << d << "; floor " << floor << std::endl;  // for the record (ctest -V)
  INFO("distance " << d << "; floor " << floor);
  CHECK(d.logits <= testing::noise_bound(floor.logits));
  CHECK(d.loss <= testing::noise_bound(floor.loss));
  CHECK(d.tensors <= testing::noise_bound(floor.tensors));
  std::int64_t count = 0;
  for (const auto& [pname, tensor] : ref.full)
    if (pname.find(".grad") == std::string::npos) count += unpadded(pname, tensor, cfg).numel();
  CHECK(count == model::count_parameters(cfg.model));
}

const char* kLlama = "model.mlp=swiglu;model.positions=rope;model.norm=rmsnorm;model.bias=false;model.tied_embeddings=false;";

TEST_CASE("tensor-parallel model equals tp=1: logits - loss and gradients", "[numerics][model][tp][mp]") {
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"gpt2", ""},
      {"llama", kLlama},
      {"gpt2+sp", "parallel.sequence_parallel=true"},
      {"llama+sp", std::string(kLlama) + "parallel.sequence_parallel=true"},
  };
  for (const auto& [name, sets] : variants) {
    SECTION(name) {
      const TPRun ref = run_tp(1, sets);
      const TPDistance floor = tp_floor(ref, sets);
      for (int tp : {2, 4}) {
        INFO(name << " tp=" << tp);
        check_same_as_tp1(ref, run_tp(tp, sets), sets, floor);
      }
    }
  }
}

TEST_CASE("grouped-query attention under TP equals tp=1: key/value heads sharded or replicated", "[numerics][model][tp][gqa][mp]") {
  // 8 query heads of 8; kv_heads 4 and 2 are sharded at tp 2 (and 4), replicated at tp 8; one
  // key/value head (multi-query) is replicated at every tp > 1. With the bias of the GPT-2
  // block (replicated heads' biases too) and the Llama block's RoPE, with and without sequence
  // parallelism.
  for (int kv : {1, 2, 4}) {
    const std::string base = "model.heads=8;model.kv_heads=" + std::to_string(kv) + ";";
    for (const std::string& style : {std::string(kLlama), std::string("")}) {
      const TPRun ref = run_tp(1, base + style);
      const TPDistance floor = tp_floor(ref, base + style);
      for (int tp : {2, 4, 8}) {
        if (style.empty() && tp == 4) continue;  // the GPT-2 block at two of the three sizes
        const std::string sets = base + style + (tp == 4 ? "parallel.sequence_parallel=true" : "");
        INFO("kv_heads=" << kv << " tp=" << tp << " " << sets);
        check_same_as_tp1(ref, run_tp(tp, sets), sets, floor);
      }
    }
  }
}
