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

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/shards.hpp"
#include "data/batches.hpp"
#include "distributed/comm.hpp"
#include "data_parallel/data_parallel.hpp"
#include "train/finalize_grads.hpp"
#include "metrics/metrics.hpp"
#include "model/flops.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "pipeline_parallel/runner.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "plan/preflight.hpp"
#include "runtime/device.hpp"

namespace trainer {
namespace {

using runtime::Clock;
using runtime::seconds_since;

// SIGTERM / SIGUSR1 (Slurm's warning before a time limit): checkpoint at the end of the step,
// then exit cleanly.
std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal = sig; }

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

// Mean validation loss over train.eval_iters global batches (known on the last stage).
double evaluate(const Config& cfg, distributed::Comm& comm, pipeline_parallel::Runner& runner,
                const data::BatchSource& source, double loss_scale) {
  double total = 0;
  for (int i = 0; i < cfg.train.eval_iters; ++i)
    total += runner.eval_step(data::local_microbatches(source, cfg, i, comm.coord().dp, comm.device()), loss_scale);
  at::Tensor loss = at::full({1}, total / cfg.train.eval_iters, at::kDouble);
  if (runner.holds_loss()) distributed::all_reduce(comm.dp(), loss);
  return loss.item<double>();
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

// The objects a checkpoint saves and restores.
struct Checkpointed {
  const Config& cfg;
  distributed::Comm& comm;
  model::GPT& model;
  optim::AdamW& optimizer;
  data_parallel::DataParallel& dp;
};

// Continues from checkpoint.dir/latest, at whatever layout this run has, when there is one and
// `allowed`; leftovers of an interrupted save are removed first.
checkpoint::TrainState resume(const Checkpointed& c, bool allowed) {
  checkpoint::TrainState state;
  if (c.cfg.checkpoint.dir.empty()) return state;
  if (c.comm.rank() == 0) checkpoint::remove_partial_saves(c.cfg.checkpoint.dir);
  distributed::barrier(c.comm.world());
  const auto dir = checkpoint::latest(c.cfg.checkpoint.dir);
  if (!dir || !allowed) return state;
  const auto t0 = Clock::now();
  state = checkpoint::load(*dir, c.cfg, c.model.params(), c.optimizer, c.dp);
  if (c.comm.rank() == 0) spdlog::info("resumed from {} (step {}) in {:.2f}s", *dir, state.step, seconds_since(t0));
  return state;
}

// checkpoint.init_from, on a fresh start: the weights only (step 0, fresh optimizer).
void initialize_from(const Config& cfg, distributed::Comm& comm, model::GPT& model, data_parallel::DataParallel& dp) {
  const auto t0 = Clock::now();
  checkpoint::load_weights(cfg.checkpoint.init_from, cfg, model.params(), &dp);
  if (comm.rank() == 0) spdlog::info("weights from {} in {:.2f}s", cfg.checkpoint.init_from, seconds_since(t0));
}

void save(const Checkpointed& c, checkpoint::TrainState& state, const char* why) {
  if (c.cfg.checkpoint.dir.empty()) return;
  const auto t0 = Clock::now();
  state.consumed_samples = static_cast<std::int64_t>(state.step) * c.cfg.train.global_batch_size;
  const std::string dir = checkpoint::save(c.cfg, c.comm, c.optimizer, c.dp, state);
  if (c.comm.rank() == 0) spdlog::info("checkpoint {} saved ({}) in {:.2f}s", dir, why, seconds_since(t0));
}

// Test-only faults, injected where a real one would strike (TrainOptions).
void inject_test_faults(const TrainOptions& opts, int step, data_parallel::DataParallel& dp) {
  if (step == opts.inject_nonfinite_step) dp.buckets().front().grads[0] = NAN;
}

}  // namespace


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
  distributed::Grid grid(p.dp, p.pp, p.tp, kv_replicas_of(cfg.model, p.tp));
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.runtime.collective_timeout_s * 1000));
  const c10::Device device = runtime::choose_device(cfg.runtime.device, job.local_rank);
  runtime::use_device(device, cfg.runtime.tf32);
  runtime::check_precision(device, cfg.runtime.precision);
  // Dropout draws from the default generators: seeded, a run repeats itself. The TP ranks of one
  // (dp, pp) share a seed: their replicated activations (the residual stream without sequence
  // parallelism) must drop the same elements, or the replicas of norms and biases drift apart.
  // The masks still depend on the layout, so layouts agree only without dropout.
  at::manual_seed(static_cast<uint64_t>(cfg.runtime.seed) + static_cast<uint64_t>(job.rank / p.tp));
  return std::make_unique<distributed::Comm>(job, grid, timeout, device, use_nccl(cfg, job, device));
}

model::GPT build_model(const Config& cfg, distributed::Comm& comm) {
  const auto& p = cfg.parallel;
  const auto ranges = pipeline_parallel::partition_layers(cfg.model.layers, p.pp * virtual_stages_in_effect(p), p.stage_layers);
  return model::GPT(cfg, comm, my_chunks(cfg, comm.coord().pp), ranges);
}

