// The planner (src/plan/): Megatron-LM's published throughput (Narayanan et al. 2021, Table 1)
// and its own theoretical memory report (run from PyPI's megatron-core), the search, and how
// each memory term answers to the parallel settings. Measured-vs-predicted memory on this
// machine is in tests/integration/test_plan.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <tuple>

#include "model/flops.hpp"

#include "config/config.hpp"
#include "helpers.hpp"
#include "plan/plan.hpp"

using namespace trainer;

namespace {

// A GPT of Megatron's SC21 runs: learned positions, LayerNorm, GELU, ffn = 4h, tied, biases,
// vocabulary 51,200 (padded by 128·tp), sequence 2048, full recomputation, 16-bit.
Config megatron_gpt(int heads, int hidden, int layers, int tp, int pp, int gpus, int batch, int micro_batch, int v) {
  Config c;
  c.model.heads = heads, c.model.hidden = hidden, c.model.layers = layers, c.model.ffn = 4 * hidden;
  c.model.vocab_size = 51200, c.model.seq_len = 2048, c.model.vocab_divisible_by = 128;
  c.parallel.tp = tp, c.parallel.pp = pp, c.parallel.dp = gpus / tp / pp;
  c.parallel.micro_batch_size = micro_batch, c.parallel.virtual_stages = v;
  c.parallel.schedule = v > 1 ? Schedule::Interleaved1F1B : Schedule::OneFOneB;
  c.parallel.recompute = Recompute::Full;
  c.train.global_batch_size = batch;
  c.plan.assumptions = PlanAssumptions::Megatron;
  return c;
}

}  // namespace

TEST_CASE("plan: Megatron-LM's Table 1 throughput within 15% (SC21, A100-80GB)", "[plan]") {
  // Micro-batch and interleaving from the paper's launch scripts (Megatron-LM
  // examples/academic_paper_scripts/sc21/run_table_1.sh); the efficiencies are plan's defaults.
  struct Row {
    int heads, hidden, layers, tp, pp, gpus, batch, micro_batch, v;
    double reported_tflops;
  };
  const Row rows[] = {{24, 2304, 24, 1, 1, 32, 512, 16, 1, 137},      {32, 4096, 36, 4, 1, 128, 512, 16, 1, 142},
                      {64, 8192, 48, 8, 2, 512, 1536, 4, 1, 138},     {96, 12288, 80, 8, 8, 1536, 2304, 2, 2, 148},
                      {128, 20480, 105, 8, 35, 2520, 2520, 1, 3, 163}};
  for (const Row& r : rows) {
    const Config c = megatron_gpt(r.heads, r.hidden, r.layers, r.tp, r.pp, r.gpus, r.batch, r.micro_batch, r.v);
    validate(c, r.gpus);
    const plan::Prediction p = plan::predict(c, layout_of(c), plan::find_gpu("a100-80gb"));
    INFO(r.hidden << " hidden: predicted " << p.hardware_tflops << " TFLOP/s, reported " << r.reported_tflops);
    CHECK(std::abs(p.hardware_tflops / r.reported_tflops - 1) < 0.15);
    // What the paper counts (its Eq. 3, with recomputation's extra forward) is hardware FLOPs.
    const double h = r.hidden, s = 2048, l = r.layers, V = 51200;
    const double eq3_per_token = 96 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    CHECK(p.hardware_tflops * 1e12 * r.gpus / p.tokens_per_s == Approx(eq3_per_token).epsilon(1e-3));
  }
}

