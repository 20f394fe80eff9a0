#include "pipeline_parallel/schedule.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

namespace trainer::pipeline_parallel {
namespace {

// Wraps a forward/backward with the receive before it and the send after it, where the
// neighbouring global chunk exists.
void add_forward(std::vector<Action>& out, int stage, int stages, int chunks, int mb, int c) {
  const int global = global_chunk(c, stage, stages);
  if (global > 0) out.push_back({Op::RecvForward, mb, c});
  out.push_back({Op::Forward, mb, c});
  if (global < stages * chunks - 1) out.push_back({Op::SendForward, mb, c});
}

void add_backward(std::vector<Action>& out, int stage, int stages, int chunks, int mb, int c) {
  const int global = global_chunk(c, stage, stages);
  if (global < stages * chunks - 1) out.push_back({Op::RecvBackward, mb, c});
  out.push_back({Op::Backward, mb, c});
  if (global > 0) out.push_back({Op::SendBackward, mb, c});
}

void check_args(int stage, int stages, int microbatches, int chunks) {
  if (stages < 1 || stage < 0 || stage >= stages || microbatches < 1 || chunks < 1)
    throw std::invalid_argument("schedule: need 0 <= stage < stages, microbatches >= 1, chunks >= 1");
}

}  // namespace

std::string to_string(const Action& a) {
  static const char* names[] = {"recv_fwd", "F", "send_fwd", "recv_bwd", "B", "send_bwd"};
  return std::string(names[static_cast<int>(a.op)]) + "(mb" + std::to_string(a.microbatch) +
         ",c" + std::to_string(a.chunk) + ")";
}

bool is_transfer(Op op) { return op != Op::Forward && op != Op::Backward; }

Message message_of(const Action& a, int stage, int stages) {
  const int global = global_chunk(a.chunk, stage, stages);
  switch (a.op) {
    case Op::SendForward: return {0, global + 1, a.microbatch};
    case Op::RecvForward: return {0, global, a.microbatch};
    case Op::SendBackward: return {1, global - 1, a.microbatch};
    case Op::RecvBackward: return {1, global, a.microbatch};
    default: throw std::invalid_argument("message_of: " + to_string(a) + " is not a transfer");
  }
}

std::vector<Action> schedule_1f1b(int stage, int stages, int microbatches) {
  check_args(stage, stages, microbatches, 1);
  const int warmup = std::min(stages - stage - 1, microbatches);
  std::vector<Action> out;
  int next_f = 0, next_b = 0;
  for (int i = 0; i < warmup; ++i) add_forward(out, stage, stages, 1, next_f++, 0);
  while (next_f < microbatches) {  // steady state: one forward, one backward
    add_forward(out, stage, stages, 1, next_f++, 0);
    add_backward(out, stage, stages, 1, next_b++, 0);
  }
  while (next_b < microbatches) add_backward(out, stage, stages, 1, next_b++, 0);
  return out;
}

std::vector<Action> schedule_gpipe(int stage, int stages, int microbatches) {
  check_args(stage, stages, microbatches, 1);
  std::vector<Action> out;
  for (int mb = 0; mb < microbatches; ++mb) add_forward(out, stage, stages, 1, mb, 0);
  for (int mb = 0; mb < microbatches; ++mb) add_backward(out, stage, stages, 1, mb, 0);
  return out;
}

std::vector<Action> schedule_interleaved(int stage, int stages, int microbatches, int chunks) {
  check_args(stage, stages, microbatches, chunks);
  if (chunks == 1) return schedule_1f1b(stage, stages, microbatches);
  if (microbatches % stages != 0)
    throw std::invalid_argument("interleaved schedule needs microbatches divisible by stages");
  // Microbatches go through the chunks in groups of `stages`: forward k visits chunk
  // (k / stages) % chunks; backwards visit the chunks in reverse.
  const int total = microbatches * chunks;
  auto microbatch_of = [&](int k) { return (k / (stages * chunks)) * stages + k % stages; };
  auto fwd_chunk = [&](int k) { return (k / stages) % chunks; };
  auto bwd_chunk = [&](int k) { return chunks - 1 - (k / stages) % chunks; };
  const int warmup = std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  std::vector<Action> out;
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f)
    add_forward(out, stage, stages, chunks, microbatch_of(next_f), fwd_chunk(next_f));
  for (; next_f < total; ++next_f, ++next_b) {
    add_forward(out, stage, stages, chunks, microbatch_of(next_f), fwd_chunk(next_f));
    add_backward(out, stage, stages, chunks, microbatch_of(next_b), bwd_chunk(next_b));
  }
  for (; next_b < total; ++next_b)
    add_backward(out, stage, stages, chunks, microbatch_of(next_b), bwd_chunk(next_b));
  return out;
}

std::vector<Action> make_schedule(Schedule schedule, int stage, int stages, int microbatches, int chunks) {
  switch (schedule) {
    case Schedule::OneFOneB: return schedule_1f1b(stage, stages, microbatches);
    case Schedule::GPipe: return schedule_gpipe(stage, stages, microbatches);
    case Schedule::Interleaved1F1B: return schedule_interleaved(stage, stages, microbatches, chunks);
  }
  throw std::invalid_argument("unknown schedule");
}

