#include "dist/comm.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <thread>

#include "core/compat.h"
#include "core/error.h"
#include "dist/liveness.h"

namespace glint {

uint64_t Comm::total_bytes_sent() const {
  uint64_t n = 0;
  for (const auto& kv : bytes_) n += kv.second;
  return n;
}

namespace {

uint64_t nbytes(const at::Tensor& t) { return uint64_t(t.numel()) * t.element_size(); }

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// This process's place in its job, for messages (Comm::create sets it).
World g_world;

// Names the lost ranks when the job's heartbeats tell (dist/liveness.h). `rank` is the
// rank in the failed group; messages give the job's rank.
[[noreturn]] void collective_failed(const char* op, int rank, const std::exception& e) {
  (void)rank;
  std::string lost = job_lost_ranks();
  fail(describe_rank(g_world, g_world.rank), ": ", op, " failed: ", first_line(e.what()), "; ",
       lost.empty() ? std::string("another rank may have exited or timed out") : lost);
}

// Starts a c10d collective; a failure to start reads as a failure to finish.
template <typename F>
c10::intrusive_ptr<c10d::Work> start_work(const char* op, int rank, F&& start) {
  try {
    return start();
  } catch (const std::exception& e) {
    collective_failed(op, rank, e);
  }
}

void wait_work(c10d::Work& work, const char* op, int rank) {
  try {
    work.wait();
  } catch (const std::exception& e) {
    collective_failed(op, rank, e);
  }
}

// A blocking collective.
template <typename F>
void run_collective(const char* op, int rank, F&& start) {
  wait_work(*start_work(op, rank, start), op, rank);
}

// A c10d work in flight and what makes its result once it is done. `finish` holds the
// work's tensors, so they live as long as the collective.
class WorkInFlight : public PendingCollective {
 public:
  // worker_lets_go: the backend's worker thread holds the work a moment after it is done.
  WorkInFlight(c10::intrusive_ptr<c10d::Work> work, std::function<at::Tensor()> finish, const char* op, int rank,
               bool worker_lets_go = false)
      : work_(std::move(work)), finish_(std::move(finish)), op_(op), rank_(rank), worker_lets_go_(worker_lets_go) {}
  ~WorkInFlight() override {
    if (!work_) return;
    try {
      work_->wait();
    } catch (...) {  // the rank is failing already; nothing left to report to
    }
  }
  at::Tensor wait() override {
    GLINT_ASSERT(work_, op_, " waited for twice");
    c10::intrusive_ptr<c10d::Work> work = std::move(work_);
    wait_work(*work, op_, rank_);
    if (worker_lets_go_) {
      // Gloo's worker thread marks the work done before it drops its own reference to it.
      // Waiting those few microseconds for it frees the buffers the work holds here, on
      // the thread that made them: where the allocators' reports (--profile) see the free
      // and not a buffer that never dies.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      while (work.use_count() > 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }
    return finish_();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<at::Tensor()> finish_;
  const char* op_;
  int rank_;
  bool worker_lets_go_;
};

// One process: every collective is the identity (or a copy).
class SoloComm : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(at::Tensor&) override {}
  at::Tensor all_gather(const at::Tensor& t) override { return t.clone(); }
  at::Tensor reduce_scatter_sum(const at::Tensor& t) override { return t.clone(); }
  at::Tensor all_to_all(const at::Tensor& t, const std::vector<int64_t>& send,
                        const std::vector<int64_t>& recv) override {
    GLINT_ASSERT(send.size() == 1 && recv.size() == 1 && send[0] == recv[0] && send[0] == t.size(0));
    return t.clone();
  }
  void broadcast(at::Tensor&, int root) override { GLINT_ASSERT(root == 0); }
  at::Tensor gather(const at::Tensor& t, int root) override {
    GLINT_ASSERT(root == 0);
    return t.clone();
  }
  void barrier() override {}
  std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks, const std::string&) override {
    GLINT_ASSERT(ranks.size() == 1 && ranks[0] == 0);
    return std::make_shared<SoloComm>();
  }
};

// The TCPStore every group of the job meets through (rank 0 hosts it).
c10::intrusive_ptr<c10d::Store> rendezvous(const World& w) {
  auto timeout = dist_timeout();
  try {
    c10d::TCPStoreOptions so;
    so.port = uint16_t(w.master_port);
    so.isServer = w.rank == 0;
    so.numWorkers = w.world_size;
    so.waitWorkers = true;
    so.timeout = timeout;
    return compat::make_tcp_store(w.master_addr, so);
  } catch (const std::exception& e) {
    // libtorch 2.x's store waits for the other ranks itself (1.13 waits in the group).
    std::string what = e.what();
    std::string first = what.substr(0, what.find('\n'));
    if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos)
      fail("rank ", w.rank, ": the other ranks did not join the rendezvous at ", w.master_addr, ":", w.master_port,
           " within ", timeout.count() / 1000, " s (GLINT_DIST_TIMEOUT_SECONDS); did every rank start, with the "
           "same WORLD_SIZE? ", first);
    fail("rank ", w.rank, ": rendezvous at ", w.master_addr, ":", w.master_port, " failed (",
         w.rank == 0 ? "is the port taken?" : "is rank 0 up and the address reachable?", "): ", first);
  }
}

// The store and this rank's index for a group over `ranks` (ascending, this rank among
// them): keys are prefixed by the tag and the member list, so groups stay distinct.
std::pair<c10::intrusive_ptr<c10d::Store>, int> subgroup_store(const c10::intrusive_ptr<c10d::Store>& store,
                                                                const std::vector<int>& ranks,
                                                                const std::string& tag, int rank) {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  GLINT_ASSERT(it != ranks.end(), "rank ", rank, " is not in subgroup ", tag);
  std::string prefix = "group/" + tag + "/";
  for (int r : ranks) prefix += std::to_string(r) + ",";
  return {c10::make_intrusive<c10d::PrefixStore>(prefix, store), int(it - ranks.begin())};
}

// Gloo in libtorch 1.13 lacks _allgather_base, reduce_scatter, list all-to-all, AVG and
// 16-bit floats (measured); each is built from what it has, which every later Gloo has
// too, so one implementation serves all builds: all-gather into dim-0 chunks of one flat
// buffer, all-to-all as alltoall_base with split sizes, reduce-scatter as an alltoall_base
// of equal chunks and a local sum (the bytes of a real one), 16-bit floats summed in
// float32 or moved as raw bytes (gloo_carries). Comm sums only: callers divide.
class GlooComm : public Comm {
 public:
  GlooComm(const World& w) : rank_(w.rank), size_(w.world_size), host_(w.master_addr) {
    store_ = rendezvous(w);
    pg_ = make_group(store_, w.rank, w.world_size, host_, w.rank);
  }