TEST_CASE("plan: megatron assumptions reproduce Megatron-LM's theoretical memory report", "[plan]") {
  // The reference is Megatron's own megatron/training/theoretical_memory_usage.py, from the
  // megatron-core 0.19.2 wheel that scripts/setup.sh fetches for the tests.
  std::string wheel;
  for (const auto& e : std::filesystem::directory_iterator(testing::source_dir() + "/.venv/wheels"))
    if (e.path().filename().string().rfind("megatron_core-", 0) == 0) wheel = e.path();
  REQUIRE(!wheel.empty());
  std::vector<Config> cases;
  cases.push_back(megatron_gpt(24, 2304, 24, 1, 1, 32, 512, 16, 1));         // without SP: +5%, output layer
  cases.push_back(megatron_gpt(96, 12288, 80, 8, 8, 1536, 2304, 2, 2));      // interleaved
  cases.push_back(megatron_gpt(64, 8192, 48, 8, 2, 512, 1536, 4, 1));        // pp 2: min(1, m/p)
  Config llama = megatron_gpt(32, 4096, 32, 4, 2, 32, 256, 1, 1);           // Llama-3-8B-like, SP + selective
  llama.model.kv_heads = 8, llama.model.ffn = 14336, llama.model.vocab_size = 128256, llama.model.mlp = Mlp::SwiGlu;
  llama.model.norm = Norm::RmsNorm, llama.model.tied_embeddings = false, llama.model.seq_len = 8192;
  llama.parallel.sequence_parallel = true, llama.parallel.recompute = Recompute::Selective, llama.optim.zero_stage = ZeroStage::Optimizer;
  cases.push_back(llama);
  Config single = llama;  // pp 1, untied: the output layer in both terms
  single.parallel.pp = 1, single.parallel.dp = 8;
  cases.push_back(single);
  std::ostringstream json;
  json << "[";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Config& c = cases[i];
    const auto& p = c.parallel;
    json << (i ? ", " : "") << "{\"num_layers\": " << c.model.layers << ", \"hidden_size\": " << c.model.hidden
         << ", \"ffn_hidden_size\": " << c.model.ffn << ", \"num_attention_heads\": " << c.model.heads
         << ", \"group_query_attention\": " << (kv_heads_of(c.model) < c.model.heads ? "true" : "false")
         << ", \"num_query_groups\": " << kv_heads_of(c.model)
         << ", \"swiglu\": " << (c.model.mlp == Mlp::SwiGlu ? "true" : "false")
         << ", \"normalization\": \"" << (c.model.norm == Norm::RmsNorm ? "RMSNorm" : "LayerNorm") << "\""
         << ", \"untie_embeddings_and_output_weights\": " << (c.model.tied_embeddings ? "false" : "true")
         << ", \"padded_vocab_size\": " << padded_vocab_size(c.model, p.tp) << ", \"seq_length\": " << c.model.seq_len
         << ", \"micro_batch_size\": " << p.micro_batch_size << ", \"tensor_model_parallel_size\": " << p.tp
         << ", \"pipeline_model_parallel_size\": " << p.pp << ", \"world_size\": " << world_size_of(p)
         << ", \"data_parallel_size\": " << p.dp
         << ", \"use_distributed_optimizer\": " << (c.optim.zero_stage != ZeroStage::None ? "true" : "false")
         << ", \"virtual_pipeline_model_parallel_size\": "
         << (p.virtual_stages > 1 ? std::to_string(p.virtual_stages) : "null")
         << ", \"sequence_parallel\": " << (p.sequence_parallel ? "true" : "false")
         << ", \"recompute_granularity\": \"" << name_of(p.recompute) << "\""
         << ", \"num_microbatches\": " << num_microbatches(c) << "}";
  }
  json << "]";
  testing::TempDir dir;
  testing::write_file(dir.file("cases.json"), json.str());
  const auto r = testing::run(testing::python() + " " + testing::source_dir() + "/tests/python/megatron_memory.py " +
                              wheel + " < " + dir.file("cases.json"), 120);
  REQUIRE(r.code == 0);
  std::vector<double> reference;
  std::istringstream in(r.output);
  for (std::string token; std::getline(in, token, ':');) {
    std::istringstream number(token);
    double x;
    if (number >> x) reference.push_back(x);
  }
  REQUIRE(reference.size() == 2 * cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const plan::Prediction p = plan::predict(cases[i], layout_of(cases[i]), plan::find_gpu("a100-80gb"));
    INFO("case " << i << ": " << r.output);
    CHECK(p.memory.weights + p.memory.gradients + p.memory.optimizer == Approx(reference[2 * i]).epsilon(1e-9));
    CHECK(p.memory.activations == Approx(reference[2 * i + 1]).epsilon(1e-9));
  }
}

