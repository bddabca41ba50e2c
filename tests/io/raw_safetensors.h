// A safetensors writer for tests that need dtype strings the library never writes (the
// quantised F8_E4M3 / F8_E8M0 / I8 forms of released checkpoints): each tensor's bytes
// as they are, under the dtype name given.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace glint::testing {

struct RawTensor {
  std::string name, dtype;
  at::Tensor t;
};

inline void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& entries) {
  std::string header = "{", data;
  for (const auto& e : entries) {
    at::Tensor t = e.t.contiguous();
    size_t bytes = size_t(t.numel()) * t.element_size();
    std::string shape;
    for (int64_t d : t.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + ("\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":[" +
                                                 shape + "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
                                                 std::to_string(data.size() + bytes) + "]}");
    data.append(static_cast<const char*>(t.data_ptr()), bytes);
  }
  header += "}";
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

}  // namespace glint::testing
