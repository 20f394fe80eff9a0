#include "config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

namespace trainer {
namespace {

// The spellings of each choice enum, in declaration order.
template <typename E> struct Choices;
template <> struct Choices<Positions> { static constexpr const char* names[] = {"learned", "rope"}; };
template <> struct Choices<Norm> { static constexpr const char* names[] = {"layernorm", "rmsnorm"}; };
template <> struct Choices<Mlp> { static constexpr const char* names[] = {"gelu", "swiglu"}; };
template <> struct Choices<Schedule> { static constexpr const char* names[] = {"1f1b", "gpipe", "interleaved-1f1b"}; };
template <> struct Choices<LrDecay> { static constexpr const char* names[] = {"cosine", "linear", "constant"}; };
template <> struct Choices<DType> { static constexpr const char* names[] = {"fp32", "bf16"}; };
template <> struct Choices<NonFinite> { static constexpr const char* names[] = {"skip", "abort"}; };
template <> struct Choices<DataSource> { static constexpr const char* names[] = {"synthetic", "indexed", "tokens"}; };
template <> struct Choices<LogLevel> { static constexpr const char* names[] = {"debug", "info", "warn"}; };
template <> struct Choices<DeviceKind> { static constexpr const char* names[] = {"auto", "cpu", "cuda"}; };
template <> struct Choices<BackendKind> { static constexpr const char* names[] = {"auto", "gloo", "nccl"}; };
template <> struct Choices<RopeScaling> { static constexpr const char* names[] = {"none", "llama3"}; };
template <> struct Choices<Recompute> { static constexpr const char* names[] = {"none", "selective", "full"}; };
template <> struct Choices<PlanAssumptions> { static constexpr const char* names[] = {"trainer", "megatron"}; };
template <> struct Choices<Preflight> { static constexpr const char* names[] = {"error", "warn", "off"}; };
template <> struct Choices<ZeroStage> { static constexpr const char* names[] = {"0", "1", "2", "3"}; };
template <> struct Choices<PipelineTransfers> { static constexpr const char* names[] = {"auto", "order-paired", "one-by-one"}; };
template <> struct Choices<CpuBf16Matmul> { static constexpr const char* names[] = {"auto", "native", "fp32"}; };

template <typename T, typename = void> struct is_choice : std::false_type {};
template <typename T> struct is_choice<T, std::void_t<decltype(Choices<T>::names)>> : std::true_type {};


std::string joined(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

}  // namespace

template <typename E> std::string name_of(E value) { return Choices<E>::names[static_cast<size_t>(value)]; }

template <typename E> std::vector<std::string> names_of() {
  return {std::begin(Choices<E>::names), std::end(Choices<E>::names)};
}

template <typename E> E parse_choice(const std::string& key, const std::string& text) {
  const auto names = names_of<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  throw ConfigError("'" + key + "' is '" + text + "'; use one of: " + joined(names, ", "));
}

#define TRAINER_CHOICE(E)                            \
  template std::string name_of<E>(E);                \
  template E parse_choice<E>(const std::string&, const std::string&); \
  template std::vector<std::string> names_of<E>();
TRAINER_CHOICE(Positions)
TRAINER_CHOICE(Norm)
TRAINER_CHOICE(Mlp)
TRAINER_CHOICE(Schedule)
TRAINER_CHOICE(PlanAssumptions)
TRAINER_CHOICE(Preflight)
TRAINER_CHOICE(LrDecay)
TRAINER_CHOICE(DType)
TRAINER_CHOICE(NonFinite)
TRAINER_CHOICE(DataSource)
TRAINER_CHOICE(LogLevel)
TRAINER_CHOICE(DeviceKind)
TRAINER_CHOICE(BackendKind)
TRAINER_CHOICE(RopeScaling)
TRAINER_CHOICE(Recompute)
TRAINER_CHOICE(ZeroStage)
TRAINER_CHOICE(PipelineTransfers)
TRAINER_CHOICE(CpuBf16Matmul)
#undef TRAINER_CHOICE

namespace {

// One schema entry: how to read a key from YAML into the Config and print it back.
struct Field {
  std::string key;
  std::string type;
  std::vector<std::string> choices;  // for strings with a fixed set of values
  std::string help;
  std::function<void(Config&, const YAML::Node&, const std::string& where)> set;
  std::function<std::string(const Config&)> get;
};

std::string where_of(const std::string& origin, const YAML::Node& node) {
  if (node.Mark().is_null()) return origin;
  return origin + ":" + std::to_string(node.Mark().line + 1);
}

[[noreturn]] void type_error(const std::string& key, const std::string& type,
                             const YAML::Node& node, const std::string& where) {
  std::string got = node.IsScalar() ? "'" + node.Scalar() + "'"
                    : node.IsSequence() ? "a list"
                    : node.IsMap()      ? "a mapping"
                                        : "nothing";
  throw ConfigError(where + ": key '" + key + "' must be " + type + ", got " + got);
}

template <typename T>
T read_scalar(const std::string& key, const std::string& type, const YAML::Node& node,
              const std::string& where) {
  if (!node.IsScalar()) type_error(key, type, node, where);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    type_error(key, type, node, where);
  }
}

// Reads a value of C++ type T; the specialisations carry the per-type rules.
template <typename T>
T read_value(const std::string& key, const YAML::Node& node, const std::string& where);

template <>
int read_value<int>(const std::string& key, const YAML::Node& node, const std::string& where) {
  return read_scalar<int>(key, "an integer", node, where);
}
template <>
std::int64_t read_value<std::int64_t>(const std::string& key, const YAML::Node& node,
                                      const std::string& where) {
  return read_scalar<std::int64_t>(key, "an integer", node, where);
}
template <>
double read_value<double>(const std::string& key, const YAML::Node& node,
                          const std::string& where) {
  return read_scalar<double>(key, "a number", node, where);
}
template <>
bool read_value<bool>(const std::string& key, const YAML::Node& node, const std::string& where) {
  return read_scalar<bool>(key, "true or false", node, where);
}
template <>
std::string read_value<std::string>(const std::string& key, const YAML::Node& node,
                                    const std::string& where) {
  if (node.IsNull()) return "";
  return read_scalar<std::string>(key, "a string", node, where);
}
template <>
std::vector<int> read_value<std::vector<int>>(const std::string& key, const YAML::Node& node,
                                              const std::string& where) {
  if (node.IsNull()) return {};
  if (!node.IsSequence()) type_error(key, "a list of integers", node, where);
  std::vector<int> out;
  for (const auto& item : node) out.push_back(read_scalar<int>(key, "a list of integers", item, where));
  return out;
}

template <>
std::vector<DataPath> read_value<std::vector<DataPath>>(const std::string& key, const YAML::Node& node,
                                                        const std::string& where) {
  if (node.IsNull()) return {};
  const std::string type = "a list of {path: ..., weight: ...}";
  if (!node.IsSequence()) type_error(key, type, node, where);
  std::vector<DataPath> out;
  for (const auto& item : node) {
    if (!item.IsMap() || !item["path"]) type_error(key, type, item, where);
    for (const auto& kv : item) {
      const std::string k = kv.first.as<std::string>();
      if (k != "path" && k != "weight")
        throw ConfigError(where + ": key '" + key + "' entries take 'path' and 'weight', not '" + k + "'");
    }
    DataPath d;
    d.path = read_scalar<std::string>(key, type, item["path"], where);
    if (item["weight"]) d.weight = read_scalar<double>(key, "a number (weight)", item["weight"], where);
    out.push_back(d);
  }
  return out;
}

template <typename T> std::string type_name() {
  static_assert(is_choice<T>::value, "a config type without a name");
  return "string";
}
template <> std::string type_name<int>() { return "int"; }
template <> std::string type_name<ZeroStage>() { return "int"; }  // a choice spelled as a number
template <> std::string type_name<std::int64_t>() { return "int"; }
template <> std::string type_name<double>() { return "float"; }
template <> std::string type_name<bool>() { return "bool"; }
template <> std::string type_name<std::string>() { return "string"; }
template <> std::string type_name<std::vector<int>>() { return "list of int"; }
template <> std::string type_name<std::vector<DataPath>>() { return "list of {path, weight}"; }

template <typename T> std::string show(const T& v) {
  if constexpr (is_choice<T>::value) {
    return name_of(v);
  } else {
    std::ostringstream s;
    s << v;
    return s.str();
  }
}
template <> std::string show<bool>(const bool& v) { return v ? "true" : "false"; }
template <> std::string show<std::string>(const std::string& v) { return v.empty() ? "\"\"" : v; }
template <> std::string show<std::vector<int>>(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

template <> std::string show<std::vector<DataPath>>(const std::vector<DataPath>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::string("{path: ") + v[i].path + ", weight: " + show(v[i].weight) + "}";
  return s + "]";
}

template <typename Section, typename T>
Field field(std::string key, Section Config::*section, T Section::*member, std::string help) {
  Field f;
  f.key = key;
  f.type = type_name<T>();
  if constexpr (is_choice<T>::value) f.choices = names_of<T>();
  f.help = std::move(help);
  f.set = [key, section, member](Config& cfg, const YAML::Node& node, const std::string& where) {
    if constexpr (is_choice<T>::value) {
      const std::string text = read_scalar<std::string>(key, "a string", node, where);
      try {
        cfg.*section.*member = parse_choice<T>(key, text);
      } catch (const ConfigError& e) {
        throw ConfigError(where + ": key " + std::string(e.what()));
      }
    } else {
      cfg.*section.*member = read_value<T>(key, node, where);
    }
  };
  f.get = [section, member](const Config& cfg) { return show(cfg.*section.*member); };
  return f;
}

const std::vector<Field>& schema() {
  using C = Config;
  static const std::vector<Field> fields = {
      field("model.layers", &C::model, &ModelConfig::layers, "Transformer blocks"),
      field("model.hidden", &C::model, &ModelConfig::hidden, "model width"),
      field("model.heads", &C::model, &ModelConfig::heads, "attention heads (divisible by tp)"),
      field("model.kv_heads", &C::model, &ModelConfig::kv_heads,
            "key/value heads, grouped-query attention (divides heads); 0 = heads"),
      field("model.ffn", &C::model, &ModelConfig::ffn, "MLP inner width (divisible by tp)"),
      field("model.vocab_size", &C::model, &ModelConfig::vocab_size, "tokenizer vocabulary size"),
      field("model.seq_len", &C::model, &ModelConfig::seq_len, "tokens per sample"),
      field("model.positions", &C::model, &ModelConfig::positions, "position encoding"),
      field("model.norm", &C::model, &ModelConfig::norm, "normalisation"),
      field("model.mlp", &C::model, &ModelConfig::mlp, "MLP type"),
      field("model.tied_embeddings", &C::model, &ModelConfig::tied_embeddings,
            "output head shares the input embedding"),
      field("model.bias", &C::model, &ModelConfig::bias, "biases in linear layers and norms"),
      field("model.qkv_bias", &C::model, &ModelConfig::qkv_bias,
            "biases on the query, key and value projections only (Qwen2's); implied by model.bias"),
      field("model.dropout", &C::model, &ModelConfig::dropout, "dropout probability"),
      field("model.init_std", &C::model, &ModelConfig::init_std, "std of the normal init"),
      field("model.norm_eps", &C::model, &ModelConfig::norm_eps, "epsilon of the norms"),
      field("model.rope_theta", &C::model, &ModelConfig::rope_theta, "RoPE base"),
      field("model.rope_scaling", &C::model, &ModelConfig::rope_scaling,
            "RoPE frequency scaling: llama3 = Llama 3.1's (Hugging Face rope_type llama3)"),
      field("model.rope_factor", &C::model, &ModelConfig::rope_factor, "llama3 scaling: factor"),
      field("model.rope_low_freq_factor", &C::model, &ModelConfig::rope_low_freq_factor,
            "llama3 scaling: low_freq_factor"),
      field("model.rope_high_freq_factor", &C::model, &ModelConfig::rope_high_freq_factor,
            "llama3 scaling: high_freq_factor"),
      field("model.rope_original_max_positions", &C::model, &ModelConfig::rope_original_max_positions,
            "llama3 scaling: original_max_position_embeddings"),
      field("model.vocab_divisible_by", &C::model, &ModelConfig::vocab_divisible_by,
            "vocab padded to a multiple of this x tp"),
      field("parallel.dp", &C::parallel, &ParallelConfig::dp, "data-parallel size"),
      field("parallel.pp", &C::parallel, &ParallelConfig::pp, "pipeline stages"),
      field("parallel.tp", &C::parallel, &ParallelConfig::tp, "tensor-parallel size"),
      field("parallel.cp", &C::parallel, &ParallelConfig::cp,
            "context-parallel size: each sequence split over cp ranks in 2 x cp load-balanced chunks"),
      field("parallel.micro_batch_size", &C::parallel, &ParallelConfig::micro_batch_size,
            "samples per microbatch"),
      field("parallel.schedule", &C::parallel, &ParallelConfig::schedule, "pipeline schedule"),
      field("parallel.virtual_stages", &C::parallel, &ParallelConfig::virtual_stages,
            "model chunks per pipeline rank (interleaved-1f1b)"),
      field("parallel.stage_layers", &C::parallel, &ParallelConfig::stage_layers,
            "layers per pipeline stage; empty = even split"),
      field("parallel.sequence_parallel", &C::parallel, &ParallelConfig::sequence_parallel,
            "shard norm/dropout regions along the sequence over tp"),
      field("parallel.recompute", &C::parallel, &ParallelConfig::recompute,
            "activation recomputation: full = whole layers, selective = the attention core"),
      field("parallel.recompute_layers", &C::parallel, &ParallelConfig::recompute_layers,
            "with full: layers recomputed per model chunk, from its first; 0 = all"),
      field("parallel.pipeline_transfers", &C::parallel, &ParallelConfig::pipeline_transfers,
            "how pipeline transfers start: order-paired batches (NCCL's need), one by one with receives posted "
            "ahead (Gloo), auto = by the backend"),
      field("parallel.fsdp_reshard_after_forward", &C::parallel, &ParallelConfig::fsdp_reshard_after_forward,
            "zero_stage 3 without pp: free gathered parameters after each unit's forward (false: keep them "
            "until its backward)"),
      field("optim.lr", &C::optim, &OptimConfig::lr, "peak learning rate"),
      field("optim.min_lr", &C::optim, &OptimConfig::min_lr, "learning rate at the end of decay"),
      field("optim.warmup_steps", &C::optim, &OptimConfig::warmup_steps, "linear warm-up steps"),
      field("optim.decay", &C::optim, &OptimConfig::decay, "decay after warm-up"),
      field("optim.weight_decay", &C::optim, &OptimConfig::weight_decay, "AdamW decoupled decay"),
      field("optim.beta1", &C::optim, &OptimConfig::beta1, "AdamW beta1"),
      field("optim.beta2", &C::optim, &OptimConfig::beta2, "AdamW beta2"),
      field("optim.eps", &C::optim, &OptimConfig::eps, "AdamW epsilon"),
      field("optim.grad_clip", &C::optim, &OptimConfig::grad_clip,
            "max global gradient norm; 0 disables"),
      field("optim.zero_stage", &C::optim, &OptimConfig::zero_stage,
            "0 = none; 1 = shard optimizer state and fp32 master weights over dp; 2 = also gradients; "
            "3 = also parameters (FSDP)"),
      field("optim.bucket_mb", &C::optim, &OptimConfig::bucket_mb, "gradient bucket size (MB)"),
      field("optim.main_grad_dtype", &C::optim, &OptimConfig::main_grad_dtype,
            "dtype gradients accumulate in over microbatches and DP reduces (bf16 needs runtime.precision bf16)"),
      field("optim.grad_reduce_dtype", &C::optim, &OptimConfig::grad_reduce_dtype,
            "bf16: fp32 main gradients travel and are summed over DP in bf16 (half the bytes)"),
      field("optim.nonfinite", &C::optim, &OptimConfig::nonfinite,
            "what to do with a non-finite gradient norm"),
      field("optim.decay_embeddings", &C::optim, &OptimConfig::decay_embeddings,
            "apply weight decay to embeddings"),
      field("optim.decay_norms_and_biases", &C::optim, &OptimConfig::decay_norms_and_biases,
            "apply weight decay to norms and biases"),
      field("train.steps", &C::train, &TrainConfig::steps, "optimizer steps"),
      field("train.global_batch_size", &C::train, &TrainConfig::global_batch_size,
            "samples per step over all data-parallel ranks"),
      field("train.eval_interval", &C::train, &TrainConfig::eval_interval,
            "steps between validation runs; 0 = never"),
      field("train.eval_iters", &C::train, &TrainConfig::eval_iters,
            "global batches per validation run"),
      field("data.source", &C::data, &DataConfig::source,
            "where samples come from: synthetic stream, Megatron .bin/.idx prefix, raw uint16 tokens"),
      field("data.path", &C::data, &DataConfig::path,
            "training data: .bin/.idx prefix (indexed) or token file (tokens)"),
      field("data.paths", &C::data, &DataConfig::paths,
            "weighted blend of datasets instead of data.path, e.g. [{path: a, weight: 0.7}, {path: b, weight: 0.3}]"),
      field("data.valid_path", &C::data, &DataConfig::valid_path,
            "validation data, same kind as data.path (with train.eval_interval)"),
      field("checkpoint.dir", &C::checkpoint, &CheckpointConfig::dir,
            "checkpoint directory; empty = no checkpoints"),
      field("checkpoint.init_from", &C::checkpoint, &CheckpointConfig::init_from,
            "start from these weights (step 0, fresh optimizer) unless resuming: a trainer checkpoint "
            "(run or step directory) or a Hugging Face model directory"),
      field("checkpoint.interval", &C::checkpoint, &CheckpointConfig::interval,
            "steps between checkpoints; 0 = only at the end"),
      field("checkpoint.keep_last", &C::checkpoint, &CheckpointConfig::keep_last,
            "checkpoints kept; older ones are deleted"),
      field("logging.dir", &C::logging, &LoggingConfig::dir,
            "directory for metrics.jsonl and TensorBoard events; empty = console only"),
      field("logging.interval", &C::logging, &LoggingConfig::interval, "steps between step lines"),
      field("logging.level", &C::logging, &LoggingConfig::level, "log level"),
      field("runtime.device", &C::runtime, &RuntimeConfig::device, "compute device"),
      field("runtime.backend", &C::runtime, &RuntimeConfig::backend, "communication backend"),
      field("runtime.seed", &C::runtime, &RuntimeConfig::seed, "seed for init and data"),
      field("runtime.threads", &C::runtime, &RuntimeConfig::threads,
            "intra-op threads per process; 0 = cores / local processes"),
      field("runtime.collective_timeout_s", &C::runtime, &RuntimeConfig::collective_timeout_s,
            "seconds before a collective or rendezvous is declared dead"),
      field("runtime.tf32", &C::runtime, &RuntimeConfig::tf32, "CUDA: let fp32 matmuls use TF32"),
      field("runtime.precision", &C::runtime, &RuntimeConfig::precision,
            "dtype of the model's weights, activations and traffic; bf16 keeps fp32 master weights in the optimizer"),
      field("runtime.fp32_residual", &C::runtime, &RuntimeConfig::fp32_residual,
            "bf16: keep the residual stream between layers (and pipeline sends) in fp32"),
      field("runtime.cpu_bf16_matmul", &C::runtime, &RuntimeConfig::cpu_bf16_matmul,
            "bf16 on a CPU: auto = LibTorch's bf16 kernels where the CPU has bf16 units (AVX512-BF16, AMX), "
            "else bf16 storage with fp32 compute; native or fp32 force one"),
      field("runtime.peak_tflops", &C::runtime, &RuntimeConfig::peak_tflops,
            "per-process peak TFLOP/s for MFU; 0 = not reported"),
      field("runtime.gpu_memory_gb", &C::runtime, &RuntimeConfig::gpu_memory_gb,
            "GPU memory the memory pre-flight allows per rank; 0 = the device's"),
      field("plan.assumptions", &C::plan, &PlanConfig::assumptions,
            "whose memory and kernels the planner assumes: this trainer, or Megatron-LM 2021 (docs/plan.md)"),
      field("plan.matmul_efficiency", &C::plan, &PlanConfig::matmul_efficiency,
            "fraction of peak TFLOP/s the layers' matmuls reach"),
      field("plan.attention_efficiency", &C::plan, &PlanConfig::attention_efficiency,
            "fraction of peak TFLOP/s fused attention reaches on its causal half"),
      field("plan.memory_efficiency", &C::plan, &PlanConfig::memory_efficiency,
            "fraction of memory bandwidth element-wise ops and AdamW reach"),
      field("plan.elementwise_traffic", &C::plan, &PlanConfig::elementwise_traffic,
            "bytes element-wise ops move in forward per byte of activations kept"),
      field("plan.intra_node_efficiency", &C::plan, &PlanConfig::intra_node_efficiency,
            "fraction of NVLink (CPU: loopback) bandwidth collectives reach"),
      field("plan.inter_node_efficiency", &C::plan, &PlanConfig::inter_node_efficiency,
            "fraction of per-GPU network bandwidth collectives reach"),
      field("plan.activation_overhead", &C::plan, &PlanConfig::activation_overhead,
            "temporaries and fragmentation as a fraction of kept activations"),
      field("plan.cpu_process_mb", &C::plan, &PlanConfig::cpu_process_mb,
            "resident MB of a trainer process before its model (CPU pre-flight and plan)"),
      field("plan.gpu_reserved_gb", &C::plan, &PlanConfig::gpu_reserved_gb,
            "GB per GPU for the CUDA context and its loaded kernels (the planner adds cuBLAS workspaces and NCCL buffers)"),
      field("plan.preflight", &C::plan, &PlanConfig::preflight,
            "a layout predicted not to fit in train/check-config: exit 2, warn, or skip the check"),
  };
  return fields;
}

const Field* find_field(const std::string& key) {
  for (const auto& f : schema())
    if (f.key == key) return &f;
  return nullptr;
}

bool section_known(const std::string& section) {
  for (const auto& f : schema())
    if (f.key.rfind(section + ".", 0) == 0) return true;
  return false;
}

std::string known_sections() {
  std::string out;
  std::string last;
  for (const auto& f : schema()) {
    std::string section = f.key.substr(0, f.key.find('.'));
    if (section != last) out += (out.empty() ? "" : ", ") + section;
    last = section;
  }
  return out;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& where) {
  std::string section = key.substr(0, key.find('.'));
  std::string hint;
  for (const auto& f : schema())
    if (f.key.rfind(section + ".", 0) == 0) hint += (hint.empty() ? "" : ", ") + f.key.substr(section.size() + 1);
  if (hint.empty())
    throw ConfigError(where + ": unknown section '" + section + "'; sections are: " + known_sections());
  throw ConfigError(where + ": unknown key '" + key + "'; keys of '" + section + "' are: " + hint);
}

[[noreturn]] void invalid(const std::string& key, const std::string& value, const std::string& why,
                          const std::string& fix) {
  throw ConfigError("invalid config: " + key + " = " + value + ": " + why + "; fix: " + fix);
}

}  // namespace

namespace {
void read_sections(const YAML::Node& root, const std::string& path, Config& cfg);
}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (!std::filesystem::is_regular_file(path))
    throw ConfigError("config file '" + path + "' does not exist or is not a file");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
  }
  Config cfg;
  cfg.source_file = path;
  try {
    read_sections(root, path, cfg);
  } catch (const YAML::Exception& e) {  // e.g. a key that is itself a list or a mapping
    throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ": unexpected YAML structure: " + e.msg);
  }
  for (const auto& o : overrides) apply_override(cfg, o);
  return cfg;
}