TEST_CASE("plan: the search gives only layouts the trainer accepts, fastest first", "[plan]") {
  Config c;  // configs/tiny.yaml's model
  c.train.global_batch_size = 16;
  const auto all = plan::search(c, 8, plan::find_gpu("h100-80gb"));
  REQUIRE(all.size() > 20);
  bool interleaved = false, zero = false, full = false;
  std::set<std::tuple<int, int, int, int>> shapes;
  int sp_on = 0, sp_off_with_tp = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Layout& l = all[i].layout;
    if (i > 0) CHECK(all[i - 1].tokens_per_s >= all[i].tokens_per_s);
    CHECK(std::isfinite(all[i].tokens_per_s));
    shapes.insert({l.dp, l.pp, l.tp, l.cp});
    interleaved |= l.virtual_stages > 1, zero |= l.zero_stage == ZeroStage::Optimizer, full |= l.recompute == Recompute::Full;
    sp_on += l.sequence_parallel, sp_off_with_tp += !l.sequence_parallel && l.tp > 1;
  }
  CHECK((interleaved && zero && full && sp_on > 0 && sp_off_with_tp > 0));
  // Every dp·cp·pp·tp = 8 with tp | 4 heads and pp <= 4 layers (seq 32 splits into 2·cp chunks
  // for every cp): tp 1 with (cp, pp) in {1, 2} x {1, 2, 4}, (4, 1), (4, 2), (8, 1); tp 2 with
  // cp 1 and pp 1, 2, 4, cp 2 and pp 1, 2, cp 4 and pp 1; tp 4 with pp 1, 2 at cp 1, cp 2 at pp 1.
  CHECK(shapes.size() == 18);
  // A config's explicit stage_layers do not narrow the search to its own pipeline.
  Config staged = c;
  staged.parallel.pp = 2, staged.parallel.stage_layers = {3, 1};
  std::set<int> pipelines;
  for (const auto& p : plan::search(staged, 8, plan::find_gpu("h100-80gb"))) pipelines.insert(p.layout.pp);
  CHECK(pipelines == std::set<int>{1, 2, 4});
  CHECK_THROWS_AS(plan::find_gpu("v100"), ConfigError);
}

TEST_CASE("plan: the weights term counts exactly the model's parameters", "[plan]") {
  // One stage, one TP rank: 4 bytes per parameter of model::count_parameters (vocab already a
  // multiple of its padding), for GPT-2 and Llama blocks, tied and untied, with GQA.
  for (int variant = 0; variant < 4; ++variant) {
    Config c;
    c.model.vocab_size = 512;
    if (variant >= 2) {
      c.model.positions = Positions::Rope, c.model.norm = Norm::RmsNorm, c.model.mlp = Mlp::SwiGlu, c.model.bias = false;
      c.model.kv_heads = variant == 3 ? 2 : 0;
    }
    c.model.tied_embeddings = variant % 2 == 0;
    c.parallel.dp = 1, c.parallel.pp = 1, c.parallel.tp = 1;
    const auto p = plan::predict(c, layout_of(c), plan::find_gpu("h100-80gb"));
    INFO("variant " << variant);
    CHECK(p.memory.weights == Approx(4.0 * model::count_parameters(c.model)));
  }
}

