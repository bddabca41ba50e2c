// Deterministic epoch-wise shuffling: the order depends only on (seed, epoch), never on
// the number of processes that later split it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace glint {

class EpochSampler {
 public:
  // Throws glint::Error when dataset_size == 0. shuffle = false yields 0, 1, ... n-1
  // in every epoch.
  EpochSampler(size_t dataset_size, uint64_t seed, bool shuffle = true);
  // The next `count` dataset indices, crossing into the next epoch (reshuffled) when
  // the current one is exhausted.
  std::vector<size_t> next(size_t count);
  // The epoch of the last index returned (0 before any).
  int64_t epoch() const { return epoch_; }
  // Where the sampler stands: the epoch and the indices of it drawn so far. restore()
  // puts a sampler of the same size and seed back there (throws glint::Error for a
  // position outside its dataset).
  struct Position {
    int64_t epoch = 0;
    size_t drawn = 0;
  };
  Position position() const { return {epoch_, pos_}; }
  void restore(Position p);

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