namespace {

// yaml-cpp keeps every entry of a mapping, and the last of two equal keys would silently win.
void refuse_repeated_key(std::map<std::string, std::string>& seen, const std::string& key, const std::string& where) {
  const auto [first, fresh] = seen.emplace(key, where);
  if (!fresh) throw ConfigError(where + ": key '" + key + "' is given twice (first at " + first->second + ")");
}

void read_sections(const YAML::Node& root, const std::string& path, Config& cfg) {
  if (root.IsNull()) return;
  if (!root.IsMap()) throw ConfigError(path + ": the top level must be a mapping of sections");
  std::map<std::string, std::string> seen;
  for (const auto& section : root) {
    const std::string name = section.first.as<std::string>();
    if (!section_known(name)) unknown_key(name + ".", where_of(path, section.first));
    refuse_repeated_key(seen, name, where_of(path, section.first));
    if (!section.second.IsMap()) {
      throw ConfigError(where_of(path, section.first) + ": section '" + name + "' must be a mapping");
    }
    for (const auto& kv : section.second) {
      const std::string key = name + "." + kv.first.as<std::string>();
      const Field* f = find_field(key);
      if (!f) unknown_key(key, where_of(path, kv.first));
      refuse_repeated_key(seen, key, where_of(path, kv.first));
      f->set(cfg, kv.second, where_of(path, kv.second));
    }
  }
}

}  // namespace