TEST_CASE("plan: each memory term answers to its setting", "[plan]") {
  Config c;  // a mid-size GPT on 8 H100s
  c.model.layers = 8, c.model.hidden = 1024, c.model.heads = 16, c.model.ffn = 4096, c.model.vocab_size = 32000;
  c.model.seq_len = 1024;
  c.parallel.dp = 2, c.parallel.pp = 2, c.parallel.tp = 2, c.parallel.micro_batch_size = 2;
  c.train.global_batch_size = 32;
  const plan::Hardware& h100 = plan::find_gpu("h100-80gb");
  auto at = [&](const std::function<void(Config&)>& change) {
    Config x = c;
    change(x);
    validate(x, 8);
    return plan::predict(x, layout_of(x), h100);
  };
  const auto base = at([](Config&) {});
  // ZeRO-1 divides the Adam moments by dp and nothing else.
  const auto zero = at([](Config& x) { x.optim.zero_stage = ZeroStage::Optimizer; });
  CHECK(zero.memory.optimizer == Approx(base.memory.optimizer / 2));
  CHECK(zero.memory.weights == Approx(base.memory.weights));
  CHECK(zero.memory.gradients == Approx(base.memory.gradients));
  CHECK(zero.memory.activations == Approx(base.memory.activations));
  CHECK(zero.memory.logits == Approx(base.memory.logits));
  // Recomputing only some layers moves memory, time and FLOPs part of the way.
  const auto some = at([](Config& x) { x.parallel.recompute = Recompute::Full, x.parallel.recompute_layers = 1; });
  // fp32 weights, fp32 gradients, two fp32 moments: 4 + 4 + 8 bytes per parameter.
  CHECK(base.memory.optimizer == Approx(2 * base.memory.weights));
  // Recomputation: full keeps less than selective, which keeps less than none; it costs time.
  const auto selective = at([](Config& x) { x.parallel.recompute = Recompute::Selective; });
  const auto full = at([](Config& x) { x.parallel.recompute = Recompute::Full; });
  CHECK(full.memory.activations < selective.memory.activations);
  CHECK(selective.memory.activations < base.memory.activations);
  CHECK(full.time.compute > selective.time.compute);
  CHECK(full.hardware_tflops > full.model_tflops);
  CHECK(some.memory.activations > full.memory.activations);
  CHECK(some.memory.activations < base.memory.activations);
  CHECK(some.time.compute > base.time.compute);
  CHECK(some.time.compute < full.time.compute);
  // GPipe keeps every microbatch; 1F1B at most pp of them on the first stage.
  const auto gpipe = at([](Config& x) { x.parallel.schedule = Schedule::GPipe; });
  CHECK(gpipe.memory.activations > 3 * base.memory.activations);
  // Sequence parallelism shards the norm and residual regions.
  const auto sp = at([](Config& x) { x.parallel.sequence_parallel = true; });
  CHECK(sp.memory.activations < base.memory.activations);
  // The bubble: (p − 1)/m of the pipeline's work, less with interleaving.
  const auto interleaved = at([](Config& x) {
    x.parallel.schedule = Schedule::Interleaved1F1B;
    x.parallel.virtual_stages = 2;
  });
  CHECK(base.time.bubble / (base.time.compute + base.time.tp_comm) == Approx(1.0 / 8).epsilon(0.01));
  CHECK(interleaved.time.bubble == Approx(base.time.bubble / 2).epsilon(0.01));
  // Doubling tp halves the layers' weights (norms stay whole).
  const auto tp4 = at([](Config& x) { x.parallel.tp = 4, x.parallel.dp = 1; });
  CHECK(tp4.memory.weights < 0.55 * base.memory.weights);
  CHECK(tp4.memory.weights > 0.45 * base.memory.weights);
}

