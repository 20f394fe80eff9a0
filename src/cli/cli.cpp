#include "cli/cli.hpp"

#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <c10/util/Backtrace.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <spdlog/spdlog.h>

#include <malloc.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "config/config.hpp"
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
    if (p.dp > 0 && p.pp > 0 && p.tp > 0 && world_size_of(p) == job.world_size) {
      auto c = distributed::Grid(p.dp, p.pp, p.tp).coord_of(job.rank);
      where += " dp" + std::to_string(c.dp) + " pp" + std::to_string(c.pp) + " tp" + std::to_string(c.tp);
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

// Parses "2x2x2" (dp x pp x tp), the value of `option`.
std::array<int, 3> parse_layout(const std::string& text, const std::string& option) {
  std::array<int, 3> out{};
  char x1 = 0, x2 = 0;
  std::istringstream s(text);
  if (!(s >> out[0] >> x1 >> out[1] >> x2 >> out[2]) || x1 != 'x' || x2 != 'x' || !s.eof())
    throw ConfigError(option + ": '" + text + "' is not DPxPPxTP, e.g. 2x2x2");
  return out;
}

int cmd_check_config(const std::string& path, const std::vector<std::string>& sets, int world) {
  Config cfg = load_config(path, sets);
  validate(cfg, world);
  // The pre-flight as `train` would run it with every process on this machine.
  const auto p = plan::check_memory(cfg, 0, world > 0 ? world : world_size_of(cfg.parallel));
  std::cout << "# " << path << ": OK\n" << to_yaml(cfg);
  print_derived(cfg);
  if (p)
    std::cout << "  memory_per_rank_gb: " << p->memory.total() / 1e9 << "  # predicted, most loaded rank (trainer plan)\n"
              << "  memory_available_gb: " << p->available / 1e9 << "\n";
  return 0;
}

// `trainer plan`: the layouts of --gpus devices for this config's model and batch.
struct PlanOptions {
  int gpus = 0, gpus_per_node = 0, top = 5;
  std::string gpu, layout;
  bool json = false;
};

int cmd_plan(const std::string& path, const std::vector<std::string>& sets, const PlanOptions& o) {
  Config cfg = plan::for_planning(load_config(path, sets));
  validate(cfg, 0);  // the plan.* values and the model, before any search
  if (!o.layout.empty()) {
    const auto l = parse_layout(o.layout, "--layout");
    cfg.parallel.dp = l[0];
    cfg.parallel.pp = l[1];
    cfg.parallel.tp = l[2];
  }
  const int gpus = o.gpus > 0 ? o.gpus : (o.layout.empty() ? 0 : world_size_of(cfg.parallel));
  if (gpus <= 0) throw ConfigError("--gpus: give the number of devices (or --layout DPxPPxTP)");
  if (!o.layout.empty()) validate(cfg, gpus);
  plan::Hardware hw = o.gpu == "cpu" ? plan::measure_cpu(cfg.runtime.precision) : plan::find_gpu(o.gpu);
  if (o.gpus_per_node > 0) hw.gpus_per_node = o.gpus_per_node;
  if (!hw.is_cpu && cfg.runtime.gpu_memory_gb > 0) hw.memory_gb = cfg.runtime.gpu_memory_gb;
  char model[160];
  std::snprintf(model, sizeof model, "%.3gB parameters (vocab %d, seq %d)", model::count_parameters(cfg.model) / 1e9,
                cfg.model.vocab_size, cfg.model.seq_len);
  plan::Report r{model, &hw, gpus, cfg.train.global_batch_size, {}, o.top};
  if (!o.layout.empty()) r.predictions.push_back(plan::predict(cfg, plan::layout_of(cfg), hw));
  else r.predictions = plan::search(cfg, gpus, hw);
  if (o.json) std::cout << plan::as_json(r);
  else if (!o.layout.empty()) std::cout << plan::breakdown(r.predictions.front());
  else std::cout << plan::as_table(r);
  return 0;
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

// --tokenizer and its files, shared by prepare-data and generate; returns --tokenizer.
CLI::Option* add_tokenizer_options(CLI::App* app, data::TokenizerFiles& files) {
  app->add_option("--vocab-file", files.vocab_file, "gpt2: encoder.json");
  app->add_option("--merges-file", files.merges_file, "gpt2: vocab.bpe");
  app->add_option("--tokenizer-json", files.tokenizer_json, "gpt2: a Hugging Face tokenizer.json (BPE) instead");
  return app->add_option("--tokenizer", files.kind, "byte | gpt2 (default byte)");
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

int cmd_train(const std::string& path, const std::vector<std::string>& sets, const RendezvousFlags& rdzv,
              const TrainOptions& opts) {
  const distributed::JobEnv job = job_from(rdzv);
  Config cfg = load_config(path, sets);
  validate(cfg, job.world_size);  // before any process group exists
  plan::check_memory(cfg, job.local_rank, job.local_world_size);  // ... and before any allocation
  setup_logging(cfg.logging.level, job, &cfg);
  // Bad input found only once training starts (a dataset's contents, a checkpoint of another
  // model) exits 2 like a bad config; anything else that stops the run exits 1.
  try {
    return run_training(cfg, job, opts);
  } catch (const BadInput& e) {
    spdlog::error("{}", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    spdlog::error("{}", distributed::message_of(e));
    return 1;
  }
}

// The checkpoint's model (its config.yaml, or a Hugging Face config.json) with this run's
// overrides (typically the layout).
int cmd_eval(const EvalOptions& opts, const std::vector<std::string>& sets) {
  const distributed::JobEnv job = job_from(RendezvousFlags{});
  Config cfg;
  if (checkpoint::is_hf_dir(opts.checkpoint)) {  // the model from config.json, the rest defaults
    cfg.model = checkpoint::read_hf_config(opts.checkpoint);
    for (const auto& s : sets) apply_override(cfg, s);
  } else {
    cfg = load_config(checkpoint::resolve_checkpoint(opts.checkpoint) + "/config.yaml", sets);
  }
  validate(cfg, job.world_size);
  setup_logging(cfg.logging.level, job, &cfg);
  return run_evaluation(cfg, job, opts);
}

std::vector<double> read_losses(const std::string& file) {
  std::vector<double> out;
  std::ifstream in(file);
  for (double loss, norm; in >> loss >> norm;) out.push_back(loss);
  return out;
}

int cmd_verify(const std::string& path, std::vector<std::string> sets, const std::string& layouts,
               int steps, double tolerance) {
  if (steps > 0) sets.push_back("train.steps=" + std::to_string(steps));
  std::vector<std::array<int, 3>> list;
  std::stringstream ls(layouts);
  for (std::string item; std::getline(ls, item, ',');) list.push_back(parse_layout(item, "--layouts"));
  if (list.empty()) throw ConfigError("--layouts: give at least one layout");
  // Every layout is validated before anything runs.
  for (auto& l : list) {
    auto s = sets;
    s.push_back("parallel.dp=" + std::to_string(l[0]));
    s.push_back("parallel.pp=" + std::to_string(l[1]));
    s.push_back("parallel.tp=" + std::to_string(l[2]));
    validate(load_config(path, s), l[0] * l[1] * l[2]);
  }
  const std::string root = std::filesystem::temp_directory_path() / ("trainer-verify-" + std::to_string(getpid()));
  std::vector<std::vector<double>> losses;
  for (auto& l : list) {
    const std::string name = std::to_string(l[0]) + "x" + std::to_string(l[1]) + "x" + std::to_string(l[2]);
    distributed::LaunchOptions o;
    o.nproc = l[0] * l[1] * l[2];
    o.worker_bytes = PlanConfig{}.cpu_process_mb * 1e6;
    o.args = {"train", path, "--dump", root + "/" + name};
    for (const auto& s : sets) o.args.insert(o.args.end(), {"--set", s});
    for (const auto& s : {"parallel.dp=" + std::to_string(l[0]), "parallel.pp=" + std::to_string(l[1]),
                          "parallel.tp=" + std::to_string(l[2]), std::string("logging.interval=1000000")})
      o.args.insert(o.args.end(), {"--set", s});
    std::cout << "verify: running " << name << " (" << o.nproc << " processes)" << std::endl;
    if (int rc = distributed::launch_local(o); rc != 0) {
      std::cerr << "verify: layout " << name << " failed with exit code " << rc << "\n";
      return rc;
    }
    losses.push_back(read_losses(root + "/" + name + "/losses.txt"));
  }
  std::filesystem::remove_all(root);
  std::printf("%6s", "step");
  for (auto& l : list) std::printf(" %14s", (std::to_string(l[0]) + "x" + std::to_string(l[1]) + "x" + std::to_string(l[2])).c_str());
  std::printf(" %12s\n", "max rel diff");
  double worst = 0;
  for (size_t s = 0; s < losses[0].size(); ++s) {
    std::printf("%6zu", s + 1);
    double row = 0;
    for (auto& l : losses) {
      const double x = s < l.size() ? l[s] : NAN;
      std::printf(" %14.8f", x);
      const double rel = std::abs(x - losses[0][s]) / std::max(1e-12, std::abs(losses[0][s]));
      row = std::isnan(rel) ? INFINITY : std::max(row, rel);
    }
    std::printf(" %12.3e\n", row);
    worst = std::max(worst, row);
  }
  const bool ok = worst <= tolerance;
  std::printf("worst relative difference %.3e (tolerance %.1e): %s\n", worst, tolerance, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// `trainer bench-comm` on its own: two local processes of it.
int cmd_bench_comm_locally() {
  const plan::CommFigures f = plan::measure_comm();
  std::cout << "Gloo all-reduce between 2 local processes: latency " << f.latency_us << " us per step, bandwidth "
            << f.gbs << " GB/s" << std::endl;
  return 0;
}

int cmd_config_keys() {
  std::cout << "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : config_keys())
    std::cout << "| `" << k.key << "` | " << k.type << " | `" << k.default_value << "` | " << k.help << " |\n";
  return 0;
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

  std::string config_path;
  std::vector<std::string> sets;
  auto add_config = [&](CLI::App* sub) {
    sub->add_option("config", config_path, "YAML config file")->required();
    sub->add_option("--set", sets, "override: section.key=value (repeatable)")->take_all()->allow_extra_args(false);
  };

  auto* train = app.add_subcommand("train", "train a model");
  add_config(train);
  RendezvousFlags rdzv;
  TrainOptions topts;
  train->add_option("--rank", rdzv.rank, "this process's rank (instead of the environment)");
  train->add_option("--world-size", rdzv.world_size, "number of processes");
  train->add_option("--master-addr", rdzv.master_addr, "address of rank 0's store");
  train->add_option("--master-port", rdzv.master_port, "port of rank 0's store");
  bool no_resume = false;
  train->add_flag("--no-resume", no_resume, "start fresh even if checkpoint.dir has a checkpoint");
  train->add_option("--exit-after", topts.exit_after, "save a checkpoint and exit after this many steps");
  train->add_option("--dump", topts.dump_dir, "write losses, final parameters and gradients here")->group("");
  train->add_option("--inject-nonfinite-step", topts.inject_nonfinite_step, "poison a gradient at this step")->group("");

  auto* check = app.add_subcommand("check-config", "validate a config and print it resolved");
  add_config(check);
  int check_world = 0;
  check->add_option("--world-size", check_world, "also check against this many processes");

  auto* launch = app.add_subcommand("launch", "start N local worker processes of trainer");
  distributed::LaunchOptions lopts;
  std::vector<std::string> command;
  launch->add_option("--nproc", lopts.nproc, "number of processes")->required();
  launch->add_option("command", command, "subcommand and arguments, after --")->required();

  auto* verify = app.add_subcommand("verify", "run the same steps at several layouts and compare losses");
  add_config(verify);
  std::string layouts;
  int verify_steps = 0;
  double tolerance = 1e-5;
  verify->add_option("--layouts", layouts, "comma-separated DPxPPxTP, e.g. 1x1x1,2x2x2")->required();
  verify->add_option("--steps", verify_steps, "steps per layout (default: train.steps)");
  verify->add_option("--tolerance", tolerance, "largest allowed relative loss difference");

  auto* exp = app.add_subcommand("export", "write a checkpoint's full model for other tools");
  std::string export_dir, export_out, export_format = "safetensors", export_dtype = "fp32";
  double max_shard_mb = 5000;
  exp->add_option("--checkpoint", export_dir, "checkpoint step directory or checkpoint.dir")->required();
  exp->add_option("--output", export_out, "output .safetensors file, or directory with --format hf")->required();
  exp->add_option("--format", export_format, "safetensors (one file) or hf (a Hugging Face model directory)");
  exp->add_option("--max-shard-mb", max_shard_mb, "with --format hf: largest safetensors shard");
  exp->add_option("--dtype", export_dtype, "fp32 (default) or bf16: the dtype of the written tensors");

  auto* import = app.add_subcommand("import-hf", "turn a Hugging Face Llama or GPT-2 model into a trainer checkpoint");
  std::string import_dir, import_out;
  import->add_option("--model", import_dir, "directory with config.json and model.safetensors (or its index)")->required();
  import->add_option("--output", import_out, "checkpoint directory to write (step 0)")->required();

  auto* eval = app.add_subcommand("eval", "mean next-token loss and perplexity of a checkpoint on a prepared dataset");
  EvalOptions eopts;
  std::vector<std::string> eval_sets;
  eval->add_option("--checkpoint", eopts.checkpoint, "checkpoint step directory, checkpoint.dir, or a Hugging Face model directory")->required();
  eval->add_option("--data", eopts.data, "prepared dataset: PREFIX of PREFIX.bin / PREFIX.idx")->required();
  eval->add_option("--windows", eopts.windows, "windows of seq_len + 1 tokens to score, from the start");
  eval->add_option("--set", eval_sets, "override (the layout, micro-batch...): section.key=value")->take_all()->allow_extra_args(false);

  auto* gen = app.add_subcommand("generate", "sample text from a checkpoint");
  GenerateOptions gopts;
  gen->add_option("--checkpoint", gopts.checkpoint, "checkpoint step directory or checkpoint.dir")->required();
  gen->add_option("--prompt", gopts.prompt, "text to continue");
  gen->add_option("--max-new-tokens", gopts.max_new_tokens, "tokens to generate");
  gen->add_option("--temperature", gopts.temperature, "sampling temperature; 0 = greedy");
  gen->add_option("--top-k", gopts.top_k, "sample among the k most likely tokens; 0 = all");
  gen->add_option("--seed", gopts.seed, "sampling seed");
  add_tokenizer_options(gen, gopts.tokenizer);

  auto* peak = app.add_subcommand("bench-peak", "measure this machine's matmul TFLOP/s (for runtime.peak_tflops)");
  std::string peak_dtype = "fp32";
  int peak_size = 2048, peak_threads = 0;
  double peak_seconds = 3;
  peak->add_option("--dtype", peak_dtype, "fp32 or bf16");
  peak->add_option("--size", peak_size, "matrix size");
  peak->add_option("--seconds", peak_seconds, "how long to measure");
  peak->add_option("--threads", peak_threads, "intra-op threads (default: all cores)");
  std::string peak_device = "cpu";
  peak->add_option("--device", peak_device, "cpu, cuda or auto");

  auto* plan_cmd = app.add_subcommand("plan", "predict memory and speed of every layout of N devices (docs/plan.md)");
  add_config(plan_cmd);
  PlanOptions plan_opts;
  plan_cmd->add_option("--gpus", plan_opts.gpus, "number of devices (processes for --gpu cpu)");
  plan_cmd->add_option("--gpu", plan_opts.gpu, "a100-80gb, h100-80gb, h200, or cpu (this machine, measured)")->required();
  plan_cmd->add_option("--gpus-per-node", plan_opts.gpus_per_node, "devices per node (default 8)");
  plan_cmd->add_option("--layout", plan_opts.layout, "DPxPPxTP: only this layout, the rest from the config");
  plan_cmd->add_option("--top", plan_opts.top, "layouts to show (default 5)");
  plan_cmd->add_flag("--json", plan_opts.json, "one JSON object instead of the table");

  auto* comm_bench = app.add_subcommand("bench-comm", "time Gloo all-reduces between local processes (run under launch)");
  std::string comm_output;
  comm_bench->add_option("--output", comm_output, "also write the figures to this JSON file");

  auto* keys = app.add_subcommand("config-keys", "print every config key as a Markdown table");

  auto* prepare = app.add_subcommand("prepare-data", "tokenize text into a Megatron .bin/.idx dataset");
  data::PrepareOptions popts;
  prepare->add_option("--input", popts.inputs, "text files, .jsonl/.json files ({\"text\": ...} per line) or directories")
      ->required();
  add_tokenizer_options(prepare, popts.tokenizer)->required();
  prepare->add_option("--output", popts.output, "output prefix: writes PREFIX.bin and PREFIX.idx")->required();
  prepare->add_option("--val-fraction", popts.val_fraction, "last fraction of documents to PREFIX_val (rest: PREFIX_train)");
  prepare->add_flag("--append-eod", popts.append_eod, "append the end-of-document token to every document");
  prepare->add_option("--workers", popts.workers, "tokenizing threads (default: one per core)");

  try {
    refuse_unknown_subcommand(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "error: " << e.what() << "\nRun with --help for more information." << std::endl;
    return kExitBadInput;
  }
  try {
    topts.resume = !no_resume;
    if (*train) return cmd_train(config_path, sets, rdzv, topts);
    if (*check) return cmd_check_config(config_path, sets, check_world);
    if (*verify) return cmd_verify(config_path, sets, layouts, verify_steps, tolerance);
    if (*keys) return cmd_config_keys();
    if (*plan_cmd) return cmd_plan(config_path, sets, plan_opts);
    if (*comm_bench) {
      const distributed::JobEnv job = job_from(RendezvousFlags{});
      if (job.world_size < 2) return cmd_bench_comm_locally();
      plan::bench_comm(job, comm_output);
      return 0;
    }
    if (*peak) {
      if (peak_threads > 0) at::set_num_threads(peak_threads);
      const auto dtype = parse_choice<DType>("--dtype", peak_dtype);
      const auto r = metrics::measure_peak(dtype, peak_size, peak_seconds, parse_choice<DeviceKind>("--device", peak_device));
      std::cout << peak_dtype << " matmul " << peak_size << "x" << peak_size << ": " << r.tflops
                << " TFLOP/s with " << at::get_num_threads() << " threads (the model's matmul: "
                << r.model_tflops << ", LibTorch's at::mm: " << r.libtorch_tflops << "); max relative error vs float64: " << r.max_rel_error << std::endl;
      std::cout << "for MFU of processes with " << at::get_num_threads()
                << " threads each: --set runtime.peak_tflops=" << r.tflops << std::endl;
      return r.max_rel_error < (dtype == DType::Bf16 ? 5e-2 : 1e-4) ? 0 : 1;
    }
    if (*exp) {
      if (export_format != "safetensors" && export_format != "hf")
        throw ConfigError("--format is '" + export_format + "'; use safetensors or hf");
      const int n = checkpoint::export_model(export_dir, export_out,
                                             export_format == "hf" ? checkpoint::ExportFormat::HuggingFace
                                                                   : checkpoint::ExportFormat::Safetensors,
                                             max_shard_mb, runtime::scalar_type(parse_choice<DType>("--dtype", export_dtype)));
      std::cout << "wrote " << n << " tensors to " << export_out << std::endl;
      return 0;
    }
    if (*import) {
      const std::string step = checkpoint::import_hf(import_dir, import_out);  // throws before anything is printed
      std::cout << "wrote " << step << std::endl;
      return 0;
    }
    if (*eval) return cmd_eval(eopts, eval_sets);
    if (*gen) {
      std::cout << generate(gopts) << std::endl;
      return 0;
    }
    if (*prepare) return data::prepare_data(popts);
    if (*launch) {
      lopts.args = command;
      lopts.worker_bytes = PlanConfig{}.cpu_process_mb * 1e6;  // the smallest trainer process, measured
      return distributed::launch_local(lopts);
    }
  } catch (const BadInput& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "error: " << distributed::message_of(e) << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace trainer::cli
