// Whole training runs through the built-in launcher: every layout computes the same run as
// 1x1x1, ZeRO-1/2/3 equal plain DP, bf16 tracks fp32, the global gradient norm is
// layout-independent, a non-finite step is skipped, and reductions overlap backward.
//
// "The same run" is bounded by measured noise (tests/helpers.hpp): the 1x1x1 reference is run
// a second time in another reduction order (the CPU kernels one ISA level down), and a layout
// may differ from the reference by at most kNoiseMultiple (50) times what that second run
// differs by, per quantity: the largest relative loss difference of any step, the same for the
// global gradient norm, the largest relative norm difference ||a - b|| / ||a|| of any final
// parameter tensor, and that of all parameters together (in bf16 single small tensors, whose
// elements AdamW moves by ~lr whatever their gradient's size, are noise of several percent). A layout bug (a missing reduction, a wrong shard) moves losses by percents
// from the first step; rounding noise over 10 steps is 1e-7 to 1e-4 (fp32) and 1e-4 to 1e-2
// (bf16), and it is the floor that says which.
//
// The key part of the attention bias is left out of the parameter comparison: its true
// gradient is exactly zero (softmax ignores a constant added to every score of a row), so its
// computed gradient is float rounding noise, which AdamW (dividing each element by its own
// running RMS) amplifies to steps of ~lr in directions that depend on summation order. Any
// two implementations differ there; every other parameter agrees.
#include "catch_torch.hpp"

#include <ATen/ATen.h>

#include <iostream>

#include "checkpoint/shards.hpp"
#include "helpers.hpp"

namespace {

constexpr int64_t kHeads = 4;  // model.heads in configs/tiny.yaml

struct Run {
  std::vector<testing::LossLine> losses;
  std::map<std::string, at::Tensor> params;  // full tensors, gradients as "<name>.grad"
  std::string output;
};

Run train(int dp, int pp, int tp, std::vector<std::string> sets, const std::vector<std::string>& extra = {},
          const testing::Env& env = {}) {
  testing::TempDir dir;
  auto r = testing::train_layout(dp, pp, tp, dir.path, sets, extra, env);
  INFO(r.output);
  REQUIRE(r.code == 0);
  return {testing::read_losses(dir.path), trainer::checkpoint::read_full(dir.path), r.output};
}

// The parts of a parameter two layouts can compare: the rows both have (vocabulary padding
// differs with tp), without the key bias (see top).
std::pair<at::Tensor, at::Tensor> comparable(const std::string& name, at::Tensor a, at::Tensor b) {
  const int64_t rows = std::min(a.size(0), b.size(0));
  a = a.narrow(0, 0, rows);
  b = b.narrow(0, 0, rows);
  if (name.find("attn.kv.bias") != std::string::npos) {
    // Rows are [head][k|v][head_dim]: drop the key bias, whose gradient is zero (see top).
    a = a.view({kHeads, 2, -1}).select(1, 1);
    b = b.view({kHeads, 2, -1}).select(1, 1);
  }
  return {a, b};
}

// How far two runs are apart (see top): losses, gradient norms, the worst final parameter.
struct Distance {
  double loss = 0, grad_norm = 0, params = 0, all_params = 0;
  std::string worst;  // the parameter tensor furthest apart
};

std::ostream& operator<<(std::ostream& out, const Distance& d) {
  return out << "loss " << d.loss << ", grad_norm " << d.grad_norm << ", params " << d.params << " (" << d.worst
             << "), all params " << d.all_params;
}

Distance distance(const Run& ref, const Run& run) {
  REQUIRE(ref.losses.size() == run.losses.size());
  Distance d;
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    d.loss = std::max(d.loss, testing::rel_diff(ref.losses[s].loss, run.losses[s].loss));
    d.grad_norm = std::max(d.grad_norm, testing::rel_diff(ref.losses[s].grad_norm, run.losses[s].grad_norm));
  }
  double diff = 0, norm = 0;
  for (const auto& [name, t] : ref.params) {
    if (name.find(".grad") != std::string::npos) continue;
    INFO(name);
    REQUIRE(run.params.count(name));
    const auto [a, b] = comparable(name, t, run.params.at(name));
    const double p = testing::norm_rel_diff(a, b);
    if (p >= d.params) d.params = p, d.worst = name;
    diff += (a.to(at::kDouble) - b.to(at::kDouble)).pow(2).sum().item<double>();
    norm += a.to(at::kDouble).pow(2).sum().item<double>();
  }
  d.all_params = std::sqrt(diff / norm);
  return d;
}

