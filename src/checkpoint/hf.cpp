#include "checkpoint/hf.hpp"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "checkpoint/safetensors.hpp"
#include "checkpoint/shards.hpp"
#include "config/bad_input.hpp"
#include "runtime/files.hpp"

namespace trainer::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The tensor names and layouts of a file: Llama's (also Mistral's and Qwen2's, the same
// modules) or GPT-2's.
enum class Family { Llama, Gpt2 };

[[noreturn]] void refuse(const std::string& dir, const std::string& what) {
  throw BadInput("Hugging Face model " + dir + ": " + what);
}

// ---------------------------------------------------------------- config.json -------------

// config.json fields that describe the file or inference only, and change nothing here.
const std::set<std::string> kInformational = {
    "_name_or_path", "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "output_attentions", "output_hidden_states",
    "return_dict", "id2label", "label2id", "task_specific_params", "n_ctx", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "initializer_range"};

// Whether `v` holds a T as JSON spells it: an int is an integer in range (1.5 is not silently
// cut to 1), a double any number.
template <typename T> bool holds(const json& v) {
  if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  else if constexpr (std::is_same_v<T, int>)
    return v.is_number_integer() && v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max();
  else if constexpr (std::is_same_v<T, double>) return v.is_number();
  else return v.is_string();
}