TEST_CASE("plan: ZeRO-2 and ZeRO-3 shard gradients and weights, and pay in gathers", "[plan][zero]") {
  Config c;  // 8 layers, hidden 1024, bf16, at dp 4 without PP
  c.model.layers = 8, c.model.hidden = 1024, c.model.heads = 16, c.model.ffn = 4096, c.model.vocab_size = 32000;
  c.model.seq_len = 1024;
  c.runtime.precision = DType::Bf16;
  c.parallel.dp = 4, c.parallel.pp = 1, c.parallel.tp = 1, c.parallel.micro_batch_size = 1;
  c.train.global_batch_size = 16;
  const plan::Hardware& h100 = plan::find_gpu("h100-80gb");
  auto at = [&](ZeroStage zero, const std::function<void(Config&)>& change = [](Config&) {}) {
    Config x = c;
    x.optim.zero_stage = zero;
    change(x);
    validate(x, x.parallel.dp * x.parallel.pp * x.parallel.tp);
    return plan::predict(x, layout_of(x), h100);
  };
  const auto z1 = at(ZeroStage::Optimizer), z2 = at(ZeroStage::Gradients), z3 = at(ZeroStage::Parameters);
  const double P = z1.memory.weights / 2;  // bf16 weights
  const double vh = 32000.0 * 1024, layer = P - vh - 1024.0 * 1024 - 2 * 1024;  // minus embeddings and final norm
  // ZeRO-2: fp32 gradient shard plus three full buckets in flight (25 MiB of fp32 each).
  const double bucket = 25.0 * 1024 * 1024 / 4;
  CHECK(z2.memory.gradients == Approx(4 * (P / 4 + 3 * bucket)));
  CHECK(z2.memory.weights == Approx(z1.memory.weights));
  CHECK(z2.memory.optimizer == Approx(z1.memory.optimizer));
  // ZeRO-3: the weight shard plus a layer and the largest unit gathered (the tied embedding:
  // token and learned position rows).
  const double embedding = vh + 1024.0 * 1024;
  CHECK(z3.memory.weights == Approx(2 * (P / 4 + layer / 8 + embedding)).epsilon(1e-6));
  CHECK(z3.memory.gradients == Approx(z2.memory.gradients));
  // Kept gathered from forward to backward: the whole model at the peak, and one gather less.
  const auto kept = at(ZeroStage::Parameters, [](Config& x) { x.parallel.fsdp_reshard_after_forward = false; });
  CHECK(kept.memory.weights == Approx(2 * (P / 4 + P)));
  // Under PP the stage stays gathered for the step and its gradients accumulate in full.
  const auto pp2 = at(ZeroStage::Parameters, [](Config& x) { x.parallel.pp = 2, x.parallel.dp = 2; });
  const double stage = pp2.memory.weights / 2 / (1 + 1.0 / 2);
  CHECK(pp2.memory.gradients == Approx(4 * (stage + stage / 2)));
  // Time: every stage pays for DP; ZeRO-3 gathers each unit twice a microbatch when it reshards
  // after forward, once when it keeps them.
  CHECK(z1.time.dp_exposed > 0);
  CHECK(z2.time.dp_exposed > 0);
  CHECK(kept.time.dp_exposed < z3.time.dp_exposed);
  // The search tries every stage, and the reshard choice only where it matters.
  std::set<std::pair<int, bool>> seen;
  for (const auto& p : plan::search(c, 8, h100, false)) {
    seen.insert({static_cast<int>(p.layout.zero_stage), p.layout.reshard_after_forward});
    if (!p.layout.reshard_after_forward) CHECK((p.layout.zero_stage == ZeroStage::Parameters && p.layout.pp == 1));
  }
  CHECK(seen == std::set<std::pair<int, bool>>{{0, true}, {1, true}, {2, true}, {3, true}, {3, false}});
}

TEST_CASE("plan: Llama 3 70B on 512 H100s and 8B on 8", "[plan]") {
  for (const auto& [file, gpus] : {std::pair{"llama3-70b.yaml", 512}, std::pair{"llama3-8b.yaml", 8}}) {
    const Config c = load_config(testing::source_dir() + "/configs/" + file);
    const auto all = plan::search(c, gpus, plan::find_gpu("h100-80gb"));
    const auto best = std::find_if(all.begin(), all.end(), [](const plan::Prediction& p) { return p.fits; });
    REQUIRE(best != all.end());
    INFO(file << ": best " << describe(best->layout) << " MFU " << best->mfu);
    CHECK(best->mfu > 0.2);
    // The planner's own ceiling is plan.matmul_efficiency (0.8), less the attention at 0.5 and
    // the communication; bf16 without recomputation (the 8B at dp 4 x tp 2 fits since issue 26)
    // predicts ~64%. Above 70% a term would be missing.
    CHECK(best->mfu < 0.7);
  }
}