// The noise floor of `ref`: the same run again in another reduction order.
Distance floor_of(const Run& ref, std::vector<std::string> sets, int dp = 1, int pp = 1, int tp = 1) {
  return distance(ref, train(dp, pp, tp, sets, {}, testing::reordered_env()));
}

// `run` is `ref`'s run: every quantity within kNoiseMultiple of its floor.
void check_same_run(const Run& ref, const Run& run, const Distance& floor) {
  const Distance d = distance(ref, run);
  // Printed for the record (ctest -V shows it): how the distance compares with its floor.
  std::cout << "noise: distance " << d << "; floor " << floor << std::endl;
  INFO("distance " << d << "; floor " << floor);
  CHECK(d.loss <= testing::noise_bound(floor.loss));
  CHECK(d.grad_norm <= testing::noise_bound(floor.grad_norm));
  CHECK(d.params <= testing::noise_bound(floor.params));
  CHECK(d.all_params <= testing::noise_bound(floor.all_params));
}

const std::vector<std::string> kTen = {"train.steps=10"};

}  // namespace

TEST_CASE("every layout trains exactly like 1x1x1 (fp32 - 10 steps)", "[numerics][training][mp]") {
  const Run ref = train(1, 1, 1, kTen);
  REQUIRE(ref.losses.size() == 10);
  CHECK(ref.losses.back().loss < ref.losses.front().loss);  // it learns
  const Distance floor = floor_of(ref, kTen);
  // The global gradient norm is checked too: double counting anything would be off by tens of
  // percent.
  for (auto [dp, pp, tp] : std::vector<std::array<int, 3>>{{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}, {1, 2, 4}, {4, 2, 1}}) {
    INFO("layout " << dp << "x" << pp << "x" << tp);
    check_same_run(ref, train(dp, pp, tp, kTen), floor);
  }
}

TEST_CASE("pipeline schedules and stage splits give the same run - tied copies stay identical", "[numerics][training][pipeline][mp]") {
  const std::vector<std::string> sets = {"train.steps=4"};
  const Run ref = train(1, 1, 1, sets);
  const Distance floor = floor_of(ref, sets);
  // read_full() refuses shards whose copies differ, so the tied embedding on the first and the
  // last stage (and every DP replica) is checked bitwise by simply loading the run.
  check_same_run(ref, train(1, 4, 1, sets), floor);
  check_same_run(ref, train(1, 2, 2, sets), floor);
  check_same_run(ref, train(1, 4, 1, {"train.steps=4", "parallel.schedule=gpipe"}), floor);
  check_same_run(ref, train(1, 2, 1, {"train.steps=4", "parallel.stage_layers=[1,3]"}), floor);
  check_same_run(ref, train(2, 2, 1, {"train.steps=4", "parallel.schedule=interleaved-1f1b", "parallel.virtual_stages=2"}), floor);
  // Gradients of the first step (identical weights everywhere), gathered to full shape: each
  // tensor's largest elementwise difference, against the largest the reordered run shows.
  const std::vector<std::string> one = {"train.steps=1"};
  const Run ref1 = train(1, 1, 1, one);
  auto worst_grad = [&](const Run& run) {
    double worst = 0;
    for (const auto& [name, g] : ref1.params)
      if (name.find(".grad") != std::string::npos) worst = std::max(worst, testing::max_rel_diff(g, run.params.at(name)));
    return worst;
  };
  const double grad_floor = worst_grad(train(1, 1, 1, one, {}, testing::reordered_env()));
  for (auto [pp, tp] : std::vector<std::pair<int, int>>{{4, 1}, {2, 2}}) {
    INFO("pp=" << pp << " tp=" << tp << ": floor " << grad_floor);
    CHECK(worst_grad(train(1, pp, tp, one)) <= testing::noise_bound(grad_floor));
  }
}

