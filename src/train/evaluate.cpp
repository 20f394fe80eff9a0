#include "train/evaluate.hpp"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>

#include "checkpoint/checkpoint.hpp"
#include "config/bad_input.hpp"
#include "data/indexed_dataset.hpp"
#include "data/microbatch.hpp"
#include "pipeline_parallel/runner.hpp"
#include "train/trainer.hpp"

namespace trainer {
namespace {

// The first `count` tokens of the dataset's documents, back to back.
std::vector<std::int64_t> leading_tokens(const data::IndexedDataset& ds, std::int64_t count) {
  std::vector<std::int64_t> out;
  out.reserve(count);
  for (size_t d = 0; d < ds.num_documents() && static_cast<std::int64_t>(out.size()) < count; ++d) {
    const data::TokenSpan doc = ds.document(d);
    for (size_t i = 0; i < doc.length && static_cast<std::int64_t>(out.size()) < count; ++i) out.push_back(doc[i]);
  }
  return out;
}

// This DP rank's microbatches of evaluation batch `batch`: window w (of the global batch's
// G = global_batch_size) is tokens [w (S+1), (w+1)(S+1)); windows at or past `windows` are
// padding whose targets are ignored (-100).
std::vector<data::MicroBatch> eval_microbatches(const Config& cfg, const std::vector<std::int64_t>& tokens, int windows,
                                                 int batch, int dp_rank, const c10::Device& device) {
  const int64_t S = cfg.model.seq_len, B = cfg.parallel.micro_batch_size;
  const int per_rank = cfg.train.global_batch_size / cfg.parallel.dp;
  std::vector<data::MicroBatch> out;
  for (int mb = 0; mb < per_rank / B; ++mb) {
    at::Tensor x = at::zeros({B, S}, at::kLong), y = at::full({B, S}, -100, at::kLong);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t w = static_cast<int64_t>(batch) * cfg.train.global_batch_size + dp_rank * per_rank + mb * B + b;
      if (w >= windows) continue;
      const at::Tensor window = at::tensor(std::vector<std::int64_t>(tokens.begin() + w * (S + 1), tokens.begin() + (w + 1) * (S + 1)));
      x[b].copy_(window.narrow(0, 0, S));
      y[b].copy_(window.narrow(0, 1, S));
    }
    out.push_back({x.to(device), y.to(device)});
  }
  return out;
}

}  // namespace

int run_evaluation(const Config& cfg, const distributed::JobEnv& job, const EvalOptions& opts) {
  const data::IndexedDataset ds(opts.data);
  const int64_t S = cfg.model.seq_len;
  const int64_t available = ds.num_tokens() / (S + 1);
  if (opts.windows < 1 || opts.windows > available)
    throw BadInput("--windows " + std::to_string(opts.windows) + ": " + opts.data + " holds " + std::to_string(available) +
                   " windows of seq_len + 1 = " + std::to_string(S + 1) + " tokens; ask for 1 to " + std::to_string(available));
  const auto tokens = leading_tokens(ds, opts.windows * (S + 1));

  const auto joined = join(cfg, job);
  distributed::Comm& comm = *joined;
  model::GPT model = build_model(cfg, comm);
  checkpoint::load_weights(opts.checkpoint, cfg, model.params());
  pipeline_parallel::Runner runner(cfg, model, comm);

  // Each window's S predictions weigh the same: the summed loss over windows * S.
  const double loss_scale = 1.0 / (static_cast<double>(opts.windows) * S);
  const int batches = (opts.windows + cfg.train.global_batch_size - 1) / cfg.train.global_batch_size;
  double total = 0;
  for (int b = 0; b < batches; ++b)
    total += runner.eval_step(eval_microbatches(cfg, tokens, opts.windows, b, comm.coord().dp, comm.device()), loss_scale);
  const double l = global_loss(total, runner, comm);
  if (reports_loss(runner, comm)) {
    std::cout << "eval: " << opts.windows << " windows x " << S << " tokens: loss " << l << ", perplexity " << std::exp(l)
              << std::endl;
  }
  return 0;
}

}  // namespace trainer
