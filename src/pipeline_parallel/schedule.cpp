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

int max_in_flight(const std::vector<Action>& actions) {
  int live = 0, most = 0;
  for (const auto& a : actions) {
    if (a.op == Op::Forward) most = std::max(most, ++live);
    if (a.op == Op::Backward) --live;
  }
  return most;
}

Simulation simulate(Schedule schedule, int stages, int microbatches, int chunks) {
  const int v = schedule == Schedule::Interleaved1F1B ? chunks : 1;
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < stages; ++s) lists.push_back(make_schedule(schedule, s, stages, microbatches, v));
  // A message is (direction, receiving global chunk, microbatch) -> time it was sent.
  std::map<std::tuple<int, int, int>, double> sent;
  std::vector<size_t> next(stages, 0);
  std::vector<double> clock(stages, 0.0);
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < lists[s].size()) {
        const Action& a = lists[s][next[s]];
        const int global = global_chunk(a.chunk, s, stages);
        if (a.op == Op::RecvForward || a.op == Op::RecvBackward) {
          auto it = sent.find({a.op == Op::RecvForward ? 0 : 1, global, a.microbatch});
          if (it == sent.end()) break;  // not sent yet: this stage waits
          clock[s] = std::max(clock[s], it->second);
        } else if (a.op == Op::Forward || a.op == Op::Backward) {
          clock[s] += 1.0;
        } else if (a.op == Op::SendForward) {
          sent[{0, global + 1, a.microbatch}] = clock[s];
        } else {
          sent[{1, global - 1, a.microbatch}] = clock[s];
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