void apply_override(Config& cfg, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set '" + assignment + "': expected section.key=value");
  const std::string key = assignment.substr(0, eq);
  const std::string where = "--set " + assignment;
  const Field* f = find_field(key);
  if (!f) unknown_key(key, where);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ": value is not valid YAML: " + e.msg);
  }
  f->set(cfg, value, where);
}

int world_size_of(const ParallelConfig& p) { return p.dp * p.cp * p.pp * p.tp; }

int padded_vocab_size(const ModelConfig& m, int tp) {
  const int multiple = m.vocab_divisible_by * tp;
  return (m.vocab_size + multiple - 1) / multiple * multiple;
}

int virtual_stages_in_effect(const ParallelConfig& p) {
  return p.schedule == Schedule::Interleaved1F1B ? p.virtual_stages : 1;
}

int kv_heads_of(const ModelConfig& m) { return m.kv_heads == 0 ? m.heads : m.kv_heads; }

int kv_replicas_of(const ModelConfig& m, int tp) { return tp > kv_heads_of(m) ? tp / kv_heads_of(m) : 1; }

int num_microbatches(const Config& cfg) {
  return cfg.train.global_batch_size / (cfg.parallel.micro_batch_size * cfg.parallel.dp);
}

namespace {

void positive(const std::string& key, double v) {
  if (!(v > 0)) invalid(key, show(v), "must be positive", "set it to a value > 0");
}

void non_negative(const std::string& key, double v, const std::string& fix) {
  if (!(v >= 0)) invalid(key, show(v), "must be >= 0", fix);
}

void fraction_of_peak(const std::string& key, double v) {
  if (!(v > 0 && v <= 1)) invalid(key, show(v), "must be in (0, 1]", "use a fraction of peak such as 0.8");
}

}  // namespace