TEST_CASE("NCCL's order-paired transfer batches, run over Gloo, give the same training and evaluation", "[numerics][training][pipeline][mp]") {
  // The batches NCCL needs (order_paired_batches) change when each transfer starts; Gloo still
  // pairs by tag, so this checks the runner's batch bookkeeping, not NCCL's ordering (the
  // schedule tests check that).
  testing::TempDir logs;
  auto evals = [&](const std::string& name) {
    return testing::eval_losses(testing::read_file(logs.file(name + "/metrics.jsonl")));
  };
  auto sets_for = [&](const std::string& name, std::vector<std::string> sets) {
    sets.insert(sets.end(), {"train.steps=4", "train.eval_interval=2", "logging.dir=" + logs.file(name)});
    return sets;
  };
  const Run ref = train(1, 1, 1, sets_for("ref", {}));
  const auto ref_evals = evals("ref");
  REQUIRE(ref_evals.size() == 2);
  const Distance floor = floor_of(ref, sets_for("reordered", {}));
  const std::string paired = "parallel.pipeline_transfers=order-paired";
  const Run one_f_one_b = train(1, 4, 1, sets_for("1f1b", {paired}));
  const Run interleaved =
      train(1, 2, 1, sets_for("interleaved", {paired, "parallel.schedule=interleaved-1f1b", "parallel.virtual_stages=2"}));
  check_same_run(ref, one_f_one_b, floor);
  check_same_run(ref, interleaved, floor);
  // Evaluation losses: against the noise of the reordered reference's evaluations.
  double eval_floor = 0;
  const auto reordered = evals("reordered");
  for (size_t i = 0; i < 2; ++i) eval_floor = std::max(eval_floor, testing::rel_diff(ref_evals[i], reordered[i]));
  for (const std::string name : {"1f1b", "interleaved"}) {
    INFO(name << ": eval floor " << eval_floor);
    const auto e = evals(name);
    REQUIRE(e.size() == 2);
    for (size_t i = 0; i < 2; ++i) CHECK(testing::rel_diff(ref_evals[i], e[i]) <= testing::noise_bound(eval_floor));
  }
}

TEST_CASE("activation recomputation gives bitwise the same run - dropout included", "[training][recompute][mp]") {
  // Dropout makes the recomputed forward draw its masks again: the generator is restored, so the
  // masks, and with them every loss and weight, are the same bits. One thread per rank: with
  // several, CPU BLAS may split a product differently from one call to the next (MKL_DYNAMIC, load),
  // which differs in the last bits whether or not anything is recomputed (seen once in CI).
  const std::vector<std::string> base = {"train.steps=3", "model.dropout=0.1", "runtime.threads=1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  auto check_bitwise = [](const Run& a, const Run& b) {
    REQUIRE(a.losses.size() == b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) CHECK(a.losses[i].loss == b.losses[i].loss);
    for (const auto& [name, t] : a.params) {
      INFO(name);
      REQUIRE(b.params.count(name));
      CHECK(at::equal(t, b.params.at(name)));
    }
  };
  const Run none = train(1, 1, 1, with({}));
  check_bitwise(none, train(1, 1, 1, with({"parallel.recompute=full"})));
  check_bitwise(none, train(1, 1, 1, with({"parallel.recompute=selective"})));
  // Under pipeline and tensor parallelism (collectives run again in backward), some layers only.
  // Without sequence parallelism the TP ranks drop the same elements of the replicated residual
  // stream, so the replicas of norms and biases stay identical (train() loads the checkpoint,
  // which refuses copies that differ).
  CHECK(train(1, 1, 2, with({})).losses.size() == 3);
  const std::string sp = "parallel.sequence_parallel=true";
  const Run pp_none = train(1, 2, 2, with({sp}));
  check_bitwise(pp_none, train(1, 2, 2, with({sp, "parallel.recompute=full", "parallel.recompute_layers=1"})));
  check_bitwise(pp_none, train(1, 2, 2, with({sp, "parallel.recompute=selective"})));
}

TEST_CASE("1F1B with fewer microbatches than stages runs and warns", "[training][pipeline][mp]") {
  const Run run = train(1, 4, 1, {"train.steps=2", "train.global_batch_size=4", "parallel.micro_batch_size=2"});
  CHECK(run.losses.size() == 2);
  CHECK(run.output.find("the bubble") != std::string::npos);
}

