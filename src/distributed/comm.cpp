#include "distributed/comm.hpp"

#include "runtime/clock.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef TRAINER_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <spdlog/spdlog.h>

namespace trainer::distributed {

struct Backend {
  c10::intrusive_ptr<c10d::Backend> pg;  // ProcessGroupGloo or ProcessGroupNCCL
  c10::Device wire_device = c10::Device(c10::kCPU);  // where its tensors must live
  bool nccl = false;  // NCCL pairs point-to-point transfers by order
  std::chrono::milliseconds timeout{0};
};

struct Comm::StoreHolder {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<gloo::transport::Device> device;
};

namespace {

using runtime::Clock;
using runtime::seconds_since;

std::int64_t nbytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// The ranks this process may have lost contact with when an operation of `g` fails.
std::string peers_of(const Group& g) {
  std::string out;
  for (int i = 0; i < g.size(); ++i)
    if (i != g.index()) out += (out.empty() ? "" : ",") + std::to_string(g.members()[i]);
  return out;
}

[[noreturn]] void fail(const Group& g, const char* what, const std::string& why) {
  throw std::runtime_error(std::string(what) + " on group " + g.describe() + " failed (peer rank " +
                           peers_of(g) + " dead, hung or too slow?): " + why);
}

// Runs `op`, charging its time and bytes to the group, and names the group and peers on failure.
template <typename Fn>
void timed(Group& g, const char* what, std::int64_t bytes, Fn&& op) {
  const auto t0 = Clock::now();
  try {
    op();
  } catch (const std::exception& e) {
    fail(g, what, message_of(e));
  }
  g.stats().seconds += seconds_since(t0);
  g.stats().bytes += bytes;
  g.stats().calls += 1;
}

c10d::Backend& pg_of(Group& g) { return *g.backend()->pg; }

std::shared_ptr<gloo::transport::Device> make_gloo_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master_addr == "localhost" || master_addr.rfind("127.", 0) == 0)
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// A listening socket on MASTER_ADDR:MASTER_PORT for rank 0's TCPStore, which takes it over
// (TCPStoreOptions::masterListenFd); left to itself the store would listen on every interface.
// A MASTER_ADDR that resolves to a loopback address is bound only when the job is on one node:
// on Debian the host's own name maps to 127.0.1.1 in /etc/hosts, and a multi-node job whose
// store listened there would be unreachable from the other nodes. -1: listen everywhere.
int store_listener(const JobEnv& job) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(job.master_addr.c_str(), nullptr, &hints, &found) != 0 || !found)
    throw std::runtime_error("cannot resolve MASTER_ADDR '" + job.master_addr + "'");
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owner(found, freeaddrinfo);
  sockaddr_storage addr{};
  std::memcpy(&addr, found->ai_addr, found->ai_addrlen);
  const bool v4 = found->ai_family == AF_INET;
  auto* in4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
  const bool loopback = v4 ? (ntohl(in4->sin_addr.s_addr) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  const bool one_node = job.world_size == job.local_world_size;
  if (loopback && !one_node) {
    spdlog::warn("MASTER_ADDR '{}' resolves to a loopback address on rank 0 in a multi-node job: the store listens "
                 "on every interface so that the other nodes can reach it", job.master_addr);
    return -1;
  }
  const auto port = htons(static_cast<std::uint16_t>(job.master_port));
  if (v4) in4->sin_port = port;
  else in6->sin6_port = port;
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), found->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot listen on " + job.master_addr + ":" + std::to_string(job.master_port) + ": " + why);
  }
  return fd;
}

