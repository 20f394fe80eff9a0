#include "metrics/metrics.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <ATen/ATen.h>

#include <cmath>
#include <fmt/format.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/flops.hpp"
#include "runtime/device.hpp"

namespace trainer::metrics {

Throughput throughput(const ModelConfig& m, double tokens_per_step, double step_seconds,
                      int world_size, double peak_tflops) {
  Throughput t;
  if (step_seconds <= 0) return t;
  t.tokens_per_s = tokens_per_step / step_seconds;
  t.tflops_per_rank = model::flops_per_token(m) * t.tokens_per_s / world_size / 1e12;
  t.mfu = peak_tflops > 0 ? t.tflops_per_rank / peak_tflops : 0;
  return t;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // Linux reports KiB
}

StepLogger::StepLogger(const Config& cfg, distributed::Comm& comm, bool prints)
    : cfg_(cfg), comm_(comm), prints_(prints) {
  if (prints_ && !cfg.logging.dir.empty()) {
    std::filesystem::create_directories(cfg.logging.dir);
    jsonl_.open(cfg.logging.dir + "/metrics.jsonl", std::ios::app);
    tensorboard_.emplace(cfg.logging.dir);
  }
}

namespace {

// One value from every rank, gathered on all of them.
std::vector<double> from_every_rank(distributed::Comm& comm, double value) {
  at::Tensor all = at::zeros({comm.grid().world()}, at::kDouble);
  all[comm.rank()] = value;
  distributed::all_reduce(comm.world(), all);
  return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
}

std::string joined(const std::vector<double>& values, double scale, const char* format) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? " " : "") + fmt::format(fmt::runtime(format), values[i] * scale);
  return out;
}

}  // namespace

void StepLogger::startup(const std::vector<model::Param>& params, std::int64_t optimizer_bytes,
                         int microbatches, double bubble, double predicted_bytes) {
  std::int64_t local = 0;
  for (const auto& p : params) local += p.tensor.numel();
  const auto counts = from_every_rank(comm_, static_cast<double>(local));
  const auto optimizer = from_every_rank(comm_, static_cast<double>(optimizer_bytes));
  const auto predicted = from_every_rank(comm_, predicted_bytes / 1e6);
  if (comm_.rank() != 0) return;
  const auto& p = cfg_.parallel;
  spdlog::info("layout dp={} pp={} tp={} cp={} ({} processes), schedule {} (theoretical bubble {:.1f}%)",
               p.dp, p.pp, p.tp, p.cp, comm_.grid().world(), name_of(p.schedule), 100 * bubble);
  if (comm_.grid().world() <= 16) {
    std::ostringstream map;
    for (int r = 0; r < comm_.grid().world(); ++r) {
      auto c = comm_.grid().coord_of(r);
      map << " r" << r << "=(" << c.dp << "," << c.pp << "," << c.tp << "," << c.cp << ")";
    }
    spdlog::info("rank -> (dp,pp,tp,cp):{}", map.str());
  }
  spdlog::info("parameters {} (model), per rank: {}", model::count_parameters(cfg_.model), joined(counts, 1, "{:.0f}"));
  spdlog::info("optimizer state per rank (MB): {}", joined(optimizer, 1e-6, "{:.2f}"));
  spdlog::info("predicted peak memory per rank (MB, trainer plan's model, process included): {}",
               joined(predicted, 1, "{:.0f}"));
  spdlog::info("global batch {} samples = {} microbatches x {} x dp {}, {} tokens/step",
               cfg_.train.global_batch_size, microbatches, p.micro_batch_size, p.dp,
               cfg_.train.global_batch_size * cfg_.model.seq_len);
}

void StepLogger::peak_memory(const std::string& when) {
  const auto peak = from_every_rank(comm_, peak_rss_mb());
  if (comm_.rank() == 0)
    spdlog::info("peak memory per rank {} (MB, RSS incl. ~{:.0f} MB of the process and LibTorch's libraries): {}", when,
                 cfg_.plan.cpu_process_mb, joined(peak, 1, "{:.0f}"));
  if (!comm_.device().is_cuda()) return;
  const auto gpu = runtime::device_memory(comm_.device());
  const auto allocated = from_every_rank(comm_, gpu.allocated_peak_mb);
  const auto reserved = from_every_rank(comm_, gpu.reserved_peak_mb);
  if (comm_.rank() == 0)
    spdlog::info("peak GPU memory per rank {} (MB, max allocated / max reserved): {} / {}", when,
                 joined(allocated, 1, "{:.0f}"), joined(reserved, 1, "{:.0f}"));
}

