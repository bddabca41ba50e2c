// Rows spread over ATen's threads in fixed blocks, each block summing its rows' shares of
// one [width] result (a weight's gradient) into its own part, the parts then added in
// block order: the same sums whatever the thread count. For files compiled with OpenMP
// (CMakeLists.txt: GLINT_OPENMP_SOURCES), as at::parallel_for runs in parallel only there.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace glint {

inline constexpr int64_t kRowsPerFixedBlock = 64;

// row(n, part) for every n in [0, rows): part is its block's [width] share of `sum`, or
// null where sum is null (nothing to sum); sum is then written whole.
template <typename T, typename Row>
void rows_in_fixed_blocks(int64_t rows, int64_t width, T* sum, Row&& row) {
  const int64_t blocks = (rows + kRowsPerFixedBlock - 1) / kRowsPerFixedBlock;
  std::vector<T> parts(sum ? size_t(blocks * width) : 0, T(0));
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      T* part = sum ? parts.data() + b * width : nullptr;
      for (int64_t n = b * kRowsPerFixedBlock; n < std::min(rows, (b + 1) * kRowsPerFixedBlock); ++n) row(n, part);
    }
  });
  if (!sum) return;
  std::fill(sum, sum + width, T(0));
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < width; ++i) sum[i] += parts[size_t(b * width + i)];
}

}  // namespace glint