TEST_CASE("ZeRO-1 trains exactly like plain data parallelism", "[numerics][training][zero][mp]") {
  const Run plain = train(2, 1, 1, kTen);
  const Distance floor = floor_of(plain, kTen, 2);
  check_same_run(plain, train(2, 1, 1, {"train.steps=10", "optim.zero_stage=1"}), floor);
  check_same_run(plain, train(2, 2, 2, {"train.steps=10", "optim.zero_stage=1"}), floor);
  check_same_run(plain, train(4, 2, 1, {"train.steps=10", "optim.zero_stage=1", "optim.bucket_mb=0.05"}), floor);
}

// The layouts ZeRO-2 and ZeRO-3 are proven on: DP alone (ZeRO-3 gathers per unit), DP with small
// buckets (many reduce-scatters in flight), and with TP + SP and PP (ZeRO-3 gathers per stage),
// interleaved included.
struct ZeroLayout {
  int dp, pp, tp;
  std::vector<std::string> sets;
};
const std::vector<ZeroLayout> kZeroLayouts = {
    {2, 1, 1, {}},
    {4, 1, 1, {"optim.bucket_mb=0.05"}},
    {2, 2, 2, {"parallel.sequence_parallel=true"}},
    {2, 2, 2, {"parallel.schedule=interleaved-1f1b", "parallel.virtual_stages=2"}}};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_CASE("ZeRO-2 and ZeRO-3 train exactly like 1x1x1 (fp32 - 10 steps)", "[numerics][training][zero][mp]") {
  const Run ref = train(1, 1, 1, kTen);
  const Distance floor = floor_of(ref, kTen);
  for (const char* zero : {"2", "3"})
    for (const auto& l : kZeroLayouts) {
      INFO("zero " << zero << " at " << l.dp << "x" << l.pp << "x" << l.tp);
      check_same_run(ref, train(l.dp, l.pp, l.tp, with({"train.steps=10", std::string("optim.zero_stage=") + zero}, l.sets)),
                     floor);
    }
  // Per unit: parameters kept gathered from forward to backward, and whole layers recomputed
  // inside backward (their forward must find the unit gathered).
  check_same_run(ref, train(2, 1, 1, {"train.steps=10", "optim.zero_stage=3", "parallel.fsdp_reshard_after_forward=false"}),
                 floor);
  check_same_run(ref, train(2, 1, 1, {"train.steps=10", "optim.zero_stage=3", "parallel.recompute=full"}), floor);
}

TEST_CASE("ZeRO-2 and ZeRO-3 in bf16 compute ZeRO-0's run at each layout", "[numerics][training][zero][bf16][mp]") {
  const std::vector<std::string> bf16 = {"train.steps=10", "runtime.precision=bf16"};
  const std::vector<std::string> unclipped = with(bf16, {"optim.grad_clip=0"});
  const Run one = train(1, 1, 1, bf16);
  const Distance one_floor = floor_of(one, bf16);
  // The floor of the unclipped runs: bf16 1x1x1 without clipping, reordered.
  const Distance unclipped_floor = floor_of(train(1, 1, 1, unclipped), unclipped);
  for (const auto& l : kZeroLayouts) {
    // The reference with the same casts and reduction order: ZeRO-0 at the same layout. The
    // shards sum the same bf16-rounded gradients in fp32 (a reduce-scatter instead of an
    // all-reduce) and gather the same bf16 parameters. Without clipping: the global norm is
    // summed shard by shard (ZeRO-3's shards are per unit), which moves the clip factor by
    // ~1e-7, and in bf16 one flipped rounding of a weight grows to ~1e-5 in a loss in 10 steps.
    const Run plain = train(l.dp, l.pp, l.tp, with(unclipped, l.sets));
    for (const char* zero : {"2", "3"}) {
      const std::string stage = std::string("optim.zero_stage=") + zero;
      INFO("zero " << zero << " at " << l.dp << "x" << l.pp << "x" << l.tp);
      check_same_run(plain, train(l.dp, l.pp, l.tp, with(with(unclipped, {stage}), l.sets)), unclipped_floor);
      // Clipped, against 1x1x1 in bf16.
      check_same_run(one, train(l.dp, l.pp, l.tp, with(with(bf16, {stage}), l.sets)), one_floor);
    }
  }
}

