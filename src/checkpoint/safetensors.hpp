// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then the raw
// little-endian data. What trainer exports and imports models in.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trainer::checkpoint {

// Every tensor of a file, as float32 (F32, BF16, F16 and F64 are read). A malformed file is a
// ConfigError-like BadInput naming the file and what is wrong.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);

// Writes `tensors` (in this order, converted to `dtype`: float32 or bfloat16) under a temporary
// name, then publishes it (runtime/files.hpp).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       at::ScalarType dtype = at::kFloat);

}  // namespace trainer::checkpoint
