#include "data/sampler.h"

#include <numeric>
#include <random>

#include "core/error.h"

namespace glint {

EpochSampler::EpochSampler(size_t dataset_size, uint64_t seed, bool shuffle)
    : size_(dataset_size), seed_(seed), shuffle_(shuffle) {
  GLINT_CHECK(dataset_size > 0, "the dataset has no samples");
  start_epoch();
}

void EpochSampler::start_epoch() {
  ++epoch_;
  pos_ = 0;
  order_.resize(size_);
  std::iota(order_.begin(), order_.end(), size_t(0));
  if (!shuffle_) return;
  // The order depends only on (seed, epoch); Fisher-Yates with our own index draw so the
  // result does not depend on the standard library's distribution implementation.
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + uint64_t(epoch_) + 1);
  for (size_t i = size_ - 1; i > 0; --i) {
    size_t j = size_t(rng() % (i + 1));
    std::swap(order_[i], order_[j]);
  }
}

std::vector<size_t> EpochSampler::next(size_t count) {
  std::vector<size_t> out;
  out.reserve(count);
  while (out.size() < count) {
    if (pos_ == size_) start_epoch();
    out.push_back(order_[pos_++]);
  }
  return out;
}

}  // namespace glint
