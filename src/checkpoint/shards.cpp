#include "checkpoint/shards.hpp"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace trainer::checkpoint {

namespace fs = std::filesystem;

void write_shards(const std::string& dir, int rank, const std::vector<model::Param>& params,
                  bool with_grads) {
  fs::create_directories(dir);
  std::vector<at::Tensor> tensors;
  std::ostringstream index;
  auto add = [&](const std::string& name, const model::ParamInfo& info, const at::Tensor& t) {
    index << name << ' ' << info.shard_dim << ' ' << info.shard_offset;
    for (auto d : info.full_shape) index << ' ' << d;
    index << '\n';
    tensors.push_back(t.detach().clone());
  };
  for (const auto& p : params) {
    add(p.info.name, p.info, p.tensor);
    if (with_grads && p.tensor.grad().defined()) add(p.info.name + ".grad", p.info, p.tensor.grad());
  }
  const std::string base = dir + "/rank" + std::to_string(rank);
  torch::save(tensors, base + ".pt");
  std::ofstream(base + ".index") << index.str();
}

std::map<std::string, at::Tensor> read_full(const std::string& dir) {
  std::map<std::string, at::Tensor> full;
  std::map<std::string, bool> replicated_seen;
  for (int rank = 0; fs::exists(dir + "/rank" + std::to_string(rank) + ".index"); ++rank) {
    const std::string base = dir + "/rank" + std::to_string(rank);
    std::vector<at::Tensor> tensors;
    torch::load(tensors, base + ".pt");
    std::ifstream in(base + ".index");
    std::string line;
    for (size_t i = 0; std::getline(in, line); ++i) {
      std::istringstream s(line);
      std::string name;
      int dim;
      int64_t offset;
      s >> name >> dim >> offset;
      std::vector<int64_t> shape;
      for (int64_t d; s >> d;) shape.push_back(d);
      at::Tensor piece = tensors.at(i);
      auto it = full.find(name);
      if (it == full.end()) it = full.emplace(name, at::zeros(shape, piece.options())).first;
      if (dim < 0) {
        if (replicated_seen[name] && !at::equal(it->second, piece))
          throw std::runtime_error("replicated tensor '" + name + "' differs on rank " + std::to_string(rank));
        it->second.copy_(piece);
        replicated_seen[name] = true;
      } else {
        it->second.narrow(dim, offset, piece.size(dim)).copy_(piece);
      }
    }
  }
  if (full.empty()) throw std::runtime_error("no shards found in " + dir);
  return full;
}

}  // namespace trainer::checkpoint