void StepLogger::step(const StepRecord& r) {
  const StepTimes& t = r.times;
  const int step = r.step;
  elapsed_ += t.total;
  if (!prints_ || (step % cfg_.logging.interval != 0 && step != cfg_.train.steps)) return;
  const double tokens = static_cast<double>(cfg_.train.global_batch_size) * cfg_.model.seq_len;
  const Throughput th = throughput(cfg_.model, tokens, t.total, comm_.grid().world(), cfg_.runtime.peak_tflops);
  const double eta = elapsed_ / step * (cfg_.train.steps - step);
  auto pct = [&](double x) { return t.total > 0 ? 100.0 * x / t.total : 0.0; };
  const runtime::DeviceMemory gpu = runtime::device_memory(comm_.device());  // zeros on the CPU
  spdlog::info("step {}/{} | loss {:.6f} | lr {:.3e} | grad_norm {:.4f} | {:.0f} tok/s | {:.3f} TFLOP/s/rank{} | "
               "step {:.3f}s (compute {:.0f}% optimizer {:.0f}% comm {:.0f}% bubble {:.0f}%) | rss {:.0f} MB{} | skipped {} | eta {:.0f}s",
               step, cfg_.train.steps, r.loss, r.lr, r.grad_norm, th.tokens_per_s, th.tflops_per_rank,
               th.mfu > 0 ? fmt::format(" | MFU {:.1f}%", 100 * th.mfu) : std::string(), t.total,
               pct(t.compute), pct(t.optimizer), pct(t.comm), pct(t.bubble), peak_rss_mb(),
               comm_.device().is_cuda() ? fmt::format(" | gpu {:.0f}/{:.0f} MB", gpu.allocated_peak_mb, gpu.reserved_peak_mb)
                                        : std::string(),
               r.skipped, eta);
  // The figures both files carry (metrics.jsonl writes the counts among them as integers).
  std::vector<std::pair<const char*, double>> figures = {
      {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"tokens_per_s", th.tokens_per_s},
      {"tflops_per_rank", th.tflops_per_rank}, {"mfu", th.mfu}, {"step_s", t.total},
      {"compute_s", t.compute}, {"optimizer_s", t.optimizer}, {"comm_s", t.comm}, {"bubble_s", t.bubble},
      {"peak_rss_mb", peak_rss_mb()}, {"skipped", static_cast<double>(r.skipped)},
      {"tp_bytes", static_cast<double>(r.bytes.tp)}, {"pp_bytes", static_cast<double>(r.bytes.pp)},
      {"dp_bytes", static_cast<double>(r.bytes.dp)}};
  if (comm_.device().is_cuda()) {
    figures.emplace_back("gpu_max_allocated_mb", gpu.allocated_peak_mb);
    figures.emplace_back("gpu_max_reserved_mb", gpu.reserved_peak_mb);
  }
  if (jsonl_.is_open()) {
    nlohmann::ordered_json line = {{"step", step}};
    for (const auto& [name, value] : figures) line[name] = value;  // a non-finite double dumps as null
    line["skipped"] = r.skipped;
    line["tp_bytes"] = r.bytes.tp;
    line["pp_bytes"] = r.bytes.pp;
    line["dp_bytes"] = r.bytes.dp;
    line["max_in_flight"] = r.max_in_flight;
    line["buckets_overlapped"] = r.buckets_overlapped;
    line["buckets"] = r.buckets;
    jsonl_ << line.dump() << "\n";
    jsonl_.flush();
  }
  if (tensorboard_)
    for (const auto& [name, value] : figures) tensorboard_->add_scalar(std::string("train/") + name, value, step);
}

void StepLogger::eval(int step, double loss) {
  if (!prints_) return;
  const double perplexity = std::exp(loss);
  spdlog::info("eval step {}/{} | loss {:.6f} | perplexity {:.3f}", step, cfg_.train.steps, loss, perplexity);
  if (jsonl_.is_open()) {
    jsonl_ << nlohmann::ordered_json{{"step", step}, {"eval_loss", loss}, {"eval_ppl", perplexity}}.dump() << "\n";
    jsonl_.flush();
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("eval/loss", loss, step);
    tensorboard_->add_scalar("eval/perplexity", perplexity, step);
  }
}

}  // namespace trainer::metrics
