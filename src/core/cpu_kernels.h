// Where glint's hand-written CPU kernels run in place of ATen's operators (the one-pass
// norms, row gathers, short convolution and the delta rule's packing): on the CPU, for
// float32 and float64 tensors. Elsewhere (CUDA, bf16 inputs to a kernel) ATen's operators
// run, and so they do everywhere while a test holds an AtenOperatorsOnly, so that both
// paths are checked on a machine without a GPU.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace glint {

namespace detail {
inline std::atomic<int> aten_operators_only{0};
}  // namespace detail

inline bool cpu_kernels_run(c10::Device device, c10::ScalarType dtype) {
  return device.is_cpu() && (dtype == c10::kFloat || dtype == c10::kDouble) &&
         detail::aten_operators_only.load(std::memory_order_relaxed) == 0;
}

// Rows per task of a kernel's at::parallel_for over rows of `row_elements` values: about
// 64 KiB of float32 each.
inline int64_t rows_per_task(int64_t row_elements) {
  return std::max<int64_t>(1, (int64_t(16) << 10) / std::max<int64_t>(1, row_elements));
}

// While one lives, cpu_kernels_run is false: for tests that hold ATen's path to the same
// references as the kernels'.
class AtenOperatorsOnly {
 public:
  AtenOperatorsOnly() { detail::aten_operators_only.fetch_add(1); }
  ~AtenOperatorsOnly() { detail::aten_operators_only.fetch_sub(1); }
  AtenOperatorsOnly(const AtenOperatorsOnly&) = delete;
  AtenOperatorsOnly& operator=(const AtenOperatorsOnly&) = delete;
};

}  // namespace glint