void ModelConfig::validate() const {
  positive("model.layers", layers);
  positive("model.hidden", hidden);
  positive("model.heads", heads);
  positive("model.ffn", ffn);
  positive("model.vocab_size", vocab_size);
  positive("model.seq_len", seq_len);
  positive("model.init_std", init_std);
  positive("model.vocab_divisible_by", vocab_divisible_by);
  if (dropout < 0 || dropout >= 1) invalid("model.dropout", show(dropout), "must be in [0, 1)", "use e.g. 0 or 0.1");
  if (hidden % heads != 0)
    invalid("model.hidden", show(hidden), "not divisible by model.heads = " + show(heads),
            "pick hidden as a multiple of heads");
  if (positions == Positions::Rope && (hidden / heads) % 2 != 0)
    invalid("model.hidden", show(hidden), "rope needs an even head dimension", "make hidden/heads even");
  const int kv = kv_heads_of(*this);
  if (kv < 1 || heads % kv != 0)
    invalid("model.kv_heads", show(kv_heads), "must divide model.heads = " + show(heads),
            "use a divisor of heads (heads / kv_heads query heads share each key/value head), or 0 for heads");
  if (rope_scaling == RopeScaling::Llama3) {
    positive("model.rope_factor", rope_factor);
    positive("model.rope_original_max_positions", rope_original_max_positions);
    if (!(rope_high_freq_factor > rope_low_freq_factor))
      invalid("model.rope_high_freq_factor", show(rope_high_freq_factor),
              "must exceed model.rope_low_freq_factor = " + show(rope_low_freq_factor), "Llama 3.1 uses 4 and 1");
    if (positions != Positions::Rope)
      invalid("model.rope_scaling", name_of(rope_scaling), "needs model.positions = rope", "set model.positions=rope");
  }
}

