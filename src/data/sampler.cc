#include "data/sampler.h"

#include <numeric>
#include <random>

#include "core/error.h"

namespace glint {

EpochSampler::EpochSampler(size_t dataset_size, uint64_t seed, bool shuffle)
    : size_(dataset_size), seed_(seed), shuffle_(shuffle) {
  GLINT_CHECK(dataset_size > 0, "cannot sample from a dataset with no samples");
  start_epoch();
}

void EpochSampler::start_epoch() {
  ++epoch_;
  pos_ = 0;
  order_.resize(size_);
  std::iota(order_.begin(), order_.end(), size_t(0));
  if (!shuffle_) return;
  // The order depends only on (seed, epoch): the seed is spread by the golden-ratio
  // constant (odd, so distinct seeds stay distinct) and the epoch added. Fisher-Yates
  // draws its indices itself rather than through std::uniform_int_distribution, whose
  // algorithm differs between standard libraries; the modulo bias is below
  // size / 2^64, negligible for any dataset.
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + uint64_t(epoch_) + 1);
  for (size_t i = size_ - 1; i > 0; --i) {
    size_t j = size_t(rng() % (i + 1));
    std::swap(order_[i], order_[j]);
  }
}

void EpochSampler::restore(Position p) {
  GLINT_CHECK(p.epoch >= 0 && p.drawn <= size_, "sampler position epoch ", p.epoch, ", ", p.drawn,
              " drawn is outside a dataset of ", size_, " samples");
  epoch_ = p.epoch - 1;
  start_epoch();
  pos_ = p.drawn;
}

std::vector<size_t> EpochSampler::next(size_t count) {
  std::vector<size_t> out;
  out.reserve(count);
  while (out.size() < count) {
    // The next epoch starts lazily, so epoch() stays put until an index of it is drawn.
    if (pos_ == size_) start_epoch();
    out.push_back(order_[pos_++]);
  }
  return out;
}

}  // namespace glint
