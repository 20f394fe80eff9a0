// The whole run configuration: typed sections with defaults, read from one YAML file and
// overridden by `--set section.key=value`. Nothing here touches torch or the network, so a
// config can be checked before any process group exists.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/bad_input.hpp"

namespace trainer {

// Values with a fixed set of choices, parsed once from their YAML spelling (name_of gives it
// back); the rest of the code compares these enums, never strings.
enum class Positions { Learned, Rope };
enum class Norm { LayerNorm, RmsNorm };
enum class Mlp { Gelu, SwiGlu };
enum class Schedule { OneFOneB, GPipe, Interleaved1F1B };
enum class LrDecay { Cosine, Linear, Constant };
enum class DType { Fp32, Bf16 };
enum class NonFinite { Skip, Abort };
enum class DataSource { Synthetic, Indexed, Tokens };
enum class LogLevel { Debug, Info, Warn };
enum class DeviceKind { Auto, Cpu, Cuda };
enum class BackendKind { Auto, Gloo, Nccl };
enum class RopeScaling { None, Llama3 };
enum class Recompute { None, Selective, Full };
enum class PlanAssumptions { Trainer, Megatron };
enum class Preflight { Error, Warn, Off };
// The stage number: what ZeRO shards over DP. 1: optimizer state and fp32 masters; 2: also the
// gradients (reduce-scattered); 3: also the parameters (FSDP: gathered per unit when used).
enum class ZeroStage { None = 0, Optimizer = 1, Gradients = 2, Parameters = 3 };
enum class PipelineTransfers { Auto, OrderPaired, OneByOne };
// How bf16 products run on a CPU (src/ops/cpu_ops.hpp): as the CPU offers, in LibTorch's bf16
// kernels, or converted to fp32.
enum class CpuBf16Matmul { Auto, Native, Fp32 };

// The spelling of `value` in a config ("interleaved-1f1b"), and the value of a spelling
// (throws ConfigError naming `key` and the choices).
template <typename E> std::string name_of(E value);
template <typename E> E parse_choice(const std::string& key, const std::string& text);
template <typename E> std::vector<std::string> names_of();  // every spelling, in declaration order

struct ModelConfig {
  int layers = 4;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 0;  // key/value heads (grouped-query attention); 0 = heads
  int ffn = 256;
  int vocab_size = 256;
  int seq_len = 32;
  Positions positions = Positions::Learned;
  Norm norm = Norm::LayerNorm;
  Mlp mlp = Mlp::Gelu;
  bool tied_embeddings = true;
  bool bias = true;
  bool qkv_bias = false;  // biases on the query, key and value projections only (Qwen2); implied by bias
  double dropout = 0.0;
  double init_std = 0.02;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  // Llama 3.1's RoPE scaling (Hugging Face rope_type "llama3"): long wavelengths slowed by
  // `rope_factor`, short ones kept, a smooth blend between.
  RopeScaling rope_scaling = RopeScaling::None;
  double rope_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int rope_original_max_positions = 8192;
  int vocab_divisible_by = 8;  // vocab is padded to a multiple of this × tp (Megatron)
  void validate() const;
};

struct ParallelConfig {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  // Context parallelism: each sequence split over cp ranks (src/context_parallel/); world = dp × cp × pp × tp.
  int cp = 1;
  int micro_batch_size = 2;
  Schedule schedule = Schedule::OneFOneB;
  int virtual_stages = 1;
  std::vector<int> stage_layers;  // explicit layers per stage; empty = even split
  bool sequence_parallel = false;
  // Activation recomputation: `full` keeps only each layer's input and runs the layer again in
  // backward (the first `recompute_layers` layers of each stage's chunks; 0 = all); `selective`
  // recomputes the attention core (RoPE, key/value repeat, attention).
  Recompute recompute = Recompute::None;
  int recompute_layers = 0;
  // How pipeline transfers start: order-paired batches (what NCCL needs), one by one with
  // receives posted ahead (Gloo), or auto (by the backend).
  PipelineTransfers pipeline_transfers = PipelineTransfers::Auto;
  // optim.zero_stage 3 without PP: free each unit's gathered parameters after its forward (and
  // gather them again for its backward); false keeps them from forward to backward. Under PP a
  // stage's parameters stay gathered for the whole step either way.
  bool fsdp_reshard_after_forward = true;
  void validate() const;
};

struct OptimConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 2;
  LrDecay decay = LrDecay::Cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  ZeroStage zero_stage = ZeroStage::None;  // see ZeroStage
  double bucket_mb = 25.0;
  // Main gradients: where microbatch gradients accumulate and what the optimizer reads (bf16
  // needs runtime.precision bf16). DP reduction travels in it, or in bf16 with grad_reduce_dtype.
  DType main_grad_dtype = DType::Fp32;
  DType grad_reduce_dtype = DType::Fp32;  // bf16: fp32 main gradients travel (and are summed) in bf16
  NonFinite nonfinite = NonFinite::Skip;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
  void validate() const;
};

struct TrainConfig {
  int steps = 20;
  int global_batch_size = 16;
  int eval_interval = 0;
  int eval_iters = 2;
  void validate() const;
};

