// Hugging Face checkpoints in and out: LlamaForCausalLM (grouped-query attention, Llama 3.1
// RoPE scaling, tied or untied), MistralForCausalLM without a sliding window (Llama's math,
// written back as LlamaForCausalLM), Qwen2ForCausalLM (Llama with q, k, v biases:
// model.qkv_bias) and GPT2LMHeadModel, as `save_pretrained` writes them: config.json and
// model.safetensors, or shards listed in model.safetensors.index.json.
//
// Names and layouts (trainer <- Hugging Face):
//   embedding.weight            model.embed_tokens.weight        | transformer.wte.weight
//   position_embedding.weight   -                                | transformer.wpe.weight
//   layers.i.norm1/.norm2       input_/post_attention_layernorm  | h.i.ln_1 / ln_2
//   layers.i.attn.q             self_attn.q_proj                 | h.i.attn.c_attn (q columns)
//   layers.i.attn.kv            k_proj, v_proj interleaved per key/value head: [kv][k|v][D]
//                                                                | c_attn (k and v columns)
//   layers.i.attn.proj          self_attn.o_proj                 | h.i.attn.c_proj
//   layers.i.mlp.fc1 / gate     mlp.up_proj / gate_proj          | h.i.mlp.c_fc (no gate)
//   layers.i.mlp.fc2            mlp.down_proj                    | h.i.mlp.c_proj
//   final_norm                  model.norm                       | transformer.ln_f
//   head.weight (untied)        lm_head.weight                   | lm_head.weight
// GPT-2's Conv1D weights are stored [in, out] and transposed here. Both apply RoPE (Llama) in
// the rotate-half form trainer uses, so q and k rows keep Hugging Face's order.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace trainer::checkpoint {

struct HfModel {
  ModelConfig model;                          // derived from config.json
  std::map<std::string, at::Tensor> tensors;  // trainer's names and layouts, unpadded vocab
};

// A directory with a config.json: a Hugging Face model, not a trainer checkpoint.
bool is_hf_dir(const std::string& dir);

// The model of a Hugging Face directory's config.json (as read_hf derives it).
ModelConfig read_hf_config(const std::string& dir);

// Reads a Hugging Face model. A config field trainer does not know or cannot honour, a missing
// tensor or an unexpected one is a BadInput naming it.
HfModel read_hf(const std::string& dir);

// Writes `tensors` (trainer names, full shapes; vocab rows beyond m.vocab_size are dropped) as
// a directory transformers.AutoModelForCausalLM.from_pretrained loads: config.json and
// model.safetensors, or shards of at most `max_shard_bytes` and the index. Llama-style models
// (RoPE, RMSNorm, SwiGLU) become LlamaForCausalLM, GPT-2-style ones (learned positions,
// LayerNorm, GELU, biases) GPT2LMHeadModel; others are refused. Returns the tensors written.
int write_hf(const std::string& dir, const ModelConfig& m, const std::map<std::string, at::Tensor>& tensors,
             std::int64_t max_shard_bytes, at::ScalarType dtype = at::kFloat);

// Whether write_hf / to_hf_tensors take this model (Llama- or GPT-2-style).
bool hf_exportable(const ModelConfig& m);
// The tensors write_hf writes, by Hugging Face name.
std::vector<std::pair<std::string, at::Tensor>> to_hf_tensors(const ModelConfig& m,
                                                              const std::map<std::string, at::Tensor>& tensors);
// trainer's key/value rows [kv][k|v][D] as the key rows and the value rows ([kv][D] each).
std::pair<at::Tensor, at::Tensor> split_kv(const at::Tensor& kv, int kv_heads);

// `trainer import-hf`: writes `output`/step_00000000 (the weights as one rank's pieces, the
// derived config.yaml, meta.yaml) and `output`/latest. Returns the step directory.
std::string import_hf(const std::string& hf_dir, const std::string& output);

}  // namespace trainer::checkpoint