void ParallelConfig::validate() const {
  positive("parallel.dp", dp);
  positive("parallel.pp", pp);
  positive("parallel.tp", tp);
  positive("parallel.cp", cp);
  positive("parallel.micro_batch_size", micro_batch_size);
  positive("parallel.virtual_stages", virtual_stages);
  non_negative("parallel.recompute_layers", recompute_layers, "0 recomputes every layer");
  if (schedule != Schedule::Interleaved1F1B && virtual_stages != 1)
    invalid("parallel.virtual_stages", show(virtual_stages), "only the interleaved-1f1b schedule uses virtual stages",
            "set parallel.schedule=interleaved-1f1b or virtual_stages=1");
  const int chunks = pp * virtual_stages_in_effect(*this);
  if (!stage_layers.empty() && static_cast<int>(stage_layers.size()) != chunks)
    invalid("parallel.stage_layers", show(stage_layers), "needs one entry per stage (" + show(chunks) + ")",
            "list " + show(chunks) + " layer counts or leave it empty");
  for (int n : stage_layers)
    if (n < 1)
      invalid("parallel.stage_layers", show(stage_layers), "every stage needs >= 1 layer",
              "give each stage at least one layer");
}

void OptimConfig::validate() const {
  positive("optim.lr", lr);
  if (min_lr < 0 || min_lr > lr) invalid("optim.min_lr", show(min_lr), "must be in [0, optim.lr]", "lower it");
  non_negative("optim.warmup_steps", warmup_steps, "set 0 or more");
  non_negative("optim.grad_clip", grad_clip, "set 0 to disable");
  positive("optim.bucket_mb", bucket_mb);
}

