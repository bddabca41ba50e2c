#include "dist/liveness.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/compat.h"

namespace glint {

namespace {

constexpr std::chrono::milliseconds kInterval{1000};  // between heartbeats
constexpr std::chrono::milliseconds kStoreTimeout{5000};  // a store call that takes longer has failed
constexpr int kWatchedBeats = 3;  // a rank whose counter stands still this long is lost

std::string key_of(int rank) { return "liveness/" + std::to_string(rank); }

// A client connection of our own to the job's store, failing within kStoreTimeout.
c10::intrusive_ptr<c10d::Store> connect(const World& w) {
  c10d::TCPStoreOptions so;
  so.port = uint16_t(w.master_port);
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = kStoreTimeout;
  return compat::make_tcp_store(w.master_addr, so);
}

// Runs f on a thread of its own; gives up on it after `deadline` (a store call on a cut
// link may block longer than its timeout), leaving the thread to finish on its own.
template <typename T, typename F>
std::optional<T> within(std::chrono::milliseconds deadline, F f) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<T> value;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, f]() mutable {
    std::optional<T> v;
    try {
      v = f();
    } catch (...) {
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->value = std::move(v);
    shared->done = true;
    shared->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, deadline, [&] { return shared->done; })) return std::nullopt;
  return shared->value;
}

std::mutex g_job_mu;
std::weak_ptr<Liveness> g_job;  // owned by the world Comm

}  // namespace

struct Liveness::State {
  World world;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool finished = false;  // the heartbeat thread has returned
};

Liveness::Liveness(const World& world) : state_(std::make_shared<State>()) {
  state_->world = world;
  std::thread([s = state_] {
    c10::intrusive_ptr<c10d::Store> store;
    const std::string key = key_of(s->world.rank);
    std::unique_lock<std::mutex> lock(s->mu);
    while (!s->stop) {
      lock.unlock();
      try {
        if (!store) store = connect(s->world);
        store->add(key, 1);
      } catch (...) {  // the store's host is gone or unreachable: try again next beat
        store.reset();
      }
      lock.lock();
      s->cv.wait_for(lock, kInterval, [&] { return s->stop; });
    }
    s->finished = true;
    s->cv.notify_all();
  }).detach();
}

Liveness::~Liveness() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  // A thread waiting between beats ends at once; one inside a store call (rank 0 has
  // just exited) ends when the call fails, within the store timeout. It is waited for, so
  // that it is not inside libtorch while the process exits; only a call stuck on a cut
  // link past that is left to end on its own (it holds its own state).
  state_->cv.wait_for(lock, kStoreTimeout + std::chrono::milliseconds(1000), [&] { return state_->finished; });
}

std::string Liveness::lost_ranks() const {
  const World w = state_->world;
  auto counters = [w]() {
    auto store = connect(w);
    std::vector<int64_t> c(size_t(w.world_size));
    for (int r = 0; r < w.world_size; ++r) c[size_t(r)] = store->add(key_of(r), 0);
    return c;
  };
  const auto deadline = kStoreTimeout + std::chrono::milliseconds(1000);
  auto before = within<std::vector<int64_t>>(deadline, counters);
  if (before) std::this_thread::sleep_for(kInterval * kWatchedBeats);
  auto after = before ? within<std::vector<int64_t>>(deadline, counters) : std::nullopt;
  if (!before || !after)
    return "the job's store at " + w.master_addr + ":" + std::to_string(w.master_port) + " (hosted by " +
           describe_rank(w, 0) + ") does not answer: that node, or the network to it, was lost";
  // Lost ranks by node, in order.
  std::map<int, std::vector<int>> lost;
  for (int r = 0; r < w.world_size; ++r)
    if (r != w.rank && (*before)[size_t(r)] == (*after)[size_t(r)]) lost[w.node_of(r)].push_back(r);
  if (lost.empty()) return "";
  std::string out;
  for (const auto& [node, ranks] : lost) {
    if (!out.empty()) out += "; ";
    for (size_t i = 0; i < ranks.size(); ++i)
      out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::string("rank ") + std::to_string(ranks[i]);
    if (w.num_nodes > 1) out += " (node " + std::to_string(node) + ")";
  }
  size_t n = 0;
  for (const auto& kv : lost) n += kv.second.size();
  return out + (n == 1 ? " stopped answering: its" : " stopped answering: their") + " heartbeat stood still for " +
         std::to_string(kWatchedBeats * kInterval.count() / 1000) +
         " s (the process exited or was stopped, or its node or network was lost)";
}

void set_job_liveness(std::shared_ptr<Liveness> liveness) {
  std::lock_guard<std::mutex> lock(g_job_mu);
  g_job = std::move(liveness);
}

std::string job_lost_ranks() {
  std::shared_ptr<Liveness> l;
  {
    std::lock_guard<std::mutex> lock(g_job_mu);
    l = g_job.lock();
  }
  return l ? l->lost_ranks() : "";
}

std::string describe_rank(const World& w, int rank) {
  std::string s = "rank " + std::to_string(rank);
  if (w.num_nodes > 1) s += " (node " + std::to_string(w.node_of(rank)) + ")";
  return s;
}

}  // namespace glint
