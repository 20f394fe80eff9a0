#include "train/trainer.hpp"

#include "runtime/clock.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <malloc.h>
#include <thread>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/shards.hpp"
#include "data/batches.hpp"
#include "distributed/comm.hpp"
#include "data_parallel/data_parallel.hpp"
#include "data_parallel/fsdp.hpp"
#include "train/finalize_grads.hpp"
#include "metrics/metrics.hpp"
#include "model/flops.hpp"
#include "model/gpt.hpp"
#include "ops/cpu_ops.hpp"
#include "optim/adamw.hpp"
#include "pipeline_parallel/runner.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "plan/preflight.hpp"
#include "runtime/device.hpp"
#include "runtime/seed.hpp"

namespace trainer {
namespace {

using runtime::Clock;
using runtime::seconds_since;

// SIGTERM / SIGUSR1 (Slurm's warning before a time limit): checkpoint at the end of the step,
// then exit cleanly. The signals are blocked in every thread the run starts (Gloo's, OpenMP's,
// LibTorch's inherit the mask of the thread that makes them) and taken by one watcher thread
// with sigwait, so no system call of a worker thread is ever interrupted by them: the stop is
// a flag read at the end of a step. Before the loop starts a stop signal ends the process at
// once, as an unhandled one would. (The handler stays for threads that existed before.)
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_loop_started{false};
void on_stop_signal(int sig) { g_stop_signal = sig; }

void watch_stop_signals() {
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
  std::thread([stops] {
    for (int sig = 0;;) {
      if (sigwait(&stops, &sig) != 0) continue;
      if (!g_loop_started) std::_Exit(128 + sig);
      g_stop_signal = sig;
    }
  }).detach();
}

// Whether any rank got a stop signal (every rank must take the same decision).
bool stop_requested(distributed::Comm& comm) {
  at::Tensor flag = at::full({1}, static_cast<double>(g_stop_signal.load()), at::kDouble);
  distributed::all_reduce_max(comm.world(), flag);
  return flag.item<double>() > 0;
}

double comm_seconds(const distributed::Comm& comm) {
  double s = 0;
  for (const auto* g : comm.groups()) s += g->stats().seconds;
  return s;
}

// Global chunk ids owned by this pipeline rank: stage, stage + pp, ... (interleaved).
std::vector<int> my_chunks(const Config& cfg, int stage) {
  const int v = virtual_stages_in_effect(cfg.parallel);
  std::vector<int> ids;
  for (int c = 0; c < v; ++c) ids.push_back(pipeline_parallel::global_chunk(c, stage, cfg.parallel.pp));
  return ids;
}

// Splits a step's wall time into compute, optimizer, exposed communication and bubble, from
// the clock and the communication layer's counters.
class StepClock {
 public:
  explicit StepClock(distributed::Comm& comm)
      : comm_(comm), start_(Clock::now()), comm_start_(comm_seconds(comm)), bytes_start_(bytes_so_far(comm)) {}
  void optimizer_starts() {
    optimizer_start_ = Clock::now();
    comm_at_optimizer_ = comm_seconds(comm_);
  }
  // ZeRO-1's parameter all-gather inside the optimizer counts as communication, not optimizer.
  void optimizer_ends() { optimizer_ = seconds_since(optimizer_start_) - (comm_seconds(comm_) - comm_at_optimizer_); }
  // `bubble`: the time this stage waited for its pipeline neighbours.
  metrics::StepTimes split(double bubble) const {
    metrics::StepTimes t;
    t.total = seconds_since(start_);
    t.bubble = bubble;
    t.comm = comm_seconds(comm_) - comm_start_ - bubble;
    t.optimizer = optimizer_;
    t.compute = std::max(0.0, t.total - t.comm - t.bubble - t.optimizer);
    return t;
  }
  metrics::StepBytes bytes() const {
    const metrics::StepBytes now = bytes_so_far(comm_);
    return {now.tp - bytes_start_.tp, now.pp - bytes_start_.pp, now.dp - bytes_start_.dp};
  }