// The key-value store the process groups rendezvous through. A file (the built-in launcher's
// choice: one node, nothing listening), torchrun's agent store, or a TCPStore that rank 0
// serves on MASTER_ADDR.
c10::intrusive_ptr<c10d::Store> open_store(const JobEnv& job, std::chrono::milliseconds timeout) {
  if (!job.store_file.empty()) {
    auto store = c10::make_intrusive<c10d::FileStore>(job.store_file, job.world_size);
    store->setTimeout(timeout);
    return store;
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(job.master_port);
  opts.timeout = timeout;
  if (job.agent_store) {
    opts.isServer = false;  // torchrun's agent already serves the store
  } else {
    opts.isServer = job.rank == 0;
    opts.numWorkers = static_cast<std::size_t>(job.world_size);
    if (opts.isServer) {
      const int fd = store_listener(job);
      if (fd >= 0) opts.masterListenFd = fd;
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(job.master_addr, opts);
}

}  // namespace

struct Pending::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  Group* group = nullptr;
  std::chrono::milliseconds timeout{0};
  const char* what = "";
  at::Tensor wire, target;  // a staged operation: copy `wire` into `target` once done
};

Pending::Pending() = default;
Pending::Pending(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

void Pending::wait() {
  if (!impl_) return;
  auto impl = std::move(impl_);
  if (!impl->work) return;
  timed(*impl->group, impl->what, 0, [&] { impl->work->wait(impl->timeout); });
  impl->group->stats().calls -= 1;  // counted when it was started
  if (impl->target.defined()) impl->target.copy_(impl->wire);
}

std::string message_of(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return torch_error ? torch_error->what_without_backtrace() : e.what();
}

std::string nccl_version() {
#ifdef TRAINER_WITH_CUDA
  return c10d::getNcclVersion();
#else
  return "none";
#endif
}

Group::Group(std::string name, std::vector<int> members, int my_rank)
    : name_(std::move(name)), members_(std::move(members)) {
  for (int i = 0; i < size(); ++i)
    if (members_[i] == my_rank) index_ = i;
}
Group::~Group() = default;
void Group::set_backend(std::unique_ptr<Backend> b) { backend_ = std::move(b); }

std::string Group::describe() const {
  std::ostringstream s;
  s << name_ << "[";
  for (int i = 0; i < size(); ++i) s << (i ? "," : "") << members_[i];
  s << "]";
  return s.str();
}

Comm::Comm(const JobEnv& job, const Grid& grid, std::chrono::milliseconds timeout, c10::Device device, bool nccl)
    : rank_(job.rank),
      device_(device),
      nccl_(nccl),
      grid_(grid),
      timeout_(timeout),
      store_(std::make_unique<StoreHolder>()) {
  if (nccl && !device.is_cuda()) throw std::invalid_argument("NCCL needs a CUDA device");
  if (grid.world() > 1) {
    try {
      store_->store = c10::make_intrusive<c10d::PrefixStore>(job.store_prefix(), open_store(job, timeout));
    } catch (const std::exception& e) {
      const std::string where = job.store_file.empty()
                                    ? job.master_addr + ":" + std::to_string(job.master_port)
                                    : job.store_file;
      throw std::runtime_error("rank " + std::to_string(job.rank) + ": cannot join the job store at " + where +
                               " within " + std::to_string(timeout.count() / 1000) + " s: " + message_of(e));
    }
    store_->device = make_gloo_device(job.master_addr);
  }
  // Every rank walks the same list of groups in the same order, creating the ones it is in.
  tp_ = make_group(GroupKind::TP);
  cp_ = make_group(GroupKind::CP);
  pp_ = make_group(GroupKind::PP);
  dp_ = make_group(GroupKind::DP);
  mp_ = make_group(GroupKind::ModelParallel);
  embedding_ = make_group(GroupKind::Embedding);
  kv_ = make_group(GroupKind::KvReplicas);
  std::vector<int> all(grid.world());
  for (int r = 0; r < grid.world(); ++r) all[r] = r;
  world_ = make_group("world", all, nccl_);
}

Comm::~Comm() = default;

std::unique_ptr<Group> Comm::make_group(GroupKind kind) {
  const auto all = grid_.groups(kind);
  std::unique_ptr<Group> mine;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& members = all[i];
    if (std::find(members.begin(), members.end(), rank_) == members.end()) continue;
    mine = make_group(group_kind_name(kind) + std::to_string(i), members, nccl_);
  }
  if (!mine) mine = std::make_unique<Group>(group_kind_name(kind), std::vector<int>{}, rank_);
  return mine;
}

std::unique_ptr<Group> Comm::make_group(const std::string& name, const std::vector<int>& members, bool nccl) {
  auto group = std::make_unique<Group>(name, members, rank_);
  if (group->size() <= 1) return group;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_->store);
  auto backend = std::make_unique<Backend>();
  backend->timeout = timeout_;
  try {
    if (nccl) {
#ifdef TRAINER_WITH_CUDA
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout_;
      backend->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, group->index(), group->size(), opts);
      backend->wire_device = device_;
      backend->nccl = true;
#else
      throw std::logic_error("this build has no NCCL");
#endif
    } else {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout_);
      opts->devices.push_back(store_->device);
      opts->threads = 1;  // one Gloo thread per group: the cores belong to compute
      backend->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, group->index(), group->size(), opts);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(rank_) + ": cannot connect group " +
                             group->describe() + ": " + message_of(e));
  }
  group->set_backend(std::move(backend));
  return group;
}