TEST_CASE("plan: context parallelism divides the activations and pays in key/value collectives", "[plan][cp]") {
  Config c;  // a Llama-style 1B-class model with GQA at 32K tokens on 4 H100s
  c.model.layers = 8, c.model.hidden = 2048, c.model.heads = 16, c.model.kv_heads = 4, c.model.ffn = 5632;
  c.model.vocab_size = 32000, c.model.seq_len = 32768;
  c.model.positions = Positions::Rope, c.model.norm = Norm::RmsNorm, c.model.mlp = Mlp::SwiGlu, c.model.bias = false;
  c.parallel.micro_batch_size = 1;
  c.train.global_batch_size = 4;
  c.runtime.precision = DType::Bf16;
  const plan::Hardware& h100 = plan::find_gpu("h100-80gb");
  auto at = [&](int dp, int cp, ZeroStage zero) {
    Config x = c;
    x.parallel.dp = dp, x.parallel.cp = cp, x.optim.zero_stage = zero;
    validate(x, 4);
    return plan::predict(x, layout_of(x), h100);
  };
  const auto dp4 = at(4, 1, ZeroStage::None), cp4 = at(1, 4, ZeroStage::None);
  // Each rank computes a quarter of the tokens: the layers' activations and the logits fall to a
  // quarter, plus the gathered keys and values (kv_heads / heads = 1/4 of the queries' size).
  CHECK(cp4.memory.activations < 0.40 * dp4.memory.activations);
  CHECK(cp4.memory.activations > 0.25 * dp4.memory.activations);
  CHECK(cp4.memory.logits == Approx(dp4.memory.logits / 4));
  CHECK(cp4.memory.weights == Approx(dp4.memory.weights));
  CHECK(dp4.time.cp_comm == 0);
  CHECK(cp4.time.cp_comm > 0);
  // ZeRO shards over the DP group, which spans dp x cp.
  const auto cp4_zero = at(1, 4, ZeroStage::Optimizer);
  CHECK(cp4_zero.memory.optimizer == Approx(cp4.memory.optimizer / 4));
  // The same global batch in a quarter of the sequence per rank: the compute per rank matches
  // dp 4's (same tokens per rank), so the step costs about the same plus the collectives.
  CHECK(cp4.time.compute == Approx(dp4.time.compute).epsilon(0.35));
}

TEST_CASE("plan: Llama 3 70B at 128K tokens on 512 H100s: the fastest layout that fits uses context parallelism", "[plan][cp]") {
  Config c = load_config(testing::source_dir() + "/configs/llama3-70b.yaml", {"model.seq_len=131072"});
  c.train.global_batch_size = 64;  // 8M tokens a step, as Llama 3's long-context stage
  const auto all = plan::search(c, 512, plan::find_gpu("h100-80gb"));
  const auto best = std::find_if(all.begin(), all.end(), [](const plan::Prediction& p) { return p.fits; });
  REQUIRE(best != all.end());
  INFO("fastest fitting layout: " << describe(best->layout) << ", " << best->memory.total() / 1e9 << " GB");
  CHECK(best->layout.cp > 1);
  CHECK(best->time.cp_comm > 0);
  // Without recomputation, no layout without CP holds the activations of 128K tokens; with CP they fit.
  bool fits_without_cp = false, fits_with_cp = false;
  for (const auto& p : all)
    if (p.fits && p.layout.recompute == Recompute::None) (p.layout.cp > 1 ? fits_with_cp : fits_without_cp) = true;
  CHECK(fits_with_cp);
  CHECK(!fits_without_cp);
}
