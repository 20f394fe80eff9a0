#include "checkpoint/export.hpp"

#include <ATen/ATen.h>

#include <filesystem>
#include <map>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/hf.hpp"
#include "checkpoint/safetensors.hpp"
#include "checkpoint/shards.hpp"
#include "config/config.hpp"

namespace trainer::checkpoint {
namespace {

std::string with_replaced(std::string name, const std::string& from, const std::string& to) {
  return name.replace(name.find(from), from.size(), to);
}

// trainer's names, the key/value rows split into keys and values, the vocab unpadded.
std::vector<std::pair<std::string, at::Tensor>> trainer_tensors(const std::map<std::string, at::Tensor>& full,
                                                                 const ModelConfig& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, t] : full) {
    if (name.find("attn.kv.") != std::string::npos) {
      const auto [k, v] = split_kv(t, kv_heads_of(m));
      out.emplace_back(with_replaced(name, "attn.kv.", "attn.k."), k);
      out.emplace_back(with_replaced(name, "attn.kv.", "attn.v."), v);
    } else {
      const bool vocab = name == "embedding.weight" || name == "head.weight";
      out.emplace_back(name, (vocab ? t.narrow(0, 0, m.vocab_size) : t).contiguous());
    }
  }
  return out;
}

}  // namespace

std::string resolve_checkpoint(const std::string& dir) {
  if (std::filesystem::exists(dir + "/meta.yaml")) return dir;
  if (auto step = latest(dir)) return *step;
  throw BadInput("no checkpoint at " + dir + ": neither a step directory (meta.yaml) nor a checkpoint.dir (latest)");
}

int export_model(const std::string& checkpoint, const std::string& output, ExportFormat format, double max_shard_mb,
                 at::ScalarType dtype) {
  const std::string dir = resolve_checkpoint(checkpoint);
  const Config cfg = load_config(dir + "/config.yaml");
  std::set<std::string> names;
  for (const auto& p : read_all_pieces(dir))
    if (p.name.find(".exp_avg") == std::string::npos) names.insert(p.name);
  const auto full = load_full(dir, cfg, names);
  if (format == ExportFormat::HuggingFace)
    return write_hf(output, cfg.model, full, static_cast<std::int64_t>(max_shard_mb * 1024 * 1024), dtype);
  const auto tensors = hf_exportable(cfg.model) ? to_hf_tensors(cfg.model, full) : trainer_tensors(full, cfg.model);
  write_safetensors(output, tensors, dtype);
  return static_cast<int>(tensors.size());
}

}  // namespace trainer::checkpoint
