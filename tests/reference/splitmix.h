// A seeded generator for the reference tests' corpora: splitmix64 gives the same sequence
// on every platform (the std distributions do not).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace glint::testing {

struct SplitMix64 {
  uint64_t s;  // state: the seed
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % uint64_t(n)); }
  bool chance(double p) { return double(next() >> 11) / double(1ull << 53) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) { return v[below(static_cast<int>(v.size()))]; }
  std::string pick(std::initializer_list<const char*> v) { return *(v.begin() + below(static_cast<int>(v.size()))); }
};

}  // namespace glint::testing