std::vector<Action> forward_only(Schedule schedule, int stage, int stages, int microbatches, int chunks) {
  std::vector<Action> out;
  for (const Action& a : make_schedule(schedule, stage, stages, microbatches, chunks))
    if (a.op == Op::RecvForward || a.op == Op::Forward || a.op == Op::SendForward) out.push_back(a);
  return out;
}

int max_in_flight(const std::vector<Action>& actions, int chunk) {
  int live = 0, most = 0;
  for (const auto& a : actions) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    if (a.op == Op::Forward) most = std::max(most, ++live);
    if (a.op == Op::Backward) --live;
  }
  return most;
}

Simulation simulate(Schedule schedule, int stages, int microbatches, int chunks) {
  const int v = schedule == Schedule::Interleaved1F1B ? chunks : 1;
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < stages; ++s) lists.push_back(make_schedule(schedule, s, stages, microbatches, v));
  std::map<Message, double> sent;  // -> the time it was sent
  std::vector<size_t> next(stages, 0);
  std::vector<double> clock(stages, 0.0);
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < lists[s].size()) {
        const Action& a = lists[s][next[s]];
        if (!is_transfer(a.op)) {
          clock[s] += 1.0;
        } else if (a.op == Op::SendForward || a.op == Op::SendBackward) {
          sent[message_of(a, s, stages)] = clock[s];
        } else {
          auto it = sent.find(message_of(a, s, stages));
          if (it == sent.end()) break;  // not sent yet: this stage waits
          clock[s] = std::max(clock[s], it->second);
        }
        ++next[s];
        progressed = true;
      }
    }
  }
  Simulation sim;
  for (int s = 0; s < stages; ++s) {
    if (next[s] < lists[s].size()) sim.deadlock = true;
    sim.makespan = std::max(sim.makespan, clock[s]);
  }
  const double busy = 2.0 * microbatches * v;
  sim.bubble_fraction = sim.makespan > 0 ? (sim.makespan - busy) / sim.makespan : 0;
  return sim;
}

std::vector<Batch> transfer_runs(const std::vector<Action>& actions) {
  std::vector<Batch> batches;
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!is_transfer(actions[i].op)) continue;
    if (i == 0 || !is_transfer(actions[i - 1].op)) batches.emplace_back();
    batches.back().push_back(i);
  }
  return batches;
}

namespace {

bool is_send(Op op) { return op == Op::SendForward || op == Op::SendBackward; }

int peer_of(const Action& a, int stage, int stages) {
  const bool towards_next = a.op == Op::SendForward || a.op == Op::RecvBackward;
  return (stage + (towards_next ? 1 : stages - 1)) % stages;
}

// Where each transfer's counterpart is: the n-th send from a stage to a peer and the peer's
// n-th receive from that stage. counterpart[stage][index] = {peer stage, index} ({-1, 0} for
// computations and unpaired transfers).
struct Pairing {
  std::vector<std::vector<std::pair<int, size_t>>> counterpart;
  std::string mismatch;
};

Pairing pair_transfers(const std::vector<std::vector<Action>>& lists) {
  const int stages = static_cast<int>(lists.size());
  Pairing pairing;
  // (from, to) -> the sends' (or receives') places, in order.
  std::map<std::pair<int, int>, std::vector<size_t>> sends, recvs;
  for (int s = 0; s < stages; ++s) {
    pairing.counterpart.emplace_back(lists[s].size(), std::make_pair(-1, size_t(0)));
    for (size_t i = 0; i < lists[s].size(); ++i) {
      const Action& a = lists[s][i];
      if (!is_transfer(a.op)) continue;
      const int peer = peer_of(a, s, stages);
      if (is_send(a.op)) sends[{s, peer}].push_back(i);
      else recvs[{peer, s}].push_back(i);
    }
  }
  for (const auto& [route, places] : sends) {
    const auto& theirs = recvs[route];
    const auto [from, to] = route;
    if (theirs.size() != places.size() && pairing.mismatch.empty())
      pairing.mismatch = "stage " + std::to_string(from) + " sends " + std::to_string(places.size()) +
                         " messages to stage " + std::to_string(to) + ", which receives " + std::to_string(theirs.size());
    for (size_t n = 0; n < std::min(places.size(), theirs.size()); ++n) {
      const Action& sent = lists[from][places[n]];
      const Action& received = lists[to][theirs[n]];
      if (!(message_of(sent, from, stages) == message_of(received, to, stages)) && pairing.mismatch.empty())
        pairing.mismatch = "stage " + std::to_string(from) + " sends " + to_string(sent) + " where stage " +
                           std::to_string(to) + " receives " + to_string(received);
      pairing.counterpart[from][places[n]] = {to, theirs[n]};
      pairing.counterpart[to][theirs[n]] = {from, places[n]};
    }
  }
  for (const auto& [route, places] : recvs)
    if (!sends.count(route) && pairing.mismatch.empty())
      pairing.mismatch = "stage " + std::to_string(route.second) + " receives from stage " +
                         std::to_string(route.first) + ", which sends nothing";
  return pairing;
}

// Every stage's batches executing together. current[s] is the batch stage s has started and
// waits in (batches.size() once done); a batch completes once every transfer in it has a
// started counterpart.
struct BatchRun {
  const std::vector<std::vector<Batch>>& batches;
  const Pairing& pairing;
  std::vector<std::vector<size_t>> batch_of;  // [stage][action index] -> batch
  std::vector<size_t> current;

