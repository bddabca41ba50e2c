#include "io/sharded_state.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>

#include "core/error.h"
#include "io/safetensors.h"

namespace glint {

namespace {
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
}  // namespace

nlohmann::json write_state_pieces(const std::string& path, const std::vector<StatePiece>& pieces) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  nlohmann::json index = nlohmann::json::array();
  for (const StatePiece& p : pieces) {
    if (!p.writes) continue;
    const int64_t count = p.local.numel();
    GLINT_ASSERT(p.offset >= 0 && p.offset + count <= numel_of(p.shape), "state piece ", p.name, " [", p.offset,
                 ", ", p.offset + count, ") outside its shape of ", numel_of(p.shape), " elements");
    if (count == 0) continue;
    std::string key = p.name + "@" + std::to_string(p.offset);
    tensors.emplace_back(key, p.local.detach().reshape({-1}));
    index.push_back({{"name", p.name},
                     {"shape", p.shape},
                     {"offset", p.offset},
                     {"count", count},
                     {"dtype", safetensors_dtype_name(p.local.scalar_type())},
                     {"key", key}});
  }
  write_safetensors(path, tensors);
  return index;
}

void read_state_pieces(const std::string& dir, const nlohmann::json& index, const std::vector<StatePiece>& pieces) {
  struct Saved {
    int64_t offset, count;
    std::string key, file;
  };
  std::map<std::string, std::vector<Saved>> saved;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& e : index) {
    const std::string name = e.at("name");
    saved[name].push_back({e.at("offset").get<int64_t>(), e.at("count").get<int64_t>(), e.at("key"), e.at("file")});
    shapes[name] = e.at("shape").get<std::vector<int64_t>>();
  }
  for (auto& [name, list] : saved)
    std::sort(list.begin(), list.end(), [](const Saved& a, const Saved& b) { return a.offset < b.offset; });
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  auto file = [&](const std::string& name) -> const SafetensorsFile& {
    auto& f = files[name];
    if (!f) f = std::make_unique<SafetensorsFile>(dir + "/" + name);
    return *f;
  };
  at::NoGradGuard no_grad;
  for (const StatePiece& p : pieces) {
    const int64_t lo = p.offset, hi = p.offset + p.local.numel();
    if (lo == hi) continue;
    auto it = saved.find(p.name);
    GLINT_CHECK(it != saved.end(), dir, ": the checkpoint has no tensor '", p.name, "'");
    GLINT_CHECK(shapes[p.name] == p.shape, dir, ": tensor '", p.name, "' was saved with shape ",
                c10::IntArrayRef(shapes[p.name]), "; this run's is ", c10::IntArrayRef(p.shape));
    at::Tensor dst = p.local.detach();
    int64_t cursor = lo;  // everything below it is filled
    for (const Saved& s : it->second) {
      const int64_t a = std::max(cursor, s.offset), b = std::min(hi, s.offset + s.count);
      if (a >= b) continue;
      GLINT_CHECK(a == cursor, dir, ": tensor '", p.name, "' elements [", cursor, ", ", a, ") were never saved");
      dst.narrow(0, a - lo, b - a).copy_(file(s.file).read_flat(s.key, a - s.offset, b - a));
      cursor = b;
      if (cursor == hi) break;
    }
    GLINT_CHECK(cursor == hi, dir, ": tensor '", p.name, "' elements [", cursor, ", ", hi, ") were never saved");
  }
  for (const auto& kv : files) kv.second->check_unchanged();
}

StatePiece replicated_piece(const std::string& name, const at::Tensor& t, bool writer) {
  return StatePiece{name, t.sizes().vec(), 0, t.detach().reshape({-1}), writer};
}

StatePiece slice_piece(const std::string& name, const at::Tensor& t, int64_t index, int64_t count, bool writer) {
  std::vector<int64_t> shape = t.sizes().vec();
  GLINT_ASSERT(!shape.empty(), "slice_piece of a scalar: ", name);
  shape[0] *= count;
  return StatePiece{name, shape, index * t.numel(), t.detach().reshape({-1}), writer};
}

}  // namespace glint
