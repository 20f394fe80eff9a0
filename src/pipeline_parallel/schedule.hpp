// Pipeline schedules as pure functions: (stage, stages, microbatches[, chunks]) -> the ordered
// list of actions that stage executes. No tensors, no communication: runner.cpp executes the
// list, and the tests check the lists (and simulate them) on their own.
//
// Chunks: with v model chunks per stage (interleaved), local chunk c of stage s is global model
// chunk c * stages + s. With v = 1 the local chunk is always 0.
#pragma once

#include "config/config.hpp"

#include <string>
#include <tuple>
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

bool is_transfer(Op op);  // a send or a receive (not a computation)

// What a send or receive action carries: an activation (direction 0) or a gradient (1) of
// `microbatch`, for the global chunk that receives it. A send and a receive pair up when
// their messages are equal.
struct Message {
  int direction;
  int receiving_chunk;
  int microbatch;
  auto key() const { return std::make_tuple(direction, receiving_chunk, microbatch); }
  bool operator==(const Message& o) const { return key() == o.key(); }
  bool operator<(const Message& o) const { return key() < o.key(); }
};
Message message_of(const Action& transfer, int stage, int stages);

// 1F1B (PipeDream-flush): warm-up forwards = min(stages - stage - 1, microbatches), then one
// forward / one backward, then the remaining backwards.
std::vector<Action> schedule_1f1b(int stage, int stages, int microbatches);
// GPipe: all forwards, then all backwards, in the same microbatch order (0, 1, ...).
std::vector<Action> schedule_gpipe(int stage, int stages, int microbatches);
// Megatron's interleaved 1F1B with `chunks` model chunks per stage; microbatches % stages == 0.
std::vector<Action> schedule_interleaved(int stage, int stages, int microbatches, int chunks);
// The schedule parallel.schedule names.
std::vector<Action> make_schedule(Schedule schedule, int stage, int stages, int microbatches, int chunks);
// Evaluation: that schedule's forward actions alone, in its order.
std::vector<Action> forward_only(Schedule schedule, int stage, int stages, int microbatches, int chunks);

// The most microbatches whose activations a stage holds at once (forwards minus backwards),
// counting only local chunk `chunk` when it is given.
int max_in_flight(const std::vector<Action>& actions, int chunk = -1);

// Executes every stage's list with unit cost per forward/backward and free communication.
// bubble_fraction = idle / makespan; deadlock = some stage waits forever.
struct Simulation {
  double makespan = 0;
  double bubble_fraction = 0;
  bool deadlock = false;
};
Simulation simulate(Schedule schedule, int stages, int microbatches, int chunks);

// Batches of transfers for a backend that pairs a send with the peer's receive by their order,
// not by tag, and runs a rank's batches one after another (NCCL: one group of sends and
// receives at a time). A batch is the indices of the transfer actions started together, which
// are in list order; batches are started in order. All stages must agree on them.
using Batch = std::vector<size_t>;

// Each run of consecutive transfers between two computations, as one batch. In 1F1B that pairs
// "send activation + receive gradient" after a forward and "send gradient + receive activation"
// after a backward, as Megatron does.
std::vector<Batch> transfer_runs(const std::vector<Action>& actions);

// Batches for every stage (lists[stage]) that cannot deadlock: starts from the runs, executes
// all stages' batches in a simulation of those rules, and wherever every stage waits, moves the
// receive one of them waits for (with the receives from the same peer before it) into the
// batch its stage is blocked in. Receives only move earlier, so each computation still finds
// its input received. For 1F1B and GPipe the runs already suffice; interleaved needs moves.
std::vector<std::vector<Batch>> order_paired_batches(const std::vector<std::vector<Action>>& lists);

// Runs every stage's batches under those rules: a batch completes once each of its transfers'
// counterparts has been started on the peer (the n-th send from a stage to a peer pairs with the
// peer's n-th receive from that stage). `mismatch` says where a pair's messages differ or a
// transfer has no counterpart.
struct BatchCheck {
  bool deadlock = false;
  std::string mismatch;
};
BatchCheck check_transfer_batches(const std::vector<std::vector<Action>>& lists,
                                  const std::vector<std::vector<Batch>>& batches);

// Theoretical bubble: (p-1)/(m+p-1), or (p-1)/(v*m+p-1) interleaved.
double theoretical_bubble(int stages, int microbatches, int chunks);

// [begin, end) layers of each of `num_chunks` global chunks: even split (earlier chunks take
// the remainder) or the explicit per-chunk counts.
std::vector<std::pair<int, int>> partition_layers(int layers, int num_chunks,
                                                  const std::vector<int>& explicit_counts);

}  // namespace trainer::pipeline_parallel
