#include "cli/cli.hpp"

#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <c10/util/Backtrace.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <spdlog/spdlog.h>

#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <memory>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "config/config.hpp"
#include "config/layout.hpp"
#include "data/prepare.hpp"
#include "distributed/comm.hpp"
#include "distributed/grid.hpp"
#include "distributed/job_env.hpp"
#include "distributed/launcher.hpp"
#include "ops/cpu_ops.hpp"
#include "model/flops.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "plan/measure.hpp"
#include "plan/preflight.hpp"
#include "plan/report.hpp"
#include "runtime/device.hpp"
#include "checkpoint/export.hpp"
#include "checkpoint/hf.hpp"
#include "train/evaluate.hpp"
#include "metrics/peak.hpp"
#include "train/generate.hpp"
#include "train/trainer.hpp"

namespace trainer::cli {
namespace {

constexpr int kExitBadInput = 2;

void setup_logging(LogLevel level, const distributed::JobEnv& job, const Config* cfg) {
  std::string where = "rank " + std::to_string(job.rank);
  if (cfg) {
    const auto& p = cfg->parallel;
    if (p.dp > 0 && p.pp > 0 && p.tp > 0 && p.cp > 0 && world_size_of(p) == job.world_size) {
      auto c = distributed::Grid(p.dp, p.pp, p.tp, 1, p.cp).coord_of(job.rank);
      where += " dp" + std::to_string(c.dp) + " pp" + std::to_string(c.pp) + " tp" + std::to_string(c.tp);
      if (p.cp > 1) where += " cp" + std::to_string(c.cp);
    }
  }
  spdlog::set_pattern("[%H:%M:%S] [" + where + "] %^%l%$: %v");
  spdlog::set_level(spdlog::level::from_str(name_of(level)));
}

void print_derived(const Config& cfg) {
  const auto& p = cfg.parallel;
  const int v = virtual_stages_in_effect(p);
  const int m = num_microbatches(cfg);
  auto ranges = pipeline_parallel::partition_layers(cfg.model.layers, p.pp * v, p.stage_layers);
  std::ostringstream layers;
  for (size_t i = 0; i < ranges.size(); ++i)
    layers << (i ? ", " : "") << ranges[i].second - ranges[i].first;
  std::cout << "derived:\n"
            << "  world_size: " << world_size_of(p) << "\n"
            << "  parameters: " << model::count_parameters(cfg.model) << "\n"
            << "  padded_vocab_size: " << padded_vocab_size(cfg.model, p.tp) << "\n"
            << "  layers_per_stage: [" << layers.str() << "]\n"
            << "  microbatches: " << m << "\n"
            << "  global_batch_size: " << cfg.train.global_batch_size << "\n"
            << "  tokens_per_step: " << static_cast<long long>(cfg.train.global_batch_size) * cfg.model.seq_len << "\n"
            << "  flops_per_token: " << model::flops_per_token(cfg.model) << "\n"
            << "  theoretical_bubble: " << pipeline_parallel::theoretical_bubble(p.pp, m, v) << "\n";
}

// An option with a fixed set of spellings is parsed into its enum as CLI11 reads it (a wrong
// one is a usage error naming the choices, exit 2). Config enums take the config's spellings.
template <typename E> CLI::Validator choices(const std::vector<std::pair<std::string, E>>& names) {
  std::string list;
  for (const auto& [name, value] : names) list += (list.empty() ? "" : ", ") + name;
  return CLI::Validator(
      [names, list](std::string& text) -> std::string {
        for (const auto& [name, value] : names)
          if (name == text) {
            text = std::to_string(static_cast<int>(value));  // what CLI11 then reads into the enum
            return "";
          }
        return "'" + text + "' is not one of: " + list;
      },
      list);
}

template <typename E> CLI::Validator config_choices() {
  std::vector<std::pair<std::string, E>> names;
  for (const auto& name : names_of<E>()) names.emplace_back(name, parse_choice<E>("", name));
  return choices(names);
}

// The config file and its --set overrides, which most subcommands take.
struct ConfigArgs {
  std::string path;
  std::vector<std::string> sets;
  Config load() const { return load_config(path, sets); }
};

void add_config(CLI::App* sub, ConfigArgs& c) {
  sub->add_option("config", c.path, "YAML config file")->required();
  sub->add_option("--set", c.sets, "override: section.key=value (repeatable)")->take_all()->allow_extra_args(false);
}

// A subcommand whose options fill a fresh `Options` and whose action `run(options)` returns the
// exit code, which lands in `exit_code` (CLI11 runs it inside parse).
template <typename Options, typename Run>
std::pair<CLI::App*, std::shared_ptr<Options>> subcommand(CLI::App& app, int& exit_code, Run run, const char* name,
                                                         const char* help) {
  auto* sub = app.add_subcommand(name, help);
  auto opts = std::make_shared<Options>();
  sub->callback([opts, run, &exit_code] { exit_code = run(*opts); });
  return {sub, opts};
}

struct RendezvousFlags {
  int rank = -1, world_size = -1, master_port = -1;
  std::string master_addr;
};

distributed::JobEnv job_from(const RendezvousFlags& f) {
  auto env = distributed::current_environment();
  if (f.rank >= 0) env["RANK"] = std::to_string(f.rank);
  if (f.world_size >= 0) env["WORLD_SIZE"] = std::to_string(f.world_size);
  if (!f.master_addr.empty()) env["MASTER_ADDR"] = f.master_addr;
  if (f.master_port >= 0) env["MASTER_PORT"] = std::to_string(f.master_port);
  return distributed::detect_job_env(env);
}

// `trainer train`.
struct TrainArgs {
  ConfigArgs config;
  RendezvousFlags rdzv;
  bool no_resume = false;
  TrainOptions options;
};

int run_train(TrainArgs& a) {
  const distributed::JobEnv job = job_from(a.rdzv);
  Config cfg = a.config.load();
  validate(cfg, job.world_size);  // before any process group exists
  plan::check_memory(cfg, job.local_rank, job.local_world_size);  // ... and before any allocation
  setup_logging(cfg.logging.level, job, &cfg);
  a.options.resume = !a.no_resume;
  // Bad input found only once training starts (a dataset's contents, a checkpoint of another
  // model) exits 2 like a bad config; anything else that stops the run exits 1.
  try {
    return run_training(cfg, job, a.options);
  } catch (const BadInput& e) {
    spdlog::error("{}", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    spdlog::error("{}", distributed::message_of(e));
    return 1;
  }
}

void add_train(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<TrainArgs>(
      app, exit_code, run_train, "train",
      "train a model");
  add_config(sub, a->config);
  sub->add_option("--rank", a->rdzv.rank, "this process's rank (instead of the environment)");
  sub->add_option("--world-size", a->rdzv.world_size, "number of processes");
  sub->add_option("--master-addr", a->rdzv.master_addr, "address of rank 0's store");
  sub->add_option("--master-port", a->rdzv.master_port, "port of rank 0's store");
  sub->add_flag("--no-resume", a->no_resume, "start fresh even if checkpoint.dir has a checkpoint");
  sub->add_option("--exit-after", a->options.exit_after, "save a checkpoint and exit after this many steps");
  // For tests (hidden from --help): TestHooks in train/trainer.hpp.
  sub->add_option("--dump", a->options.hooks.dump_dir, "write losses, final parameters and gradients here")->group("");
  sub->add_option("--inject-nonfinite-step", a->options.hooks.inject_nonfinite_step, "poison a gradient at this step")
      ->group("");
}

// `trainer check-config`.
struct CheckArgs {
  ConfigArgs config;
  int world = 0;
};

int run_check_config(const CheckArgs& a) {
  Config cfg = a.config.load();
  validate(cfg, a.world);
  // The pre-flight as `train` would run it with every process on this machine.
  const auto p = plan::check_memory(cfg, 0, a.world > 0 ? a.world : world_size_of(cfg.parallel));
  std::cout << "# " << a.config.path << ": OK\n" << to_yaml(cfg);
  print_derived(cfg);
  if (p)
    std::cout << "  memory_per_rank_gb: " << p->memory.total() / 1e9 << "  # predicted, most loaded rank (trainer plan)\n"
              << "  memory_available_gb: " << p->available / 1e9 << "\n";
  return 0;
}

void add_check_config(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<CheckArgs>(
      app, exit_code, run_check_config, "check-config",
      "validate a config and print it resolved");
  add_config(sub, a->config);
  sub->add_option("--world-size", a->world, "also check against this many processes");
}

// `trainer launch`.
int run_launch(distributed::LaunchOptions& l) {
  l.worker_bytes = PlanConfig{}.cpu_process_mb * 1e6;  // the smallest trainer process, measured
  return distributed::launch_local(l);
}

void add_launch(CLI::App& app, int& exit_code) {
  auto [sub, o] = subcommand<distributed::LaunchOptions>(
      app, exit_code, run_launch, "launch",
      "start N local worker processes of trainer");
  sub->add_option("--nproc", o->nproc, "number of processes")->required();
  sub->add_option("command", o->args, "subcommand and arguments, after --")->required();
}

// `trainer verify`: every layout trains the same steps (each as `train --dump`), then one table.
struct VerifyArgs {
  ConfigArgs config;
  std::string layouts;
  int steps = 0;
  double tolerance = 1e-5;
};

std::vector<double> read_losses(const std::string& file) {
  std::vector<double> out;
  std::ifstream in(file);
  for (double loss, norm; in >> loss >> norm;) out.push_back(loss);
  return out;
}

// Prints one row per step and returns the worst relative difference to the first layout.
double print_loss_table(const std::vector<Layout>& layouts, const std::vector<std::vector<double>>& losses) {
  std::cout << fmt::format("{:>6}", "step");
  for (const auto& l : layouts) std::cout << fmt::format(" {:>14}", grid_name(l));
  std::cout << fmt::format(" {:>12}\n", "max rel diff");
  double worst = 0;
  for (size_t s = 0; s < losses[0].size(); ++s) {
    std::cout << fmt::format("{:6}", s + 1);
    double row = 0;
    for (const auto& l : losses) {
      const double x = s < l.size() ? l[s] : NAN;
      std::cout << fmt::format(" {:14.8f}", x);
      const double rel = std::abs(x - losses[0][s]) / std::max(1e-12, std::abs(losses[0][s]));
      row = std::isnan(rel) ? INFINITY : std::max(row, rel);
    }
    std::cout << fmt::format(" {:12.3e}\n", row);
    worst = std::max(worst, row);
  }
  return worst;
}

int run_verify(VerifyArgs a) {
  if (a.steps > 0) a.config.sets.push_back("train.steps=" + std::to_string(a.steps));
  const Config base = a.config.load();
  std::vector<Layout> layouts;
  std::stringstream list(a.layouts);
  for (std::string item; std::getline(list, item, ',');) layouts.push_back(parse_grid(item, "--layouts", base));
  if (layouts.empty()) throw ConfigError("--layouts: give at least one layout");
  for (const auto& l : layouts) validate(with_layout(base, l), l.world());  // every layout before anything runs
  const std::string root = std::filesystem::temp_directory_path() / ("trainer-verify-" + std::to_string(getpid()));
  std::vector<std::vector<double>> losses;
  for (const auto& l : layouts) {
    const std::string dir = root + "/" + grid_name(l);
    distributed::LaunchOptions o;
    o.nproc = l.world();
    o.worker_bytes = PlanConfig{}.cpu_process_mb * 1e6;
    o.args = {"train", a.config.path, "--dump", dir};
    auto sets = a.config.sets;
    for (const auto& s : overrides_between(base, with_layout(base, l))) sets.push_back(s);
    sets.push_back("logging.interval=1000000");
    for (const auto& s : sets) o.args.insert(o.args.end(), {"--set", s});
    spdlog::info("verify: running {} ({} processes)", grid_name(l), o.nproc);
    if (int rc = distributed::launch_local(o); rc != 0) {
      spdlog::error("verify: layout {} failed with exit code {}", grid_name(l), rc);
      return rc;
    }
    losses.push_back(read_losses(dir + "/losses.txt"));
  }
  std::filesystem::remove_all(root);
  const double worst = print_loss_table(layouts, losses);
  const bool ok = worst <= a.tolerance;
  std::cout << fmt::format("worst relative difference {:.3e} (tolerance {:.1e}): {}\n", worst, a.tolerance,
                           ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

void add_verify(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<VerifyArgs>(
      app, exit_code, run_verify, "verify",
      "run the same steps at several layouts and compare losses");
  add_config(sub, a->config);
  sub->add_option("--layouts", a->layouts, "comma-separated DPxPPxTP or DPxPPxTPxCP, e.g. 1x1x1,2x2x2,1x1x2x2")->required();
  sub->add_option("--steps", a->steps, "steps per layout (default: train.steps)");
  sub->add_option("--tolerance", a->tolerance, "largest allowed relative loss difference");
}

// `trainer export`.
struct ExportArgs {
  std::string checkpoint, output;
  checkpoint::ExportFormat format = checkpoint::ExportFormat::Safetensors;
  double max_shard_mb = 5000;
  DType dtype = DType::Fp32;
};

int run_export(const ExportArgs& e) {
  const int n = checkpoint::export_model(e.checkpoint, e.output, e.format, e.max_shard_mb, runtime::scalar_type(e.dtype));
  std::cout << "wrote " << n << " tensors to " << e.output << std::endl;
  return 0;
}

void add_export(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<ExportArgs>(
      app, exit_code, run_export, "export",
      "write a checkpoint's full model for other tools");
  sub->add_option("--checkpoint", a->checkpoint, "checkpoint step directory or checkpoint.dir")->required();
  sub->add_option("--output", a->output, "output .safetensors file, or directory with --format hf")->required();
  sub->add_option("--format", a->format, "safetensors (one file) or hf (a Hugging Face model directory)")
      ->transform(choices<checkpoint::ExportFormat>(
          {{"safetensors", checkpoint::ExportFormat::Safetensors}, {"hf", checkpoint::ExportFormat::HuggingFace}}));
  sub->add_option("--max-shard-mb", a->max_shard_mb, "with --format hf: largest safetensors shard");
  sub->add_option("--dtype", a->dtype, "fp32 (default) or bf16: the dtype of the written tensors")
      ->transform(config_choices<DType>());
}

// `trainer import-hf`.
struct ImportArgs {
  std::string model, output;
};

int run_import_hf(const ImportArgs& i) {
  const std::string step = checkpoint::import_hf(i.model, i.output);  // throws before anything is printed
  std::cout << "wrote " << step << std::endl;
  return 0;
}

void add_import_hf(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<ImportArgs>(
      app, exit_code, run_import_hf, "import-hf",
      "turn a Hugging Face Llama or GPT-2 model into a trainer checkpoint");
  sub->add_option("--model", a->model, "directory with config.json and model.safetensors (or its index)")->required();
  sub->add_option("--output", a->output, "checkpoint directory to write (step 0)")->required();
}

// `trainer eval`: the checkpoint's model (its config.yaml, or a Hugging Face config.json) with
// this run's overrides (typically the layout).
struct EvalArgs {
  EvalOptions options;
  std::vector<std::string> sets;
};

int run_eval(const EvalArgs& a) {
  const distributed::JobEnv job = job_from(RendezvousFlags{});
  Config cfg;
  if (checkpoint::is_hf_dir(a.options.checkpoint)) {  // the model from config.json, the rest defaults
    cfg.model = checkpoint::read_hf_config(a.options.checkpoint);
    for (const auto& s : a.sets) apply_override(cfg, s);
  } else {
    cfg = load_config(checkpoint::resolve_checkpoint(a.options.checkpoint) + "/config.yaml", a.sets);
  }
  validate(cfg, job.world_size);
  setup_logging(cfg.logging.level, job, &cfg);
  return run_evaluation(cfg, job, a.options);
}

void add_eval(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<EvalArgs>(
      app, exit_code, run_eval, "eval",
      "mean next-token loss and perplexity of a checkpoint on a prepared dataset");
  sub->add_option("--checkpoint", a->options.checkpoint,
                  "checkpoint step directory, checkpoint.dir, or a Hugging Face model directory")
      ->required();
  sub->add_option("--data", a->options.data, "prepared dataset: PREFIX of PREFIX.bin / PREFIX.idx")->required();
  sub->add_option("--windows", a->options.windows, "windows of seq_len + 1 tokens to score, from the start");
  sub->add_option("--set", a->sets, "override (the layout, micro-batch...): section.key=value")
      ->take_all()
      ->allow_extra_args(false);
}

// --tokenizer and its files, shared by prepare-data and generate; returns --tokenizer.
CLI::Option* add_tokenizer_options(CLI::App* app, data::TokenizerFiles& files) {
  app->add_option("--vocab-file", files.vocab_file, "gpt2: encoder.json");
  app->add_option("--merges-file", files.merges_file, "gpt2: vocab.bpe");
  app->add_option("--tokenizer-json", files.tokenizer_json, "gpt2: a Hugging Face tokenizer.json (BPE) instead");
  return app->add_option("--tokenizer", files.kind, "byte | gpt2 (default byte)")
      ->transform(choices<data::TokenizerKind>({{"byte", data::TokenizerKind::Byte}, {"gpt2", data::TokenizerKind::Gpt2}}));
}

// `trainer generate`.
int run_generate(const GenerateOptions& o) {
  std::cout << generate(o) << std::endl;
  return 0;
}

void add_generate(CLI::App& app, int& exit_code) {
  auto [sub, g] = subcommand<GenerateOptions>(
      app, exit_code, run_generate, "generate",
      "sample text from a checkpoint");
  sub->add_option("--checkpoint", g->checkpoint, "checkpoint step directory or checkpoint.dir")->required();
  sub->add_option("--prompt", g->prompt, "text to continue");
  sub->add_option("--max-new-tokens", g->max_new_tokens, "tokens to generate");
  sub->add_option("--temperature", g->temperature, "sampling temperature; 0 = greedy");
  sub->add_option("--top-k", g->top_k, "sample among the k most likely tokens; 0 = all");
  sub->add_option("--seed", g->seed, "sampling seed");
  add_tokenizer_options(sub, g->tokenizer);
}

// `trainer bench-peak`.
struct PeakArgs {
  DType dtype = DType::Fp32;
  DeviceKind device = DeviceKind::Cpu;
  int size = 2048, threads = 0;
  double seconds = 3;
};

int run_bench_peak(const PeakArgs& a) {
  if (a.threads > 0) at::set_num_threads(a.threads);
  const auto r = metrics::measure_peak(a.dtype, a.size, a.seconds, a.device);
  std::cout << name_of(a.dtype) << " matmul " << a.size << "x" << a.size << ": " << r.tflops << " TFLOP/s with "
            << at::get_num_threads() << " threads (the model's matmul: " << r.model_tflops
            << ", LibTorch's at::mm: " << r.libtorch_tflops << "); max relative error vs float64: " << r.max_rel_error
            << std::endl;
  if (a.dtype == DType::Bf16 && a.device == DeviceKind::Cpu)
    std::cout << "bf16 products: " << (ops::cpu_bf16_in_fp32() ? "fp32 compute" : "LibTorch's bf16 kernels")
              << " (" << ops::cpu_bf16().why << ")" << std::endl;
  std::cout << "for MFU of processes with " << at::get_num_threads()
            << " threads each: --set runtime.peak_tflops=" << r.tflops << std::endl;
  return r.max_rel_error < (a.dtype == DType::Bf16 ? 5e-2 : 1e-4) ? 0 : 1;
}

void add_bench_peak(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<PeakArgs>(
      app, exit_code, run_bench_peak, "bench-peak",
      "measure this machine's matmul TFLOP/s (for runtime.peak_tflops)");
  sub->add_option("--dtype", a->dtype, "fp32 or bf16")->transform(config_choices<DType>());
  sub->add_option("--size", a->size, "matrix size");
  sub->add_option("--seconds", a->seconds, "how long to measure");
  sub->add_option("--threads", a->threads, "intra-op threads (default: all cores)");
  sub->add_option("--device", a->device, "cpu, cuda or auto")->transform(config_choices<DeviceKind>());
}

// `trainer plan`: the layouts of --gpus devices for this config's model and batch.
struct PlanArgs {
  ConfigArgs config;
  int gpus = 0, gpus_per_node = 0, top = 5;
  std::string gpu, layout;
  bool json = false;
};

int run_plan(const PlanArgs& o) {
  Config cfg = plan::for_planning(o.config.load());
  validate(cfg, 0);  // the plan.* values and the model, before any search
  if (!o.layout.empty()) cfg = with_layout(cfg, parse_grid(o.layout, "--layout", cfg));
  const int gpus = o.gpus > 0 ? o.gpus : (o.layout.empty() ? 0 : world_size_of(cfg.parallel));
  if (gpus <= 0) throw ConfigError("--gpus: give the number of devices (or --layout DPxPPxTP[xCP])");
  if (!o.layout.empty()) validate(cfg, gpus);
  plan::Hardware hw = o.gpu == "cpu" ? plan::measure_cpu(cfg.runtime) : plan::find_gpu(o.gpu);
  if (o.gpus_per_node > 0) hw.gpus_per_node = o.gpus_per_node;
  if (!hw.is_cpu && cfg.runtime.gpu_memory_gb > 0) hw.memory_gb = cfg.runtime.gpu_memory_gb;
  const std::string model = fmt::format("{:.3g}B parameters (vocab {}, seq {})", model::count_parameters(cfg.model) / 1e9,
                                        cfg.model.vocab_size, cfg.model.seq_len);
  plan::Report r{model, &hw, gpus, cfg.train.global_batch_size, {}, o.top};
  if (!o.layout.empty()) r.predictions.push_back(plan::predict(cfg, layout_of(cfg), hw));
  else r.predictions = plan::search(cfg, gpus, hw);
  if (o.json) std::cout << plan::as_json(r);
  else if (!o.layout.empty()) std::cout << plan::breakdown(r.predictions.front());
  else std::cout << plan::as_table(r);
  return 0;
}

void add_plan(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<PlanArgs>(
      app, exit_code, run_plan, "plan",
      "predict memory and speed of every layout of N devices (docs/plan.md)");
  add_config(sub, a->config);
  sub->add_option("--gpus", a->gpus, "number of devices (processes for --gpu cpu)");
  sub->add_option("--gpu", a->gpu, "a100-80gb, h100-80gb, h200, or cpu (this machine, measured)")->required();
  sub->add_option("--gpus-per-node", a->gpus_per_node, "devices per node (default 8)");
  sub->add_option("--layout", a->layout, "DPxPPxTP or DPxPPxTPxCP: only this layout, the rest from the config (or --set parallel.cp=N)");
  sub->add_option("--top", a->top, "layouts to show (default 5)");
  sub->add_flag("--json", a->json, "one JSON object instead of the table");
}

// `trainer bench-comm`: under `launch`, the measurement; on its own, two local processes of it.
struct CommArgs {
  std::string output;
};

int run_bench_comm(const CommArgs& a) {
  const distributed::JobEnv job = job_from(RendezvousFlags{});
  if (job.world_size >= 2) {
    plan::bench_comm(job, a.output);
    return 0;
  }
  const plan::CommFigures f = plan::measure_comm();
  std::cout << "Gloo all-reduce between 2 local processes: latency " << f.latency_us << " us per step, bandwidth "
            << f.gbs << " GB/s" << std::endl;
  return 0;
}

void add_bench_comm(CLI::App& app, int& exit_code) {
  auto [sub, a] = subcommand<CommArgs>(
      app, exit_code, run_bench_comm, "bench-comm",
      "time Gloo all-reduces between local processes (run under launch)");
  sub->add_option("--output", a->output, "also write the figures to this JSON file");
}

// `trainer config-keys`.
void add_config_keys(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("config-keys", "print every config key as a Markdown table");
  sub->callback([&exit_code] {
    std::cout << "| key | type | default | meaning |\n|---|---|---|---|\n";
    for (const auto& k : config_keys())
      std::cout << "| `" << k.key << "` | " << k.type << " | `" << k.default_value << "` | " << k.help << " |\n";
    exit_code = 0;
  });
}

// `trainer prepare-data`.
void add_prepare_data(CLI::App& app, int& exit_code) {
  auto [sub, p] = subcommand<data::PrepareOptions>(
      app, exit_code, data::prepare_data, "prepare-data",
      "tokenize text into a Megatron .bin/.idx dataset");
  sub->add_option("--input", p->inputs, "text files, .jsonl/.json files ({\"text\": ...} per line) or directories")
      ->required();
  add_tokenizer_options(sub, p->tokenizer)->required();
  sub->add_option("--output", p->output, "output prefix: writes PREFIX.bin and PREFIX.idx")->required();
  sub->add_option("--val-fraction", p->val_fraction, "last fraction of documents to PREFIX_val (rest: PREFIX_train)");
  sub->add_flag("--append-eod", p->append_eod, "append the end-of-document token to every document");
  sub->add_option("--workers", p->workers, "tokenizing threads (default: one per core)");
}

// CLI11 reports a mistyped subcommand as "a subcommand is required"; name it instead.
void refuse_unknown_subcommand(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return;
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == argv[1]) return;
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  throw CLI::ExtrasError("unknown subcommand '" + std::string(argv[1]) + "'; use one of: " + names,
                         CLI::ExitCodes::ExtrasError);
}

}  // namespace

// glibc serves allocations above its mmap threshold (at most 32 MB by default) with fresh
// mmaps and unmaps them on free, so each step's activations, logits and gradients come back as
// new pages that the kernel must fault in and zero: a quarter of a small model's step time on
// this CPU (measured with perf). Keeping freed memory in the heap lets the next step reuse it;
// RSS then stays at the peak, which a training process reaches anyway.
void keep_freed_memory() {
  constexpr int kOneGiB = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
}

int main(int argc, char** argv) {
  keep_freed_memory();
  // LibTorch appends a C++ backtrace to its errors, and quotes them in its own warnings (a store
  // that cannot connect, for instance): the user sees the message; the backtrace only at
  // logging.level=debug.
  c10::SetStackTraceFetcher([]() -> std::string {
    return spdlog::should_log(spdlog::level::debug) ? c10::get_backtrace(1) : std::string();
  });
  CLI::App app{"trainer: 3D-parallel (DP x PP x TP) GPT pretraining on LibTorch"};
  app.set_version_flag("--version", std::function<std::string()>([] {
    const std::string cuda = TRAINER_CUDA_VERSION;
    return std::string("trainer " TRAINER_VERSION "\nbuilt with LibTorch " TRAINER_TORCH_VERSION ", ") +
           (cuda.empty() ? "no CUDA" : "CUDA " + cuda + ", NCCL " + distributed::nccl_version());
  }));
  app.require_subcommand(1);
  int exit_code = 0;
  for (auto add : {add_train, add_check_config, add_launch, add_verify, add_export, add_import_hf, add_eval,
                   add_generate, add_bench_peak, add_plan, add_bench_comm, add_config_keys, add_prepare_data})
    add(app, exit_code);

  // The chosen subcommand runs inside parse, as its callback. Errors before logging is set up
  // (usage, a bad config, bad files) go to stderr as "error: ..."; results go to stdout.
  try {
    refuse_unknown_subcommand(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "error: " << e.what() << "\nRun with --help for more information." << std::endl;
    return kExitBadInput;
  } catch (const BadInput& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "error: " << distributed::message_of(e) << std::endl;
    return 1;
  }
  return exit_code;
}

}  // namespace trainer::cli
