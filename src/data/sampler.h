// Deterministic epoch-wise shuffling: the order depends only on (seed, epoch), never on
// the number of processes that later split it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace glint {

class EpochSampler {
 public:
  EpochSampler(size_t dataset_size, uint64_t seed, bool shuffle = true);
  // The next `count` dataset indices, crossing into the next epoch (reshuffled) when
  // the current one is exhausted.
  std::vector<size_t> next(size_t count);
  int64_t epoch() const { return epoch_; }

 private:
  void start_epoch();
  size_t size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  size_t pos_ = 0;
  std::vector<size_t> order_;
};

}  // namespace glint