void TrainConfig::validate() const {
  positive("train.steps", steps);
  positive("train.global_batch_size", global_batch_size);
  non_negative("train.eval_interval", eval_interval, "use 0 to disable");
  if (eval_interval > 0) positive("train.eval_iters", eval_iters);
}

void DataConfig::validate(bool with_validation) const {
  if (source == DataSource::Synthetic) return;
  // An indexed dataset is named by its prefix; check the .idx that must sit beside it.
  const std::string suffix = source == DataSource::Indexed ? ".idx" : "";
  auto check_file = [&](const std::string& key, const std::string& file) {
    if (file.empty())
      invalid(key, "\"\"", "data.source=" + name_of(source) + " needs a path", "set " + key + " (see trainer prepare-data)");
    if (!std::filesystem::is_regular_file(file + suffix))
      invalid(key, file, "file " + file + suffix + " does not exist", "check the path or prepare the data first");
  };
  if (paths.empty()) check_file("data.path", path);
  else if (!path.empty()) invalid("data.path", path, "data.path and data.paths are both set", "use one of them");
  for (const auto& d : paths) {
    check_file("data.paths", d.path);
    if (!(d.weight > 0))
      invalid("data.paths", d.path, "weight " + show(d.weight) + " is not positive", "give every dataset a weight > 0");
  }
  if (with_validation) check_file("data.valid_path", valid_path);
}