TEST_CASE("bf16 at 2x2x2 - 1x2x4 and 2x1x2 with SP computes the run of bf16 at 1x1x1", "[numerics][training][bf16][mp]") {
  const std::vector<std::string> bf16 = {"train.steps=10", "runtime.precision=bf16"};
  const Run fp32 = train(1, 1, 1, kTen);
  const Run ref = train(1, 1, 1, bf16);
  CHECK(ref.losses.back().loss < ref.losses.front().loss - 0.1);  // it learns
  // What bf16 itself changes: its 8-bit mantissa against fp32's 24. Not an equivalence: bf16
  // must stay within a few of its 2^-9 roundings of fp32 in the loss, and differ at all.
  const Distance precision = distance(fp32, ref);
  INFO("bf16 against fp32: " << precision);
  CHECK(precision.loss < 5e-3);
  CHECK(precision.params > 1e-4);  // the rounding did happen
  // A layout sums the same products in another order (TP splits the matmul reductions, DP the
  // batch) and rounds the partial results to bf16 at other places: noise of bf16's size, which
  // the reordered 1x1x1 run measures.
  const Distance floor = floor_of(ref, bf16);
  std::vector<std::string> sp = bf16;
  sp.push_back("parallel.sequence_parallel=true");
  for (const auto& [layout, sets] : std::vector<std::pair<std::array<int, 3>, std::vector<std::string>>>{
           {{2, 2, 2}, bf16}, {{1, 2, 4}, bf16}, {{2, 1, 2}, sp}}) {
    const auto [dp, pp, tp] = layout;
    INFO("layout " << dp << "x" << pp << "x" << tp);
    check_same_run(ref, train(dp, pp, tp, sets), floor);
  }
}

TEST_CASE("bf16 halves the tensor- and pipeline-parallel bytes of every step", "[training][bf16][mp]") {
  auto bytes = [](const std::string& precision) {
    testing::TempDir logs;
    train(2, 2, 2, {"train.steps=2", "logging.interval=1", "parallel.sequence_parallel=true",
                    "runtime.precision=" + precision, "logging.dir=" + logs.path});
    const std::string jsonl = testing::read_file(logs.file("metrics.jsonl"));
    INFO(jsonl);
    auto field = [&](const std::string& key) {
      const auto at = jsonl.rfind("\"" + key + "\":");
      REQUIRE(at != std::string::npos);
      return std::stod(jsonl.substr(at + key.size() + 3));
    };
    return std::array<double, 3>{field("tp_bytes"), field("pp_bytes"), field("dp_bytes")};
  };
  const auto fp32 = bytes("fp32"), bf16 = bytes("bf16");
  INFO("fp32 tp/pp/dp " << fp32[0] << " " << fp32[1] << " " << fp32[2] << "; bf16 " << bf16[0] << " " << bf16[1] << " "
                        << bf16[2]);
  CHECK(fp32[0] > 0);
  CHECK(fp32[1] > 0);
  CHECK(bf16[0] / fp32[0] == Approx(0.5).margin(0.01));  // activations and their gradients
  CHECK(bf16[1] / fp32[1] == Approx(0.5).margin(0.01));
  CHECK(bf16[2] == fp32[2]);  // fp32 main grads: DP reduces fp32
}

TEST_CASE("bf16 gradient reduction tracks fp32 reduction", "[numerics][training][bf16][dp][mp]") {
  const Run fp32 = train(2, 1, 1, kTen);
  const Run bf16 = train(2, 1, 1, {"train.steps=10", "optim.grad_reduce_dtype=bf16"});
  const Run bf16_zero = train(2, 2, 1, {"train.steps=10", "optim.grad_reduce_dtype=bf16", "optim.zero_stage=1"});
  double largest = 0;
  for (size_t s = 1; s < fp32.losses.size(); ++s) {  // step 0's loss comes before any reduction
    // Gradients rounded to bf16 (8-bit mantissa) before and after the sum.
    const double a = std::abs(fp32.losses[s].loss - bf16.losses[s].loss) / fp32.losses[s].loss;
    largest = std::max(largest, a);
    CHECK(a < 5e-3);
    CHECK(std::abs(fp32.losses[s].loss - bf16_zero.losses[s].loss) / fp32.losses[s].loss < 5e-3);
  }
  CHECK(largest > 0);  // the rounding did happen: the runs are not the fp32 run
}

