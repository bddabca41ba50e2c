// Running a piece of a test at a given ATen thread count: the checks that a kernel's sums do
// not depend on how many threads share its rows.
#pragma once

#include <ATen/Parallel.h>

#include <utility>

namespace glint::testing {

// f() with `threads` ATen intra-op threads; the count before is restored after, also when
// f throws.
template <typename F>
auto with_aten_threads(int threads, F&& f) {
  struct Restore {
    int threads;
    ~Restore() { at::set_num_threads(threads); }
  } restore{at::get_num_threads()};
  at::set_num_threads(threads);
  return std::forward<F>(f)();
}

}  // namespace glint::testing