 private:
  static metrics::StepBytes bytes_so_far(distributed::Comm& comm) {
    return {comm.tp().stats().bytes, comm.pp().stats().bytes, comm.dp().stats().bytes};
  }

  distributed::Comm& comm_;
  Clock::time_point start_, optimizer_start_;
  double comm_start_ = 0, comm_at_optimizer_ = 0, optimizer_ = 0;
  metrics::StepBytes bytes_start_;
};

// Everything a training run is made of, built once by run_training.
struct Run {
  const Config& cfg;
  distributed::Comm& comm;
  model::GPT& model;
  data_parallel::DataParallel& dp;
  data_parallel::ParameterGathers& gathers;  // ZeRO-3's parameter gathers (inert below it)
  optim::AdamW& optimizer;
  pipeline_parallel::Runner& runner;
  const data::BatchSource& source;
  double loss_scale;  // 1 / tokens in the global batch: the summed microbatch losses become the mean
};

// The training step, as the algorithm reads: this rank's data, forward and backward through the
// pipeline schedule, finished gradients, clipping and the optimizer (skipped, with the gradients
// dropped, when their norm is not finite).
metrics::StepRecord train_step(const Run& r, int step, const TestHooks& hooks) {
  StepClock clock(r.comm);
  const auto batch = data::local_microbatches(r.source, r.cfg, step, r.comm.coord().dp, r.comm.device());
  r.dp.zero_grad();
  r.gathers.begin_step();
  // DP reduction of each chunk starts during its last backward.
  const auto stats = r.runner.train_step(batch, r.loss_scale, [&](int chunk) { r.dp.enable_sync(chunk); });
  r.gathers.end_step();
  finalize_grads(r.dp, r.model.params(), r.comm);
  if (step == hooks.inject_nonfinite_step) r.dp.buckets().front().shard_grads()[0] = NAN;  // where a real fault strikes
  metrics::StepRecord record;
  record.step = step + 1;
  record.grad_norm = r.optimizer.grad_norm();
  record.lr = optim::learning_rate(r.cfg.optim, step, r.cfg.train.steps);
  clock.optimizer_starts();
  if (std::isfinite(record.grad_norm)) {
    r.optimizer.clip(record.grad_norm);
    r.optimizer.step(record.lr);
  } else {
    r.dp.zero_grad();  // parameters and moments stay untouched
  }
  clock.optimizer_ends();
  record.loss = global_loss(stats.loss, r.runner, r.comm);
  record.times = clock.split(stats.wait_seconds);
  record.bytes = clock.bytes();
  record.max_in_flight = stats.max_in_flight;
  record.buckets_overlapped = r.dp.launched_in_backward();
  record.buckets = static_cast<int>(r.dp.buckets().size());
  return record;
}

// Checkpoints: resuming, and when to save (on the interval, at --exit-after, on a stop signal,
// at the end).
class Checkpointer {
 public:
  Checkpointer(const Run& r, const TrainOptions& opts) : r_(r), opts_(opts) {}

  // Continues from checkpoint.dir/latest, at whatever layout this run has, when there is one and
  // resuming is allowed (leftovers of an interrupted save are removed first); else, on a fresh
  // start, the weights of checkpoint.init_from (step 0, fresh optimizer).
  checkpoint::TrainState resume_or_initialize() {
    checkpoint::TrainState state;
    const auto& c = r_.cfg.checkpoint;
    if (!c.dir.empty()) {
      if (r_.comm.rank() == 0) checkpoint::remove_partial_saves(c.dir);
      distributed::barrier(r_.comm.world());
      if (const auto dir = checkpoint::latest(c.dir); dir && opts_.resume) {
        const auto t0 = Clock::now();
        state = checkpoint::load(*dir, r_.cfg, r_.model.params(), r_.optimizer, r_.dp);
        if (r_.comm.rank() == 0) spdlog::info("resumed from {} (step {}) in {:.2f}s", *dir, state.step, seconds_since(t0));
      }
    }
    if (state.step == 0 && !c.init_from.empty()) {
      const auto t0 = Clock::now();
      checkpoint::load_weights(c.init_from, r_.cfg, r_.model.params(), &r_.dp);
      if (r_.comm.rank() == 0) spdlog::info("weights from {} in {:.2f}s", c.init_from, seconds_since(t0));
    }
    return state;
  }

