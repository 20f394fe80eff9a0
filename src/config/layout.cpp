#include "config/layout.hpp"

#include <sstream>

namespace trainer {

Layout layout_of(const Config& cfg) {
  const auto& p = cfg.parallel;
  return {p.dp, p.pp, p.tp, p.cp, virtual_stages_in_effect(p), p.micro_batch_size, p.schedule, p.recompute,
          cfg.optim.zero_stage, p.sequence_parallel && p.tp > 1, p.fsdp_reshard_after_forward};
}

Config with_layout(Config cfg, const Layout& l) {
  auto& p = cfg.parallel;
  // Explicit layers per stage belong to the config's own number of chunks.
  if (l.pp * l.virtual_stages != p.pp * virtual_stages_in_effect(p)) p.stage_layers.clear();
  p.dp = l.dp;
  p.pp = l.pp;
  p.tp = l.tp;
  p.cp = l.cp;
  p.virtual_stages = l.virtual_stages;
  p.micro_batch_size = l.micro_batch_size;
  p.schedule = l.schedule;
  p.recompute = l.recompute;
  p.sequence_parallel = l.sequence_parallel;
  p.fsdp_reshard_after_forward = l.reshard_after_forward;
  cfg.optim.zero_stage = l.zero_stage;
  return cfg;
}

Layout parse_grid(const std::string& text, const std::string& option, const Config& base) {
  Layout l = layout_of(base);
  l.sequence_parallel = base.parallel.sequence_parallel;
  char x1 = 0, x2 = 0, x3 = 0;
  std::istringstream s(text);
  bool ok = (s >> l.dp >> x1 >> l.pp >> x2 >> l.tp) && x1 == 'x' && x2 == 'x';
  if (ok && !s.eof()) ok = (s >> x3 >> l.cp) && x3 == 'x';
  if (!ok || !s.eof())
    throw ConfigError(option + ": '" + text + "' is not DPxPPxTP or DPxPPxTPxCP, e.g. 2x2x2 or 2x1x2x4");
  return l;
}

std::string grid_name(const Layout& l) {
  const std::string cp = l.cp > 1 ? "x" + std::to_string(l.cp) : "";
  return std::to_string(l.dp) + "x" + std::to_string(l.pp) + "x" + std::to_string(l.tp) + cp;
}

std::string describe(const Layout& l) {
  const std::string cp = l.cp > 1 ? " cp" + std::to_string(l.cp) : "";
  std::string s = "dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " tp" + std::to_string(l.tp) + cp + " v" +
                  std::to_string(l.virtual_stages) + " mb" + std::to_string(l.micro_batch_size) + " " +
                  name_of(l.schedule) + " " + name_of(l.recompute);
  if (l.zero_stage != ZeroStage::None) s += " zero" + name_of(l.zero_stage);
  if (l.zero_stage == ZeroStage::Parameters && l.pp == 1 && !l.reshard_after_forward) s += " keep-gathered";
  if (l.sequence_parallel) s += " sp";
  return s;
}

}  // namespace trainer
