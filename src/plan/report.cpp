#include "plan/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace trainer::plan {
namespace {

// Members in the order written: layout first, then memory, time and throughput.
using Json = nlohmann::ordered_json;

double gb(double bytes) { return bytes / 1e9; }

// The best `top` that fit and the best `top` that do not (both in search order).
std::pair<std::vector<const Prediction*>, std::vector<const Prediction*>> best(const Report& r) {
  std::vector<const Prediction*> fit, no_fit;
  for (const auto& p : r.predictions) {
    auto& list = p.fits ? fit : no_fit;
    if (static_cast<int>(list.size()) < r.top) list.push_back(&p);
  }
  return {fit, no_fit};
}

std::string why_not(const Prediction& p) {
  const auto [term, bytes] = p.memory.biggest();
  return fmt::format("needs {:.1f} GB > {:.1f} GB; biggest term {} ({:.1f} GB)", gb(p.memory.total()), gb(p.available),
                     term, gb(bytes));
}

// {"name": value, ...} of `terms`, each divided by `unit`.
Json json_terms(const std::vector<std::pair<const char*, double>>& terms, double unit) {
  Json out = Json::object();
  for (const auto& [name, value] : terms) out[name] = value / unit;
  return out;
}

Json json_of(const Prediction& p) {
  const Layout& l = p.layout;
  const Memory& m = p.memory;
  const Time& t = p.time;
  Json memory = json_terms(m.terms(), 1e9);
  memory["total"] = gb(m.total());
  memory["available"] = gb(p.available);
  memory["stage"] = m.stage;
  Json seconds = json_terms(t.terms(), 1);
  seconds["step"] = t.step();
  return {{"dp", l.dp},
          {"pp", l.pp},
          {"tp", l.tp},
          {"cp", l.cp},
          {"virtual_stages", l.virtual_stages},
          {"micro_batch_size", l.micro_batch_size},
          {"schedule", name_of(l.schedule)},
          {"recompute", name_of(l.recompute)},
          {"zero_stage", static_cast<int>(l.zero_stage)},
          {"sequence_parallel", l.sequence_parallel},
          {"fsdp_reshard_after_forward", l.reshard_after_forward},
          {"memory_gb", memory},
          {"fits", p.fits},
          {"time_s", seconds},
          {"tokens_per_s", p.tokens_per_s},
          {"model_tflops", p.model_tflops},
          {"hardware_tflops", p.hardware_tflops},
          {"mfu", p.mfu}};
}

// "name value  name value ..." of `terms`, each divided by `unit`.
std::string text_terms(const std::vector<std::pair<const char*, double>>& terms, double unit, const char* format) {
  std::string out;
  for (const auto& [name, value] : terms) out += fmt::format(fmt::runtime(std::string("  {} ") + format), name, value / unit);
  return out;
}

}  // namespace

std::string as_table(const Report& r) {
  const auto [fit, no_fit] = best(r);
  std::string out = fmt::format("{} on {} x {}, global batch {}: {} layouts considered, {} fit\n", r.model, r.gpus,
                                r.hardware->name, r.global_batch_size, r.predictions.size(),
                                std::count_if(r.predictions.begin(), r.predictions.end(), [](const auto& p) { return p.fits; }));
  out += fmt::format("{:<40} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>6}  {}\n", "layout", "mem GB", "step s",
                     "compute", "comm", "bubble", "tok/s", "TFLOP/s", "MFU", "memory: weights+grads+optim / activ+logits");
  for (const Prediction* p : fit) {
    const Memory& m = p->memory;
    const Time& t = p->time;
    out += fmt::format("{:<40} {:>8.1f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>7.0f} {:>8.1f} {:>5.1f}%  {:.1f} / {:.1f}\n",
                       describe(p->layout), gb(m.total()), t.step(), t.compute, t.tp_comm + t.cp_comm + t.pp_comm + t.dp_exposed,
                       t.bubble, p->tokens_per_s, p->model_tflops, 100 * p->mfu, gb(m.weights + m.gradients + m.optimizer),
                       gb(m.activations + m.logits));
  }
  if (fit.empty()) out += "no layout fits\n";
  if (!no_fit.empty()) {
    out += "faster layouts that do not fit:\n";
    for (const Prediction* p : no_fit) {
      if (!fit.empty() && p->tokens_per_s < fit.front()->tokens_per_s) break;
      out += fmt::format("  {:<40} {}\n", describe(p->layout), why_not(*p));
    }
  }
  return out;
}

std::string as_json(const Report& r) {
  const auto [fit, no_fit] = best(r);
  const Hardware& h = *r.hardware;
  Json layouts = Json::array(), not_fitting = Json::array();
  for (const Prediction* p : fit) layouts.push_back(json_of(*p));
  for (const Prediction* p : no_fit) {
    Json entry = {{"why", why_not(*p)}};
    entry.update(json_of(*p));
    not_fitting.push_back(entry);
  }
  const Json out = {{"model", r.model},
                    {"gpus", r.gpus},
                    {"global_batch_size", r.global_batch_size},
                    {"hardware",
                     {{"name", h.name},
                      {"memory_gb", h.memory_gb},
                      {"bf16_tflops", h.bf16_tflops},
                      {"fp32_tflops", h.fp32_tflops},
                      {"memory_gbs", h.memory_gbs},
                      {"intra_gbs", h.intra_gbs},
                      {"inter_gbs", h.inter_gbs},
                      {"intra_latency_us", h.intra_latency_us},
                      {"inter_latency_us", h.inter_latency_us}}},
                    {"considered", r.predictions.size()},
                    {"layouts", layouts},
                    {"not_fitting", not_fitting}};
  return out.dump() + "\n";
}

std::string breakdown(const Prediction& p) {
  const Memory& m = p.memory;
  const Time& t = p.time;
  return fmt::format(
      "layout {}\n"
      "memory per rank (most loaded: pipeline stage {}), GB:\n"
      "{}\n"
      "  total {:.3f} of {:.3f} available: {}\n"
      "step time, s:{}  = {:.4f}\n"
      "tokens/s {:.0f}  model TFLOP/s per device {:.3f}  hardware TFLOP/s {:.3f}  MFU {:.1f}%\n",
      describe(p.layout), m.stage, text_terms(m.terms(), 1e9, "{:.3f}"), gb(m.total()), gb(p.available),
      p.fits ? "fits" : "does NOT fit", text_terms(t.terms(), 1, "{:.4f}").substr(1), t.step(), p.tokens_per_s, p.model_tflops,
      p.hardware_tflops, 100 * p.mfu);
}

}  // namespace trainer::plan
