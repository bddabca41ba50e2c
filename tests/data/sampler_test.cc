// EpochSampler: deterministic, one permutation per epoch, epochs crossed seamlessly.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "data/sampler.h"

namespace glint {
namespace {

std::vector<size_t> iota(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), size_t(0));
  return v;
}

TEST(Sampler, SameSeedSameOrder) {
  EpochSampler s1(100, 7), s2(100, 7), other(100, 8);
  std::vector<size_t> a = s1.next(250);
  EXPECT_EQ(a, s2.next(250));
  EXPECT_NE(a, other.next(250));
}

TEST(Sampler, EachEpochIsAPermutationAndEpochsDiffer) {
  const size_t n = 37;
  EpochSampler s(n, 123);
  std::vector<std::vector<size_t>> epochs;
  for (int e = 0; e < 5; ++e) {
    epochs.push_back(s.next(n));
    EXPECT_EQ(s.epoch(), e);
    std::vector<size_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, iota(n)) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], iota(n));  // shuffled (a 1 in 37! chance of a false failure)
  for (int e = 1; e < 5; ++e) EXPECT_NE(epochs[e], epochs[e - 1]) << "epoch " << e;
}

TEST(Sampler, NextCrossesEpochBoundary) {
  EpochSampler ref(10, 7);
  std::vector<size_t> e0 = ref.next(10), e1 = ref.next(10);

  EpochSampler s(10, 7);
  std::vector<size_t> first = s.next(7);
  EXPECT_EQ(first, std::vector<size_t>(e0.begin(), e0.begin() + 7));
  EXPECT_EQ(s.epoch(), 0);
  std::vector<size_t> cross = s.next(7);  // 3 from epoch 0, then 4 from epoch 1
  std::vector<size_t> expect(e0.begin() + 7, e0.end());
  expect.insert(expect.end(), e1.begin(), e1.begin() + 4);
  EXPECT_EQ(cross, expect);
  EXPECT_EQ(s.epoch(), 1);

  // A request longer than an epoch spans several.
  EpochSampler big(3, 1);
  std::vector<size_t> many = big.next(10);
  EXPECT_EQ(many.size(), 10u);
  EXPECT_EQ(big.epoch(), 3);
  EXPECT_TRUE(big.next(0).empty());
}

TEST(Sampler, OrderDoesNotDependOnRequestSizes) {
  EpochSampler whole(13, 5), pieces(13, 5);
  std::vector<size_t> all = whole.next(60), joined;
  for (size_t k : {1, 4, 13, 2, 40}) {
    std::vector<size_t> part = pieces.next(k);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(std::vector<size_t>(joined.begin(), joined.begin() + 60), all);
}

TEST(Sampler, WithoutShuffleIsIdentity) {
  EpochSampler s(4, 99, /*shuffle=*/false);
  EXPECT_EQ(s.next(10), (std::vector<size_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1}));
}

TEST(Sampler, SingleSampleDataset) {
  EpochSampler s(1, 3);
  EXPECT_EQ(s.next(3), (std::vector<size_t>{0, 0, 0}));
}

TEST(Sampler, EmptyDatasetIsAnError) { EXPECT_THROW(EpochSampler(0, 1), Error); }

}  // namespace
}  // namespace glint
