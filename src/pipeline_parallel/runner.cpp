#include "pipeline_parallel/runner.hpp"

#include "runtime/clock.hpp"

#include <torch/torch.h>

#include <chrono>
#include <map>

#include "pipeline_parallel/schedule.hpp"

namespace trainer::pipeline_parallel {
namespace {

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
// several virtual stages) the tensors are handed over directly instead of sent to ourselves.
class Mailbox {
 public:
  Mailbox(distributed::Group& pp, bool local) : pp_(pp), local_(local) {}
  void send(const at::Tensor& t, int peer, int tag) {
    if (local_) local_messages_[tag] = t;
    else sends_.push_back(distributed::send_async(pp_, t, peer, tag));
  }
  // Fills `buffer` (now, if local; when the returned operation completes, otherwise).
  distributed::Pending receive(at::Tensor& buffer, int peer, int tag) {
    if (!local_) return distributed::recv_async(pp_, buffer, peer, tag);
    buffer = local_messages_.at(tag);
    local_messages_.erase(tag);
    return distributed::Pending();
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

// Microbatches whose forward activations this stage holds (an entry may also be just a receive
// posted ahead, which holds no activations yet).
int activations_held(const std::map<std::pair<int, int>, InFlight>& live) {
  int n = 0;
  for (const auto& entry : live) n += entry.second.output.defined();
  return n;
}

}  // namespace

Runner::Runner(const Config& cfg, model::GPT& model, distributed::Comm& comm)
    : cfg_(cfg), model_(model), comm_(comm) {
  stage_ = comm.coord().pp;
  stages_ = comm.grid().pp();
  chunks_ = static_cast<int>(model.chunks().size());
}

bool Runner::holds_loss() const { return model_.chunks().back().last(); }

at::Tensor Runner::activation_buffer() const {
  const auto& m = cfg_.model;
  const bool sp = cfg_.parallel.sequence_parallel && comm_.tp().size() > 1;
  const int64_t s = sp ? m.seq_len / comm_.tp().size() : m.seq_len;
  return at::empty({cfg_.parallel.micro_batch_size, s, m.hidden},
                   at::TensorOptions().dtype(at::kFloat).device(comm_.device()));
}

int Runner::tag(int direction, int receiving_global_chunk, int microbatch, int microbatches) const {
  return (direction * stages_ * chunks_ + receiving_global_chunk) * microbatches + microbatch;
}

StepStats Runner::train_step(const std::vector<model::MicroBatch>& mbs, double loss_scale,
                             const std::function<void(int)>& before_last_backward) {
  const int m = static_cast<int>(mbs.size());
  const auto actions = make_schedule(cfg_.parallel.schedule, stage_, stages_, m, chunks_);
  std::vector<int> last_backward(chunks_, -1);
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].op == Op::Backward) last_backward[actions[i].chunk] = static_cast<int>(i);

  distributed::Group& pp = comm_.pp();
  const int next = (stage_ + 1) % stages_, prev = (stage_ - 1 + stages_) % stages_;
  std::map<std::pair<int, int>, InFlight> live;
  Mailbox mailbox(pp, stages_ == 1);
  StepStats stats;
  at::Tensor loss_total = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(comm_.device()));