std::vector<const Group*> Comm::groups() const {
  return {tp_.get(), cp_.get(), pp_.get(), dp_.get(), mp_.get(), embedding_.get(), kv_.get(), world_.get()};
}

// --- collectives ------------------------------------------------------------------------

namespace {

// Launches an operation on `g`. `wire` is the tensor the backend works on; when it is a staged
// copy of the caller's `target` (see on_wire), wait() copies the result back.
// An operation of `g` about to start; `work` is set once it has.
std::shared_ptr<Pending::Impl> pending_impl(Group& g, const char* what, std::chrono::milliseconds timeout,
                                            const at::Tensor& wire, const at::Tensor& target) {
  auto impl = std::make_shared<Pending::Impl>();
  impl->group = &g;
  impl->timeout = timeout;
  impl->what = what;
  impl->wire = wire;  // also keeps a staged send's copy alive until the send is done
  if (target.defined() && !target.is_same(wire)) impl->target = target;
  return impl;
}

Pending start(Group& g, const char* what, std::int64_t bytes, std::chrono::milliseconds timeout,
              const std::function<c10::intrusive_ptr<c10d::Work>()>& launch, const at::Tensor& wire = {},
              const at::Tensor& target = {}) {
  auto impl = pending_impl(g, what, timeout, wire, target);
  timed(g, what, bytes, [&] { impl->work = launch(); });
  return Pending(impl);
}

std::chrono::milliseconds timeout_of(Group& g) { return g.backend()->timeout; }

// What the backend is handed for `t`: `t` itself when it already lives where the backend works,
// else a copy there. Every dtype travels as itself (Gloo of LibTorch 2.x sums bf16 too), so the
// byte counters are what moved.
at::Tensor on_wire(const Group& g, const at::Tensor& t) {
  const Backend& b = *g.backend();
  if (t.device() == b.wire_device) return t;
  return t.to(b.wire_device);
}


void check_dense(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_contiguous(), what, " needs a contiguous tensor");
}

// Reduces `wire` (on the backend's device) in place; on completion `result`, `wire` or a view of
// it, lands in `target`.
Pending all_reduce_wire(Group& g, at::Tensor& wire, c10d::ReduceOp op, const char* what, const at::Tensor& result,
                        const at::Tensor& target) {
  return start(g, what, nbytes(wire), timeout_of(g), [&] {
    std::vector<at::Tensor> ts{wire};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    o.timeout = timeout_of(g);
    return pg_of(g).allreduce(ts, o);
  }, result, target);
}