  // A group over a subset: ranks of the new group are indices into `ranks`.
  GlooComm(c10::intrusive_ptr<c10d::Store> store, int group_rank, int group_size, std::string host,
           int world_rank)
      : rank_(group_rank), size_(group_size), host_(std::move(host)), store_(std::move(store)) {
    pg_ = make_group(store_, group_rank, group_size, host_, world_rank);
  }

  std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks, const std::string& tag) override {
    auto [store, index] = subgroup_store(store_, ranks, tag, rank_);
    return std::make_shared<GlooComm>(store, index, int(ranks.size()), host_, rank_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(at::Tensor& t) override {
    GLINT_ASSERT(t.is_contiguous());
    if (!gloo_carries(t)) {  // summed in float32 over the wire, then rounded once
      at::Tensor wide = t.to(at::kFloat);
      all_reduce_sum(wide);
      t.copy_(wide);
      return;
    }
    std::vector<at::Tensor> v{t};
    run_collective("all_reduce", rank_, [&] { return pg_->allreduce(v); });
    count("all_reduce", 2 * nbytes(t) * (size_ - 1) / size_);  // ring all-reduce volume
  }

  at::Tensor all_gather(const at::Tensor& t) override { return start_all_gather(t)->wait(); }
  at::Tensor reduce_scatter_sum(const at::Tensor& t) override { return start_reduce_scatter_sum(t)->wait(); }

  std::unique_ptr<PendingCollective> start_all_gather(const at::Tensor& t) override {
    const bool raw = !gloo_carries(t);
    at::Tensor in = raw ? as_bytes(t) : t.contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] *= size_;
    at::Tensor out = at::empty(shape, in.options());
    // Gather straight into dim-0 chunks of one flat buffer (no _allgather_base in 1.13).
    std::vector<std::vector<at::Tensor>> outs{out.chunk(size_, 0)};
    std::vector<at::Tensor> ins{in};
    auto work = start_work("all_gather", rank_, [&] { return pg_->allgather(outs, ins); });
    count("all_gather", nbytes(in) * (size_ - 1));
    at::Tensor like = t;
    return std::make_unique<WorkInFlight>(
        work, [out, in, like, raw] { return raw ? from_bytes(out, like) : out; }, "all_gather", rank_, true);
  }

  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const at::Tensor& t) override {
    GLINT_CHECK(t.size(0) % size_ == 0, "rank ", rank_, ": reduce_scatter of ", t.size(0),
                " rows over ", size_, " ranks");
    // All-to-all of equal chunks, then a local sum: the bytes of a real reduce-scatter.
    const int64_t n = t.size(0) / size_;
    std::vector<int64_t> counts(size_, n);
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] = n;
    shape.insert(shape.begin(), size_);
    const auto dtype = t.scalar_type();
    const bool narrow = !gloo_carries(t);
    return start_exchange(t.contiguous(), counts, counts, "reduce_scatter", [shape, dtype, narrow](at::Tensor received) {
      // Low-precision chunks travel as they are and are summed in float32 here.
      if (narrow) return received.view(shape).sum(0, false, at::kFloat).to(dtype);
      return received.view(shape).sum(0);
    });
  }

  at::Tensor all_to_all(const at::Tensor& t, const std::vector<int64_t>& send,
                        const std::vector<int64_t>& recv) override {
    return start_exchange(t.contiguous(), send, recv, "all_to_all", [](at::Tensor out) { return out; })->wait();
  }

  void broadcast(at::Tensor& t, int root) override {
    GLINT_ASSERT(t.is_contiguous());
    std::vector<at::Tensor> v{gloo_carries(t) ? t : as_bytes(t)};  // a view: t receives
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run_collective("broadcast", rank_, [&] { return pg_->broadcast(v, o); });
    if (rank_ == root) count("broadcast", nbytes(t) * (size_ - 1));
  }

  at::Tensor gather(const at::Tensor& t, int root) override {
    if (!gloo_carries(t)) {
      at::Tensor out = gather(as_bytes(t), root);
      return out.defined() ? from_bytes(out, t) : out;
    }
    at::Tensor in = t.contiguous();
    std::vector<at::Tensor> ins{in};
    std::vector<std::vector<at::Tensor>> outs;
    at::Tensor out;
    if (rank_ == root) {
      std::vector<int64_t> shape = in.sizes().vec();
      shape[0] *= size_;
      out = at::empty(shape, in.options());
      outs.push_back(out.chunk(size_, 0));
    }
    c10d::GatherOptions o;
    o.rootRank = root;
    run_collective("gather", rank_, [&] { return pg_->gather(outs, ins, o); });
    if (rank_ != root) count("gather", nbytes(in));
    return out;
  }

  void barrier() override {
    run_collective("barrier", rank_, [&] { return pg_->barrier(); });
  }

 private:
  // Gloo (1.13's at least) has no bf16: 16-bit floats move as raw bytes and are summed
  // in float32.
  static bool gloo_carries(const at::Tensor& t) {
    return t.scalar_type() != at::kBFloat16 && t.scalar_type() != at::kHalf;
  }
  // The bytes of t's rows, [rows, bytes per row] (a view when t is contiguous), and back
  // to `like`'s dtype and trailing shape. (Gloo has no int16 either: bytes it is.)
  static at::Tensor as_bytes(const at::Tensor& t) {
    const int64_t rows = t.dim() ? t.size(0) : 1, row = rows ? t.numel() / rows : 0;
    return t.contiguous().reshape({rows, row}).view(at::kByte);
  }
  static at::Tensor from_bytes(const at::Tensor& bytes, const at::Tensor& like) {
    std::vector<int64_t> shape = like.sizes().vec();
    if (shape.empty()) return bytes.view(like.scalar_type()).reshape({});
    shape[0] = bytes.size(0);
    return bytes.view(like.scalar_type()).reshape(shape);
  }

  static c10::intrusive_ptr<c10d::ProcessGroupGloo> make_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                               int rank, int size, const std::string& addr,
                                                               int world_rank) {
    auto timeout = dist_timeout();
    try {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local_address(addr)));
      opts->threads = 2;
      return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
    } catch (const std::exception& e) {
      fail("rank ", world_rank, ": cannot form a process group of ", size, " ranks within ",
           timeout.count() / 1000, " s (GLINT_DIST_TIMEOUT_SECONDS); did every rank start, with the "
           "same WORLD_SIZE? ", first_line(e.what()));
    }
  }
  // The address this machine reaches `master` from (the source address the kernel picks
  // for it), which the other nodes reach this one by; loopback for a loopback master.
  // Falls back to the host name when there is no route.
  static std::string local_address(const std::string& master) {
    if (master == "localhost" || master.rfind("127.", 0) == 0) return "127.0.0.1";
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    std::string address;
    if (::getaddrinfo(master.c_str(), "9", &hints, &found) == 0 && found) {
      int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
      sockaddr_in local{};
      socklen_t len = sizeof local;
      char text[INET_ADDRSTRLEN] = {0};
      if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&  // UDP: sends nothing
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
          ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
        address = text;
      if (fd >= 0) ::close(fd);
      ::freeaddrinfo(found);
    }
    if (!address.empty()) return address;
    char buf[256] = {0};
    ::gethostname(buf, sizeof buf - 1);
    return buf;
  }

  // Starts the uneven all-to-all of t's rows (16-bit floats as raw bytes); the result
  // is then(the received rows, in t's dtype).
  std::unique_ptr<PendingCollective> start_exchange(const at::Tensor& t, const std::vector<int64_t>& send,
                                                    const std::vector<int64_t>& recv, const char* op,
                                                    std::function<at::Tensor(at::Tensor)> then) {
    GLINT_ASSERT(int(send.size()) == size_ && int(recv.size()) == size_);
    GLINT_ASSERT(std::accumulate(send.begin(), send.end(), int64_t(0)) == t.size(0));
    const bool raw = !gloo_carries(t);
    at::Tensor in = raw ? as_bytes(t) : t;
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] = std::accumulate(recv.begin(), recv.end(), int64_t(0));
    at::Tensor out = at::empty(shape, in.options());
    // alltoall_base empties the split vectors it is given: pass copies.
    std::vector<int64_t> out_splits = recv, in_splits = send;
    auto work = start_work(op, rank_, [&] { return pg_->alltoall_base(out, in, out_splits, in_splits); });
    int64_t row = in.size(0) ? in.numel() / in.size(0) : 0;
    uint64_t sent = 0;
    for (int j = 0; j < size_; ++j)
      if (j != rank_) sent += uint64_t(send[j] * row) * in.element_size();
    count(op, sent);
    at::Tensor like = t;
    return std::make_unique<WorkInFlight>(
        work, [out, in, like, raw, then] { return then(raw ? from_bytes(out, like) : out); }, op, rank_, true);
  }

  int rank_, size_;
  std::string host_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