void LoggingConfig::validate() const { positive("logging.interval", interval); }

void RuntimeConfig::validate() const {
  positive("runtime.collective_timeout_s", collective_timeout_s);
  non_negative("runtime.threads", threads, "use 0 for automatic");
  non_negative("runtime.gpu_memory_gb", gpu_memory_gb, "use 0 or a positive value");
#ifndef TRAINER_WITH_CUDA
  if (device == DeviceKind::Cuda)
    invalid("runtime.device", "cuda", "this build of trainer has no CUDA support",
            "use runtime.device=cpu or build against a CUDA LibTorch");
  if (backend == BackendKind::Nccl)
    invalid("runtime.backend", "nccl", "this build of trainer has no NCCL support",
            "use runtime.backend=gloo or build against a CUDA LibTorch");
#endif
}

void PlanConfig::validate() const {
  fraction_of_peak("plan.matmul_efficiency", matmul_efficiency);
  fraction_of_peak("plan.attention_efficiency", attention_efficiency);
  fraction_of_peak("plan.memory_efficiency", memory_efficiency);
  fraction_of_peak("plan.intra_node_efficiency", intra_node_efficiency);
  fraction_of_peak("plan.inter_node_efficiency", inter_node_efficiency);
  non_negative("plan.elementwise_traffic", elementwise_traffic, "use 0 or a positive value");
  non_negative("plan.activation_overhead", activation_overhead, "use 0 or a positive value");
  non_negative("plan.cpu_process_mb", cpu_process_mb, "use 0 or a positive value");
  non_negative("plan.gpu_reserved_gb", gpu_reserved_gb, "use 0 or a positive value");
}

