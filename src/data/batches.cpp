#include "data/batches.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

#include "model/params.hpp"

namespace trainer::data {
namespace {

std::uint64_t mix(std::uint64_t seed, std::int64_t index) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class SyntheticSource : public BatchSource {
 public:
  SyntheticSource(std::uint64_t seed, int vocab, int seq_len) : seed_(seed), vocab_(vocab), len_(seq_len + 1) {}
  at::Tensor samples(std::int64_t first, std::int64_t count) const override {
    at::Tensor out = at::empty({count, len_}, at::kLong);
    auto acc = out.accessor<int64_t, 2>();
    for (std::int64_t i = 0; i < count; ++i) {
      const std::uint64_t r = mix(seed_, first + i);
      const std::int64_t start = static_cast<std::int64_t>(r % vocab_);
      const std::int64_t stride = 1 + static_cast<std::int64_t>((r >> 32) % 7);
      for (int t = 0; t < len_; ++t) acc[i][t] = (start + stride * t) % vocab_;
    }
    return out;
  }

 private:
  std::uint64_t seed_;
  int vocab_, len_;
};

class TokenFileSource : public BatchSource {
 public:
  TokenFileSource(const std::string& path, std::uint64_t seed, int vocab, int seq_len)
      : seed_(seed), len_(seq_len + 1) {
    fd_ = open(path.c_str(), O_RDONLY);
    struct stat st {};
    if (fd_ < 0 || fstat(fd_, &st) != 0) throw std::runtime_error("cannot open token file " + path);
    tokens_ = static_cast<std::int64_t>(st.st_size) / 2;
    if (tokens_ <= len_)
      throw std::runtime_error("token file " + path + " holds " + std::to_string(tokens_) +
                               " tokens, fewer than one sample of " + std::to_string(len_));
    map_ = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd_, 0);
    if (map_ == MAP_FAILED) throw std::runtime_error("cannot mmap token file " + path);
    bytes_ = static_cast<size_t>(st.st_size);
    vocab_ = vocab;
    path_ = path;
  }
  ~TokenFileSource() override {
    if (map_ && map_ != MAP_FAILED) munmap(map_, bytes_);
    if (fd_ >= 0) close(fd_);
  }
  at::Tensor samples(std::int64_t first, std::int64_t count) const override {
    const auto* data = static_cast<const std::uint16_t*>(map_);
    at::Tensor out = at::empty({count, len_}, at::kLong);
    auto acc = out.accessor<int64_t, 2>();
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t start = static_cast<std::int64_t>(mix(seed_, first + i) % (tokens_ - len_));
      for (int t = 0; t < len_; ++t) {
        const int id = data[start + t];
        if (id >= vocab_)
          throw std::runtime_error("token file " + path_ + " has token id " + std::to_string(id) +
                                   " >= model.vocab_size " + std::to_string(vocab_));
        acc[i][t] = id;
      }
    }
    return out;
  }

 private:
  std::uint64_t seed_;
  int len_, vocab_ = 0;
  int fd_ = -1;
  void* map_ = nullptr;
  size_t bytes_ = 0;
  std::int64_t tokens_ = 0;
  std::string path_;
};

}  // namespace

std::unique_ptr<BatchSource> make_source(const Config& cfg) {
  const std::uint64_t seed = model::seed_for(cfg.runtime.seed, "data");
  if (cfg.data.source == "tokens")
    return std::make_unique<TokenFileSource>(cfg.data.path, seed, cfg.model.vocab_size, cfg.model.seq_len);
  return std::make_unique<SyntheticSource>(seed, cfg.model.vocab_size, cfg.model.seq_len);
}

std::unique_ptr<BatchSource> make_validation_source(const Config& cfg) {
  const std::uint64_t seed = model::seed_for(cfg.runtime.seed, "validation");
  if (cfg.data.source == "tokens")
    return std::make_unique<TokenFileSource>(cfg.data.valid_path, seed, cfg.model.vocab_size, cfg.model.seq_len);
  return std::make_unique<SyntheticSource>(seed, cfg.model.vocab_size, cfg.model.seq_len);
}

std::vector<pipeline::MicroBatch> local_microbatches(const BatchSource& src, const Config& cfg,
                                                     std::int64_t step, int dp_rank) {
  const int global = cfg.train.global_batch_size;
  const int per_rank = global / cfg.parallel.dp;
  const int mbs = cfg.parallel.micro_batch_size;
  at::Tensor mine = src.samples(step * global + static_cast<std::int64_t>(dp_rank) * per_rank, per_rank);
  std::vector<pipeline::MicroBatch> out;
  for (int i = 0; i < per_rank / mbs; ++i) {
    at::Tensor s = mine.narrow(0, static_cast<int64_t>(i) * mbs, mbs);
    const int64_t S = cfg.model.seq_len;
    out.push_back({s.narrow(1, 0, S).contiguous(), s.narrow(1, 1, S).contiguous()});
  }
  return out;
}

}  // namespace trainer::data