TEST_CASE("a non-finite gradient skips the step and leaves the weights unchanged", "[training][mp]") {
  const Run three = train(2, 1, 2, {"train.steps=3"});
  const Run poisoned = train(2, 1, 2, {"train.steps=4"}, {"--inject-nonfinite-step", "3"});
  CHECK(poisoned.output.find("step 4: gradient norm is nan; step skipped") != std::string::npos);
  for (const auto& [name, t] : three.params)
    if (name.find(".grad") == std::string::npos) {
      INFO(name);
      CHECK(at::equal(t, poisoned.params.at(name)));  // bitwise: the skipped step changed nothing
    }
  // And training continues afterwards.
  const Run after = train(2, 1, 2, {"train.steps=6"}, {"--inject-nonfinite-step", "3"});
  CHECK(std::isfinite(after.losses.back().loss));
  CHECK(after.losses.back().loss < after.losses.front().loss);
}

TEST_CASE("bucket all-reduces start while backward is still running", "[training][dp][mp]") {
  testing::TempDir logs;
  const Run run = train(2, 1, 1, {"train.steps=2", "optim.bucket_mb=0.02", "logging.dir=" + logs.path});
  const std::string jsonl = testing::read_file(logs.file("metrics.jsonl"));
  INFO(jsonl);
  // Several buckets, and all but possibly the very last one were started from autograd hooks.
  auto field = [&](const std::string& key) {
    auto at = jsonl.rfind("\"" + key + "\":");
    return std::stoi(jsonl.substr(at + key.size() + 3));
  };
  CHECK(field("buckets") > 3);
  CHECK(field("buckets_overlapped") >= field("buckets") - 1);
}

TEST_CASE("trainer verify compares layouts and fails above the tolerance", "[training][verify][mp]") {
  const std::string cfg = testing::source_dir() + "/configs/tiny.yaml";
  auto ok = testing::trainer({"verify", cfg, "--layouts", "1x1x1,2x1x1,1x2x1", "--steps", "3"});
  INFO(ok.output);
  CHECK(ok.code == 0);
  CHECK(ok.output.find("PASS") != std::string::npos);
  auto strict = testing::trainer({"verify", cfg, "--layouts", "1x1x1,1x1x2", "--steps", "3", "--tolerance", "0"});
  INFO(strict.output);
  CHECK(strict.code == 1);
  CHECK(strict.output.find("FAIL") != std::string::npos);
}



// ---------------------------------------------------------------- context parallelism ------

