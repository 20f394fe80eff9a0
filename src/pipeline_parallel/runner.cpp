#include "pipeline_parallel/runner.hpp"

#include "runtime/clock.hpp"

#include <torch/torch.h>

#include <map>

#include "context_parallel/context_parallel.hpp"
#include "pipeline_parallel/schedule.hpp"

namespace trainer::pipeline_parallel {

using runtime::Clock;
using runtime::seconds_since;

// What a stage keeps for one (microbatch, chunk) between its forward and its backward.
struct InFlight {
  at::Tensor input;   // received activation (requires grad) or tokens
  at::Tensor output;  // activation to send on, or the scaled loss on the last chunk
  at::Tensor grad_in; // gradient received for `output`
  at::Tensor input_grad;
  distributed::Pending recv;
};

// Point-to-point transfers between chunks. When every chunk lives on this rank (pp = 1 with
// several virtual stages) a message is handed over directly instead of sent to ourselves.
class Mailbox {
 public:
  Mailbox(distributed::Group& pp, bool local) : pp_(pp), local_(local) {}
  // Starts `batch`; one Pending per transfer (a local receive is filled at once).
  std::vector<distributed::Pending> start(const std::vector<distributed::Transfer>& batch) {
    if (!local_) {
      auto pending = distributed::start_transfers(pp_, batch);
      for (size_t i = 0; i < batch.size(); ++i)
        if (batch[i].kind == distributed::Transfer::Send) sends_.push_back(std::move(pending[i]));
      return pending;
    }
    for (const auto& t : batch) {
      if (t.kind == distributed::Transfer::Send) {
        local_messages_[t.tag] = t.tensor;
      } else {
        t.tensor.copy_(local_messages_.at(t.tag));
        local_messages_.erase(t.tag);
      }
    }
    return std::vector<distributed::Pending>(batch.size());
  }
  void wait_sends() {
    for (auto& s : sends_) s.wait();
    sends_.clear();
  }