  // A receive is posted one compute action ahead of where the list puts it, so that the
  // transfer (which Gloo starts only once the receiver is ready) overlaps that computation
  // instead of being waited for; the list itself (what the tests simulate) is unchanged. (Not
  // with every chunk on this rank: there a message exists only once its send has run.)
  std::vector<bool> posted(actions.size(), false);
  auto post_receive = [&](size_t j) {
    const Action& r = actions[j];
    InFlight& f = live[{r.microbatch, r.chunk}];
    const int global = global_chunk(r.chunk, stage_, stages_);
    at::Tensor& buffer = r.op == Op::RecvForward ? f.input : f.grad_in;
    buffer = activation_buffer();
    f.recv = mailbox.receive(buffer, r.op == Op::RecvForward ? prev : next,
                             tag(r.op == Op::RecvForward ? 0 : 1, global, r.microbatch, m));
    posted[j] = true;
  };
  auto is_compute = [&](size_t j) { return actions[j].op == Op::Forward || actions[j].op == Op::Backward; };
  auto post_receives_before_next_compute = [&](size_t i) {
    for (size_t j = i + 1; j < actions.size() && !is_compute(j); ++j)
      if (!posted[j] && (actions[j].op == Op::RecvForward || actions[j].op == Op::RecvBackward)) post_receive(j);
  };

  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const auto key = std::make_pair(a.microbatch, a.chunk);
    const int global = global_chunk(a.chunk, stage_, stages_);
    model::Chunk& chunk = model_.chunks()[a.chunk];
    if (is_compute(i) && stages_ > 1) post_receives_before_next_compute(i);
    switch (a.op) {
      case Op::RecvForward:
      case Op::RecvBackward:
        if (!posted[i]) post_receive(i);
        break;
      case Op::Forward: {
        InFlight& f = live[key];
        if (chunk.first()) {
          f.input = mbs[a.microbatch].tokens;
        } else {
          const auto t0 = Clock::now();
          f.recv.wait();
          stats.wait_seconds += seconds_since(t0);
          f.input.requires_grad_(true);
        }
        const auto t0 = Clock::now();
        f.output = chunk.forward(f.input);
        if (chunk.last()) {
          f.output = chunk.loss_sum(f.output, mbs[a.microbatch].targets) * loss_scale;
          loss_total += f.output.detach().to(at::kDouble);
        }
        stats.compute_seconds += seconds_since(t0);
        stats.max_in_flight = std::max(stats.max_in_flight, activations_held(live));
        break;
      }
      case Op::SendForward:
        mailbox.send(live[key].output.detach(), next, tag(0, global + 1, a.microbatch, m));
        break;
      case Op::Backward: {
        InFlight& f = live[key];
        if (static_cast<int>(i) == last_backward[a.chunk]) before_last_backward(a.chunk);
        if (!chunk.last()) {
          const auto t0 = Clock::now();
          f.recv.wait();
          stats.wait_seconds += seconds_since(t0);
        }
        const auto t0 = Clock::now();
        if (chunk.last()) torch::autograd::backward({f.output});
        else torch::autograd::backward({f.output}, {f.grad_in});
        if (!chunk.first()) f.input_grad = f.input.grad();
        stats.compute_seconds += seconds_since(t0);
        if (chunk.first()) live.erase(key);  // nothing to send: free the activations now
        break;
      }
      case Op::SendBackward: {
        InFlight& f = live[key];
        mailbox.send(f.input_grad, prev, tag(1, global - 1, a.microbatch, m));
        live.erase(key);  // the send holds its own reference; activations are freed
        break;
      }
    }
  }
  mailbox.wait_sends();
  stats.loss = loss_total.item<double>();
  return stats;
}

double Runner::eval_step(const std::vector<model::MicroBatch>& mbs, double loss_scale) {
  torch::NoGradGuard no_grad;
  const int m = static_cast<int>(mbs.size());
  distributed::Group& pp = comm_.pp();
  const int next = (stage_ + 1) % stages_, prev = (stage_ - 1 + stages_) % stages_;
  double loss = 0;
  Mailbox mailbox(pp, stages_ == 1);
  // Forward-only: each chunk in order, every microbatch through it (the GPipe forward phase).
  for (int c = 0; c < chunks_; ++c) {
    model::Chunk& chunk = model_.chunks()[c];
    const int global = global_chunk(c, stage_, stages_);
    for (int mb = 0; mb < m; ++mb) {
      at::Tensor x = mbs[mb].tokens;
      if (!chunk.first()) {
        x = activation_buffer();
        mailbox.receive(x, prev, tag(0, global, mb, m)).wait();
      }
      at::Tensor out = chunk.forward(x);
      if (chunk.last()) {
        loss += chunk.loss_sum(out, mbs[mb].targets).item<double>() * loss_scale;
      } else {
        mailbox.send(out.contiguous(), next, tag(0, global + 1, mb, m));
      }
    }
  }
  mailbox.wait_sends();
  return loss;
}

}  // namespace trainer::pipeline_parallel