namespace {

// The worst gradient tensor of the last step, relative to its norm (the dumps hold each
// parameter's main gradient as "<name>.grad").
double grad_distance(const Run& ref, const Run& run, std::string* worst = nullptr) {
  double d = 0;
  for (const auto& [name, t] : ref.params) {
    if (name.find(".grad") == std::string::npos) continue;
    INFO(name);
    REQUIRE(run.params.count(name));
    const auto [a, b] = comparable(name, t, run.params.at(name));
    const double g = testing::norm_rel_diff(a, b);
    if (g >= d && worst) *worst = name;
    d = std::max(d, g);
  }
  return d;
}

// `run` (a CP layout) is `ref`'s run: check_same_run, and every gradient of the last step too.
void check_same_run_and_grads(const Run& ref, const Run& floor_run, const Run& run, const Distance& floor) {
  check_same_run(ref, run, floor);
  std::string worst;
  const double g = grad_distance(ref, run, &worst), g_floor = grad_distance(ref, floor_run);
  std::cout << "noise: gradients " << g << " (" << worst << "); floor " << g_floor << std::endl;
  INFO("gradients " << g << " (" << worst << "); floor " << g_floor);
  CHECK(g <= testing::noise_bound(g_floor));
}

struct CpLayout {
  int dp, pp, tp, cp;
  std::vector<std::string> sets;
};

// Every CP layout of `layouts` against 1x1x1 of the same model over `steps`: losses, gradient
// norms, the final weights and the last step's gradients within the noise floor.
void check_cp_layouts(const std::vector<std::string>& model, const std::vector<CpLayout>& layouts) {
  const Run ref = train(1, 1, 1, model);
  REQUIRE(ref.losses.size() == 5);
  CHECK(ref.losses.back().loss < ref.losses.front().loss);  // it learns
  const Run floor_run = train(1, 1, 1, model, {}, testing::reordered_env());
  const Distance floor = distance(ref, floor_run);
  for (const auto& l : layouts) {
    std::vector<std::string> sets = model;
    sets.push_back("parallel.cp=" + std::to_string(l.cp));
    sets.insert(sets.end(), l.sets.begin(), l.sets.end());
    INFO("layout dp" << l.dp << " pp" << l.pp << " tp" << l.tp << " cp" << l.cp);
    check_same_run_and_grads(ref, floor_run, train(l.dp, l.pp, l.tp, sets), floor);
  }
}

const std::vector<std::string> kFive = {"train.steps=5", "logging.interval=1"};
const std::vector<std::string> kSp = {"parallel.sequence_parallel=true"};

std::vector<std::string> with_five(std::vector<std::string> sets) {
  sets.insert(sets.begin(), kFive.begin(), kFive.end());
  return sets;
}

}  // namespace

TEST_CASE("context parallelism trains exactly like 1x1x1: the GPT-2 block (fp32 - 5 steps)", "[numerics][training][cp][mp]") {
  check_cp_layouts(kFive, {{1, 1, 1, 2, {}},
                           {1, 1, 1, 4, {}},
                           {1, 1, 2, 2, kSp},
                           {1, 2, 1, 2, {}},
                           {2, 1, 1, 2, {}},
                           {1, 2, 2, 2, {}}});
}

TEST_CASE("context parallelism trains exactly like 1x1x1: the Llama block with GQA (fp32 - 5 steps)", "[numerics][training][cp][gqa][mp]") {
  // 4 query heads share 2 key/value heads; at tp 4 each key/value head is replicated on 2 ranks.
  const auto llama = with_five({"model.mlp=swiglu", "model.positions=rope", "model.norm=rmsnorm", "model.bias=false",
                                "model.tied_embeddings=false", "model.kv_heads=2"});
  check_cp_layouts(llama, {{1, 1, 1, 2, {}},
                           {1, 1, 1, 4, {}},
                           {1, 1, 2, 2, kSp},
                           {1, 2, 1, 2, {"parallel.recompute=selective"}},
                           {2, 1, 1, 2, {"optim.zero_stage=1"}},
                           {1, 2, 2, 2, {"parallel.recompute=full"}},
                           {1, 1, 4, 2, kSp}});
}

TEST_CASE("context parallelism in bf16 computes the run of bf16 at 1x1x1", "[numerics][training][cp][bf16][mp]") {
  const auto bf16 = with_five({"runtime.precision=bf16"});
  check_cp_layouts(bf16, {{1, 1, 1, 2, {}}, {1, 1, 2, 2, kSp}, {1, 2, 1, 2, {"parallel.schedule=interleaved-1f1b", "parallel.virtual_stages=2"}}});
}

TEST_CASE("trainer verify accepts context-parallel layouts (DPxPPxTPxCP) on tiny and tiny-llama", "[training][verify][cp][mp]") {
  for (const char* config : {"/configs/tiny.yaml", "/configs/tiny-llama.yaml"}) {
    auto r = testing::trainer({"verify", testing::source_dir() + config, "--layouts", "1x1x1,1x1x1x2,1x2x2x2", "--steps", "3"});
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("PASS") != std::string::npos);
    CHECK(r.output.find("1x2x2x2") != std::string::npos);
  }
  auto bad = testing::trainer({"verify", testing::source_dir() + "/configs/tiny.yaml", "--layouts", "1x1x1,1x1x1y2"});
  INFO(bad.output);
  CHECK(bad.code == 2);
  CHECK(bad.output.find("DPxPPxTPxCP") != std::string::npos);
}