Pending all_reduce_start(Group& g, at::Tensor& t, c10d::ReduceOp op, const char* what) {
  check_dense(t, what);
  at::Tensor wire = on_wire(g, t);
  return all_reduce_wire(g, wire, op, what, wire, t);
}

void reduce_in_place(Group& g, at::Tensor& t, c10d::ReduceOp op, const char* what) {
  if (g.size() <= 1) return;
  all_reduce_start(g, t, op, what).wait();
}

}  // namespace

void all_reduce(Group& g, at::Tensor& t) { reduce_in_place(g, t, c10d::ReduceOp::SUM, "all_reduce"); }

void all_reduce_max(Group& g, at::Tensor& t) {
  reduce_in_place(g, t, c10d::ReduceOp::MAX, "all_reduce(max)");
}

Pending all_reduce_async(Group& g, at::Tensor& t) {
  if (g.size() <= 1) return Pending();
  return all_reduce_start(g, t, c10d::ReduceOp::SUM, "all_reduce");
}

at::Tensor all_gather(Group& g, const at::Tensor& local, int64_t dim) {
  if (g.size() <= 1) return local;
  at::Tensor in = on_wire(g, local.contiguous());
  std::vector<std::vector<at::Tensor>> outs(1);
  for (int i = 0; i < g.size(); ++i) outs[0].push_back(at::empty_like(in));
  std::vector<at::Tensor> ins{in};
  start(g, "all_gather", nbytes(in) * g.size(), timeout_of(g), [&] {
    c10d::AllgatherOptions o;
    o.timeout = timeout_of(g);
    return pg_of(g).allgather(outs, ins, o);
  }).wait();
  return at::cat(outs[0], dim).to(local.device(), local.scalar_type());
}

at::Tensor reduce_scatter(Group& g, const at::Tensor& full, int64_t dim) {
  if (g.size() <= 1) return full;
  // The collective splits its input into equal slices along dim 0: bring `dim` to the front.
  at::Tensor in = on_wire(g, full.movedim(dim, 0).contiguous());
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] /= g.size();
  at::Tensor out = at::empty(shape, in.options());
  start(g, "reduce_scatter", nbytes(in), timeout_of(g), [&] {
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = timeout_of(g);
    return pg_of(g)._reduce_scatter_base(out, in, o);
  }).wait();
  return out.movedim(0, dim).to(full.device(), full.scalar_type()).contiguous();
}

// Gloo's all_gather and reduce_scatter stage a copy of their full buffer on the heap at every
// call (an allocation counter at dp 4 ZeRO-3 saw two 28 MB copies per bucket reduce-scatter and
// one 14 MB copy per unit gather; peak RSS grew by ~300 MB over three steps from them). ZeRO's
// full buffers are the collective's to overwrite, so on Gloo both are one in-place all-reduce of it:
// a reduce-scatter reads its member's slice of the sum; an all-gather sums its members' slices of
// a zeroed buffer (adding zeros is exact). Twice the bytes of the collective it stands for
// (docs/benchmark.md measures the step).
Pending all_gather_async(Group& g, const at::Tensor& local, at::Tensor& full) {
  check_dense(full, "all_gather");
  TORCH_CHECK(full.numel() == local.numel() * std::max(1, g.size()), "all_gather: full is not size x local");
  if (g.size() <= 1) {
    full.copy_(local);
    return Pending();
  }
  at::Tensor in = on_wire(g, local.contiguous());
  at::Tensor out = on_wire(g, full);
  if (!matches_by_order(g)) {  // Gloo (above)
    out.zero_();
    out.narrow(0, g.index() * local.numel(), local.numel()).copy_(in);
    return all_reduce_wire(g, out, c10d::ReduceOp::SUM, "all_gather", out, full);
  }
  return start(g, "all_gather", nbytes(in) * g.size(), timeout_of(g), [&] {
    c10d::AllgatherOptions o;
    o.timeout = timeout_of(g);
    return pg_of(g)._allgather_base(out, in, o);
  }, out, full);
}