 private:
  distributed::Group& pp_;
  bool local_;
  std::vector<distributed::Pending> sends_;
  std::map<int, at::Tensor> local_messages_;
};

namespace {

// Microbatches whose forward activations this stage holds (an entry may also be just a receive
// posted ahead, which holds no activations yet).
int activations_held(const std::map<std::pair<int, int>, InFlight>& live) {
  int n = 0;
  for (const auto& entry : live) n += entry.second.output.defined();
  return n;
}

bool is_receive(Op op) { return op == Op::RecvForward || op == Op::RecvBackward; }

}  // namespace

namespace {

// parallel.pipeline_transfers: auto is order-paired where the PP group pairs messages by their
// order (NCCL); order-paired on Gloo runs NCCL's batching on CPUs (the tests use it: Gloo still
// matches by tag, so only the results can be checked).
Transfers choose_transfers(PipelineTransfers setting, int stages, distributed::Group& pp) {
  if (stages == 1) return Transfers::Local;
  switch (setting) {
    case PipelineTransfers::OrderPaired: return Transfers::OrderPaired;
    case PipelineTransfers::OneByOne: return Transfers::OneByOne;
    case PipelineTransfers::Auto: break;
  }
  return distributed::matches_by_order(pp) ? Transfers::OrderPaired : Transfers::OneByOne;
}

}  // namespace

Runner::Runner(const Config& cfg, model::GPT& model, distributed::Comm& comm)
    : cfg_(cfg),
      model_(model),
      comm_(comm),
      stage_(comm.coord().pp),
      stages_(comm.grid().pp()),
      chunks_(static_cast<int>(model.chunks().size())),
      transfers_(choose_transfers(cfg.parallel.pipeline_transfers, stages_, comm.pp())) {}

bool Runner::holds_loss() const { return model_.chunks().back().last(); }

at::Tensor Runner::activation_buffer() const {
  const auto& m = cfg_.model;
  const bool sp = cfg_.parallel.sequence_parallel && comm_.tp().size() > 1;
  const int64_t local = m.seq_len / comm_.cp().size();  // this CP rank's tokens
  const int64_t s = sp ? local / comm_.tp().size() : local;
  // The residual stream's dtype: bf16 travels in a bf16 model (half the bytes of fp32).
  return at::empty({cfg_.parallel.micro_batch_size, s, m.hidden},
                   at::TensorOptions().dtype(model::residual_dtype(cfg_)).device(comm_.device()));
}

int Runner::tag(const Message& msg, int microbatches) const {
  return (msg.direction * stages_ * chunks_ + msg.receiving_chunk) * microbatches + msg.microbatch;
}

std::vector<Action> Runner::actions_of(int stage, bool training, int microbatches) const {
  return training ? make_schedule(cfg_.parallel.schedule, stage, stages_, microbatches, chunks_)
                  : forward_only(cfg_.parallel.schedule, stage, stages_, microbatches, chunks_);
}

// The batches this stage starts its transfers in: where the PP group pairs messages by order
// (NCCL), batches all stages agree on (order_paired_batches, given every stage's list);
// elsewhere each transfer alone. They depend only on the step's kind and microbatch count, so
// each is worked out once.
const std::vector<Batch>& Runner::transfer_batches(bool training, int microbatches) const {
  auto [it, fresh] = batches_.try_emplace({training, microbatches});
  if (!fresh) return it->second;
  if (transfers_ == Transfers::OrderPaired) {
    std::vector<std::vector<Action>> lists;
    for (int s = 0; s < stages_; ++s) lists.push_back(actions_of(s, training, microbatches));
    it->second = order_paired_batches(lists)[stage_];
  } else {
    const auto actions = actions_of(stage_, training, microbatches);
    for (size_t i = 0; i < actions.size(); ++i)
      if (is_transfer(actions[i].op)) it->second.push_back({i});
  }
  return it->second;
}

// Starts the transfers of `batch`: sends of what `live` holds, receives into new buffers whose
// Pending goes to `live`.
void Runner::start_transfers(const std::vector<Action>& actions, const Batch& batch_actions, int microbatches,
                             std::map<std::pair<int, int>, InFlight>& live, Mailbox& mailbox) const {
  const int next = (stage_ + 1) % stages_, prev = (stage_ - 1 + stages_) % stages_;
  std::vector<distributed::Transfer> batch;
  for (size_t j : batch_actions) {
    const Action& a = actions[j];
    const int t = tag(message_of(a, stage_, stages_), microbatches);
    InFlight& f = live[{a.microbatch, a.chunk}];
    switch (a.op) {
      case Op::SendForward: batch.push_back({distributed::Transfer::Send, f.output.detach(), next, t}); break;
      case Op::SendBackward: batch.push_back({distributed::Transfer::Send, f.input_grad, prev, t}); break;
      case Op::RecvForward:
        f.input = activation_buffer();
        batch.push_back({distributed::Transfer::Receive, f.input, prev, t});
        break;
      case Op::RecvBackward:
        f.grad_in = activation_buffer();
        batch.push_back({distributed::Transfer::Receive, f.grad_in, next, t});
        break;
      default: break;
    }
  }
  auto pending = mailbox.start(batch);
  for (size_t k = 0; k < batch_actions.size(); ++k) {
    const Action& a = actions[batch_actions[k]];
    const auto key = std::make_pair(a.microbatch, a.chunk);
    if (is_receive(a.op)) live[key].recv = std::move(pending[k]);
    // A sent gradient was the last use of that microbatch on this chunk: the transfer holds its
    // own reference, and the activations are freed now.
    if (a.op == Op::SendBackward) live.erase(key);
  }
}

StepStats Runner::train_step(const std::vector<data::MicroBatch>& mbs, double loss_scale,
                             const std::function<void(int)>& before_last_backward) {
  return run(mbs, loss_scale, /*training=*/true, before_last_backward);
}

double Runner::eval_step(const std::vector<data::MicroBatch>& mbs, double loss_scale) {
  torch::NoGradGuard no_grad;
  return run(mbs, loss_scale, /*training=*/false, [](int) {}).loss;
}

StepStats Runner::run(const std::vector<data::MicroBatch>& all_tokens, double loss_scale, bool training,
                      const std::function<void(int)>& before_last_backward) {
  // Each stage computes on this CP rank's chunks of every sequence (and sends only those on).
  const auto mbs = context_parallel::shard_microbatches(all_tokens, comm_.cp());
  const int m = static_cast<int>(mbs.size());
  const auto actions = actions_of(stage_, training, m);
  std::vector<int> last_backward(chunks_, -1);
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].op == Op::Backward) last_backward[actions[i].chunk] = static_cast<int>(i);

  std::map<std::pair<int, int>, InFlight> live;
  Mailbox mailbox(comm_.pp(), transfers_ == Transfers::Local);
  StepStats stats;
  at::Tensor loss_total = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(comm_.device()));

  // Transfers start in batches (transfer_batches), each when the list reaches its first action.
  // One by one, a receive is posted one compute action ahead of where the list puts it, so that
  // the transfer (which Gloo starts only once the receiver is ready) overlaps that computation
  // instead of being waited for; the list itself (what the tests simulate) is unchanged. (Not
  // with every chunk on this rank: there a message exists only once its send has run; nor in
  // order-paired batches, which all stages must start in the same order.)
  const auto& batches = transfer_batches(training, m);
  std::vector<size_t> batch_of(actions.size(), 0);
  for (size_t k = 0; k < batches.size(); ++k)
    for (size_t i : batches[k]) batch_of[i] = k;
  std::vector<bool> started(batches.size(), false);
  auto start_batch_of = [&](size_t i) {
    if (started[batch_of[i]]) return;
    start_transfers(actions, batches[batch_of[i]], m, live, mailbox);
    started[batch_of[i]] = true;
  };
  auto post_receives_before_next_compute = [&](size_t i) {
    for (size_t j = i + 1; j < actions.size() && is_transfer(actions[j].op); ++j)
      if (is_receive(actions[j].op)) start_batch_of(j);
  };

  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (is_transfer(a.op)) {
      start_batch_of(i);
      continue;
    }
    if (transfers_ == Transfers::OneByOne) post_receives_before_next_compute(i);
    if (a.op == Op::Forward) {
      forward(a, mbs[a.microbatch], loss_scale, training, live, stats, loss_total);
    } else {
      if (static_cast<int>(i) == last_backward[a.chunk]) before_last_backward(a.chunk);
      backward(a, live, stats);
    }
  }
  mailbox.wait_sends();
  stats.loss = loss_total.item<double>();
  return stats;
}