  // After a step: saves on the interval; saves and returns true when the run must stop now
  // (--exit-after, or a stop signal on any rank).
  bool save_or_stop(checkpoint::TrainState& state) {
    const bool more = state.step < r_.cfg.train.steps;
    if (state.step == opts_.exit_after && more) {
      save(state, "--exit-after");
      return true;
    }
    if (stop_requested(r_.comm)) {
      save(state, "stop signal");
      if (r_.comm.rank() == 0) spdlog::warn("stopping after step {} on a signal", state.step);
      return true;
    }
    const int interval = r_.cfg.checkpoint.interval;
    if (interval > 0 && state.step % interval == 0 && more) save(state, "interval");
    return false;
  }

  void save(checkpoint::TrainState& state, const char* why) {
    if (r_.cfg.checkpoint.dir.empty()) return;
    const auto t0 = Clock::now();
    state.consumed_samples = static_cast<std::int64_t>(state.step) * r_.cfg.train.global_batch_size;
    const std::string dir = checkpoint::save(r_.cfg, r_.comm, r_.optimizer, r_.dp, state);
    if (r_.comm.rank() == 0) spdlog::info("checkpoint {} saved ({}) in {:.2f}s", dir, why, seconds_since(t0));
  }

 private:
  const Run& r_;
  const TrainOptions& opts_;
};

// Validation every train.eval_interval steps and after the last: the mean loss over
// train.eval_iters global batches of the validation source.
class Evaluator {
 public:
  explicit Evaluator(const Run& r)
      : r_(r), source_(r.cfg.train.eval_interval > 0 ? data::make_validation_source(r.cfg) : nullptr) {}

  void after_step(int step, metrics::StepLogger& logger) {
    if (!source_ || (step % r_.cfg.train.eval_interval != 0 && step != r_.cfg.train.steps)) return;
    double total = 0;
    r_.gathers.begin_step();
    for (int i = 0; i < r_.cfg.train.eval_iters; ++i)
      total += r_.runner.eval_step(data::local_microbatches(*source_, r_.cfg, i, r_.comm.coord().dp, r_.comm.device()),
                                   r_.loss_scale);
    r_.gathers.end_step();
    logger.eval(step, global_loss(total / r_.cfg.train.eval_iters, r_.runner, r_.comm));
  }

 private:
  const Run& r_;
  std::unique_ptr<data::BatchSource> source_;
};

// TestHooks::dump_dir: each step's loss and gradient norm (on the reporting rank), and at the
// end every rank's parameters and gradients.
class Dump {
 public:
  Dump(const TestHooks& hooks, const Run& r) : dir_(hooks.dump_dir), r_(r) {
    if (dir_.empty() || !reports_loss(r.runner, r.comm)) return;
    std::filesystem::create_directories(dir_);
    losses_.open(dir_ + "/losses.txt");
  }
  void step(const metrics::StepRecord& record) {
    if (losses_.is_open()) losses_ << std::setprecision(17) << record.loss << ' ' << record.grad_norm << '\n';
  }
  void end() {
    if (!dir_.empty())
      checkpoint::write_pieces(dir_ + "/rank" + std::to_string(r_.comm.rank()), checkpoint::dump_pieces(r_.dp));
  }

