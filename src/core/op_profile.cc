#include "core/op_profile.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/compat.h"
#include "core/error.h"

namespace glint::profile {

namespace detail {
std::atomic<bool> g_active{false};
}  // namespace detail

namespace {

constexpr const char* kNoPhase = "(outside a phase)";
constexpr const char* kNoRegion = "(other)";
constexpr const char* kHostCode = "(host code between ops)";

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Frame {
  std::string op;      // an operator or a backward node; empty for a scope
  const char* phase;   // the phase this frame counts in
  const char* region;  // the region its self time is credited to
  bool is_phase = false;
  int64_t start = 0, child = 0;
};

struct Stat {
  int64_t calls = 0, self_ns = 0;
};

}  // namespace

struct Profiler::Data {
  std::thread::id owner;
  std::vector<Frame> stack;
  // (phase, region, op) -> self time; phase -> inclusive time.
  std::map<std::tuple<std::string, std::string, std::string>, Stat> ops;
  std::map<std::string, int64_t> phase_ns;
  std::vector<std::string> phase_order;
  // Autograd node sequence number -> the region whose forward made it. A node no operator
  // announced (a custom autograd function's) takes the region of the latest operator or
  // region entry before it.
  std::map<int64_t, const char*> node_region;
  at::CallbackHandle handle = 0;

  // Memory: each block allocated while profiling, by what allocated it (phase, region),
  // counted from each step's start (frees between steps are not seen). The peak over the
  // steps, and what was live at it.
  struct LiveBlock {
    int64_t bytes;
    size_t category;
  };
  std::shared_ptr<void> observer;
  std::unordered_map<void*, LiveBlock> blocks;
  std::map<std::pair<const char*, const char*>, size_t> category_id;
  std::vector<std::pair<const char*, const char*>> categories;
  std::vector<int64_t> live_by_category, peak_by_category;
  int64_t live = 0, freed_older = 0, peak = 0, peak_freed_older = 0;

  void begin_step_memory() {
    blocks.clear();
    std::fill(live_by_category.begin(), live_by_category.end(), 0);
    live = freed_older = 0;
  }
  void on_memory(void* ptr, int64_t bytes) {
    if (std::this_thread::get_id() != owner) return;
    if (bytes > 0) {
      std::pair<const char*, const char*> key{phase(), region()};
      auto [it, added] = category_id.emplace(key, categories.size());
      if (added) {
        categories.push_back(key);
        live_by_category.push_back(0);
        peak_by_category.push_back(0);
      }
      blocks[ptr] = {bytes, it->second};
      live_by_category[it->second] += bytes;
      live += bytes;
      if (live > peak) {
        peak = live;
        peak_by_category = live_by_category;
        peak_freed_older = freed_older;
      }
      return;
    }
    auto it = blocks.find(ptr);
    if (it == blocks.end()) {  // allocated before the step
      freed_older -= bytes;
      live += bytes;
      return;
    }
    live_by_category[it->second.category] -= it->second.bytes;
    live -= it->second.bytes;
    blocks.erase(it);
  }

  const char* phase() const { return stack.empty() ? kNoPhase : stack.back().phase; }
  const char* region() const { return stack.empty() ? kNoRegion : stack.back().region; }

