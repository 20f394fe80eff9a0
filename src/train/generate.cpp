#include "train/generate.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/export.hpp"
#include "data/tokenizer.hpp"
#include "distributed/comm.hpp"
#include "model/gpt.hpp"

namespace trainer {

std::string generate(const GenerateOptions& opts) {
  const std::string dir = checkpoint::resolve_checkpoint(opts.checkpoint);
  Config cfg = load_config(dir + "/config.yaml", {"parallel.dp=1", "parallel.pp=1", "parallel.tp=1", "parallel.cp=1",
                                                  "parallel.schedule=1f1b", "parallel.virtual_stages=1",
                                                  "parallel.stage_layers=[]"});
  auto tokenizer = data::make_tokenizer(opts.tokenizer);
  if (tokenizer->vocab_size() > cfg.model.vocab_size + 1)
    throw std::runtime_error("the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                             " ids but the model only " + std::to_string(cfg.model.vocab_size));

  distributed::Comm comm(distributed::JobEnv{}, distributed::Grid(1, 1, 1), std::chrono::seconds(10));
  model::GPT gpt(cfg, comm, {0}, {{0, cfg.model.layers}});
  checkpoint::load_params(dir, cfg, gpt.params());
  auto& chunk = gpt.chunks()[0];

  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(opts.seed));
  std::vector<std::int32_t> ids = tokenizer->encode(opts.prompt);
  if (ids.empty()) ids.push_back(tokenizer->eod_id() < cfg.model.vocab_size ? tokenizer->eod_id() : 0);
  for (int n = 0; n < opts.max_new_tokens; ++n) {
    // The last seq_len tokens are the context (no KV cache: fine for models this size).
    const int64_t len = std::min<int64_t>(ids.size(), cfg.model.seq_len);
    at::Tensor context = at::empty({1, cfg.model.seq_len}, at::kLong).fill_(0);
    for (int64_t i = 0; i < len; ++i) context[0][i] = ids[ids.size() - len + i];
    at::Tensor logits = chunk.logits(chunk.forward(context, /*training=*/false))[0][len - 1];
    logits = logits.narrow(0, 0, cfg.model.vocab_size).to(at::kFloat, false, true);  // padding is never generated
    int64_t next;
    if (opts.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits.div_(opts.temperature);
      if (opts.top_k > 0 && opts.top_k < logits.size(0)) {
        const double kth = std::get<0>(logits.topk(opts.top_k)).min().item<double>();
        logits.masked_fill_(logits.lt(kth), -INFINITY);
      }
      next = at::multinomial(at::softmax(logits, 0), 1, false, gen).item<int64_t>();
    }
    ids.push_back(static_cast<std::int32_t>(next));
  }
  // Ids the tokenizer cannot decode (the model's vocab may be larger) are skipped.
  std::vector<std::int32_t> known;
  for (auto id : ids)
    if (id < tokenizer->vocab_size()) known.push_back(id);
  return tokenizer->decode(known);
}

}  // namespace trainer