// `object`'s member `key` if it is a string, else "".
std::string string_member(const json& object, const std::string& key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// Reads config.json (an object) field by field; every field must be consumed or informational.
class HfConfig {
 public:
  HfConfig(const std::string& dir, json root) : dir_(dir), root_(std::move(root)) {}
  bool has(const std::string& key) const { return root_.contains(key) && !root_.at(key).is_null(); }
  template <typename T> T get(const std::string& key) {
    used_.insert(key);
    if (!has(key)) refuse(dir_, "config.json has no '" + key + "'");
    const json& v = root_.at(key);
    if (!holds<T>(v)) refuse(dir_, "config.json field '" + key + "' has an unexpected type");
    return v.get<T>();
  }
  template <typename T> T get(const std::string& key, const T& fallback) { return has(key) ? get<T>(key) : mark(key, fallback); }
  // The field must be absent, null or `expected`.
  template <typename T> void require(const std::string& key, const T& expected, const std::string& why) {
    if (has(key) && get<T>(key) != expected) refuse(dir_, "config.json field '" + key + "' is not supported: " + why);
    used_.insert(key);
  }
  // The field as it is (null when absent).
  const json& node(const std::string& key) {
    used_.insert(key);
    static const json absent;
    return root_.contains(key) ? root_.at(key) : absent;
  }
  void check_all_used() const {
    for (const auto& item : root_.items()) {
      const std::string& key = item.key();
      if (!used_.count(key) && !kInformational.count(key))
        refuse(dir_, "config.json field '" + key + "' is not supported by trainer (remove it if it does not change the model)");
    }
  }

 private:
  template <typename T> T mark(const std::string& key, const T& value) {
    used_.insert(key);
    return value;
  }
  std::string dir_;
  json root_;
  std::set<std::string> used_;
};

// The Hugging Face classes read: the architecture and its model_type.
struct Architecture {
  const char* name;
  const char* model_type;
  Family family;
};
constexpr Architecture kArchitectures[] = {{"LlamaForCausalLM", "llama", Family::Llama},
                                           {"MistralForCausalLM", "mistral", Family::Llama},
                                           {"Qwen2ForCausalLM", "qwen2", Family::Llama},
                                           {"GPT2LMHeadModel", "gpt2", Family::Gpt2}};

// config.json's architecture (from "architectures", else "model_type").
const Architecture& architecture_of(const std::string& dir, const json& root) {
  std::string arch;
  const auto archs = root.find("architectures");
  if (archs != root.end() && archs->is_array() && archs->size() == 1 && archs->front().is_string())
    arch = archs->front().get<std::string>();
  const std::string type = string_member(root, "model_type");
  std::string known;
  for (const Architecture& a : kArchitectures) {
    if (arch == a.name || (arch.empty() && type == a.model_type)) return a;
    known += std::string(known.empty() ? "" : ", ") + a.name;
  }
  refuse(dir, "architecture '" + (arch.empty() ? type : arch) + "' is not supported (" + known + " are)");
}

// rope_scaling: null or rope_type "default" is none; "llama3" is Llama 3.1's; others change the
// model in ways trainer does not implement.
void read_rope_scaling(HfConfig& c, const std::string& dir, ModelConfig& m) {
  const json& r = c.node("rope_scaling");
  if (r.is_null()) return;
  if (!r.is_object()) refuse(dir, "config.json rope_scaling is neither null nor an object");
  const std::string type = r.contains("rope_type") ? string_member(r, "rope_type") : string_member(r, "type");
  if (type == "default") return;
  if (type != "llama3")
    refuse(dir, "config.json rope_scaling type '" + type + "' is not supported (llama3 and default are; null means none)");
  for (const auto& [key, value] : r.items()) {
    if (key == "rope_type" || key == "type") continue;
    if (!value.is_number()) refuse(dir, "config.json rope_scaling field '" + key + "' is not a number");
    const double v = value.get<double>();
    if (key == "factor") m.rope_factor = v;
    else if (key == "low_freq_factor") m.rope_low_freq_factor = v;
    else if (key == "high_freq_factor") m.rope_high_freq_factor = v;
    else if (key == "original_max_position_embeddings") m.rope_original_max_positions = static_cast<int>(v);
    else refuse(dir, "config.json rope_scaling field '" + key + "' is not supported");
  }
  m.rope_scaling = RopeScaling::Llama3;
}

// Sliding-window attention changes the model only for windows shorter than the sequence:
// Mistral's sliding_window (null: none), Qwen2's use_sliding_window (then sliding_window and
// max_window_layers say where) and layer_types.
void require_full_attention(HfConfig& c, const std::string& dir, const Architecture& a, const ModelConfig& m) {
  const std::string name = a.name;
  if (name == "MistralForCausalLM") {
    const int window = c.get<int>("sliding_window", m.seq_len);
    if (window < m.seq_len)
      refuse(dir, "config.json sliding_window " + std::to_string(window) + " is shorter than max_position_embeddings " +
                      std::to_string(m.seq_len) + "; trainer's attention sees every earlier token (no sliding window)");
  }
  if (name == "Qwen2ForCausalLM") {
    c.require<bool>("use_sliding_window", false, "trainer's attention sees every earlier token (no sliding window)");
    c.node("sliding_window"), c.node("max_window_layers");  // unused without use_sliding_window
  }
  const json& types = c.node("layer_types");
  if (types.is_array())
    for (const auto& t : types)
      if (t != "full_attention")
        refuse(dir, "config.json layer_types has " + t.dump() + "; trainer's layers are full_attention");
}

ModelConfig llama_config(HfConfig& c, const std::string& dir, const Architecture& arch) {
  ModelConfig m;
  m.positions = Positions::Rope;
  m.norm = Norm::RmsNorm;
  m.mlp = Mlp::SwiGlu;
  m.hidden = c.get<int>("hidden_size");
  m.ffn = c.get<int>("intermediate_size");
  m.layers = c.get<int>("num_hidden_layers");
  m.heads = c.get<int>("num_attention_heads");
  m.kv_heads = c.get<int>("num_key_value_heads", m.heads);
  m.vocab_size = c.get<int>("vocab_size");
  m.seq_len = c.get<int>("max_position_embeddings");
  m.norm_eps = c.get<double>("rms_norm_eps");
  m.rope_theta = c.get<double>("rope_theta", 10000.0);
  m.tied_embeddings = c.get<bool>("tie_word_embeddings", false);
  const bool attention_bias = c.get<bool>("attention_bias", false), mlp_bias = c.get<bool>("mlp_bias", false);
  if (attention_bias != mlp_bias)
    refuse(dir, "config.json has attention_bias = " + std::string(attention_bias ? "true" : "false") + " but mlp_bias = " +
                    (mlp_bias ? "true" : "false") + "; trainer's model.bias covers both");
  m.bias = attention_bias;
  m.qkv_bias = std::string(arch.name) == "Qwen2ForCausalLM";  // Qwen2: q, k, v biases, none elsewhere
  m.init_std = c.get<double>("initializer_range", 0.02);
  c.require<std::string>("hidden_act", "silu", "trainer's SwiGLU uses silu");
  c.require<int>("head_dim", m.hidden / m.heads, "trainer's head dimension is hidden_size / num_attention_heads");
  c.require<int>("pretraining_tp", 1, "it changes how the projections are computed");
  c.require<double>("attention_dropout", 0.0, "trainer's model.dropout applies to every dropout site");
  read_rope_scaling(c, dir, m);
  require_full_attention(c, dir, arch, m);
  return m;
}

ModelConfig gpt2_config(HfConfig& c, const std::string& dir) {
  ModelConfig m;
  m.positions = Positions::Learned;
  m.norm = Norm::LayerNorm;
  m.mlp = Mlp::Gelu;
  m.bias = true;
  m.hidden = c.get<int>("n_embd");
  m.layers = c.get<int>("n_layer");
  m.heads = c.get<int>("n_head");
  m.seq_len = c.get<int>("n_positions");
  m.ffn = c.get<int>("n_inner", 4 * m.hidden);
  m.vocab_size = c.get<int>("vocab_size");
  m.norm_eps = c.get<double>("layer_norm_epsilon", 1e-5);
  m.tied_embeddings = c.get<bool>("tie_word_embeddings", true);
  m.init_std = c.get<double>("initializer_range", 0.02);
  const std::string act = c.get<std::string>("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    refuse(dir, "config.json activation_function '" + act + "' is not supported (trainer's GELU is the tanh form, gelu_new)");
  const double resid = c.get<double>("resid_pdrop", 0.1), embd = c.get<double>("embd_pdrop", 0.1),
               attn = c.get<double>("attn_pdrop", 0.1);
  if (resid != embd || resid != attn)
    refuse(dir, "config.json has different resid_pdrop, embd_pdrop and attn_pdrop; trainer's model.dropout is one value");
  m.dropout = resid;
  c.require<bool>("scale_attn_weights", true, "trainer scales scores by 1/sqrt(head_dim)");
  c.require<bool>("scale_attn_by_inverse_layer_idx", false, "trainer does not scale by layer");
  c.require<bool>("reorder_and_upcast_attn", false, "not implemented");
  c.require<bool>("add_cross_attention", false, "trainer's model is decoder-only");
  return m;
}

// ---------------------------------------------------------------- tensors ------------------

// Keys and values interleaved per key/value head ([kv][k|v][D] rows), and back.
at::Tensor interleave_kv(const at::Tensor& k, const at::Tensor& v, int kv_heads) {
  auto rest = k.sizes().slice(1).vec();
  std::vector<int64_t> grouped = {kv_heads, 1, -1};
  grouped.insert(grouped.end(), rest.begin(), rest.end());
  std::vector<int64_t> rows = {2 * k.size(0)};
  rows.insert(rows.end(), rest.begin(), rest.end());
  return at::cat({k.reshape(grouped), v.reshape(grouped)}, 1).reshape(rows);
}

// One Hugging Face tensor per trainer tensor except the attention's, which `pack`/`unpack`
// handle: trainer name suffix <-> Hugging Face name, per family. `{}` marks the layer index.
struct Rename {
  std::string trainer, hf;
  bool conv1d;  // GPT-2's Conv1D: stored [in, out]
};

std::vector<Rename> renames(Family f, const ModelConfig& m) {
  if (f == Family::Llama) {
    std::vector<Rename> r = {{"embedding.weight", "model.embed_tokens.weight", false},
                             {"final_norm.weight", "model.norm.weight", false},
                             {"layers.{}.norm1.weight", "model.layers.{}.input_layernorm.weight", false},
                             {"layers.{}.norm2.weight", "model.layers.{}.post_attention_layernorm.weight", false}};
    for (const std::string kind : {"weight", "bias"}) {
      if (kind == "bias" && !m.bias) continue;
      r.push_back({"layers.{}.attn.proj." + kind, "model.layers.{}.self_attn.o_proj." + kind, false});
      r.push_back({"layers.{}.mlp.fc1." + kind, "model.layers.{}.mlp.up_proj." + kind, false});
      r.push_back({"layers.{}.mlp.gate." + kind, "model.layers.{}.mlp.gate_proj." + kind, false});
      r.push_back({"layers.{}.mlp.fc2." + kind, "model.layers.{}.mlp.down_proj." + kind, false});
    }
    if (!m.tied_embeddings) r.push_back({"head.weight", "lm_head.weight", false});
    return r;
  }
  std::vector<Rename> r = {{"embedding.weight", "transformer.wte.weight", false},
                           {"position_embedding.weight", "transformer.wpe.weight", false},
                           {"final_norm.weight", "transformer.ln_f.weight", false},
                           {"final_norm.bias", "transformer.ln_f.bias", false}};
  for (const std::string kind : {"weight", "bias"}) {
    const bool w = kind == "weight";
    r.push_back({"layers.{}.norm1." + kind, "transformer.h.{}.ln_1." + kind, false});
    r.push_back({"layers.{}.norm2." + kind, "transformer.h.{}.ln_2." + kind, false});
    r.push_back({"layers.{}.attn.proj." + kind, "transformer.h.{}.attn.c_proj." + kind, w});
    r.push_back({"layers.{}.mlp.fc1." + kind, "transformer.h.{}.mlp.c_fc." + kind, w});
    r.push_back({"layers.{}.mlp.fc2." + kind, "transformer.h.{}.mlp.c_proj." + kind, w});
  }
  if (!m.tied_embeddings) r.push_back({"head.weight", "lm_head.weight", false});
  return r;
}

std::string at_layer(std::string pattern, int layer) {
  const auto at = pattern.find("{}");
  if (at != std::string::npos) pattern.replace(at, 2, std::to_string(layer));
  return pattern;
}

// Calls fn(trainer name, hf name, conv1d) for every renamed tensor of every layer.
template <typename Fn> void for_each_rename(Family f, const ModelConfig& m, Fn&& fn) {
  for (const Rename& r : renames(f, m)) {
    if (r.trainer.find("{}") == std::string::npos) {
      fn(r.trainer, r.hf, r.conv1d);
      continue;
    }
    for (int l = 0; l < m.layers; ++l) fn(at_layer(r.trainer, l), at_layer(r.hf, l), r.conv1d);
  }
}

// The attention's query and key/value tensors of layer `l` in Hugging Face's names and layouts
// (unpack_attention: the reverse).
std::vector<std::pair<std::string, at::Tensor>> pack_attention(Family f, const ModelConfig& m, int l,
                                                               const std::map<std::string, at::Tensor>& t) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const std::string p = "layers." + std::to_string(l) + ".attn.";
  for (const std::string kind : {"weight", "bias"}) {
    if (kind == "bias" && !m.bias && !m.qkv_bias) continue;
    const auto [k, v] = split_kv(t.at(p + "kv." + kind), kv_heads_of(m));
    const at::Tensor q = t.at(p + "q." + kind);
    if (f == Family::Llama) {
      const std::string h = "model.layers." + std::to_string(l) + ".self_attn.";
      out.emplace_back(h + "q_proj." + kind, q);
      out.emplace_back(h + "k_proj." + kind, k);
      out.emplace_back(h + "v_proj." + kind, v);
    } else {
      at::Tensor c_attn = at::cat({q, k, v}, 0);
      out.emplace_back("transformer.h." + std::to_string(l) + ".attn.c_attn." + kind, kind == "weight" ? c_attn.t() : c_attn);
    }
  }
  return out;
}

void unpack_attention(Family f, const ModelConfig& m, int l, std::map<std::string, at::Tensor>& hf,
                      std::map<std::string, at::Tensor>& out) {
  const std::string p = "layers." + std::to_string(l) + ".attn.";
  const int64_t D = m.hidden / m.heads, kv = kv_heads_of(m);
  for (const std::string kind : {"weight", "bias"}) {
    if (kind == "bias" && !m.bias && !m.qkv_bias) continue;
    at::Tensor q, k, v;
    if (f == Family::Llama) {
      const std::string h = "model.layers." + std::to_string(l) + ".self_attn.";
      q = hf.at(h + "q_proj." + kind), k = hf.at(h + "k_proj." + kind), v = hf.at(h + "v_proj." + kind);
      hf.erase(h + "q_proj." + kind), hf.erase(h + "k_proj." + kind), hf.erase(h + "v_proj." + kind);
    } else {
      const std::string h = "transformer.h." + std::to_string(l) + ".attn.c_attn." + kind;
      at::Tensor c = hf.at(h);
      hf.erase(h);
      if (kind == "weight") c = c.t();
      q = c.narrow(0, 0, m.hidden), k = c.narrow(0, m.hidden, kv * D), v = c.narrow(0, m.hidden + kv * D, kv * D);
    }
    out[p + "q." + kind] = q.contiguous();
    out[p + "kv." + kind] = interleave_kv(k, v, static_cast<int>(kv)).contiguous();
  }
}

// The tensors of a model directory by Hugging Face name (single file or shards).
std::map<std::string, at::Tensor> read_hf_tensors(const std::string& dir) {
  if (fs::exists(dir + "/model.safetensors")) return read_safetensors(dir + "/model.safetensors");
  const std::string index = dir + "/model.safetensors.index.json";
  if (!fs::exists(index)) refuse(dir, "has neither model.safetensors nor model.safetensors.index.json");
  std::set<std::string> files;
  try {
    std::ifstream in(index);
    const json root = json::parse(in);
    for (const auto& file : root.at("weight_map")) files.insert(file.get<std::string>());
  } catch (const json::exception& e) {
    refuse(dir, std::string("model.safetensors.index.json: ") + e.what());
  }
  std::map<std::string, at::Tensor> all;
  for (const auto& file : files)
    for (auto& [name, t] : read_safetensors(dir + "/" + file)) all.emplace(name, std::move(t));
  return all;
}

// config.json as save_pretrained writes it: two-space indents, here in the order of the fields
// below (ordered_json).
std::string config_json(Family f, const ModelConfig& m, at::ScalarType dtype) {
  nlohmann::ordered_json j;
  if (f == Family::Llama) {
    // Biases on q, k and v alone are Qwen2's model; Llama's attention_bias covers o_proj too.
    const bool qwen2 = m.qkv_bias && !m.bias;
    j["architectures"] = nlohmann::ordered_json::array({qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"});
    j["model_type"] = qwen2 ? "qwen2" : "llama";
    j["hidden_size"] = m.hidden;
    j["intermediate_size"] = m.ffn;
    j["num_hidden_layers"] = m.layers;
    j["num_attention_heads"] = m.heads;
    j["num_key_value_heads"] = kv_heads_of(m);
    j["vocab_size"] = m.vocab_size;
    j["max_position_embeddings"] = m.seq_len;
    j["rms_norm_eps"] = m.norm_eps;
    j["rope_theta"] = m.rope_theta;
    j["hidden_act"] = "silu";
    j["tie_word_embeddings"] = m.tied_embeddings;
    j["initializer_range"] = m.init_std;
    if (qwen2) {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      j["max_window_layers"] = m.layers;
    } else {
      j["head_dim"] = m.hidden / m.heads;
      j["attention_bias"] = m.bias;
      j["mlp_bias"] = m.bias;
    }
    j["rope_scaling"] = nullptr;
    if (m.rope_scaling == RopeScaling::Llama3)
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", m.rope_factor},
                           {"low_freq_factor", m.rope_low_freq_factor},
                           {"high_freq_factor", m.rope_high_freq_factor},
                           {"original_max_position_embeddings", m.rope_original_max_positions}};
  } else {
    j["architectures"] = nlohmann::ordered_json::array({"GPT2LMHeadModel"});
    j["model_type"] = "gpt2";
    j["n_embd"] = m.hidden;
    j["n_layer"] = m.layers;
    j["n_head"] = m.heads;
    j["n_inner"] = m.ffn;
    j["n_positions"] = m.seq_len;
    j["vocab_size"] = m.vocab_size;
    j["layer_norm_epsilon"] = m.norm_eps;
    j["activation_function"] = "gelu_new";
    j["resid_pdrop"] = m.dropout;
    j["embd_pdrop"] = m.dropout;
    j["attn_pdrop"] = m.dropout;
    j["tie_word_embeddings"] = m.tied_embeddings;
    j["initializer_range"] = m.init_std;
  }
  j["torch_dtype"] = dtype == at::kBFloat16 ? "bfloat16" : "float32";
  return j.dump(2) + "\n";
}

std::optional<Family> family_of(const ModelConfig& m) {
  if (m.positions == Positions::Rope && m.norm == Norm::RmsNorm && m.mlp == Mlp::SwiGlu) return Family::Llama;
  if (m.positions == Positions::Learned && m.norm == Norm::LayerNorm && m.mlp == Mlp::Gelu && m.bias &&
      kv_heads_of(m) == m.heads)
    return Family::Gpt2;
  return std::nullopt;
}

Family family_for_export(const ModelConfig& m) {
  if (auto f = family_of(m)) return *f;
  throw BadInput("--format hf writes Llama-style models (positions rope, norm rmsnorm, mlp swiglu) and GPT-2-style ones "
                 "(positions learned, norm layernorm, mlp gelu, bias true, kv_heads = heads); this model is neither: "
                 "use --format safetensors");
}

}  // namespace

std::pair<at::Tensor, at::Tensor> split_kv(const at::Tensor& kv, int kv_heads) {
  auto rest = kv.sizes().slice(1).vec();
  std::vector<int64_t> grouped = {kv_heads, 2, -1};
  grouped.insert(grouped.end(), rest.begin(), rest.end());
  std::vector<int64_t> rows = {kv.size(0) / 2};
  rows.insert(rows.end(), rest.begin(), rest.end());
  const at::Tensor g = kv.reshape(grouped);
  return {g.select(1, 0).reshape(rows).contiguous(), g.select(1, 1).reshape(rows).contiguous()};
}

bool hf_exportable(const ModelConfig& m) { return family_of(m).has_value(); }

std::vector<std::pair<std::string, at::Tensor>> to_hf_tensors(const ModelConfig& m,
                                                              const std::map<std::string, at::Tensor>& tensors) {
  const Family f = family_for_export(m);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for_each_rename(f, m, [&](const std::string& ours, const std::string& theirs, bool conv1d) {
    at::Tensor t = tensors.at(ours);
    if (ours == "embedding.weight" || ours == "head.weight") t = t.narrow(0, 0, m.vocab_size);
    out.emplace_back(theirs, (conv1d ? t.t() : t).contiguous());
  });
  for (int l = 0; l < m.layers; ++l)
    for (auto& entry : pack_attention(f, m, l, tensors)) out.emplace_back(entry.first, entry.second.contiguous());
  return out;
}

bool is_hf_dir(const std::string& dir) { return fs::is_regular_file(dir + "/config.json"); }

namespace {

json load_config_json(const std::string& dir) {
  if (!is_hf_dir(dir)) refuse(dir, "has no config.json; point at a directory save_pretrained wrote");
  json root;
  try {
    std::ifstream in(dir + "/config.json");
    root = json::parse(in);
  } catch (const json::exception& e) {
    refuse(dir, std::string("config.json is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) refuse(dir, "config.json is not a JSON object");
  return root;
}

// The family and model of a Hugging Face directory's config.json, checked.
std::pair<Family, ModelConfig> hf_model_of(const std::string& dir) {
  const json root = load_config_json(dir);
  const Architecture& arch = architecture_of(dir, root);
  const Family f = arch.family;
  HfConfig c(dir, root);
  const ModelConfig m = f == Family::Llama ? llama_config(c, dir, arch) : gpt2_config(c, dir);
  c.check_all_used();
  Config check;
  check.model = m;
  try {
    validate(check, 0);
  } catch (const ConfigError& e) {
    refuse(dir, std::string("its config gives a model trainer cannot build: ") + e.what());
  }
  return {f, m};
}

}  // namespace

ModelConfig read_hf_config(const std::string& dir) { return hf_model_of(dir).second; }

HfModel read_hf(const std::string& dir) {
  const auto [f, model] = hf_model_of(dir);
  HfModel out;
  out.model = model;
  auto hf = read_hf_tensors(dir);
  // Buffers older GPT-2 files carry (the causal mask), not parameters.
  for (auto it = hf.begin(); it != hf.end();)
    it = it->first.find(".attn.bias") != std::string::npos || it->first.find(".attn.masked_bias") != std::string::npos
             ? hf.erase(it)
             : std::next(it);
  if (f == Family::Gpt2) {  // GPT2Model files lack the "transformer." prefix
    std::map<std::string, at::Tensor> prefixed;
    for (auto& [name, t] : hf) prefixed[name.rfind("transformer.", 0) == 0 || name == "lm_head.weight" ? name : "transformer." + name] = t;
    hf = std::move(prefixed);
  }
  // A tied model may still carry lm_head.weight: it must be the embedding.
  if (out.model.tied_embeddings && hf.count("lm_head.weight")) {
    const std::string emb = f == Family::Llama ? "model.embed_tokens.weight" : "transformer.wte.weight";
    if (!hf.count(emb) || !at::equal(hf.at(emb), hf.at("lm_head.weight")))
      refuse(dir, "tie_word_embeddings is true but lm_head.weight differs from the embedding");
    hf.erase("lm_head.weight");
  }
  auto take = [&](const std::string& name) {
    auto it = hf.find(name);
    if (it == hf.end()) refuse(dir, "tensor '" + name + "' is missing");
    at::Tensor t = it->second;
    hf.erase(it);
    return t;
  };
  try {
    for_each_rename(f, out.model, [&](const std::string& ours, const std::string& theirs, bool conv1d) {
      at::Tensor t = take(theirs);
      out.tensors[ours] = (conv1d ? t.t() : t).contiguous();
    });
    for (int l = 0; l < out.model.layers; ++l) unpack_attention(f, out.model, l, hf, out.tensors);
  } catch (const std::out_of_range&) {
    refuse(dir, "an attention tensor is missing");
  }
  if (!hf.empty()) refuse(dir, "tensor '" + hf.begin()->first + "' is not part of the model trainer builds from config.json");
  return out;
}

int write_hf(const std::string& dir, const ModelConfig& m, const std::map<std::string, at::Tensor>& tensors,
             std::int64_t max_shard_bytes, at::ScalarType dtype) {
  const auto out = to_hf_tensors(m, tensors);
  fs::create_directories(dir);
  // Weights of an earlier export here would shadow these (readers prefer model.safetensors).
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" ||
        (name.rfind("model-", 0) == 0 && entry.path().extension() == ".safetensors"))
      fs::remove(entry.path());
  }
  runtime::write_file_atomic(dir + "/config.json", config_json(family_for_export(m), m, dtype));
  // Shards in order, each at most max_shard_bytes (a larger single tensor gets its own shard).
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  std::int64_t in_shard = 0, total = 0;
  for (auto& entry : out) {
    const std::int64_t bytes = entry.second.numel() * c10::elementSize(dtype);
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(entry);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors(dir + "/model.safetensors", shards[0], dtype);
    return static_cast<int>(out.size());
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::ostringstream file;
    file << "model-" << std::setw(5) << std::setfill('0') << i + 1 << "-of-" << std::setw(5) << shards.size() << ".safetensors";
    write_safetensors(dir + "/" + file.str(), shards[i], dtype);
    for (const auto& entry : shards[i]) index["weight_map"][entry.first] = file.str();
  }
  runtime::write_file_atomic(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  return static_cast<int>(out.size());
}

std::string import_hf(const std::string& hf_dir, const std::string& output) {
  const HfModel hf = read_hf(hf_dir);
  Config cfg;
  cfg.model = hf.model;
  const std::string step = output + "/step_00000000", tmp = step + ".tmp";
  fs::create_directories(output);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::vector<Piece> pieces;
  for (const auto& [name, t] : hf.tensors) {
    Piece p;
    p.name = name;
    p.full_shape = t.sizes().vec();
    p.local_shape = p.full_shape;
    p.flat_end = t.numel();
    p.data = t.reshape({-1});
    pieces.push_back(std::move(p));
  }
  write_pieces(tmp + "/rank0", pieces);
  runtime::write_file_atomic(tmp + "/meta.yaml", "step: 0\nskipped: 0\nconsumed_samples: 0\nadam_steps: 0\nworld_size: 1\n"
                                                 "dp: 1\npp: 1\ntp: 1\nzero_stage: 0\nimported_from: " + hf_dir + "\n");
  runtime::write_file_atomic(tmp + "/config.yaml", to_yaml(cfg));
  fs::remove_all(step);
  runtime::publish(tmp, step);
  runtime::write_file_atomic(output + "/latest", "step_00000000\n");
  return step;
}

}  // namespace trainer::checkpoint
