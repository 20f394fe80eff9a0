// `trainer export`: a checkpoint (any layout) as the full model, for other tools.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace trainer::checkpoint {

enum class ExportFormat { Safetensors, HuggingFace };

// A step directory as given, or the latest step of a checkpoint.dir.
std::string resolve_checkpoint(const std::string& dir);

// Safetensors: one file. Llama- and GPT-2-style models get Hugging Face's tensor names and
// layouts (what --format hf writes, see hf.hpp), other models trainer's names with the key and
// value rows apart (attn.k, attn.v). HuggingFace: a directory from_pretrained loads, sharded
// above `max_shard_mb`. Vocab padding rows are dropped. The tensors are written in `dtype`
// (float32, or bfloat16: the fp32 master weights rounded once). Returns the number written.
int export_model(const std::string& checkpoint, const std::string& output, ExportFormat format, double max_shard_mb,
                 at::ScalarType dtype);

}  // namespace trainer::checkpoint