 private:
  std::string dir_;
  const Run& r_;
  std::ofstream losses_;
};

data_parallel::DataParallel::Options dp_options_of(const Config& cfg) {
  const OptimConfig& o = cfg.optim;
  data_parallel::DataParallel::Options d;
  d.bucket_mb = o.bucket_mb;
  d.zero = o.zero_stage;
  d.reduce_every_microbatch = cfg.parallel.pp == 1;
  d.main_grad_dtype = runtime::scalar_type(o.main_grad_dtype);
  d.bf16_reduction = o.grad_reduce_dtype == DType::Bf16;
  return d;
}

// Rank 0 prints the layout, the parameters and the memory the planner predicts, and warns when
// the pipeline bubble will dominate.
void log_startup(const Run& r, const distributed::JobEnv& job, metrics::StepLogger& logger) {
  const auto& p = r.cfg.parallel;
  const int microbatches = num_microbatches(r.cfg);
  const double bubble = pipeline_parallel::theoretical_bubble(p.pp, microbatches, virtual_stages_in_effect(p));
  const plan::Prediction predicted = plan::predict_own_layout(
      r.cfg, plan::local_memory(r.cfg, job.local_rank, job.local_world_size).value_or(plan::Hardware{}));
  logger.startup(r.model.params(), r.optimizer.state_bytes(), microbatches, bubble,
                 predicted.stage_totals[r.comm.coord().pp]);
  if (p.pp > 1 && microbatches < p.pp && r.comm.rank() == 0)
    spdlog::warn("{} microbatches for {} pipeline stages: the bubble ({:.0f}%) dominates; raise "
                 "train.global_batch_size or lower parallel.micro_batch_size",
                 microbatches, p.pp, 100 * bubble);
}

}  // namespace

bool reports_loss(const pipeline_parallel::Runner& runner, const distributed::Comm& comm) {
  return runner.holds_loss() && comm.coord().dp == 0 && comm.coord().cp == 0 && comm.coord().tp == 0;
}

double global_loss(double local, const pipeline_parallel::Runner& runner, distributed::Comm& comm) {
  at::Tensor loss = at::full({1}, local, at::kDouble);
  if (runner.holds_loss()) distributed::all_reduce(comm.dp(), loss);
  return loss.item<double>();
}

// runtime.backend "auto": NCCL when the ranks compute on CUDA and each has a GPU of its own
// (NCCL refuses two ranks on one device), else Gloo.
bool use_nccl(const Config& cfg, const distributed::JobEnv& job, const c10::Device& device) {
  if (cfg.runtime.backend == BackendKind::Nccl && !device.is_cuda())
    throw ConfigError("runtime.backend = nccl: NCCL needs CUDA tensors but this rank computes on the CPU; "
                      "fix: use runtime.device=cuda on a GPU machine, or runtime.backend=gloo");
  if (cfg.runtime.backend != BackendKind::Auto) return cfg.runtime.backend == BackendKind::Nccl;
  return device.is_cuda() && job.local_world_size <= runtime::gpu_count();
}

std::unique_ptr<distributed::Comm> join(const Config& cfg, const distributed::JobEnv& job) {
  at::set_num_threads(runtime::threads_per_rank(cfg.runtime, job.local_world_size));
  at::set_num_interop_threads(1);
  const auto& p = cfg.parallel;
  distributed::Grid grid(p.dp, p.pp, p.tp, kv_replicas_of(cfg.model, p.tp), p.cp);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.runtime.collective_timeout_s * 1000));
  const c10::Device device = runtime::choose_device(cfg.runtime.device, job.local_rank);
  runtime::use_device(device, cfg.runtime.tf32);
  runtime::check_precision(device, cfg.runtime.precision);
  // Context parallelism's attention calls the flash kernel directly, which CUDA has for bf16 alone.
  if (device.is_cuda() && p.cp > 1 && cfg.runtime.precision != DType::Bf16)
    throw ConfigError("parallel.cp = " + std::to_string(p.cp) + " on CUDA: its attention runs CUDA's flash kernel, "
                      "which has no fp32 form; fix: runtime.precision=bf16, or parallel.cp=1");
  runtime::use_cpu_bf16(cfg.runtime);
  if (job.rank == 0 && device.is_cpu() && cfg.runtime.precision == DType::Bf16)
    spdlog::info("bf16 products on this CPU: {} (runtime.cpu_bf16_matmul={}; {})",
                 ops::cpu_bf16_in_fp32() ? "bf16 storage, fp32 compute" : "LibTorch's bf16 kernels",
                 name_of(cfg.runtime.cpu_bf16_matmul), ops::cpu_bf16().why);
  return std::make_unique<distributed::Comm>(job, grid, timeout, device, use_nccl(cfg, job, device));
}