#ifdef USE_C10D_NCCL
// NCCL (a CUDA build): every collective is native. Tensors given on the CPU (step
// counters, text) travel through the device and come back. Sums of 16-bit floats run in
// float32, as on Gloo.
class NcclComm : public Comm {
 public:
  NcclComm(c10::intrusive_ptr<c10d::Store> store, int rank, int size, c10::Device device, int world_rank)
      : rank_(rank), size_(size), device_(device), store_(std::move(store)) {
    try {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = dist_timeout();
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, rank, size, opts);
    } catch (const std::exception& e) {
      std::string what = e.what();
      fail("rank ", world_rank, ": cannot form an NCCL group of ", size, " ranks on ", device_.str(), ": ",
           what.substr(0, what.find('\n')));
    }
  }

  std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks, const std::string& tag) override {
    auto [store, index] = subgroup_store(store_, ranks, tag, rank_);
    return std::make_shared<NcclComm>(store, index, int(ranks.size()), device_, rank_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(at::Tensor& t) override {
    GLINT_ASSERT(t.is_contiguous());
    at::Tensor d = wide(on_device(t));
    std::vector<at::Tensor> v{d};
    run_collective("all_reduce", rank_, [&] { return pg_->allreduce(v); });
    if (!d.is_same(t)) t.copy_(d);
    count("all_reduce", 2 * nbytes(d) * (size_ - 1) / size_);
  }

  at::Tensor all_gather(const at::Tensor& t) override { return start_all_gather(t)->wait(); }
  at::Tensor reduce_scatter_sum(const at::Tensor& t) override { return start_reduce_scatter_sum(t)->wait(); }

  // NCCL runs collectives on its own stream: a started one overlaps the compute that the
  // current stream is given until wait() makes that stream wait for it.
  std::unique_ptr<PendingCollective> start_all_gather(const at::Tensor& t) override {
    at::Tensor in = on_device(t).contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] *= size_;
    at::Tensor out = at::empty(shape, in.options());
    auto work = start_work("all_gather", rank_, [&] { return pg_->_allgather_base(out, in); });
    count("all_gather", nbytes(in) * (size_ - 1));
    const c10::Device home = t.device();
    return std::make_unique<WorkInFlight>(work, [out, in, home] { return out.to(home); }, "all_gather", rank_);
  }

  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const at::Tensor& t) override {
    GLINT_CHECK(t.size(0) % size_ == 0, "rank ", rank_, ": reduce_scatter of ", t.size(0), " rows over ", size_,
                " ranks");
    at::Tensor in = wide(on_device(t)).contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] /= size_;
    at::Tensor out = at::empty(shape, in.options());
    auto work = start_work("reduce_scatter", rank_, [&] { return pg_->_reduce_scatter_base(out, in); });
    count("reduce_scatter", nbytes(in) * (size_ - 1) / size_);
    const c10::Device home = t.device();
    const auto dtype = t.scalar_type();
    return std::make_unique<WorkInFlight>(work, [out, in, home, dtype] { return out.to(home, dtype); },
                                          "reduce_scatter", rank_);
  }

  at::Tensor all_to_all(const at::Tensor& t, const std::vector<int64_t>& send,
                        const std::vector<int64_t>& recv) override {
    GLINT_ASSERT(int(send.size()) == size_ && int(recv.size()) == size_);
    at::Tensor in = on_device(t).contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] = std::accumulate(recv.begin(), recv.end(), int64_t(0));
    at::Tensor out = at::empty(shape, in.options());
    std::vector<int64_t> out_splits = recv, in_splits = send;  // copies: the call may consume them
    run_collective("all_to_all", rank_, [&] { return pg_->alltoall_base(out, in, out_splits, in_splits); });
    int64_t row = in.size(0) ? in.numel() / in.size(0) : 0;
    uint64_t sent = 0;
    for (int j = 0; j < size_; ++j)
      if (j != rank_) sent += uint64_t(send[j] * row) * in.element_size();
    count("all_to_all", sent);
    return out.to(t.device());
  }

  void broadcast(at::Tensor& t, int root) override {
    GLINT_ASSERT(t.is_contiguous());
    at::Tensor d = on_device(t);
    std::vector<at::Tensor> v{d};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run_collective("broadcast", rank_, [&] { return pg_->broadcast(v, o); });
    if (!d.is_same(t)) t.copy_(d);
    if (rank_ == root) count("broadcast", nbytes(t) * (size_ - 1));
  }

  at::Tensor gather(const at::Tensor& t, int root) override {
    // An all-gather that only the root keeps: NCCL has no gather of its own.
    at::Tensor all = all_gather(t);
    return rank_ == root ? all : at::Tensor();
  }

  void barrier() override {
    run_collective("barrier", rank_, [&] { return pg_->barrier(); });
  }

 private:
  at::Tensor on_device(const at::Tensor& t) const { return t.device() == device_ ? t : t.to(device_); }
  static at::Tensor wide(const at::Tensor& t) {
    return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf ? t.to(at::kFloat) : t;
  }

  int rank_, size_;
  c10::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
};
#endif  // USE_C10D_NCCL

}  // namespace