int run_training(const Config& cfg, const distributed::JobEnv& job, const TrainOptions& opts) {
  const auto& p = cfg.parallel;
  const auto joined = join(cfg, job);
  distributed::Comm& comm = *joined;
  const distributed::Coord me = comm.coord();
  const int v = virtual_stages_in_effect(p);
  model::GPT model = build_model(cfg, comm);
  data_parallel::DataParallel::Options dp_options;
  dp_options.bucket_mb = cfg.optim.bucket_mb;
  dp_options.zero1 = cfg.optim.zero_stage == 1;
  dp_options.main_grad_dtype = runtime::scalar_type(cfg.optim.main_grad_dtype);
  dp_options.bf16_reduction = cfg.optim.grad_reduce_dtype == DType::Bf16;
  data_parallel::DataParallel dp(model.params(), comm, dp_options);
  optim::AdamW optimizer(cfg.optim, dp, comm);
  pipeline_parallel::Runner runner(cfg, model, comm);
  auto source = data::make_source(cfg);
  // Validation samples: a held-out stream (synthetic) or data.valid_path.
  auto valid_source = cfg.train.eval_interval > 0 ? data::make_validation_source(cfg) : nullptr;

  const int microbatches = num_microbatches(cfg);
  const double tokens_per_step = static_cast<double>(cfg.train.global_batch_size) * cfg.model.seq_len;
  const double loss_scale = 1.0 / tokens_per_step;
  metrics::StepLogger logger(cfg, comm, runner.holds_loss() && me.dp == 0 && me.tp == 0);
  const plan::Prediction predicted = plan::predict_own_layout(
      cfg, plan::local_memory(cfg, job.local_rank, job.local_world_size).value_or(plan::Hardware{}));
  logger.startup(model.params(), optimizer.state_bytes(), microbatches, predicted.stage_totals[me.pp]);
  if (p.pp > 1 && microbatches < p.pp && comm.rank() == 0)
    spdlog::warn("{} microbatches for {} pipeline stages: the bubble ({:.0f}%) dominates; raise "
                 "train.global_batch_size or lower parallel.micro_batch_size",
                 microbatches, p.pp, 100 * pipeline_parallel::theoretical_bubble(p.pp, microbatches, v));

  const Checkpointed checkpointed{cfg, comm, model, optimizer, dp};
  checkpoint::TrainState state = resume(checkpointed, opts.resume);
  if (state.step == 0 && !cfg.checkpoint.init_from.empty()) initialize_from(cfg, comm, model, dp);
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);

  std::ofstream losses;
  if (!opts.dump_dir.empty() && runner.holds_loss() && me.dp == 0 && me.tp == 0) {
    std::filesystem::create_directories(opts.dump_dir);
    losses.open(opts.dump_dir + "/losses.txt");
  }
  const int first_step = state.step;
  for (int step = state.step; step < cfg.train.steps; ++step) {
    StepClock clock(comm);
    // 1. this rank's share of the global batch
    auto batch = data::local_microbatches(*source, cfg, step, me.dp, comm.device());
    // 2. forward and backward through the pipeline; DP reduction starts during the last backward
    dp.zero_grad();
    auto stats = runner.train_step(batch, loss_scale, [&](int chunk) { dp.enable_sync(chunk); });
    // 3. finish the gradients: DP reduction, tied embedding copies, sequence-parallel sums
    finalize_grads(dp, model.params(), comm);
    inject_test_faults(opts, step, dp);
    // 4. clip and step, unless the gradients are not finite
    const double norm = optimizer.grad_norm();
    const double lr = optim::learning_rate(cfg.optim, step, cfg.train.steps);
    clock.optimizer_starts();
    if (std::isfinite(norm)) {
      optimizer.clip(norm);
      optimizer.step(lr);
    } else {
      ++state.skipped;
      dp.zero_grad();  // drop the poisoned gradients; parameters and moments are untouched
      if (cfg.optim.nonfinite == NonFinite::Abort) {
        spdlog::error("step {}: gradient norm is {}; aborting (optim.nonfinite=abort)", step + 1, norm);
        return 3;
      }
      if (comm.rank() == 0) spdlog::warn("step {}: gradient norm is {}; step skipped", step + 1, norm);
    }
    clock.optimizer_ends();
    // 5. log: the loss lives on the last stage; sum the DP shares there
    at::Tensor loss = at::full({1}, stats.loss, at::kDouble);
    if (runner.holds_loss()) distributed::all_reduce(comm.dp(), loss);
    metrics::StepRecord record;
    record.step = step + 1;
    record.loss = loss.item<double>();
    record.lr = lr;
    record.grad_norm = norm;
    record.times = clock.split(stats.wait_seconds);
    record.bytes = clock.bytes();
    record.skipped = state.skipped;
    record.max_in_flight = stats.max_in_flight;
    record.buckets_overlapped = dp.launched_in_backward();
    record.buckets = static_cast<int>(dp.buckets().size());
    if (step == first_step) logger.peak_memory("after the first step");
    logger.step(record);
    if (losses.is_open()) losses << std::setprecision(17) << record.loss << ' ' << norm << '\n';
    state.step = step + 1;
    if (valid_source && (state.step % cfg.train.eval_interval == 0 || state.step == cfg.train.steps)) {
      const double eval_loss = evaluate(cfg, comm, runner, *valid_source, loss_scale);
      logger.eval(state.step, eval_loss);
    }
    // 6. checkpoint on schedule, or on a stop signal (then leave cleanly)
    if (state.step == opts.exit_after && state.step < cfg.train.steps) {
      save(checkpointed, state, "--exit-after");
      return 0;
    }
    if (stop_requested(comm)) {
      save(checkpointed, state, "stop signal");
      if (comm.rank() == 0) spdlog::warn("stopping after step {} on a signal", state.step);
      return 0;
    }
    if (cfg.checkpoint.interval > 0 && state.step % cfg.checkpoint.interval == 0 && state.step < cfg.train.steps)
      save(checkpointed, state, "interval");
  }
  logger.peak_memory("at the end");
  save(checkpointed, state, "end of training");
  if (!opts.dump_dir.empty())
    checkpoint::write_pieces(opts.dump_dir + "/rank" + std::to_string(comm.rank()),
                             checkpoint::dump_pieces(model.params(), dp));
  distributed::barrier(comm.world());
  return 0;
}

}  // namespace trainer
