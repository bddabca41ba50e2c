#include "dist/liveness.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
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
  std::chrono::milliseconds limit;  // a heartbeat that stands still this long is lost
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool finished = false;  // the heartbeat thread has returned
  // When the store last answered a heartbeat (steady clock, ns). A second thread watches
  // it, since a store call on a cut link may block long past its timeout.
  std::atomic<int64_t> answered_ns{0};
};

namespace {

constexpr const char* kLostKey = "liveness/lost";
std::string left_key(int rank) { return "liveness/left/" + std::to_string(rank); }

// Ends this process at once from the heartbeat thread: the main thread may sit in a
// collective that would not return before the collective timeout. Files are written
// whole or not at all (atomic writes, flushed metrics), so nothing is half-written.
[[noreturn]] void end_job(const World& w, const std::string& why) {
  std::fprintf(stderr, "glint: error: %s: %s\n", describe_rank(w, w.rank).c_str(), why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

std::string seconds(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000) + " s"; }

// "rank 2 and rank 3 (node 1); rank 5 (node 2)": ranks grouped by node, in order.
std::string name_ranks(const World& w, const std::vector<int>& ranks) {
  std::map<int, std::vector<int>> by_node;
  for (int r : ranks) by_node[w.node_of(r)].push_back(r);
  std::string out;
  for (const auto& [node, rs] : by_node) {
    if (!out.empty()) out += "; ";
    for (size_t i = 0; i < rs.size(); ++i)
      out += (i == 0 ? "" : i + 1 == rs.size() ? " and " : ", ") + std::string("rank ") + std::to_string(rs[i]);
    if (w.num_nodes > 1) out += " (node " + std::to_string(node) + ")";
  }
  return out;
}

std::string stopped_answering(const World& w, const std::vector<int>& ranks, std::chrono::milliseconds still) {
  return name_ranks(w, ranks) + (ranks.size() == 1 ? " stopped answering: its" : " stopped answering: their") +
         " heartbeat stood still for " + seconds(still) +
         " (the process exited or was stopped, or its node or network was lost)";
}

std::string store_lost(const World& w) {
  return "the job's store at " + w.master_addr + ":" + std::to_string(w.master_port) + " (hosted by " +
         describe_rank(w, 0) + ") does not answer: that node, or the network to it, was lost";
}

using clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
}

// Ranks but 0: ends the job when the store has not answered for the limit.
void watch_store(const std::shared_ptr<Liveness::State>& s) {
  std::unique_lock<std::mutex> lock(s->mu);
  while (!s->stop) {
    if (now_ns() - s->answered_ns.load() > int64_t(s->limit.count()) * 1000000) end_job(s->world, store_lost(s->world));
    s->cv.wait_for(lock, kInterval, [&] { return s->stop; });
  }
}

void heartbeat(const std::shared_ptr<Liveness::State>& s) {
  const World& w = s->world;
  c10::intrusive_ptr<c10d::Store> store;
  const std::string key = key_of(w.rank);
  // Rank 0's watch: each rank's counter as last seen, and when it last moved.
  std::vector<int64_t> seen(size_t(w.world_size), -1);
  std::vector<clock::time_point> moved(size_t(w.world_size), clock::now());
  std::unique_lock<std::mutex> lock(s->mu);
  while (!s->stop) {
    lock.unlock();
    try {
      if (!store) store = connect(w);
      store->add(key, 1);
      s->answered_ns = now_ns();
      if (w.rank == 0) {
        // The ranks in the job standing still for several beats; lost when one of them
        // has stood still past the limit (the ranks of a lost node stop within a beat of
        // each other, and are named together).
        const clock::time_point now = clock::now();
        std::vector<int> lost;
        bool over = false;
        for (int r = 1; r < w.world_size; ++r) {
          const int64_t c = store->add(key_of(r), 0);
          if (c != seen[size_t(r)]) {
            seen[size_t(r)] = c;
            moved[size_t(r)] = now;
          } else if (now - moved[size_t(r)] >= kInterval * kWatchedBeats && !store->check({left_key(r)})) {
            lost.push_back(r);
            over |= now - moved[size_t(r)] > s->limit;
          }
        }
        if (!over) lost.clear();
        if (!lost.empty()) {
          const std::string why = stopped_answering(w, lost, s->limit);
          store->set(kLostKey, std::vector<uint8_t>(why.begin(), why.end()));
          // The others read it within a beat or two; then the store leaves with this process.
          std::this_thread::sleep_for(kInterval * 3);
          end_job(w, why);
        }
      } else if (store->check({kLostKey})) {
        const std::vector<uint8_t> v = store->get(kLostKey);
        end_job(w, "the job ends: " + std::string(v.begin(), v.end()));
      }
    } catch (...) {  // the store's host is gone or unreachable: try again next beat
      store.reset();
    }
    lock.lock();
    s->cv.wait_for(lock, kInterval, [&] { return s->stop; });
  }
  lock.unlock();
  try {  // leaving: rank 0 stops watching this rank
    if (store) store->set(left_key(w.rank), std::vector<uint8_t>{'1'});
  } catch (...) {
  }
  lock.lock();
  s->finished = true;
  s->cv.notify_all();
}

}  // namespace

Liveness::Liveness(const World& world) : state_(std::make_shared<State>()) {
  state_->world = world;
  state_->limit = heartbeat_timeout();
  state_->answered_ns = now_ns();
  std::thread([s = state_] { heartbeat(s); }).detach();
  if (world.rank != 0) std::thread([s = state_] { watch_store(s); }).detach();
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
  if (!before || !after) return store_lost(w);
  std::vector<int> lost;
  for (int r = 0; r < w.world_size; ++r)
    if (r != w.rank && (*before)[size_t(r)] == (*after)[size_t(r)]) lost.push_back(r);
  return lost.empty() ? "" : stopped_answering(w, lost, kInterval * kWatchedBeats);
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