model::GPT build_model(const Config& cfg, distributed::Comm& comm) {
  const auto& p = cfg.parallel;
  const auto ranges = pipeline_parallel::partition_layers(cfg.model.layers, p.pp * virtual_stages_in_effect(p), p.stage_layers);
  return model::GPT(cfg, comm, my_chunks(cfg, comm.coord().pp), ranges);
}

// Setup frees much that no step asks for again: each parameter's fp32 draw, the parameters
// before they moved into their buckets, ZeRO-3's full buffers, a checkpoint's read buffers. The
// heap keeps what is freed (cli's keep_freed_memory), and what comes next is rarely of sizes that
// fit its holes (AdamW's shard-sized moments after the per-matrix parameters), so each phase that
// frees gives its memory back to the system before the next allocates. Measured at dp 4 ZeRO-3
// (h 768, 36 layers, bf16): 1825 MB peak before the first step with one release at the end of
// setup, 1476 MB with one after the model, one after the buckets and one at the end.
namespace {
void release_setup_memory() { malloc_trim(0); }
}  // namespace

int run_training(const Config& cfg, const distributed::JobEnv& job, const TrainOptions& opts) {
  watch_stop_signals();  // before any thread of the run exists
  const auto joined = join(cfg, job);
  distributed::Comm& comm = *joined;
  // Dropout masks: one seed per TP group (runtime/seed.hpp says why).
  runtime::seed_dropout(cfg.runtime.seed, job.rank / cfg.parallel.tp);
  model::GPT model = build_model(cfg, comm);
  release_setup_memory();
  data_parallel::DataParallel dp(model.params(), comm, dp_options_of(cfg));
  release_setup_memory();
  data_parallel::ParameterGathers gathers(dp, model.units(), comm, /*per_unit=*/cfg.parallel.pp == 1,
                                          cfg.parallel.fsdp_reshard_after_forward);
  if (gathers.per_unit()) model.set_unit_hooks(&gathers);
  optim::AdamW optimizer(cfg.optim, dp, comm);
  pipeline_parallel::Runner runner(cfg, model, comm);
  const auto source = data::make_source(cfg);
  const double tokens_per_step = static_cast<double>(cfg.train.global_batch_size) * cfg.model.seq_len;
  const Run run{cfg, comm, model, dp, gathers, optimizer, runner, *source, 1.0 / tokens_per_step};

  metrics::StepLogger logger(cfg, comm, reports_loss(runner, comm));
  log_startup(run, job, logger);
  Checkpointer checkpoints(run, opts);
  checkpoint::TrainState state = checkpoints.resume_or_initialize();
  release_setup_memory();
  logger.peak_memory("before the first step");
  Evaluator evaluator(run);
  Dump dump(opts.hooks, run);
  g_loop_started = true;

  const int first_step = state.step;
  for (int step = state.step; step < cfg.train.steps; ++step) {
    metrics::StepRecord record = train_step(run, step, opts.hooks);
    if (!std::isfinite(record.grad_norm)) {
      if (cfg.optim.nonfinite == NonFinite::Abort) {
        spdlog::error("step {}: gradient norm is {}; aborting (optim.nonfinite=abort)", step + 1, record.grad_norm);
        return 3;
      }
      ++state.skipped;
      if (comm.rank() == 0) spdlog::warn("step {}: gradient norm is {}; step skipped", step + 1, record.grad_norm);
    }
    record.skipped = state.skipped;
    if (step == first_step) logger.peak_memory("after the first step");
    logger.step(record);
    dump.step(record);
    state.step = step + 1;
    evaluator.after_step(state.step, logger);
    if (checkpoints.save_or_stop(state)) return 0;
  }
  logger.peak_memory("at the end");
  checkpoints.save(state, "end of training");
  dump.end();
  distributed::barrier(comm.world());
  return 0;
}

}  // namespace trainer
