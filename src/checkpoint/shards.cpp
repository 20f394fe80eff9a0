#include "checkpoint/shards.hpp"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/files.hpp"

namespace trainer::checkpoint {

namespace fs = std::filesystem;

namespace {

std::uint64_t file_checksum(const std::string& path) {
  // FNV-1a over the bytes: cheap, and enough to catch truncation and corruption.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof(buf));
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 1099511628211ull;
    }
  }
  return h;
}

void write_bytes(const std::string& path, const std::string& data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const bool ok = f && std::fwrite(data.data(), 1, data.size(), f) == data.size();
  const bool closed = f && std::fclose(f) == 0;
  if (!ok || !closed)
    throw std::runtime_error("cannot write " + path + " (disk full or not writable?): " + std::strerror(errno));
}

void write_shape(std::ostream& out, const std::vector<int64_t>& shape) {
  out << ' ' << shape.size();
  for (auto d : shape) out << ' ' << d;
}

std::vector<int64_t> read_shape(std::istream& in) {
  size_t n = 0;
  in >> n;
  std::vector<int64_t> shape(n);
  for (auto& d : shape) in >> d;
  return shape;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace

Piece range_piece(const model::Param& p, const std::string& name, int64_t begin, int64_t end,
                  const at::Tensor& flat) {
  Piece piece;
  piece.name = name;
  piece.full_shape = p.info.full_shape;
  piece.shard_dim = p.info.shard_dim;
  piece.shard_offset = p.info.shard_offset;
  piece.local_shape = p.tensor.sizes().vec();
  piece.flat_begin = begin;
  piece.flat_end = end;
  piece.data = flat.detach().reshape({-1}).clone();
  return piece;
}

std::vector<Piece> param_pieces(const std::vector<model::Param>& params, bool with_grads) {
  std::vector<Piece> out;
  for (const auto& p : params) {
    out.push_back(range_piece(p, p.info.name, 0, p.tensor.numel(), p.tensor));
    if (with_grads && p.tensor.grad().defined())
      out.push_back(range_piece(p, p.info.name + ".grad", 0, p.tensor.numel(), p.tensor.grad()));
  }
  return out;
}

void write_pieces(const std::string& base, const std::vector<Piece>& pieces) {
  std::vector<at::Tensor> tensors;
  std::ostringstream index;
  for (const auto& p : pieces) {
    index << p.name << ' ' << p.shard_dim << ' ' << p.shard_offset << ' ' << p.flat_begin << ' ' << p.flat_end;
    write_shape(index, p.full_shape);
    write_shape(index, p.local_shape);
    index << '\n';
    tensors.push_back(p.data.cpu());  // files hold CPU tensors, whatever device trained
  }
  // Serialise in memory, then write with checked calls: LibTorch's file writer aborts the
  // process on a short write (disk full) instead of throwing.
  std::ostringstream bytes;
  torch::save(tensors, bytes);
  const std::string data_tmp = base + ".pt.tmp";
  write_bytes(data_tmp, bytes.str());
  std::ostringstream header;
  header << "checksum " << std::hex << file_checksum(data_tmp) << std::dec << '\n';
  runtime::publish(data_tmp, base + ".pt");
  runtime::write_file_atomic(base + ".index", header.str() + index.str());
}

std::vector<Piece> read_pieces(const std::string& base) {
  std::ifstream in(base + ".index");
  if (!in) throw std::runtime_error("cannot read " + base + ".index");
  std::string word;
  std::string expected;
  in >> word >> expected;
  if (word != "checksum") throw std::runtime_error(base + ".index: not a shard index");
  std::ostringstream actual;
  actual << std::hex << file_checksum(base + ".pt");
  if (actual.str() != expected)
    throw std::runtime_error(base + ".pt: checksum mismatch (file truncated or corrupted)");
  std::vector<at::Tensor> tensors;
  torch::load(tensors, base + ".pt");
  std::vector<Piece> pieces;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream s(line);
    Piece p;
    s >> p.name >> p.shard_dim >> p.shard_offset >> p.flat_begin >> p.flat_end;
    p.full_shape = read_shape(s);
    p.local_shape = read_shape(s);
    if (!s || pieces.size() >= tensors.size()) throw std::runtime_error(base + ".index: malformed line: " + line);
    p.data = tensors[pieces.size()];
    pieces.push_back(std::move(p));
  }
  return pieces;
}

std::vector<Piece> read_all_pieces(const std::string& dir) {
  std::vector<Piece> all;
  for (int rank = 0; fs::exists(dir + "/rank" + std::to_string(rank) + ".index"); ++rank) {
    auto pieces = read_pieces(dir + "/rank" + std::to_string(rank));
    all.insert(all.end(), std::make_move_iterator(pieces.begin()), std::make_move_iterator(pieces.end()));
  }
  if (all.empty()) throw std::runtime_error("no shards found in " + dir);
  return all;
}

std::map<std::string, at::Tensor> assemble(const std::vector<Piece>& pieces, const std::set<std::string>* only) {
  // First the TP shards (flat ranges filled in), then the full tensors.
  struct Shard {
    at::Tensor flat, filled;
    const Piece* first;
  };
  std::map<std::pair<std::string, int64_t>, Shard> shards;
  for (const auto& p : pieces) {
    if (only && !only->count(p.name)) continue;
    auto key = std::make_pair(p.name, p.shard_offset);
    auto it = shards.find(key);
    if (it == shards.end()) {
      const int64_t n = numel_of(p.local_shape);
      it = shards.emplace(key, Shard{at::zeros({n}, p.data.options()), at::zeros({n}, at::kBool), &p}).first;
    }
    at::Tensor dst = it->second.flat.narrow(0, p.flat_begin, p.flat_end - p.flat_begin);
    at::Tensor seen = it->second.filled.narrow(0, p.flat_begin, p.flat_end - p.flat_begin);
    if (seen.any().item<bool>() && !at::equal(dst.masked_select(seen), p.data.masked_select(seen)))
      throw std::runtime_error("copies of tensor '" + p.name + "' held by different ranks differ");
    dst.copy_(p.data);
    seen.fill_(true);
  }
  std::map<std::string, at::Tensor> full;
  for (auto& [key, shard] : shards) {
    const Piece& p = *shard.first;
    if (!shard.filled.all().item<bool>())
      throw std::runtime_error("tensor '" + p.name + "' is incomplete: some ranks' shards are missing");
    auto it = full.find(p.name);
    if (it == full.end()) it = full.emplace(p.name, at::zeros(p.full_shape, p.data.options())).first;
    at::Tensor local = shard.flat.view(p.local_shape);
    if (p.shard_dim < 0) it->second.copy_(local);
    else it->second.narrow(p.shard_dim, p.shard_offset, p.local_shape[p.shard_dim]).copy_(local);
  }
  return full;
}

std::map<std::string, at::Tensor> read_full(const std::string& dir) { return assemble(read_all_pieces(dir)); }

}  // namespace trainer::checkpoint