Pending reduce_scatter_async(Group& g, const at::Tensor& full, at::Tensor& local) {
  check_dense(local, "reduce_scatter");
  TORCH_CHECK(full.numel() == local.numel() * std::max(1, g.size()), "reduce_scatter: full is not size x local");
  if (g.size() <= 1) {
    local.copy_(full);
    return Pending();
  }
  at::Tensor in = on_wire(g, full.contiguous());
  if (!matches_by_order(g))  // Gloo (above)
    return all_reduce_wire(g, in, c10d::ReduceOp::SUM, "reduce_scatter",
                           in.narrow(0, g.index() * local.numel(), local.numel()), local);
  at::Tensor out = on_wire(g, local);
  return start(g, "reduce_scatter", nbytes(in), timeout_of(g), [&] {
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = timeout_of(g);
    return pg_of(g)._reduce_scatter_base(out, in, o);
  }, out, local);
}

void broadcast(Group& g, at::Tensor& t, int root_index) {
  if (g.size() <= 1) return;
  check_dense(t, "broadcast");
  at::Tensor wire = on_wire(g, t);
  start(g, "broadcast", nbytes(t), timeout_of(g), [&] {
    std::vector<at::Tensor> ts{wire};
    c10d::BroadcastOptions o;
    o.rootRank = root_index;
    o.timeout = timeout_of(g);
    return pg_of(g).broadcast(ts, o);
  }, wire, t).wait();
}

bool matches_by_order(const Group& g) { return g.backend() && g.backend()->nccl; }

std::vector<Pending> start_transfers(Group& g, const std::vector<Transfer>& batch) {
  std::vector<at::Tensor> wires;
  std::int64_t bytes = 0;
  for (const Transfer& t : batch) {
    check_dense(t.tensor, t.kind == Transfer::Send ? "send" : "recv");
    wires.push_back(on_wire(g, t.tensor));
    bytes += nbytes(t.tensor);
  }
  auto launch = [&](size_t i) {
    std::vector<at::Tensor> ts{wires[i]};
    if (batch[i].kind == Transfer::Send) return pg_of(g).send(ts, batch[i].peer_index, batch[i].tag);
    return pg_of(g).recv(ts, batch[i].peer_index, batch[i].tag);
  };
  auto what = [&](size_t i) { return batch[i].kind == Transfer::Send ? "send" : "recv"; };
  // A receive's result lands in its tensor when it was staged through a copy (see on_wire).
  auto target = [&](size_t i) { return batch[i].kind == Transfer::Receive ? batch[i].tensor : at::Tensor(); };
  std::vector<Pending> pending;
  if (!matches_by_order(g)) {  // Gloo: each transfer on its own, matched by tag
    for (size_t i = 0; i < batch.size(); ++i)
      pending.push_back(start(g, what(i), nbytes(batch[i].tensor), timeout_of(g), [&] { return launch(i); }, wires[i],
                              target(i)));
    return pending;
  }
  std::vector<std::shared_ptr<Pending::Impl>> impls;
  for (size_t i = 0; i < batch.size(); ++i) impls.push_back(pending_impl(g, what(i), timeout_of(g), wires[i], target(i)));
  timed(g, "send/recv batch", bytes, [&] {  // NCCL: the whole batch is one group, one completion
    pg_of(g).startCoalescing();
    for (size_t i = 0; i < batch.size(); ++i) launch(i);
    const auto work = pg_of(g).endCoalescing();
    for (auto& impl : impls) impl->work = work;
  });
  for (auto& impl : impls) pending.push_back(Pending(impl));
  return pending;
}

void barrier(Group& g) {
  if (g.size() <= 1) return;
  start(g, "barrier", 0, timeout_of(g), [&] {
    c10d::BarrierOptions o;
    o.timeout = timeout_of(g);
    return pg_of(g).barrier(o);
  }).wait();
}

}  // namespace trainer::distributed
