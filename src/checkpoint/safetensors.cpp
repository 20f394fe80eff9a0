#include "checkpoint/safetensors.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/bad_input.hpp"
#include "runtime/files.hpp"

namespace trainer::checkpoint {
namespace {

[[noreturn]] void malformed(const std::string& path, const std::string& why) {
  throw BadInput(path + " is not a readable safetensors file: " + why);
}

at::ScalarType dtype_of(const std::string& path, const std::string& name) {
  if (name == "F32") return at::kFloat;
  if (name == "BF16") return at::kBFloat16;
  if (name == "F16") return at::kHalf;
  if (name == "F64") return at::kDouble;
  malformed(path, "dtype " + name + " is not supported (F32, BF16, F16, F64 are)");
}

}  // namespace

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput("cannot open " + path);
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) malformed(path, "shorter than 8 bytes");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  const auto file_size = std::filesystem::file_size(path);
  if (n > file_size - 8) malformed(path, "header length " + std::to_string(n) + " exceeds the file");
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const std::uint64_t data_size = file_size - 8 - n;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    malformed(path, std::string("header: ") + e.what());
  }
  if (!root.is_object()) malformed(path, "the header is not a JSON object");
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, spec] : root.items()) {
    if (name == "__metadata__") continue;
    std::string dtype_name;
    std::vector<int64_t> shape;
    std::vector<std::uint64_t> offsets;
    try {
      dtype_name = spec.at("dtype").get<std::string>();
      shape = spec.at("shape").get<std::vector<int64_t>>();
      offsets = spec.at("data_offsets").get<std::vector<std::uint64_t>>();
    } catch (const nlohmann::json::exception& e) {
      malformed(path, "tensor '" + name + "': " + e.what());
    }
    const at::ScalarType dtype = dtype_of(path, dtype_name);
    std::int64_t numel = 1;
    for (auto d : shape) numel *= d;
    if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] > data_size ||
        offsets[1] - offsets[0] != static_cast<std::uint64_t>(numel) * c10::elementSize(dtype))
      malformed(path, "tensor '" + name + "' has data_offsets that do not fit its shape and dtype");
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
    in.seekg(static_cast<std::streamoff>(8 + n + offsets[0]));
    if (!in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(offsets[1] - offsets[0])))
      malformed(path, "cannot read tensor '" + name + "'");
    out.emplace(name, t.to(at::kFloat));
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       at::ScalarType dtype) {
  if (dtype != at::kFloat && dtype != at::kBFloat16) throw std::invalid_argument("safetensors are written in F32 or BF16");
  const char* dtype_name = dtype == at::kFloat ? "F32" : "BF16";
  const int64_t element = dtype == at::kFloat ? 4 : 2;
  // Header: JSON with dtype, shape and [begin, end) byte offsets into the data that follows,
  // in the tensors' order (ordered_json: readers go by the offsets, people read it in order).
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"producer", "trainer"}};
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = t.numel() * element;
    header[name] = {{"dtype", dtype_name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));  // little endian
    out << text;
    for (const auto& [name, t] : tensors) {
      at::Tensor f = t.to(dtype).contiguous();  // x86 is little endian, as the format requires
      out.write(static_cast<const char*>(f.data_ptr()), f.numel() * element);
    }
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  runtime::publish(tmp, path);
}

}  // namespace trainer::checkpoint