// One dataset of a weighted blend.
struct DataPath {
  std::string path;
  double weight = 1.0;
  bool operator==(const DataPath& o) const { return path == o.path && weight == o.weight; }
};

struct DataConfig {
  DataSource source = DataSource::Synthetic;
  std::string path;
  std::string valid_path;  // validation data, of the same source as `path`
  std::vector<DataPath> paths;  // weighted blend instead of data.path
  // The files exist (`with_validation`: data.valid_path too).
  void validate(bool with_validation) const;
};

struct CheckpointConfig {
  std::string dir;
  std::string init_from;  // weights to start from (trainer checkpoint or Hugging Face directory)
  int interval = 0;
  int keep_last = 2;
};

struct LoggingConfig {
  std::string dir;
  int interval = 1;
  LogLevel level = LogLevel::Info;
  void validate() const;
};

struct RuntimeConfig {
  DeviceKind device = DeviceKind::Auto;
  BackendKind backend = BackendKind::Auto;
  std::int64_t seed = 1234;
  int threads = 0;  // intra-op threads per process; 0 = cores / local processes
  double collective_timeout_s = 120.0;
  // The model's weights, activations and traffic; the optimizer keeps fp32 master weights.
  DType precision = DType::Fp32;
  bool fp32_residual = false;      // bf16: the residual stream (and pipeline sends) stay fp32
  CpuBf16Matmul cpu_bf16_matmul = CpuBf16Matmul::Auto;  // bf16 on a CPU: native units, or fp32 compute
  bool tf32 = false;               // CUDA: fp32 matmuls may use TF32
  double peak_tflops = 0.0;        // for MFU; 0 = unknown
  double gpu_memory_gb = 0.0;      // what the memory pre-flight allows per GPU; 0 = the device's
  void validate() const;
};

// `trainer plan` and the memory pre-flight (src/plan/, docs/plan.md): what the predictions
// assume. The efficiencies are fractions of the hardware's peak that a kind of work reaches.
struct PlanConfig {
  // trainer: this program's bytes (fp32 weights, gradients and activations, fused attention,
  // DP reduction overlapped with backward). megatron: Megatron-LM's as in Narayanan et al. 2021
  // (bf16 weights + fp32 master, 16-bit activations, unfused attention, DP reduction after backward).
  PlanAssumptions assumptions = PlanAssumptions::Trainer;
  double matmul_efficiency = 0.8;       // dense GEMMs of the layers and the head
  double attention_efficiency = 0.5;    // the fused attention kernel (its causal half of the FLOPs)
  double memory_efficiency = 0.8;       // of the memory bandwidth, for element-wise work and AdamW
  double elementwise_traffic = 2.0;     // bytes element-wise ops move per byte of kept activations (forward)
  double intra_node_efficiency = 0.8;   // of NVLink bandwidth (CPU: of the measured loopback)
  double inter_node_efficiency = 0.8;   // of the per-GPU network bandwidth
  double activation_overhead = 0.15;    // temporaries and allocator fragmentation on top of kept activations
  double cpu_process_mb = 372;          // a trainer process's own resident memory (LibTorch, threads, Gloo)
  double gpu_reserved_gb = 1.0;         // per GPU: the CUDA context and the kernels it loads (cuBLAS and NCCL buffers are counted apart)
  // What `train` and `check-config` do with a layout predicted not to fit: exit 2, warn, or skip.
  Preflight preflight = Preflight::Error;
  void validate() const;
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  OptimConfig optim;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  RuntimeConfig runtime;
  PlanConfig plan;
  std::string source_file;  // where it was read from, for messages
};

// Every error a user can cause with a config. The CLI turns it into exit code 2.
class ConfigError : public BadInput {
 public:
  using BadInput::BadInput;
};

// Reads `path` (strict: unknown keys and wrong types are errors naming key, file and line),
// then applies `overrides` of the form "section.key=value" in order.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Applies one "section.key=value" override.
void apply_override(Config& cfg, const std::string& assignment);

// Checks that the config can run on `world_size` processes (0 = skip the world check): each
// section's own rules (its validate(), beside its declaration above), then the rules that tie
// sections together. Throws ConfigError naming the key, the value and the fix.
void validate(const Config& cfg, int world_size);

// The "section.key=value" overrides that turn `from` into `to`: one per key whose value differs,
// named as the schema names it.
std::vector<std::string> overrides_between(const Config& from, const Config& to);

// Derived figures.
int padded_vocab_size(const ModelConfig& m, int tp);
// Model chunks per pipeline rank: parallel.virtual_stages under interleaved-1f1b, else 1.
int virtual_stages_in_effect(const ParallelConfig& p);
int num_microbatches(const Config& cfg);
int world_size_of(const ParallelConfig& p);
// model.kv_heads in effect (0 means heads).
int kv_heads_of(const ModelConfig& m);
// TP ranks that hold each key/value head: tp / kv_heads when tp exceeds kv_heads, else 1.
int kv_replicas_of(const ModelConfig& m, int tp);

// The resolved config as YAML text (every key, defaults included).
std::string to_yaml(const Config& cfg);

// One row per key: name, type, default, description. Used for `trainer config-keys` (README).
struct KeyDoc {
  std::string key, type, default_value, help;
};
std::vector<KeyDoc> config_keys();

}  // namespace trainer