std::shared_ptr<Comm> Comm::create(const World& world, const c10::Device& device) {
  if (!world.distributed()) return std::make_shared<SoloComm>();
  g_world = world;
  std::shared_ptr<Comm> comm;
  if (device.is_cuda()) {
#ifdef USE_C10D_NCCL
    c10::cuda::set_device(device.index());
    comm = std::make_shared<NcclComm>(rendezvous(world), world.rank, world.world_size, device, world.rank);
#else
    fail("rank ", world.rank, ": ", device.str(), " needs NCCL, and this build of glint has none");
#endif
  } else {
    comm = std::make_shared<GlooComm>(world);
  }
  comm->liveness_ = std::make_shared<Liveness>(world);
  set_job_liveness(comm->liveness_);
  return comm;
}

std::unique_ptr<PendingCollective> Comm::start_all_gather(const at::Tensor& t) {
  return std::make_unique<ReadyCollective>(all_gather(t));
}

std::unique_ptr<PendingCollective> Comm::start_reduce_scatter_sum(const at::Tensor& t) {
  return std::make_unique<ReadyCollective>(reduce_scatter_sum(t));
}

std::string Comm::broadcast_text(const std::string& text, int root) {
  if (size() == 1) return text;
  constexpr int64_t kMax = 64 * 1024;
  GLINT_ASSERT(rank() != root || int64_t(text.size()) <= kMax, "broadcast_text: ", text.size(), " bytes");
  // Length, then the bytes as int64 values (every backend carries int64).
  at::Tensor t = at::zeros({kMax + 1}, at::kLong);
  if (rank() == root) {
    t[0] = int64_t(text.size());
    for (size_t i = 0; i < text.size(); ++i) t[int64_t(i) + 1] = int64_t(static_cast<unsigned char>(text[i]));
  }
  broadcast(t, root);
  const int64_t* v = t.data_ptr<int64_t>();
  std::string out(size_t(v[0]), '\0');
  for (int64_t i = 0; i < v[0]; ++i) out[size_t(i)] = char(v[i + 1]);
  return out;
}

void run_collectively(Comm& comm, const std::function<void()>& f) {
  std::string error;
  try {
    f();
  } catch (const std::exception& e) {  // any failure: the other ranks must hear of it
    error = e.what();
    if (error.empty()) error = "failed";
  }
  if (comm.size() == 1) {
    if (!error.empty()) fail(error);
    return;
  }
  at::Tensor failed = at::zeros({comm.size()}, at::kLong);
  if (!error.empty()) failed[comm.rank()] = 1;
  comm.all_reduce_sum(failed);
  int first = -1;
  for (int r = 0; r < comm.size() && first < 0; ++r)
    if (failed[r].item<int64_t>() != 0) first = r;
  if (first < 0) return;
  std::string message = comm.broadcast_text(error.substr(0, 60000), first);
  if (!error.empty()) fail(error);
  fail("rank ", first, ": ", message);
}

}  // namespace glint