  void push(Frame f) {
    f.start = now_ns();
    stack.push_back(std::move(f));
  }
  void pop() {
    if (stack.empty()) return;  // started inside a frame the profile did not see
    Frame f = std::move(stack.back());
    stack.pop_back();
    const int64_t total = now_ns() - f.start;
    if (!stack.empty()) stack.back().child += total;
    Stat& s = ops[{f.phase, f.region, f.op.empty() ? kHostCode : f.op}];
    ++s.calls;
    s.self_ns += std::max<int64_t>(0, total - f.child);
    if (f.is_phase) {
      if (!phase_ns.count(f.phase)) phase_order.push_back(f.phase);
      phase_ns[f.phase] += total;
    }
  }
};

namespace {

// The running profile's data, or null. Read by every thread that runs an operator.
std::atomic<Profiler::Data*> g_data{nullptr};

// The running profile when this thread is the one it profiles, else null.
Profiler::Data* owned() {
  Profiler::Data* d = g_data.load(std::memory_order_acquire);
  return d && std::this_thread::get_id() == d->owner ? d : nullptr;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Profiler::Data* running = owned();
  if (!running) return nullptr;
  Profiler::Data& d = *running;
  Frame f;
  f.op = fn.name();
  f.phase = d.phase();
  f.region = d.region();
  f.is_phase = false;
  const int64_t seq = fn.seqNr();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    auto it = seq >= 0 ? d.node_region.upper_bound(seq) : d.node_region.begin();
    f.region = it == d.node_region.begin() ? kNoRegion : std::prev(it)->second;
  } else if (seq >= 0 && fn.scope() == at::RecordScope::FUNCTION) {
    d.node_region[seq] = f.region;
  }
  d.push(std::move(f));
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  if (Profiler::Data* d = owned()) d->pop();
}

}  // namespace

namespace detail {

void push_scope(const char* name, bool phase) {
  Profiler::Data* running = owned();
  if (!running) return;
  Profiler::Data& d = *running;
  Frame f;
  f.phase = phase ? name : d.phase();
  f.region = phase ? kNoRegion : name;
  f.is_phase = phase;
  d.push(std::move(f));
  // A custom autograd function made next, before any operator announces the region,
  // belongs to it (not to the region of the latest operator before it).
  if (!phase) d.node_region[int64_t(at::sequence_number::peek())] = name;
}

void pop_scope() {
  Profiler::Data* d = owned();
  if (!d) return;
  const bool region = !d->stack.empty() && !d->stack.back().is_phase;
  d->pop();
  if (region) d->node_region[int64_t(at::sequence_number::peek())] = d->region();
}

}  // namespace detail

Profiler::Profiler() : data_(std::make_unique<Data>()) {}

Profiler::~Profiler() { stop(); }

void Profiler::start() {
  if (running_) return;
  GLINT_CHECK(!g_data.load(), "a profile is already running in this process");
  data_->owner = std::this_thread::get_id();
  data_->stack.clear();
  data_->node_region.clear();
  g_data.store(data_.get(), std::memory_order_release);
  data_->handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  data_->begin_step_memory();
  Data* d = data_.get();
  data_->observer = compat::observe_allocations([d](void* ptr, int64_t bytes) { d->on_memory(ptr, bytes); });
  detail::g_active.store(true);
  running_ = true;
}

void Profiler::stop() {
  if (!running_) return;
  at::removeCallback(data_->handle);
  data_->observer.reset();
  detail::g_active.store(false);
  g_data.store(nullptr, std::memory_order_release);
  data_->stack.clear();
  running_ = false;
}

