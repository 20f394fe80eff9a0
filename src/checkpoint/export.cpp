#include "checkpoint/export.hpp"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/shards.hpp"
#include "config/config.hpp"

namespace trainer::checkpoint {
namespace {

bool gpt2_style(const ModelConfig& m) {
  return m.positions == Positions::Learned && m.norm == Norm::LayerNorm && m.mlp == Mlp::Gelu && m.bias && m.tied_embeddings;
}

// trainer stores QKV rows per head ([head][q|k|v][d]); others expect [q|k|v][head][d].
at::Tensor qkv_standard(const at::Tensor& t, int heads) {
  auto rest = t.sizes().slice(1).vec();
  std::vector<int64_t> shape = {heads, 3, -1};
  shape.insert(shape.end(), rest.begin(), rest.end());
  std::vector<int64_t> flat = {t.size(0)};
  flat.insert(flat.end(), rest.begin(), rest.end());
  return t.reshape(shape).transpose(0, 1).reshape(flat);
}

// (name, tensor) pairs in the exported naming.
std::vector<std::pair<std::string, at::Tensor>> exported(const std::map<std::string, at::Tensor>& full,
                                                         const ModelConfig& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const bool hf = gpt2_style(m);
  for (const auto& [name, t0] : full) {
    at::Tensor t = t0;
    if (name == "embedding.weight" || name == "head.weight") t = t.narrow(0, 0, m.vocab_size);
    if (name.find("attn.qkv") != std::string::npos) t = qkv_standard(t, m.heads);
    if (!hf) {
      out.emplace_back(name, t.contiguous());
      continue;
    }
    // Hugging Face GPT-2 names; its Conv1D layers store weights as [in, out].
    std::string n = name;
    auto replace = [&](const std::string& a, const std::string& b) {
      auto at = n.find(a);
      if (at != std::string::npos) n.replace(at, a.size(), b);
    };
    const bool conv1d = name.find(".weight") != std::string::npos &&
                        (name.find(".attn.") != std::string::npos || name.find(".mlp.") != std::string::npos);
    if (n == "embedding.weight") n = "wte.weight";
    if (n == "position_embedding.weight") n = "wpe.weight";
    replace("final_norm", "ln_f");
    replace("layers.", "h.");
    replace(".norm1", ".ln_1");
    replace(".norm2", ".ln_2");
    replace(".attn.qkv", ".attn.c_attn");
    replace(".attn.proj", ".attn.c_proj");
    replace(".mlp.fc1", ".mlp.c_fc");
    replace(".mlp.fc2", ".mlp.c_proj");
    out.emplace_back("transformer." + n, (conv1d ? t.t() : t).contiguous());
  }
  return out;
}

}  // namespace

int export_safetensors(const std::string& checkpoint_dir, const std::string& output) {
  const Config cfg = load_config(checkpoint_dir + "/config.yaml");
  std::set<std::string> names;
  for (const auto& p : read_all_pieces(checkpoint_dir))
    if (p.name.find(".exp_avg") == std::string::npos) names.insert(p.name);
  const auto tensors = exported(load_full(checkpoint_dir, cfg, names), cfg.model);

  // Header: JSON with dtype, shape and [begin, end) byte offsets into the data that follows.
  std::ostringstream header;
  header << "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"trainer\"}";
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header << ",\"" << name << "\":{\"dtype\":\"F32\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) header << (d ? "," : "") << t.size(d);
    const int64_t bytes = t.numel() * 4;
    header << "],\"data_offsets\":[" << offset << "," << offset + bytes << "]}";
    offset += bytes;
  }
  header << "}";
  std::string text = header.str();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  const std::string tmp = output + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));  // little endian
    out << text;
    for (const auto& [name, t] : tensors) {
      at::Tensor f = t.to(at::kFloat).contiguous();  // x86 is little endian, as the format requires
      out.write(static_cast<const char*>(f.data_ptr()), f.numel() * 4);
    }
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, output);
  return static_cast<int>(tensors.size());
}

}  // namespace trainer::checkpoint