void Runner::forward(const Action& a, const data::MicroBatch& mb, double loss_scale, bool training,
                     std::map<std::pair<int, int>, InFlight>& live, StepStats& stats, at::Tensor& loss_total) {
  model::Chunk& chunk = model_.chunks()[a.chunk];
  InFlight& f = live[{a.microbatch, a.chunk}];
  if (chunk.first()) {
    f.input = mb.tokens;
  } else {
    const auto t0 = Clock::now();
    f.recv.wait();
    stats.wait_seconds += seconds_since(t0);
    if (training) f.input.requires_grad_(true);
  }
  f.output = chunk.forward(f.input, training);
  if (!chunk.last()) {
    f.output = f.output.contiguous();  // it is sent as it is
  } else if (training) {
    // The scaled loss is what backward starts from.
    f.output = chunk.loss_sum(f.output, mb.targets) * loss_scale;
    loss_total += f.output.detach().to(at::kDouble);
  } else {
    loss_total += chunk.loss_sum(f.output, mb.targets).to(at::kDouble) * loss_scale;
    live.erase({a.microbatch, a.chunk});
  }
  stats.max_in_flight = std::max(stats.max_in_flight, activations_held(live));
}

void Runner::backward(const Action& a, std::map<std::pair<int, int>, InFlight>& live, StepStats& stats) {
  model::Chunk& chunk = model_.chunks()[a.chunk];
  InFlight& f = live[{a.microbatch, a.chunk}];
  if (chunk.last()) {
    torch::autograd::backward({f.output});
  } else {
    const auto t0 = Clock::now();
    f.recv.wait();
    stats.wait_seconds += seconds_since(t0);
    torch::autograd::backward({f.output}, {f.grad_in});
  }
  if (chunk.first()) live.erase({a.microbatch, a.chunk});  // nothing to send: free the activations now
  else f.input_grad = f.input.grad();
}

}  // namespace trainer::pipeline_parallel
