// The protobuf wire written and read by hand, from the encoding's rules alone (varints,
// tags, length-delimited fields, little-endian fixed values): the tests' own encoder of
// the requests an SDK 0.25 client posts, and a reader of the results it gets back,
// independent of libprotobuf and of serve/wire.cc.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace glint::testing::proto {

inline void varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(char((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}
inline void tag(std::string* out, int field, int wire) { varint(out, (uint64_t(field) << 3) | uint64_t(wire)); }
inline void bytes_field(std::string* out, int field, const std::string& b) {
  tag(out, field, 2);
  varint(out, b.size());
  out->append(b);
}
inline void varint_field(std::string* out, int field, uint64_t v) {
  tag(out, field, 0);
  varint(out, v);
}
inline void double_field(std::string* out, int field, double v) {
  tag(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);
  out->append(b, 8);
}
template <typename T, typename In>
std::string le(const std::vector<In>& values) {
  std::string out;
  for (In x : values) {
    T v = T(x);
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  return out;
}

// A Tensor: dense values in dtype 1 (float32) or 2 (int64), shape [n].
inline std::string tensor(const std::vector<double>& values, int dtype) {
  std::string t;
  bytes_field(&t, 1, dtype == 1 ? le<float>(values) : le<int64_t>(values));
  varint_field(&t, 3, uint64_t(dtype));
  std::string shape;
  varint(&shape, values.size());
  bytes_field(&t, 4, shape);
  return t;
}

// A loss_fn_inputs map entry: `name` -> the Tensor message `tensor`.
inline std::string input_entry(const std::string& name, const std::string& tensor) {
  std::string entry;
  bytes_field(&entry, 1, name);
  bytes_field(&entry, 2, tensor);
  return entry;
}

// A Datum: one encoded_text chunk and the named inputs (target_tokens int64, others float32).
inline std::string datum(const std::vector<int64_t>& tokens, const std::map<std::string, std::vector<double>>& inputs) {
  std::string text, chunk, d;
  bytes_field(&text, 1, le<int32_t>(tokens));
  bytes_field(&chunk, 1, text);
  bytes_field(&d, 1, chunk);
  for (const auto& [name, values] : inputs)
    bytes_field(&d, 2, input_entry(name, tensor(values, name == "target_tokens" ? 2 : 1)));
  return d;
}

// A ForwardBackwardRequest.
inline std::string forward_backward(const std::string& model_id, int seq_id, const std::vector<std::string>& data,
                                    const std::string& loss, const std::map<std::string, double>& config,
                                    bool forward_only) {
  std::string m;
  bytes_field(&m, 1, model_id);
  if (seq_id != 0) varint_field(&m, 2, uint64_t(uint32_t(seq_id)));
  for (const auto& d : data) bytes_field(&m, 3, d);
  bytes_field(&m, 4, loss);
  for (const auto& [k, v] : config) {
    std::string entry;
    bytes_field(&entry, 1, k);
    double_field(&entry, 2, v);
    bytes_field(&m, 5, entry);
  }
  if (forward_only) varint_field(&m, 6, 1);
  return m;
}

// A message's fields by number, each occurrence in order: length-delimited ones as their
// bytes, varints and fixed values as their 8 little-endian bytes.
struct Fields {
  std::multimap<int, std::string> f;
  std::vector<std::string> all(int n) const {
    std::vector<std::string> out;
    for (auto [it, end] = f.equal_range(n); it != end; ++it) out.push_back(it->second);
    return out;
  }
  std::string one(int n) const {
    auto v = all(n);
    if (v.size() != 1) throw std::runtime_error("field " + std::to_string(n) + " occurs " + std::to_string(v.size()) + " times");
    return v[0];
  }
  bool has(int n) const { return f.count(n) > 0; }
  uint64_t number(int n) const {
    if (!has(n)) return 0;
    uint64_t v;
    std::memcpy(&v, one(n).data(), 8);
    return v;
  }
};

inline Fields parse(const std::string& b) {
  Fields out;
  size_t i = 0;
  auto read_varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i >= b.size()) throw std::runtime_error("truncated varint");
      const uint8_t c = uint8_t(b[i++]);
      v |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    throw std::runtime_error("overlong varint");
  };
  while (i < b.size()) {
    const uint64_t key = read_varint();
    const int field = int(key >> 3), wire = int(key & 7);
    std::string value;
    if (wire == 0) {
      const uint64_t v = read_varint();
      value.assign(reinterpret_cast<const char*>(&v), 8);
    } else if (wire == 1 || wire == 5) {
      const size_t n = wire == 1 ? 8 : 4;
      if (i + n > b.size()) throw std::runtime_error("truncated fixed value");
      value = b.substr(i, n);
      value.resize(8, '\0');
      i += n;
    } else if (wire == 2) {
      const uint64_t n = read_varint();
      if (n > b.size() - i) throw std::runtime_error("truncated bytes");
      value = b.substr(i, n);
      i += n;
    } else {
      throw std::runtime_error("wire type " + std::to_string(wire));
    }
    out.f.emplace(field, value);
  }
  return out;
}

template <typename T>
std::vector<T> values(const std::string& b) {
  std::vector<T> out(b.size() / sizeof(T));
  std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

inline double as_double(const std::string& fixed) {
  double d;
  std::memcpy(&d, fixed.data(), 8);
  return d;
}

inline std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace glint::testing::proto
