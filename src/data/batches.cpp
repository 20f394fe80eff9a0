#include "data/batches.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <stdexcept>

#include "data/common.hpp"
#include "data/indexed_dataset.hpp"

#include "runtime/seed.hpp"

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

// Fixed windows of seq_len + 1 tokens over a token stream (every document back to back, with
// its end-of-document token if the data was prepared with one). Window w covers tokens
// [w * seq_len, w * seq_len + seq_len], so consecutive windows share one token and every token
// is a target once per epoch. Sample i of the run is window perm_epoch[i % N] of epoch i / N,
// where perm_epoch is a permutation drawn from (seed, epoch): a pure function of the index.
class WindowSource : public BatchSource {
 public:
  WindowSource(std::shared_ptr<void> owner, TokenSpan tokens, std::string file, std::uint64_t seed,
               int vocab, int seq_len)
      : owner_(std::move(owner)), tokens_(tokens), file_(std::move(file)), seed_(seed), vocab_(vocab), seq_len_(seq_len) {
    windows_ = (static_cast<std::int64_t>(tokens_.length) - 1) / seq_len_;
    if (windows_ < 1)
      throw DataError(file_ + " holds " + std::to_string(tokens_.length) + " tokens, fewer than one sample of " +
                      std::to_string(seq_len_ + 1) + " (model.seq_len + 1)");
  }

  at::Tensor samples(std::int64_t first, std::int64_t count) const override {
    at::Tensor out = at::empty({count, seq_len_ + 1}, at::kLong);
    auto acc = out.accessor<int64_t, 2>();
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t index = first + i;
      const std::int64_t window = permutation(index / windows_)[index % windows_];
      const std::int64_t start = window * seq_len_;
      for (int t = 0; t <= seq_len_; ++t) {
        const std::int64_t id = tokens_[static_cast<size_t>(start + t)];
        if (id < 0 || id >= vocab_)
          throw DataError(file_ + ": token id " + std::to_string(id) + " at position " + std::to_string(start + t) +
                          " is outside model.vocab_size " + std::to_string(vocab_));
        acc[i][t] = id;
      }
    }
    return out;
  }

 private:
  const std::vector<std::int64_t>& permutation(std::int64_t epoch) const {
    auto it = permutations_.find(epoch);
    if (it != permutations_.end()) return it->second;
    if (permutations_.size() > 2) permutations_.clear();  // only the current epochs are needed
    auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(seed_, epoch));
    at::Tensor perm = at::randperm(windows_, gen, at::kLong);
    std::vector<std::int64_t> order(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + windows_);
    return permutations_.emplace(epoch, std::move(order)).first->second;
  }

  std::shared_ptr<void> owner_;  // keeps the memory map alive
  TokenSpan tokens_;
  std::string file_;
  std::uint64_t seed_;
  int vocab_, seq_len_;
  std::int64_t windows_ = 0;
  mutable std::map<std::int64_t, std::vector<std::int64_t>> permutations_;
};

std::unique_ptr<BatchSource> window_source(const Config& cfg, const std::string& path, std::uint64_t seed) {
  if (cfg.data.source == DataSource::Indexed) {
    auto ds = std::make_shared<IndexedDataset>(path);
    // Megatron writes every document back to back: the whole .bin is one token stream.
    TokenSpan all = ds->num_documents() ? ds->document(0) : TokenSpan{};
    all.length = static_cast<size_t>(ds->num_tokens());
    return std::make_unique<WindowSource>(ds, all, path + ".bin", seed, cfg.model.vocab_size, cfg.model.seq_len);
  }
  auto file = std::make_shared<MappedFile>(path);  // raw uint16 tokens, nanoGPT's layout
  TokenSpan all{file->data(), file->size() / 2, TokenType::kUInt16};
  return std::make_unique<WindowSource>(file, all, path, seed, cfg.model.vocab_size, cfg.model.seq_len);
}

// A weighted blend (Megatron's scheme): sample i goes to the dataset whose share so far lags
// its weight the most, and takes that dataset's next sample. Deterministic, so every layout
// sees the same blend; the assignment of samples is built lazily and kept.
class BlendSource : public BatchSource {
 public:
  BlendSource(std::vector<std::unique_ptr<BatchSource>> sources, std::vector<double> weights)
      : sources_(std::move(sources)), weights_(std::move(weights)), counts_(sources_.size(), 0) {
    double total = 0;
    for (double w : weights_) total += w;
    for (double& w : weights_) w /= total;
  }

  at::Tensor samples(std::int64_t first, std::int64_t count) const override {
    extend(first + count);
    std::vector<at::Tensor> rows;
    for (std::int64_t i = first; i < first + count; ++i)
      rows.push_back(sources_[assignment_[i].first]->samples(assignment_[i].second, 1));
    return at::cat(rows);
  }

 private:
  void extend(std::int64_t n) const {
    while (static_cast<std::int64_t>(assignment_.size()) < n) {
      const double next = static_cast<double>(assignment_.size()) + 1;
      size_t best = 0;
      for (size_t k = 1; k < weights_.size(); ++k)
        if (weights_[k] * next - counts_[k] > weights_[best] * next - counts_[best]) best = k;
      assignment_.emplace_back(best, counts_[best]++);
    }
  }

  std::vector<std::unique_ptr<BatchSource>> sources_;
  std::vector<double> weights_;
  mutable std::vector<std::int64_t> counts_;
  mutable std::vector<std::pair<size_t, std::int64_t>> assignment_;
};

}  // namespace

std::unique_ptr<BatchSource> make_source(const Config& cfg) {
  const std::uint64_t seed = runtime::seed_for(cfg.runtime.seed, "data");
  if (cfg.data.source == DataSource::Synthetic) return std::make_unique<SyntheticSource>(seed, cfg.model.vocab_size, cfg.model.seq_len);
  if (cfg.data.paths.empty()) return window_source(cfg, cfg.data.path, seed);
  std::vector<std::unique_ptr<BatchSource>> sources;
  std::vector<double> weights;
  for (size_t k = 0; k < cfg.data.paths.size(); ++k) {
    sources.push_back(window_source(cfg, cfg.data.paths[k].path, runtime::seed_for(seed, std::to_string(k))));
    weights.push_back(cfg.data.paths[k].weight);
  }
  return std::make_unique<BlendSource>(std::move(sources), std::move(weights));
}

std::unique_ptr<BatchSource> make_validation_source(const Config& cfg) {
  const std::uint64_t seed = runtime::seed_for(cfg.runtime.seed, "validation");
  if (cfg.data.source != DataSource::Synthetic) return window_source(cfg, cfg.data.valid_path, seed);
  return std::make_unique<SyntheticSource>(seed, cfg.model.vocab_size, cfg.model.seq_len);
}

std::vector<data::MicroBatch> local_microbatches(const BatchSource& src, const Config& cfg,
                                                     std::int64_t step, int dp_rank, c10::Device device) {
  const int global = cfg.train.global_batch_size;
  const int per_rank = global / cfg.parallel.dp;
  const int mbs = cfg.parallel.micro_batch_size;
  at::Tensor mine = src.samples(step * global + static_cast<std::int64_t>(dp_rank) * per_rank, per_rank);
  std::vector<data::MicroBatch> out;
  for (int i = 0; i < per_rank / mbs; ++i) {
    at::Tensor s = mine.narrow(0, static_cast<int64_t>(i) * mbs, mbs);
    const int64_t S = cfg.model.seq_len;
    out.push_back({s.narrow(1, 0, S).contiguous().to(device), s.narrow(1, 1, S).contiguous().to(device)});
  }
  return out;
}

}  // namespace trainer::data