nlohmann::json Profiler::report(int top_ops) const {
  const double per = 1e-9 / double(std::max<int64_t>(1, steps_));
  std::vector<std::string> phases = data_->phase_order;
  for (const auto& [key, s] : data_->ops)  // ops outside any phase, last
    if (std::get<0>(key) == kNoPhase && std::find(phases.begin(), phases.end(), kNoPhase) == phases.end())
      phases.push_back(kNoPhase);
  nlohmann::json out = {{"steps", steps_}, {"phases", nlohmann::json::array()}};
  for (const std::string& phase : phases) {
    std::map<std::string, int64_t> regions;
    std::vector<std::pair<int64_t, nlohmann::json>> ops;
    int64_t self_sum = 0;
    for (const auto& [key, s] : data_->ops) {
      const auto& [p, region, op] = key;
      if (p != phase) continue;
      regions[region] += s.self_ns;
      self_sum += s.self_ns;
      ops.push_back({s.self_ns, {{"op", op}, {"region", region}, {"calls", double(s.calls) * per * 1e9}}});
    }
    auto it = data_->phase_ns.find(phase);
    const int64_t total = it == data_->phase_ns.end() ? self_sum : it->second;
    const double denom = double(std::max<int64_t>(1, total));
    std::vector<std::pair<int64_t, std::string>> by_region;
    for (const auto& [r, ns] : regions) by_region.push_back({ns, r});
    std::sort(by_region.rbegin(), by_region.rend());
    nlohmann::json rj = nlohmann::json::array();
    for (const auto& [ns, r] : by_region)
      rj.push_back({{"region", r}, {"seconds", double(ns) * per}, {"share", double(ns) / denom}});
    std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    nlohmann::json oj = nlohmann::json::array();
    for (size_t i = 0; i < ops.size() && int(i) < top_ops; ++i) {
      nlohmann::json o = ops[i].second;
      o["seconds"] = double(ops[i].first) * per;
      o["share"] = double(ops[i].first) / denom;
      oj.push_back(o);
    }
    out["phases"].push_back(
        {{"phase", phase}, {"seconds", double(total) * per}, {"regions", rj}, {"ops", oj}});
  }
  const Data& d = *data_;
  std::vector<std::pair<int64_t, size_t>> at_peak;
  for (size_t c = 0; c < d.peak_by_category.size(); ++c)
    if (d.peak_by_category[c] != 0) at_peak.push_back({d.peak_by_category[c], c});
  std::sort(at_peak.rbegin(), at_peak.rend());
  nlohmann::json mj = nlohmann::json::array();
  for (const auto& [bytes, c] : at_peak)
    mj.push_back({{"phase", d.categories[c].first}, {"region", d.categories[c].second}, {"mb", double(bytes) / (1 << 20)}});
  out["memory"] = {{"peak_over_step_start_mb", double(d.peak) / (1 << 20)},
                   {"older_freed_by_the_peak_mb", double(d.peak_freed_older) / (1 << 20)},
                   {"live_at_peak", mj}};
  return out;
}

std::string Profiler::text(int top_ops) const {
  nlohmann::json r = report(top_ops);
  std::ostringstream s;
  char buf[256];
  s << "profile: seconds per step over " << r["steps"].get<int64_t>() << " step(s); self times\n";
  for (const auto& p : r["phases"]) {
    std::snprintf(buf, sizeof buf, "  %-12s %8.3f s\n", p["phase"].get<std::string>().c_str(),
                  p["seconds"].get<double>());
    s << buf;
    for (const auto& g : p["regions"]) {
      if (g["share"].get<double>() < 0.005) continue;
      std::snprintf(buf, sizeof buf, "    %-28s %8.3f s %5.1f%%\n", g["region"].get<std::string>().c_str(),
                    g["seconds"].get<double>(), 100 * g["share"].get<double>());
      s << buf;
    }
    s << "    top ops:\n";
    for (const auto& o : p["ops"]) {
      const std::string name = o["op"].get<std::string>() + " [" + o["region"].get<std::string>() + "]";
      std::snprintf(buf, sizeof buf, "      %-44s %8.3f s %5.1f%% %8.0f calls\n", name.c_str(),
                    o["seconds"].get<double>(), 100 * o["share"].get<double>(), o["calls"].get<double>());
      s << buf;
    }
  }
  const nlohmann::json& m = r["memory"];
  std::snprintf(buf, sizeof buf, "  memory: peak %.1f MB over the step's start (%.1f MB allocated in it, %.1f MB "
                "older freed by then); allocated by:\n",
                m["peak_over_step_start_mb"].get<double>(),
                m["peak_over_step_start_mb"].get<double>() + m["older_freed_by_the_peak_mb"].get<double>(),
                m["older_freed_by_the_peak_mb"].get<double>());
  s << buf;
  int shown = 0;
  for (const auto& g : m["live_at_peak"]) {
    if (shown++ == top_ops) break;
    const std::string name = g["phase"].get<std::string>() + " / " + g["region"].get<std::string>();
    std::snprintf(buf, sizeof buf, "    %-44s %8.1f MB\n", name.c_str(), g["mb"].get<double>());
    s << buf;
  }
  return s.str();
}

}  // namespace glint::profile
