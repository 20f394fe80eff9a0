#include "plan/plan.hpp"

#include <algorithm>
#include <cmath>

#include "model/flops.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "runtime/device.hpp"

namespace trainer::plan {

std::vector<std::pair<const char*, double>> Memory::terms() const {
  return {{"weights", weights}, {"gradients", gradients}, {"optimizer", optimizer}, {"activations", activations},
          {"logits", logits},   {"buffers", buffers},     {"runtime", runtime}};
}

double Memory::total() const {
  double sum = 0;
  for (const auto& [name, bytes] : terms()) sum += bytes;
  return sum;
}

std::pair<std::string, double> Memory::biggest() const {
  const auto all = terms();
  return *std::max_element(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
}

std::vector<std::pair<const char*, double>> Time::terms() const {
  return {{"compute", compute}, {"tp_comm", tp_comm},       {"cp_comm", cp_comm},    {"pp_comm", pp_comm},
          {"bubble", bubble},   {"dp_exposed", dp_exposed}, {"optimizer", optimizer}};
}

double Time::step() const {
  double sum = 0;
  for (const auto& [name, seconds] : terms()) sum += seconds;
  return sum;
}

namespace {

// A CPU process's heap above its live bytes at its peak (see stage_memory).
constexpr double kCpuHeapSlack = 90e6;

// ------------------------------------------------------------------ the model's shape -------

// Sizes of one layer as one TP rank holds and computes it (elements, per token where relevant).
struct LayerShape {
  double h, f, D, heads_local, kv_local, tp;
  double matmul_params;  // weights of the layer's matmuls on this rank (what its FLOPs use)
  double params;         // all its parameters on this rank
};

LayerShape layer_shape(const ModelConfig& m, int tp) {
  LayerShape s;
  s.h = m.hidden;
  s.f = m.ffn;
  s.tp = tp;
  s.D = static_cast<double>(m.hidden) / m.heads;
  s.heads_local = static_cast<double>(m.heads) / tp;
  // With fewer KV heads than TP ranks each rank holds (and computes) one whole KV head.
  s.kv_local = std::max(1.0, static_cast<double>(kv_heads_of(m)) / tp);
  const double mlp_in = m.mlp == Mlp::SwiGlu ? 2 : 1;
  const double q = s.heads_local * s.D, kv = 2 * s.kv_local * s.D;
  s.matmul_params = q * s.h + kv * s.h + q * s.h + mlp_in * s.f / tp * s.h + s.f / tp * s.h;
  s.params = s.matmul_params + 2.0 * model::norm_parameters(m);
  if (m.bias) s.params += q + kv + s.h + mlp_in * s.f / tp + s.h;
  else if (m.qkv_bias) s.params += q + kv;
  return s;
}

// Layers of each global chunk (pp·v of them, chunk c·pp + s on stage s); `cfg` has the layout.
std::vector<int> chunk_layers(const Config& cfg, const Layout& l) {
  std::vector<int> out;
  for (const auto& [begin, end] :
       pipeline_parallel::partition_layers(cfg.model.layers, l.pp * l.virtual_stages, cfg.parallel.stage_layers))
    out.push_back(end - begin);
  return out;
}

// Layers of a chunk of `layers_per_chunk` that full recomputation recomputes (recompute_layers
// of them, 0 = all); none without full recomputation.
double recomputed_layers(const Config& cfg, const Layout& l, double layers_per_chunk) {
  if (l.recompute != Recompute::Full) return 0;
  const int k = cfg.parallel.recompute_layers;
  return k > 0 ? std::min<double>(k, layers_per_chunk) : layers_per_chunk;
}

// What one pipeline stage holds and does.
struct Stage {
  int index = 0;
  double layers = 0;  // over its chunks
  bool first = false, last = false;
  double params = 0;          // on one rank of the stage
  double matmul_params = 0;   // of its layers and the head, for FLOPs
  int in_flight = 0;          // most (microbatch, chunk) pairs whose activations it holds
  int first_in_flight = 0;    // of those, chunk 0's (which keep the embedding output)
  int head_in_flight = 0;     // and the last chunk's (which keep the logits)
};

std::vector<Stage> stages_of(const Config& cfg, const Layout& l, int microbatches) {
  const ModelConfig& m = cfg.model;
  const LayerShape shape = layer_shape(m, l.tp);
  const double vocab_rows = static_cast<double>(padded_vocab_size(m, l.tp)) / l.tp;
  const std::vector<int> layers = chunk_layers(cfg, l);
  const double norm = model::norm_parameters(m);
  std::vector<Stage> stages(l.pp);
  for (int s = 0; s < l.pp; ++s) {
    Stage& st = stages[s];
    st.index = s;
    for (int c = 0; c < l.virtual_stages; ++c) st.layers += layers[pipeline_parallel::global_chunk(c, s, l.pp)];
    st.first = s == 0;
    st.last = s == l.pp - 1;
    st.params = st.layers * shape.params;
    st.matmul_params = st.layers * shape.matmul_params;
    if (st.first) st.params += vocab_rows * m.hidden + (m.positions == Positions::Learned ? 1.0 * m.seq_len * m.hidden : 0);
    // The head: its own weight, or the tied embedding (one tensor when it is on the same rank).
    if (st.last) {
      st.params += norm + (st.first && m.tied_embeddings ? 0 : vocab_rows * m.hidden);
      st.matmul_params += vocab_rows * m.hidden;
    }
    const auto actions = pipeline_parallel::make_schedule(l.schedule, s, l.pp, microbatches, l.virtual_stages);
    st.in_flight = pipeline_parallel::max_in_flight(actions);
    st.first_in_flight = pipeline_parallel::max_in_flight(actions, 0);
    st.head_in_flight = pipeline_parallel::max_in_flight(actions, l.virtual_stages - 1);
  }
  return stages;
}

// ------------------------------------------------------------------ activations ------------

// The bytes of each kind of tensor a rank holds: `matmul` for what the layers compute in (the
// model's parameter dtype), `residual` for the residual stream, the embedding output and the
// pipeline's sends (runtime.fp32_residual keeps it fp32 under bf16).
struct Widths {
  double matmul = 4, residual = 4;
  bool cpu_fp32 = false;      // trainer's own CPU fp32 kernels (GELU keeps its sigmoid)
  bool bf16_in_fp32 = false;  // CPU bf16 products computed in fp32 (runtime::cpu_bf16_in_fp32)
};

Widths widths_of(const Config& cfg, bool gpu) {
  const bool bf16 = cfg.runtime.precision == DType::Bf16;
  Widths w;
  w.matmul = bf16 ? 2 : 4;
  w.residual = bf16 && !cfg.runtime.fp32_residual ? 2 : 4;
  w.cpu_fp32 = !gpu && !bf16;
  w.bf16_in_fp32 = !gpu && bf16 && runtime::cpu_bf16_in_fp32(cfg.runtime);
  return w;
}

// Bytes per token that one layer keeps for backward in trainer (src/model/gpt.cpp, counted from
// the tensors autograd saves).
// Under context parallelism (cp > 1) the tokens are this rank's S/cp, and attention keeps the
// keys and values of the whole sequence (cp times its own) gathered for backward.
double trainer_layer_bytes(const ModelConfig& m, const LayerShape& s, bool sp, Recompute recompute, bool gpu,
                           const Widths& w, int cp) {
  const double shard = sp ? s.tp : 1;  // the sequence-sharded regions under SP
  const double q = s.heads_local * s.D, kv = 2 * s.kv_local * s.D;
  double attention_core;
  if (recompute == Recompute::Selective) {
    attention_core = (q + kv) * w.matmul;  // the recomputed function's inputs only
  } else if (cp > 1) {
    // context_parallel::attention keeps the rotated queries, the gathered keys and values, its
    // output and fp32 log-sum-exp (in fp32 where bf16 products compute in fp32); the projection
    // outputs it was given are not kept.
    const double width = w.bf16_in_fp32 ? 4 : w.matmul;
    attention_core = (q + cp * kv + q) * width + 4 * s.heads_local;
  } else if (w.bf16_in_fp32) {
    // The kernel's fp32 copies of q, k, v and its fp32 output; the bf16 projection outputs they
    // were converted from are not kept.
    attention_core = (q + kv + q) * 4 + 4 * s.heads_local;
  } else {
    // q, k, v (GQA shares them inside the kernel: none repeated; RoPE's rotated keys are a new
    // tensor beside the kv projection output), the output, and its fp32 log-sum-exp per head.
    const double keys_values = kv + (m.positions == Positions::Rope ? kv / 2 : 0);
    attention_core = (q + keys_values + q) * w.matmul + 4 * s.heads_local;
  }
  // Two norm inputs: RMSNorm keeps its input (residual dtype) and an fp32 scale per token;
  // LayerNorm its input cast to the weights' dtype and an fp32 mean and rstd.
  const double norm_input = m.norm == Norm::RmsNorm ? w.residual : w.matmul;
  const double norms = 2 * (s.h / shard * norm_input + (m.norm == Norm::RmsNorm ? 4 : 8) / shard);
  const double matmul_inputs = (s.h + q + s.h) * w.matmul;  // attention and MLP inputs (whole sequence), projection input
  const double mlp = (m.mlp == Mlp::SwiGlu ? 4 : w.cpu_fp32 ? 3 : 2) * s.f / s.tp * w.matmul;
  const double dropout_masks = m.dropout > 0 ? 2 * s.h / shard : 0;  // bool masks
  // Measured on the CPU (Gloo), not yet explained by the saved tensors: with tp > 1 each forward
  // TP collective (2 all-reduces, or 2 all-gathers + 2 reduce-scatters with SP) leaves ~1.4
  // full-size [tokens, h] tensors alive until backward (small model at tp 2, seq 256 and 1024,
  // fp32 and bf16; docs/plan.md). Not assumed on GPUs, where it is unmeasured.
  const double tp_retained = !gpu && s.tp > 1 ? 1.4 * (sp ? 4 : 2) * s.h * w.matmul : 0;
  return norms + matmul_inputs + attention_core + mlp + dropout_masks + tp_retained;
}

// Megatron-LM's activation count (Korthikanti et al. 2022, Table 2; bytes per token of one
// layer, 16-bit), as its theoretical_memory_usage.py applies it.
double megatron_layer_bytes(const ModelConfig& m, const LayerShape& s, const Layout& l) {
  const double h = s.h, t = l.tp, a = m.heads, S = m.seq_len;
  const double attention_scores = l.recompute == Recompute::None ? 5 * a * S / h : 0;
  if (l.sequence_parallel) return h / t * (34 + attention_scores);
  return h * (10 + 24 / t + attention_scores / t);
}

// Megatron-LM's theoretical_memory_usage.py (megatron-core 0.19), arithmetic for a dense GPT:
// weights and optimizer of the first stage's shard (its layers, the embedding, and the output
// layer only when untied at pp = 1), at 18 bytes per parameter or 6 + 12/dp with the distributed
// optimizer (ZeRO-1 here); activations of the first stage, per Korthikanti et al. with SP and
// selective recomputation, else the formula without SP (+5%). Biases are not counted.
Memory megatron_memory(const Config& cfg, const Layout& l, int microbatches) {
  const ModelConfig& m = cfg.model;
  const double h = m.hidden, a = m.heads, G = kv_heads_of(m), F = m.ffn, L = m.layers;
  const double t = l.tp, p = l.pp, s = static_cast<double>(m.seq_len) / l.cp, b = l.micro_batch_size;  // s: this rank's tokens
  const double V = padded_vocab_size(m, l.tp);
  const double norm = m.norm == Norm::RmsNorm ? 1 : 2;
  const double gated = m.mlp == Mlp::SwiGlu ? 1.5 : 1;
  const double sharded_layers = L * (2 * h * h * (1 + G / a) + 2 * h * F * gated);
  const double replicated = L * 2 * h * norm + norm * h;
  const double embedding = h * V;
  double params = (sharded_layers / p + embedding) / t + replicated / p;
  if (!m.tied_embeddings && l.pp == 1) params += embedding / t;
  Memory mem;
  mem.weights = 2 * params;
  mem.gradients = 4 * params;
  mem.optimizer = 12 * params / (l.zero_stage != ZeroStage::None ? l.dp * l.cp : 1);
  const double sbh = s * b * h;
  double act;
  const bool sp_selective = l.sequence_parallel && l.recompute == Recompute::Selective;
  act = sbh * (sp_selective ? 18 + 4 * F / h : 10 + 24 / t) * L + 8 * s * b * p + sbh * p;
  if (l.virtual_stages > 1) act *= 1 + (p - 1) / (p * l.virtual_stages);
  else if (l.pp > 1) act *= std::min(1.0, microbatches / p);
  if (sp_selective) {
    if (l.pp == 1) act += 4 * sbh * (1 + V / h);
    act /= t;
  } else {
    if (l.pp == 1) act += 2 * (s * b * V / t + sbh);
    act *= 1.05;
  }
  mem.activations = act;
  mem.runtime = cfg.plan.gpu_reserved_gb * 1e9;
  return mem;
}

// Bytes per parameter of the model copy, its gradients and the optimizer (before ZeRO-1's ÷ dp).
// fp32: the weights are AdamW's masters; gradients fp32; two moments. bf16: bf16 weights, main
// gradients in optim.main_grad_dtype, and fp32 masters beside the moments.
struct ParamBytes {
  double weights, gradients, optimizer;
};

ParamBytes param_bytes(const Config& cfg) {
  if (cfg.runtime.precision != DType::Bf16) return {4, 4, 8};
  return {2, cfg.optim.main_grad_dtype == DType::Bf16 ? 2.0 : 4.0, 12};
}

// What a GPU process holds outside PyTorch's tensors:
// - the CUDA context with the kernels it loads (plan.gpu_reserved_gb; CUDA's lazy module loading,
//   PyTorch's default, loads only the kernels used);
// - cuBLAS and cuBLASLt workspaces, 32 MiB each per (handle, stream) on Hopper and later, 4 MiB
//   before (the cuBLAS guide's recommendation, PyTorch's default since pytorch#120925); trainer
//   multiplies on one stream;
// - NCCL's buffers per communicator: NCCL_BUFFSIZE (4 MiB by default) per channel and
//   direction, up to 32 channels on NVLink: 256 MiB for each group the rank talks in (TP, DP,
//   and both pipeline neighbours).
double gpu_runtime_bytes(const Config& cfg, const Layout& l) {
  const double mib = 1024.0 * 1024.0;
  const double cublas = 2 * 32 * mib;
  const int communicators = (l.tp > 1) + (l.cp > 1) + (l.dp * l.cp > 1) + (l.pp > 1 ? 2 : 0);
  const double nccl = communicators * 32 * 2 * 4 * mib;
  return cfg.plan.gpu_reserved_gb * 1e9 + cublas + nccl;
}

// Trainer's own bytes on one rank of stage `st`.
Memory stage_memory(const Config& cfg, const Layout& l, const Stage& st, const Hardware& hw) {
  const ModelConfig& m = cfg.model;
  const PlanConfig& pc = cfg.plan;
  const LayerShape shape = layer_shape(m, l.tp);
  const Widths w = widths_of(cfg, !hw.is_cpu);
  const ParamBytes pb = param_bytes(cfg);
  const double tokens = static_cast<double>(l.micro_batch_size) * m.seq_len / l.cp;  // this rank's
  const double shard = l.sequence_parallel ? l.tp : 1;
  const double vocab_rows = static_cast<double>(padded_vocab_size(m, l.tp)) / l.tp;
  // ZeRO shards over the DP group, which spans dp and cp (distributed/grid.hpp).
  const double dp_group = static_cast<double>(l.dp) * l.cp;
  const double zero = l.zero_stage != ZeroStage::None ? dp_group : 1;
  const bool shards_grads = l.zero_stage >= ZeroStage::Gradients, shards_params = l.zero_stage == ZeroStage::Parameters;
  Memory mem;
  mem.stage = st.index;
  // ZeRO-3 keeps 1/dp of the weights between uses. What is gathered at once: without PP, a unit
  // and the one prefetched beside it (src/data_parallel/fsdp.hpp), or every unit from forward to
  // backward when they stay gathered; under PP the whole stage for the step.
  double gathered = st.params, largest_unit = st.params;
  if (shards_params && l.pp == 1) {
    const double embedding = vocab_rows * m.hidden + (m.positions == Positions::Learned ? 1.0 * m.seq_len * m.hidden : 0);
    const double head = model::norm_parameters(m) + vocab_rows * m.hidden;
    largest_unit = std::max({embedding, head, shape.params});
    if (l.reshard_after_forward) gathered = shape.params + std::max({embedding, head, st.layers >= 2 ? shape.params : 0.0});
  }
  mem.weights = pb.weights * (shards_params ? st.params / dp_group + gathered : st.params);
  // ZeRO-2/3 keep 1/dp of the gradients. Without PP each microbatch's full buffers live from a
  // bucket's first gradient until its reduce-scatter lands: the bucket being filled and at most
  // kReductionsInFlight (2) more, each at most optim.bucket_mb (ZeRO-3: at most a unit). Under PP
  // the full buffers accumulate over the step.
  const double bucket = std::min(cfg.optim.bucket_mb * 1024 * 1024 / 4, largest_unit);
  const double full_grads = shards_grads && l.pp == 1 ? 3 * bucket : st.params;
  mem.gradients = pb.gradients * (full_grads + (shards_grads ? st.params / dp_group : 0));
  mem.optimizer = pb.optimizer * st.params / zero;
  // Kept activations: each in-flight (microbatch, chunk) pair holds its chunk's layers; a fully
  // recomputed layer keeps its input alone.
  const double layers_per_chunk = st.layers / l.virtual_stages;
  const double per_layer = trainer_layer_bytes(m, shape, l.sequence_parallel, l.recompute, !hw.is_cpu, w, l.cp);
  const double layer_input = w.residual * m.hidden / shard;
  const double recomputed = recomputed_layers(cfg, l, layers_per_chunk);
  const double kept = (layers_per_chunk - recomputed) * per_layer + recomputed * layer_input;
  double activations = st.in_flight * kept * tokens;
  // Backward runs the chunk's last layers first; when every layer is recomputed, nothing freed
  // by them makes room for the layer being recomputed.
  if (recomputed > 0 && recomputed >= layers_per_chunk) activations += per_layer * tokens;
  if (st.first) activations += layer_input * tokens * st.first_in_flight;  // embedding output
  // The head keeps its logits (in the model's dtype; the cross-entropy saves nothing else of
  // their size) per microbatch in flight and, while one runs backward, their gradient in the
  // same dtype; the cross-entropy's fp32 work goes in 16 MB blocks. Measured on the CPU, not
  // explained by these tensors: in bf16 the backward holds ~2 bytes per logit more, whether the
  // head runs through LibTorch's CPU matmul or computes in fp32 (docs/plan.md).
  const double head_backward = w.matmul + (hw.is_cpu && w.matmul == 2 ? 2 : 0);
  const double logits = st.last ? (st.head_in_flight * w.matmul + head_backward) * tokens * vocab_rows : 0;
  // glibc's heap grows above its live bytes by more when bf16 products compute in fp32: heap
  // size minus peak live bytes (an allocation counter and malloc_stats, small model, two runs
  // each) at dp 2 ZeRO-1 145-230 MB against 90-135 with LibTorch's bf16 kernels, pp 2 1F1B
  // 130-200 against 90-175, pp 2 interleaved 170-275 against 105-185: 45-70 MB more, about a
  // fifth of the counted activations. Not explained by what the path allocates (its fp32
  // buffers are mapped outside the heap); without the emulation's runs it would be a guess.
  const double overhead = pc.activation_overhead + (w.bf16_in_fp32 ? 0.20 : 0.0);
  mem.activations = activations * (1 + overhead);
  mem.logits = logits * (1 + overhead);
  // AdamW's step: 8 bytes a shard parameter, as fp32 temporaries twice the shard's size. On GPUs
  // they reuse the activations' memory (the caching allocator splits freed blocks), so they
  // matter only when the activations are smaller. On the CPU they are not seen (computing the
  // update in 1 MiB blocks left every peak as it was); what is seen is glibc's heap above its live
  // bytes, by a roughly constant amount: 40-166 MB over the memory test's 17 layouts of the small
  // model and 60-150 MB at dp 4 ZeRO-1/2/3 of a 261M-parameter model (docs/plan.md), where 8
  // bytes a shard parameter would have been 523 MB.
  const double optimizer_temporaries = 2 * 4 * st.params / zero;
  if (hw.is_cpu) {
    mem.buffers += kCpuHeapSlack;
  } else if (optimizer_temporaries > mem.activations + mem.logits) {
    mem.activations = optimizer_temporaries;
    mem.logits = 0;
  }
  // bf16 products computed in fp32: each process keeps (src/ops/cpu_ops.cpp, mapped outside the
  // heap) an fp32 copy and an fp32 gradient of its largest matrix and three fp32 blocks of at
  // most 8 MiB: the gradient, the input and the result.
  if (w.bf16_in_fp32) {
    const double qkv_rows = (shape.heads_local + 2 * shape.kv_local) * shape.D;
    const double rows = std::max({shape.f / l.tp, qkv_rows, st.last ? vocab_rows : 0.0});
    const double block = std::min(8.0 * 1024 * 1024, 4 * tokens * std::max(rows, shape.h));
    mem.buffers += 8 * rows * shape.h + 3 * block;
  }
  // Two pipeline receive buffers per chunk; a bf16 copy of fp32 gradients that travel in bf16.
  if (l.pp > 1) mem.buffers += 2 * l.virtual_stages * tokens * layer_input;
  if (cfg.optim.grad_reduce_dtype == DType::Bf16 && pb.gradients == 4 && dp_group > 1) mem.buffers += 2 * full_grads;
  // Context parallelism's attention backward, one layer at a time: the whole sequence's key and
  // value gradient in fp32, and its copy in the model's dtype for the sum when attention computes
  // in bf16 (fp32 inputs, also where bf16 products compute in fp32, sum the fp32 buffer itself).
  if (l.cp > 1) {
    const double copy = w.matmul == 2 && !w.bf16_in_fp32 ? 2 : 0;
    mem.buffers += (4 + copy) * 2 * shape.kv_local * shape.D * l.micro_batch_size * m.seq_len;
  }
  mem.runtime = hw.is_cpu ? pc.cpu_process_mb * 1e6 : gpu_runtime_bytes(cfg, l);
  return mem;
}

// ------------------------------------------------------------------ time --------------------

// A collective over `n` ranks on one link, ring algorithm: each rank moves `factor`·(n−1)/n of
// the buffer and takes `factor`·(n−1) latency steps (all-reduce 2, all-gather or
// reduce-scatter 1).
double ring_seconds(double bytes, int n, double gbs, double latency_us, double factor) {
  if (n <= 1 || bytes <= 0) return 0;
  return factor * (n - 1.0) / n * bytes / (gbs * 1e9) + factor * (n - 1) * latency_us * 1e-6;
}

struct Link {
  double gbs, latency_us;
};

// The link a group of ranks spaced `stride` apart uses: inside a node while the span fits.
Link link_for(const Hardware& hw, const PlanConfig& pc, int stride, int size, int ranks_per_node) {
  if (hw.is_cpu || static_cast<long long>(stride) * size <= ranks_per_node)
    return {hw.intra_gbs * pc.intra_node_efficiency, hw.intra_latency_us};
  return {hw.inter_gbs * pc.inter_node_efficiency, hw.inter_latency_us};
}

// Seconds of one microbatch's forward on a stage: matmuls, attention, element-wise work.
struct ForwardCost {
  double layer = 0;      // one layer
  double attention = 0;  // of which the attention core (what selective recomputation repeats)
  double head = 0;       // the head (last stage): its matmul and the logits' element-wise work
};

ForwardCost forward_cost(const Config& cfg, const Layout& l, const Hardware& hw, double peak_tflops, double share) {
  const ModelConfig& m = cfg.model;
  const PlanConfig& pc = cfg.plan;
  const bool megatron = pc.assumptions == PlanAssumptions::Megatron;
  const LayerShape shape = layer_shape(m, l.tp);
  const double tokens = static_cast<double>(l.micro_batch_size) * m.seq_len / l.cp;  // this rank's
  const double matmul_rate = peak_tflops * 1e12 * pc.matmul_efficiency * share;
  const double memory_rate = hw.memory_gbs * 1e9 * pc.memory_efficiency * share;
  // Attention scores and the weighted sum: 4·s·h per token without the causal discount (each of
  // this rank's tokens against the whole sequence's keys under CP). A fused kernel skips the
  // masked half; Megatron 2021 ran them as batched matmuls over the full square.
  const double attention_flops = 4.0 * tokens * m.seq_len * shape.heads_local * shape.D;
  ForwardCost c;
  c.attention = megatron ? attention_flops / matmul_rate
                         : 0.5 * attention_flops / (peak_tflops * 1e12 * pc.attention_efficiency * share);
  Layout forward_only = l;  // element-wise traffic of a forward that keeps everything
  forward_only.recompute = Recompute::None;
  const double kept_bytes = megatron ? megatron_layer_bytes(m, shape, forward_only) * tokens
                                     : trainer_layer_bytes(m, shape, l.sequence_parallel, Recompute::None, !hw.is_cpu,
                                                           widths_of(cfg, !hw.is_cpu), l.cp) * tokens;
  const double elementwise = pc.elementwise_traffic * kept_bytes / memory_rate;
  c.layer = 2 * tokens * shape.matmul_params / matmul_rate + c.attention + elementwise;
  const double vocab_rows = static_cast<double>(padded_vocab_size(m, l.tp)) / l.tp;
  c.head = 2 * tokens * vocab_rows * m.hidden / matmul_rate + pc.elementwise_traffic * 4 * tokens * vocab_rows / memory_rate;
  return c;
}

// The matmul peak the run's precision uses (Megatron's runs: 16-bit).
double peak_of(const Config& cfg, const Hardware& hw) {
  return cfg.plan.assumptions == PlanAssumptions::Megatron ? hw.bf16_tflops : hw.peak_tflops(cfg.runtime);
}

Time step_time(const Config& cfg, const Layout& l, const Hardware& hw, const std::vector<Stage>& stages, int microbatches,
               int ranks_per_node) {
  const ModelConfig& m = cfg.model;
  const PlanConfig& pc = cfg.plan;
  const bool megatron = pc.assumptions == PlanAssumptions::Megatron;
  const double bubble_fraction = pipeline_parallel::theoretical_bubble(l.pp, microbatches, l.virtual_stages);
  // CPU: each rank runs runtime.threads threads (default max(1, cores / ranks)). With more
  // threads than cores the ranks take turns, but only while they compute at once: a pipeline
  // stage computes 1 − bubble of the time; the fill and drain run alone.
  double share = 1, contended = 1, all_contended = 1;  // the last: every rank at once (optimizer)
  if (hw.is_cpu) {
    const double cores = std::max(1, hw.cores);
    const double threads = runtime::threads_per_rank(cfg.runtime, ranks_per_node);
    share = std::min(1.0, threads / cores);
    contended = std::max(1.0, ranks_per_node * (1 - bubble_fraction) * threads / cores);
    all_contended = std::max(1.0, ranks_per_node * threads / cores);
  }
  const ForwardCost f = forward_cost(cfg, l, hw, peak_of(cfg, hw), share);
  const double tokens = static_cast<double>(l.micro_batch_size) * m.seq_len / l.cp;  // this rank's
  const double act_bytes = megatron || cfg.runtime.precision == DType::Bf16 ? 2 : 4;  // what TP and PP move per element
  const double shard = l.sequence_parallel ? l.tp : 1;
  // Rank order tp, cp, dp, pp (distributed/grid.hpp); the DP group spans dp × cp.
  const int dp_group = l.dp * l.cp;
  const Link tp_link = link_for(hw, pc, 1, l.tp, ranks_per_node);
  const Link cp_link = link_for(hw, pc, l.tp, l.cp, ranks_per_node);
  const Link dp_link = link_for(hw, pc, l.tp, dp_group, ranks_per_node);
  const Link pp_link = link_for(hw, pc, l.tp * dp_group, l.pp, ranks_per_node);
  // TP: per layer two all-reduces (or all-gather + reduce-scatter) forward, two backward, two more
  // when the forward is recomputed; the embedding and head add one each.
  const double tp_one = ring_seconds(tokens * m.hidden * act_bytes, l.tp, tp_link.gbs, tp_link.latency_us, 2);
  // CP: per layer the whole sequence's keys and values gathered forward (again when the forward
  // is recomputed: selective recomputation repeats the attention core) and their gradients summed
  // backward, in the model's dtype, each an in-place all-reduce of the whole buffer
  // (src/context_parallel/ says why); trainer waits for each (no overlap).
  const LayerShape shape = layer_shape(m, l.tp);
  const double kv_bytes = 2 * shape.kv_local * shape.D * l.micro_batch_size * m.seq_len * act_bytes;
  const double cp_one = ring_seconds(kv_bytes, l.cp, cp_link.gbs, cp_link.latency_us, 2);
  // Pipeline messages: sharded under SP, and split over the TP ranks by Megatron's scatter/gather.
  const double p2p_shard = megatron ? l.tp : shard;
  const double p2p = l.pp > 1 ? tokens * m.hidden / p2p_shard * act_bytes / (pp_link.gbs * 1e9) + pp_link.latency_us * 1e-6 : 0;
  // The slowest stage sets the pace; per microbatch: its forward, backward (2 × forward, plus the
  // recomputed forward, which runs in backward) and TP collectives.
  double stage_time = 0, stage_backward = 0, stage_tp = 0, stage_cp = 0;
  for (const Stage& st : stages) {
    const double layers_per_chunk = st.layers / l.virtual_stages;
    const double recomputed = recomputed_layers(cfg, l, layers_per_chunk) / std::max(1.0, layers_per_chunk) * st.layers;
    double forward = st.layers * f.layer, recompute = recomputed * f.layer;
    if (l.recompute == Recompute::Selective) recompute = st.layers * f.attention;
    if (st.last) forward += f.head;
    const double backward = 2 * forward + recompute;
    const double tp = tp_one * (4 * st.layers + 2 * recomputed + st.first + st.last);
    const double cp = cp_one * (2 * st.layers + (l.recompute == Recompute::Selective ? st.layers : recomputed));
    if (forward + backward + tp + cp > stage_time + stage_tp + stage_cp) {
      stage_time = forward + backward;
      stage_backward = backward;
      stage_tp = tp;
      stage_cp = cp;
    }
  }
  Time t;
  t.compute = microbatches * stage_time * contended;
  t.tp_comm = microbatches * stage_tp;
  t.cp_comm = microbatches * stage_cp;
  // Fill and drain (Narayanan et al. 2021): the bubble fraction of the whole pipeline's time.
  t.bubble = bubble_fraction / (1 - bubble_fraction) * microbatches * (stage_time + stage_tp + stage_cp);
  // Each microbatch sends an activation and a gradient across each of its v chunk boundaries.
  t.pp_comm = 2.0 * l.virtual_stages * microbatches * p2p;
  // DP: the gradients of the most loaded rank. Trainer starts buckets during the last
  // microbatch's backward (of its last chunk), Megatron 2021 after backward; ZeRO-2/3 without PP
  // reduce-scatter every microbatch's gradients during its backward. ZeRO-1 reduces in full,
  // ZeRO-2/3 reduce-scatter; ZeRO-1/2 then all-gather the updated parameters (model dtype).
  // Megatron's distributed optimizer reduce-scatters and all-gathers 16-bit parameters.
  double max_params = 0;
  for (const Stage& st : stages) max_params = std::max(max_params, st.params);
  const double grad_bytes =
      megatron || cfg.optim.grad_reduce_dtype == DType::Bf16 || cfg.optim.main_grad_dtype == DType::Bf16 ? 2 : 4;
  const double weight_bytes = megatron ? 2 : param_bytes(cfg).weights;
  const bool sharded = l.zero_stage != ZeroStage::None;
  const bool scatters = l.zero_stage >= ZeroStage::Gradients || (megatron && sharded);
  const double reduce = ring_seconds(max_params * grad_bytes, dp_group, dp_link.gbs, dp_link.latency_us, scatters ? 1 : 2);
  const double gather = ring_seconds(max_params * weight_bytes, dp_group, dp_link.gbs, dp_link.latency_us, 1);
  if (megatron) {
    t.dp_exposed = reduce + (sharded ? gather : 0);
  } else {
    // Collectives run beside compute (NCCL's stream, Gloo's threads): of a transfer overlapped
    // with `window` seconds of compute, split in `pieces`, the first piece or what exceeds the
    // window is exposed.
    auto exposed = [](double seconds, double window, double pieces) { return std::max(seconds / pieces, seconds - window); };
    const double buckets = std::max(1.0, std::ceil(max_params * 4 / (cfg.optim.bucket_mb * 1e6)));
    const int reductions = l.zero_stage >= ZeroStage::Gradients && l.pp == 1 ? microbatches : 1;
    t.dp_exposed = reductions * exposed(reduce, stage_backward / l.virtual_stages, buckets);
    if (l.zero_stage == ZeroStage::Optimizer || l.zero_stage == ZeroStage::Gradients) t.dp_exposed += gather;
    if (l.zero_stage == ZeroStage::Parameters) {
      if (l.pp == 1) {
        // Each unit gathered before its forward and (resharded) again before its backward, the
        // next unit's gather prefetched during the current one's compute.
        const double units = cfg.model.layers + 2;
        const double passes = l.reshard_after_forward ? 2 : 1;
        t.dp_exposed += microbatches * passes * exposed(gather, stage_time / passes, units);
      } else {
        t.dp_exposed += gather;  // the whole stage, before its first microbatch
      }
    }
  }
  // Optimizer: gradient norm (read g) and AdamW (read p, g, m, v; write p, m, v) over the
  // rank's shard, fp32.
  const double shard_params = max_params / (sharded ? dp_group : 1);
  t.optimizer = 8 * 4 * shard_params / (hw.memory_gbs * 1e9 * pc.memory_efficiency * share) * all_contended;
  return t;
}

// FLOPs per token that recomputation adds: the attention core's forward (selective), or the
// forward of the recomputed layers (full).
double recompute_flops_per_token(const Config& cfg, const Layout& l) {
  const ModelConfig& m = cfg.model;
  if (l.recompute == Recompute::Selective) return 4.0 * m.layers * m.seq_len * m.hidden;
  const double per_chunk = static_cast<double>(m.layers) / (l.pp * l.virtual_stages);
  if (per_chunk <= 0) return 0;
  const double fraction = recomputed_layers(cfg, l, per_chunk) / per_chunk;
  const double head = 6.0 * m.hidden * m.vocab_size;  // never recomputed
  return fraction * (model::flops_per_token(m) - head) / 3;
}

}  // namespace

Prediction predict(const Config& base, const Layout& l, const Hardware& hw, bool with_time) {
  const Config cfg = with_layout(base, l);
  const int microbatches = num_microbatches(cfg);
  const int world = l.world();
  // CPU: the ranks on this machine (all of them unless said); GPU: a node's worth.
  const int ranks_per_node = hw.gpus_per_node > 0 ? std::min(world, hw.gpus_per_node) : world;
  const std::vector<Stage> stages = stages_of(cfg, l, microbatches);
  Prediction p;
  p.layout = l;
  if (cfg.plan.assumptions == PlanAssumptions::Megatron) {
    p.memory = megatron_memory(cfg, l, microbatches);
    p.stage_totals.assign(l.pp, p.memory.total());  // Megatron's report has the first stage only
  } else {
    for (const Stage& st : stages) {
      Memory mem = stage_memory(cfg, l, st, hw);
      p.stage_totals.push_back(mem.total());
      if (mem.total() > p.memory.total()) p.memory = mem;
    }
  }
  if (hw.is_cpu) {
    // The machine's memory holds all its ranks: dp·tp of each stage when the job is local,
    // else as many ranks of the average stage.
    p.available = hw.memory_gb * 1e9 / ranks_per_node;
    double sum = 0;
    for (double total : p.stage_totals) sum += total;
    p.fits = ranks_per_node * sum / p.stage_totals.size() <= hw.memory_gb * 1e9;
  } else {
    p.available = hw.memory_gb * 1e9;
    p.fits = p.memory.total() <= p.available;
  }
  if (!with_time) return p;
  p.time = step_time(cfg, l, hw, stages, microbatches, ranks_per_node);
  const double step = p.time.step();
  const double tokens = static_cast<double>(cfg.train.global_batch_size) * cfg.model.seq_len;
  p.tokens_per_s = tokens / step;
  p.model_tflops = model::flops_per_token(cfg.model) * p.tokens_per_s / world / 1e12;
  p.hardware_tflops = (model::flops_per_token(cfg.model) + recompute_flops_per_token(cfg, l)) * p.tokens_per_s / world / 1e12;
  // On the CPU the peak is the machine's, which its ranks share.
  p.mfu = p.model_tflops / (peak_of(cfg, hw) / (hw.is_cpu ? ranks_per_node : 1));
  return p;
}

Config for_planning(Config cfg) {
  cfg.data.source = DataSource::Synthetic;  // the data files are not the planner's business
  cfg.checkpoint.init_from.clear();
  return cfg;
}

namespace {

std::vector<int> divisors(int n, int at_most) {
  std::vector<int> out;
  for (int d = 1; d <= std::min(n, at_most); ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool accepted(const Config& cfg, const Layout& l, int gpus) {
  try {
    validate(with_layout(cfg, l), gpus);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

}  // namespace

std::vector<Prediction> search(const Config& base, int gpus, const Hardware& hw, bool with_time) {
  const Config cfg = for_planning(base);
  std::vector<Prediction> out;
  const int node = hw.gpus_per_node > 0 ? hw.gpus_per_node : gpus;
  for (int tp : divisors(gpus, node)) {
    if (cfg.model.heads % tp != 0) continue;
    for (int cp : divisors(gpus / tp, gpus))
    for (int pp : divisors(gpus / tp / cp, cfg.model.layers)) {
      const int dp = gpus / tp / cp / pp;
      if (cp > 1 && cfg.model.seq_len % (2 * cp) != 0) continue;
      if (cfg.train.global_batch_size % dp != 0) continue;
      std::vector<int> chunk_counts = {1};
      for (int v = 2; pp > 1 && pp * v <= cfg.model.layers; ++v)
        if (cfg.model.layers % (pp * v) == 0) chunk_counts.push_back(v);
      for (int mb : divisors(cfg.train.global_batch_size / dp, 64))
        for (int v : chunk_counts)
          for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
            for (ZeroStage zero : {ZeroStage::None, ZeroStage::Optimizer, ZeroStage::Gradients, ZeroStage::Parameters})
              for (bool sp : {false, true})
                for (bool reshard : {true, false}) {
                  if ((zero != ZeroStage::None && dp * cp == 1) || (sp && tp == 1)) continue;
                  if (!reshard && (zero != ZeroStage::Parameters || pp > 1)) continue;  // the same run
                  Layout l{dp, pp, tp, cp, v, mb, v > 1 ? Schedule::Interleaved1F1B : Schedule::OneFOneB, r, zero, sp, reshard};
                  if (accepted(cfg, l, gpus)) out.push_back(predict(cfg, l, hw, with_time));
                }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) { return a.tokens_per_s > b.tokens_per_s; });
  return out;
}

}  // namespace trainer::plan