namespace {

// The model split over TP: heads, key/value heads, MLP, sequence and vocabulary.
void validate_tensor_split(const ModelConfig& m, const ParallelConfig& p) {
  // The padded vocabulary (a multiple of vocab_divisible_by * tp) must stay an int.
  if (m.vocab_size > std::numeric_limits<int>::max() - static_cast<std::int64_t>(m.vocab_divisible_by) * p.tp)
    invalid("model.vocab_size", show(m.vocab_size), "is too large to pad", "use a vocabulary below 2^31 - vocab_divisible_by * tp");
  if (m.heads % p.tp != 0)
    invalid("model.heads", show(m.heads), "not divisible by parallel.tp = " + show(p.tp),
            "use a tp that divides the number of heads");
  const int kv = kv_heads_of(m);
  if (kv >= p.tp ? kv % p.tp != 0 : p.tp % kv != 0)
    invalid("model.kv_heads", show(kv),
            "parallel.tp = " + show(p.tp) + " must divide the key/value heads, or be a multiple of them (then each is replicated on tp / kv_heads ranks)",
            "pick tp and kv_heads so that one divides the other");
  if (m.ffn % p.tp != 0)
    invalid("model.ffn", show(m.ffn), "not divisible by parallel.tp = " + show(p.tp), "use an ffn size that is a multiple of tp");
  if (p.sequence_parallel && m.seq_len / p.cp % p.tp != 0)
    invalid("model.seq_len", show(m.seq_len),
            "sequence parallelism needs seq_len / parallel.cp divisible by parallel.tp = " + show(p.tp),
            "pick seq_len as a multiple of cp x tp = " + show(p.cp * p.tp) + " or turn parallel.sequence_parallel off");
}

// Context parallelism cuts every sequence into 2 x cp chunks of equal length (rank r holds
// chunks r and 2cp-1-r), and its attention kernel calls draw no dropout.
void validate_context_split(const ModelConfig& m, const ParallelConfig& p) {
  if (p.cp == 1) return;
  if (m.seq_len % (2 * p.cp) != 0)
    invalid("model.seq_len", show(m.seq_len), "context parallelism needs seq_len divisible by 2 x parallel.cp = " + show(2 * p.cp),
            "use a seq_len that is a multiple of " + show(2 * p.cp) + ", or a smaller parallel.cp");
  if (m.dropout > 0)
    invalid("model.dropout", show(m.dropout), "context parallelism's attention kernels draw no dropout (parallel.cp = " + show(p.cp) + ")",
            "set model.dropout=0 (what pretraining runs use), or parallel.cp=1");
}

// The layers over pipeline stages, and the global batch over DP and microbatches.
void validate_pipeline_split(const Config& cfg) {
  const auto& p = cfg.parallel;
  const int layers = cfg.model.layers, chunks = p.pp * virtual_stages_in_effect(p);
  int total = 0;
  for (int n : p.stage_layers) total += n;
  if (p.stage_layers.empty() && layers < chunks)
    invalid("model.layers", show(layers), "fewer layers than pipeline stages (" + show(chunks) + " = pp x virtual_stages)",
            "use at least " + show(chunks) + " layers or fewer stages");
  if (!p.stage_layers.empty() && total != layers)
    invalid("parallel.stage_layers", show(p.stage_layers), "adds up to " + show(total) + " but model.layers = " + show(layers),
            "make the entries sum to model.layers");
  const int per_step = p.micro_batch_size * p.dp;
  if (cfg.train.global_batch_size % per_step != 0)
    invalid("train.global_batch_size", show(cfg.train.global_batch_size),
            "not divisible by micro_batch_size x dp = " + show(per_step), "use a multiple of " + show(per_step));
  const int mbs = num_microbatches(cfg);
  if (p.schedule == Schedule::Interleaved1F1B && mbs % p.pp != 0)
    invalid("parallel.schedule", name_of(p.schedule),
            "interleaved-1f1b needs the number of microbatches (" + show(mbs) + ") to be a multiple of pp = " + show(p.pp),
            "change train.global_batch_size or parallel.micro_batch_size");
}

// Options that only a bf16 model has.
void validate_precision(const Config& cfg) {
  if (cfg.optim.main_grad_dtype == DType::Bf16 && cfg.runtime.precision != DType::Bf16)
    invalid("optim.main_grad_dtype", "bf16", "bf16 main gradients belong to a bf16 model; this one is fp32",
            "set runtime.precision=bf16, or optim.main_grad_dtype=fp32");
  if (cfg.runtime.fp32_residual && cfg.runtime.precision != DType::Bf16)
    invalid("runtime.fp32_residual", "true", "an fp32 model's residual stream is fp32 already",
            "set runtime.precision=bf16, or runtime.fp32_residual=false");
}

// ZeRO over the DP group (dp × cp ranks): stage 3 shards the parameters themselves, which needs
// a group to shard over (with one rank it would gather each unit from itself).
void validate_sharding(const Config& cfg) {
  if (cfg.optim.zero_stage == ZeroStage::Parameters && cfg.parallel.dp * cfg.parallel.cp == 1)
    invalid("optim.zero_stage", "3", "shards the parameters over data parallelism, but parallel.dp = 1",
            "raise parallel.dp, or use optim.zero_stage=0 (nothing to shard over one rank)");
}

}  // namespace

void validate(const Config& cfg, int world_size) {
  const auto& p = cfg.parallel;
  cfg.model.validate();
  p.validate();
  cfg.optim.validate();
  cfg.train.validate();
  cfg.logging.validate();
  cfg.runtime.validate();
  cfg.plan.validate();
  if (world_size > 0 && world_size_of(p) != world_size)
    invalid("parallel", "dp=" + show(p.dp) + " cp=" + show(p.cp) + " pp=" + show(p.pp) + " tp=" + show(p.tp),
            "dp*cp*pp*tp = " + show(world_size_of(p)) + " but the job has " + show(world_size) + " processes",
            "make dp*cp*pp*tp equal the number of processes");
  validate_tensor_split(cfg.model, p);
  validate_context_split(cfg.model, p);
  validate_pipeline_split(cfg);
  validate_precision(cfg);
  validate_sharding(cfg);
  cfg.data.validate(cfg.train.eval_interval > 0);
}

std::vector<std::string> overrides_between(const Config& from, const Config& to) {
  std::vector<std::string> out;
  for (const auto& f : schema())
    if (f.get(from) != f.get(to)) out.push_back(f.key + "=" + f.get(to));
  return out;
}

std::string to_yaml(const Config& cfg) {
  std::string out, last;
  for (const auto& f : schema()) {
    const auto dot = f.key.find('.');
    const std::string section = f.key.substr(0, dot);
    if (section != last) out += section + ":\n";
    last = section;
    out += "  " + f.key.substr(dot + 1) + ": " + f.get(cfg) + "\n";
  }
  return out;
}

std::vector<KeyDoc> config_keys() {
  const Config defaults;
  std::vector<KeyDoc> out;
  for (const auto& f : schema()) {
    std::string help = f.help;
    if (!f.choices.empty()) help += " (" + joined(f.choices, " | ") + ")";
    out.push_back({f.key, f.type, f.get(defaults), help});
  }
  return out;
}

}  // namespace trainer
