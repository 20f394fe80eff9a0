// `trainer export`: a checkpoint (any layout) as one safetensors file of the full model.
#pragma once

#include <string>

namespace trainer::checkpoint {

// GPT-2-style models (learned positions, LayerNorm, GELU, biases, tied embeddings) get Hugging
// Face GPT-2 tensor names and layouts (Conv1D weights are [in, out]; c_attn packs q, k, v);
// other models keep trainer's names, with the QKV rows reordered to [q heads | k heads | v heads].
// Vocab padding rows are dropped. Returns the number of tensors written.
int export_safetensors(const std::string& checkpoint_dir, const std::string& output);

}  // namespace trainer::checkpoint