  BatchRun(const std::vector<std::vector<Batch>>& b, const Pairing& p, const std::vector<std::vector<Action>>& lists)
      : batches(b), pairing(p), current(b.size(), 0) {
    for (size_t s = 0; s < b.size(); ++s) {
      batch_of.emplace_back(lists[s].size(), 0);
      for (size_t k = 0; k < b[s].size(); ++k)
        for (size_t i : b[s][k]) batch_of[s][i] = k;
    }
  }
  bool started(int stage, size_t index) const { return batch_of[stage][index] <= current[stage]; }
  bool can_complete(size_t s) const {
    for (size_t i : batches[s][current[s]]) {
      const auto [peer, j] = pairing.counterpart[s][i];
      if (peer >= 0 && !started(peer, j)) return false;
    }
    return true;
  }
  void run() {
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (size_t s = 0; s < batches.size(); ++s)
        for (; current[s] < batches[s].size() && can_complete(s); ++current[s]) progressed = true;
    }
  }
  bool finished() const {
    for (size_t s = 0; s < batches.size(); ++s)
      if (current[s] < batches[s].size()) return false;
    return true;
  }
};

}  // namespace

BatchCheck check_transfer_batches(const std::vector<std::vector<Action>>& lists,
                                  const std::vector<std::vector<Batch>>& batches) {
  const Pairing pairing = pair_transfers(lists);
  BatchRun run(batches, pairing, lists);
  run.run();
  return {!run.finished(), pairing.mismatch};
}

std::vector<std::vector<Batch>> order_paired_batches(const std::vector<std::vector<Action>>& lists) {
  const int stages = static_cast<int>(lists.size());
  const Pairing pairing = pair_transfers(lists);
  if (!pairing.mismatch.empty()) throw std::logic_error("pipeline transfers do not pair up: " + pairing.mismatch);
  std::vector<std::vector<Batch>> batches;
  for (const auto& actions : lists) batches.push_back(transfer_runs(actions));
  BatchRun run(batches, pairing, lists);
  // Moving receives into the batch a stage is blocked in only adds work to batches that have
  // not completed, so the run resumes where it stopped.
  for (run.run(); !run.finished(); run.run()) {
    bool moved = false;
    for (int s = 0; s < stages && !moved; ++s) {
      if (run.current[s] == batches[s].size()) continue;
      for (size_t i : batches[s][run.current[s]]) {
        const auto [q, j] = pairing.counterpart[s][i];
        if (q < 0 || run.started(q, j) || is_send(lists[q][j].op)) continue;
        // Receive j on stage q, and the receives from stage s before it, join q's current batch.
        Batch& into = batches[q][run.current[q]];
        for (size_t k = 0; k <= j; ++k) {
          const Action& a = lists[q][k];
          if (!is_transfer(a.op) || is_send(a.op) || peer_of(a, q, stages) != s || run.started(q, k)) continue;
          Batch& from = batches[q][run.batch_of[q][k]];
          from.erase(std::find(from.begin(), from.end(), k));
          into.push_back(k);
          run.batch_of[q][k] = run.current[q];
        }
        std::sort(into.begin(), into.end());
        moved = true;
        break;
      }
    }
    if (!moved) throw std::logic_error("pipeline transfers: no batch order avoids a deadlock");
  }
  for (auto& stage_batches : batches)
    stage_batches.erase(std::remove_if(stage_batches.begin(), stage_batches.end(), [](const Batch& b) { return b.empty(); }),
                        stage_batches.end());
  return batches;
}

double theoretical_bubble(int stages, int microbatches, int chunks) {
  return (stages - 1.0) / (static_cast<double>(chunks) * microbatches + stages - 1.0);
}

std::vector<std::pair<int, int>> partition_layers(int layers, int num_chunks,
                                                  const std::vector<int>& explicit_counts) {
  std::vector<int> counts = explicit_counts;
  if (counts.empty()) {
    for (int c = 0; c < num_chunks; ++c) counts.push_back(layers / num_chunks + (c < layers % num_chunks));
  }
  if (static_cast<int>(counts.size()) != num_chunks)
    throw std::invalid_argument("partition_layers: one count per chunk needed");
  std::vector<std::pair<int, int>> ranges;
  int begin = 0;
  for (int n : counts) {
    ranges.emplace_back(begin, begin + n);
    begin += n;
  }
  if (begin != layers) throw std::invalid_argument("partition_layers: counts do not sum to layers");
  return ranges;
}

}  // namespace trainer::pipeline_parallel
