// The communication layer: every process group and every collective of the trainer lives here,
// and nothing outside src/distributed/ touches c10d. Each operation applies the configured timeout and
// adds its bytes and wall time to its group's counters, which the metrics report.
//
// Groups are built from the Grid (one store, one PrefixStore per group). A group of size one
// never talks to anybody: its collectives return at once, so a 1x1x1 run pays nothing.
//
// Backends: Gloo on the CPU; with `nccl`, NCCL for every group. A tensor that is not where its group's
// backend works (a CPU scalar on an NCCL group, a GPU tensor on Gloo) is copied
// there and back, so callers never need to know which backend a group has.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "distributed/grid.hpp"
#include "distributed/job_env.hpp"

namespace trainer::distributed {

struct GroupStats {
  double seconds = 0;  // wall time spent inside (or waiting on) this group's operations
  std::int64_t bytes = 0;
  std::int64_t calls = 0;
};

struct Backend;  // c10d process group, hidden from every header

// An exception's message without the C++ backtrace LibTorch's errors carry.
std::string message_of(const std::exception& e);

// The NCCL library this process runs ("2.28.9"), or "none" in a build without CUDA.
std::string nccl_version();

class Group {
 public:
  Group(std::string name, std::vector<int> members, int my_rank);
  ~Group();
  const std::string& name() const { return name_; }
  const std::vector<int>& members() const { return members_; }
  int size() const { return static_cast<int>(members_.size()); }
  int index() const { return index_; }  // this process's position among members
  GroupStats& stats() { return stats_; }
  const GroupStats& stats() const { return stats_; }
  Backend* backend() const { return backend_.get(); }
  void set_backend(std::unique_ptr<Backend> b);
  std::string describe() const;  // "tp[0,1]" for messages

 private:
  std::string name_;
  std::vector<int> members_;
  int index_ = -1;
  std::unique_ptr<Backend> backend_;
  GroupStats stats_;
};

// An operation in flight. wait() blocks until it is done (or the timeout passes, which throws),
// and adds the waited time to the group's counters: that is the exposed communication time.
class Pending {
 public:
  struct Impl;
  Pending();
  explicit Pending(std::shared_ptr<Impl> impl);
  void wait();
  bool active() const { return impl_ != nullptr; }

 private:
  std::shared_ptr<Impl> impl_;
};

class Comm {
 public:
  // Joins the job's store and builds every group this rank belongs to. `device` is where this
  // rank's tensors live; `nccl` (CUDA devices only) selects NCCL for the groups.
  Comm(const JobEnv& job, const Grid& grid, std::chrono::milliseconds timeout,
       c10::Device device = c10::Device(c10::kCPU), bool nccl = false);
  ~Comm();

  c10::Device device() const { return device_; }
  int rank() const { return rank_; }
  const Grid& grid() const { return grid_; }
  Coord coord() const { return grid_.coord_of(rank_); }
  std::chrono::milliseconds timeout() const { return timeout_; }

  Group& tp() { return *tp_; }
  Group& cp() { return *cp_; }  // the ranks that split one sequence (context parallelism)
  Group& pp() { return *pp_; }
  Group& dp() { return *dp_; }  // every rank with the same parameters: dp × cp (grid.hpp)
  Group& model_parallel() { return *mp_; }
  Group& embedding() { return *embedding_; }  // size 0 on middle stages
  Group& kv_replicas() { return *kv_; }       // size 1 unless key/value heads are replicated
  Group& world() { return *world_; }
  std::vector<const Group*> groups() const;

 private:
  std::unique_ptr<Group> make_group(GroupKind kind);
  std::unique_ptr<Group> make_group(const std::string& name, const std::vector<int>& members, bool nccl);

  int rank_;
  c10::Device device_;
  bool nccl_;
  Grid grid_;
  std::chrono::milliseconds timeout_;
  struct StoreHolder;
  std::unique_ptr<StoreHolder> store_;
  std::unique_ptr<Group> tp_, cp_, pp_, dp_, mp_, embedding_, kv_, world_;
};

// --- collectives (all members of the group must call them in the same order) -------------
void all_reduce(Group& g, at::Tensor& t);              // sum, in place
Pending all_reduce_async(Group& g, at::Tensor& t);     // sum, in place
void all_reduce_max(Group& g, at::Tensor& t);          // max, in place
// Concatenates every member's `local` along `dim`, in member order.
at::Tensor all_gather(Group& g, const at::Tensor& local, int64_t dim);
// Sums `full` over the group and returns this member's slice along `dim`.
at::Tensor reduce_scatter(Group& g, const at::Tensor& full, int64_t dim);
// Flat and asynchronous (ZeRO-2/3): `full` (size × local's numel elements) takes every member's
// `local` in member order; and `full` summed over the group leaves this member's slice in `local`
// (on Gloo `full` is overwritten by the sum: comm.cpp says why).
Pending all_gather_async(Group& g, const at::Tensor& local, at::Tensor& full);
Pending reduce_scatter_async(Group& g, const at::Tensor& full, at::Tensor& local);
void broadcast(Group& g, at::Tensor& t, int root_index);
// Point-to-point between members of a group, by member index.
struct Transfer {
  enum Kind { Send, Receive } kind;
  at::Tensor tensor;  // what is sent, or the buffer the receive fills
  int peer_index;
  int tag;  // keeps messages apart on Gloo; NCCL ignores it (see matches_by_order)
};
// Starts the transfers of `batch` together and returns one Pending per transfer. On NCCL the
// batch is one NCCL group (ncclGroupStart/End through c10d coalescing), so that two neighbours
// whose sends cross (each sending to the other and receiving from it) cannot deadlock.
std::vector<Pending> start_transfers(Group& g, const std::vector<Transfer>& batch);
// True where the backend pairs a send with the peer's receive by their order, not by tag, and
// runs a rank's transfers one batch after another (NCCL): both sides must then start the same
// messages in the same order, batched so that crossing transfers start together.
bool matches_by_order(const Group& g);
void barrier(Group& g);

}  // namespace trainer::distributed
