// Pipeline schedules as pure functions: (stage, stages, microbatches[, chunks]) -> the ordered
// list of actions that stage executes. No tensors, no communication: runner.cpp executes the
// list, and the tests check the lists (and simulate them) on their own.
//
// Chunks: with v model chunks per stage (interleaved), local chunk c of stage s is global model
// chunk c * stages + s. With v = 1 the local chunk is always 0.
#pragma once

#include "config/config.hpp"

#include <string>
#include <utility>
#include <vector>

namespace trainer::pipeline_parallel {

enum class Op { RecvForward, Forward, SendForward, RecvBackward, Backward, SendBackward };

struct Action {
  Op op;
  int microbatch;
  int chunk;  // local chunk index on this stage
  bool operator==(const Action& o) const {
    return op == o.op && microbatch == o.microbatch && chunk == o.chunk;
  }
};

std::string to_string(const Action& a);

// The global model chunk that local chunk `local_chunk` of `stage` holds (Megatron's order).
inline int global_chunk(int local_chunk, int stage, int stages) { return local_chunk * stages + stage; }

// 1F1B (PipeDream-flush): warm-up forwards = min(stages - stage - 1, microbatches), then one
// forward / one backward, then the remaining backwards.
std::vector<Action> schedule_1f1b(int stage, int stages, int microbatches);
// GPipe: all forwards, then all backwards, in the same microbatch order (0, 1, ...).
std::vector<Action> schedule_gpipe(int stage, int stages, int microbatches);
// Megatron's interleaved 1F1B with `chunks` model chunks per stage; microbatches % stages == 0.
std::vector<Action> schedule_interleaved(int stage, int stages, int microbatches, int chunks);
// The schedule parallel.schedule names.
std::vector<Action> make_schedule(Schedule schedule, int stage, int stages, int microbatches, int chunks);

// The most microbatches whose activations a stage holds at once (forwards minus backwards).
int max_in_flight(const std::vector<Action>& actions);

// Executes every stage's list with unit cost per forward/backward and free communication.
// bubble_fraction = idle / makespan; deadlock = some stage waits forever.
struct Simulation {
  double makespan = 0;
  double bubble_fraction = 0;
  bool deadlock = false;
};
Simulation simulate(Schedule schedule, int stages, int microbatches, int chunks);

// Theoretical bubble: (p-1)/(m+p-1), or (p-1)/(v*m+p-1) interleaved.
double theoretical_bubble(int stages, int microbatches, int chunks);

// [begin, end) layers of each of `num_chunks` global chunks: even split (earlier chunks take
// the remainder) or the explicit per-chunk counts.
std::vector<std::pair<int, int>> partition_layers(int layers, int num_chunks,
                                                  const std::vector<int>& explicit_counts);

}  // namespace trainer::pipeline_parallel
