// Compiled with OpenMP where the compiler is g++ (CMakeLists.txt): ATen's parallel_for is
// inline in its headers and runs its loop on OpenMP's threads only in code compiled so.
#include "core/blas.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <dlfcn.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace glint::blas {
namespace {

// CBLAS's enumerations (cblas.h), by value: the header belongs to whichever BLAS is
// installed, and glint links none itself.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kUpper = 121, kLower = 122, kNonUnit = 131,
              kUnit = 132, kLeft = 141;
template <typename T>
using Gemm = void (*)(int, int, int, int, int, int, T, const T*, int, const T*, int, T, T*, int);
template <typename T>
using Trsm = void (*)(int, int, int, int, int, int, int, T, const T*, int, T*, int);
using SetThreads = void (*)(int);
using GetThreads = int (*)();

// OpenBLAS, found among the libraries libtorch loaded (looked up at run time: the BLAS
// behind libtorch differs between builds, MKL in pip wheels, OpenBLAS in Debian's); all
// null elsewhere.
struct OpenBlas {
  Gemm<float> sgemm = nullptr;
  Gemm<double> dgemm = nullptr;
  Trsm<float> strsm = nullptr;
  Trsm<double> dtrsm = nullptr;
  SetThreads set_threads = nullptr;
  GetThreads get_threads = nullptr;
  // Whether it runs its own pool of threads (the pthreads build): then each call inside
  // the parallel loop is held to one thread. The OpenMP build already runs one thread
  // inside a parallel region (and its thread count is OpenMP's, which ATen's loop reads).
  bool own_pool = false;
  bool usable() const { return sgemm && dgemm && strsm && dtrsm && set_threads && get_threads; }
  // Whether the matrices of these CPU tensors go to OpenBLAS one call each.
  bool takes(std::initializer_list<const at::Tensor*> tensors) const {
    if (!usable() || tensors.size() == 0 || (*tensors.begin())->size(0) < 2) return false;
    for (const at::Tensor* t : tensors)
      if (!t->device().is_cpu() || (t->scalar_type() != at::kFloat && t->scalar_type() != at::kDouble)) return false;
    return true;
  }
  template <typename T>
  Gemm<T> gemm() const {
    if constexpr (std::is_same_v<T, float>) return sgemm;
    else return dgemm;
  }
  template <typename T>
  Trsm<T> trsm() const {
    if constexpr (std::is_same_v<T, float>) return strsm;
    else return dtrsm;
  }
};

const OpenBlas& openblas() {
  static const OpenBlas found = [] {
    OpenBlas b;
    b.set_threads = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    b.get_threads = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    const auto parallel = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    b.own_pool = parallel && parallel() == 1;  // 0: sequential, 1: pthreads, 2: OpenMP
    if (b.set_threads) {  // the CBLAS of OpenBLAS, not of another BLAS that happens to be loaded
      b.sgemm = reinterpret_cast<Gemm<float>>(::dlsym(RTLD_DEFAULT, "cblas_sgemm"));
      b.dgemm = reinterpret_cast<Gemm<double>>(::dlsym(RTLD_DEFAULT, "cblas_dgemm"));
      b.strsm = reinterpret_cast<Trsm<float>>(::dlsym(RTLD_DEFAULT, "cblas_strsm"));
      b.dtrsm = reinterpret_cast<Trsm<double>>(::dlsym(RTLD_DEFAULT, "cblas_dtrsm"));
    }
    return b;
  }();
  return found;
}

// How BLAS reads one matrix of a [N, r, c] tensor: transposed or not, and its leading
// dimension, for row-major calls; none when neither dimension has unit stride.
struct Layout {
  int trans;
  int64_t ld;
};
std::optional<Layout> layout_of(const at::Tensor& t) {
  const int64_t r = t.size(1), c = t.size(2), sr = t.stride(1), sc = t.stride(2);
  if (c == 1 || sc == 1) {
    const int64_t ld = r == 1 ? std::max<int64_t>(c, 1) : sr;
    if (ld >= std::max<int64_t>(c, 1)) return Layout{kNoTrans, ld};
  }
  if (r == 1 || sr == 1) {
    const int64_t ld = c == 1 ? std::max<int64_t>(r, 1) : sc;
    if (ld >= std::max<int64_t>(r, 1)) return Layout{kTrans, ld};
  }
  return std::nullopt;
}

// Whether out's matrices are row-major and do not overlap one another.
bool writable(const at::Tensor& out) {
  const auto l = layout_of(out);
  if (!l || l->trans != kNoTrans) return false;
  const int64_t N = out.size(0), m = out.size(1), n = out.size(2);
  return N == 1 || out.stride(0) >= (m - 1) * l->ld + n;
}

bool fits_int(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v > INT_MAX) return false;
  return true;
}

// Restores OpenBLAS's thread count however the products end.
class SingleThreadedBlas {
 public:
  explicit SingleThreadedBlas(const OpenBlas& b) : b_(b), threads_(b.own_pool ? b.get_threads() : 1) {
    if (threads_ != 1) b_.set_threads(1);
  }
  ~SingleThreadedBlas() {
    if (threads_ != 1) b_.set_threads(threads_);
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  const OpenBlas& b_;
  int threads_;
};

// fn(i) for every matrix i < N, spread over ATen's intra-op threads, with OpenBLAS on one
// thread of its own inside each.
template <typename F>
void for_each_matrix(int64_t N, const F& fn) {
  SingleThreadedBlas one(openblas());
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
}

// `out` itself when OpenBLAS can write it in place, else a row-major copy (holding out's
// values when `read`); copied back by finish().
at::Tensor writable_form(const at::Tensor& out, bool read) {
  if (writable(out)) return out;
  return read ? out.contiguous() : at::empty(out.sizes(), out.options());
}
void finish(const at::Tensor& out, const at::Tensor& written) {
  if (!written.is_same(out)) out.copy_(written);
}

template <typename T>
void gemm_each(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  const Layout la = *layout_of(a), lb = *layout_of(b), lc = *layout_of(out);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  const int64_t sa = a.stride(0), sb = b.stride(0), sc = out.stride(0);
  const Gemm<T> gemm = openblas().gemm<T>();
  for_each_matrix(a.size(0), [&](int64_t i) {
    gemm(kRowMajor, la.trans, lb.trans, int(m), int(n), int(k), T(alpha), pa + i * sa, int(la.ld), pb + i * sb,
         int(lb.ld), T(beta), pc + i * sc, int(lc.ld));
  });
}

template <typename T>
void trsm_each(const at::Tensor& a, const at::Tensor& b, bool upper, bool unit_diagonal) {
  const int64_t m = b.size(1), n = b.size(2);
  const Layout la = *layout_of(a), lb = *layout_of(b);
  // A column-major matrix is its transpose in row-major memory, with the triangles swapped.
  const int uplo = (upper != (la.trans == kTrans)) ? kUpper : kLower;
  const T* pa = a.data_ptr<T>();
  T* pb = b.data_ptr<T>();
  const int64_t sa = a.stride(0), sb = b.stride(0);
  const Trsm<T> trsm = openblas().trsm<T>();
  for_each_matrix(a.size(0), [&](int64_t i) {
    trsm(kRowMajor, kLeft, uplo, la.trans, unit_diagonal ? kUnit : kNonUnit, int(m), int(n), T(1), pa + i * sa,
         int(la.ld), pb + i * sb, int(lb.ld));
  });
}

}  // namespace

void set_threads(int threads) {
  GLINT_ASSERT(threads > 0);
  if (openblas().set_threads) openblas().set_threads(threads);
}

bool calls_openblas() { return openblas().usable(); }

void batched_gemm(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  GLINT_ASSERT(a.dim() == 3 && b.dim() == 3 && out.dim() == 3 && b.size(0) == a.size(0) &&
                   out.size(0) == a.size(0) && b.size(1) == a.size(2) && out.size(1) == a.size(1) &&
                   out.size(2) == b.size(2),
               "batched_gemm: out ", out.sizes(), " = a ", a.sizes(), " x b ", b.sizes());
  GLINT_ASSERT(a.scalar_type() == b.scalar_type() && out.scalar_type() == a.scalar_type(), "batched_gemm: dtypes ",
               out.scalar_type(), " = ", a.scalar_type(), " x ", b.scalar_type());
  GLINT_ASSERT(!at::GradMode::is_enabled() || !(a.requires_grad() || b.requires_grad() || out.requires_grad()),
               "batched_gemm is not differentiable");
  const int64_t N = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  if (N == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0) out.zero_();
    else out.mul_(beta);
    return;
  }
  RECORD_FUNCTION("glint::batched_gemm", std::vector<c10::IValue>());
  if (openblas().takes({&out, &a, &b})) {
    const at::Tensor A = layout_of(a) ? a : a.contiguous(), B = layout_of(b) ? b : b.contiguous();
    const at::Tensor C = writable_form(out, /*read=*/beta != 0);
    if (fits_int({m, n, k, layout_of(A)->ld, layout_of(B)->ld, layout_of(C)->ld})) {  // BLAS's int dimensions
      if (a.scalar_type() == at::kFloat) gemm_each<float>(C, A, B, alpha, beta);
      else gemm_each<double>(C, A, B, alpha, beta);
      finish(out, C);
      return;
    }
  }
  if (beta == 0) {
    at::Tensor target = out;
    at::bmm_out(target, a, b);
    if (alpha != 1) out.mul_(alpha);
  } else {
    out.baddbmm_(a, b, beta, alpha);
  }
}

void batched_solve_triangular(const at::Tensor& a, const at::Tensor& b, bool upper, bool unit_diagonal) {
  GLINT_ASSERT(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(1) == a.size(2) &&
                   b.size(1) == a.size(1),
               "batched_solve_triangular: a ", a.sizes(), ", b ", b.sizes());
  GLINT_ASSERT(a.scalar_type() == b.scalar_type(), "batched_solve_triangular: dtypes ", a.scalar_type(), ", ",
               b.scalar_type());
  GLINT_ASSERT(!at::GradMode::is_enabled() || !(a.requires_grad() || b.requires_grad()),
               "batched_solve_triangular is not differentiable");
  const int64_t m = b.size(1), n = b.size(2);
  if (b.numel() == 0) return;
  RECORD_FUNCTION("glint::batched_solve_triangular", std::vector<c10::IValue>());
  if (openblas().takes({&a, &b})) {
    const at::Tensor A = layout_of(a) ? a : a.contiguous(), B = writable_form(b, /*read=*/true);
    if (fits_int({m, n, layout_of(A)->ld, layout_of(B)->ld})) {
      if (a.scalar_type() == at::kFloat) trsm_each<float>(A, B, upper, unit_diagonal);
      else trsm_each<double>(A, B, upper, unit_diagonal);
      finish(b, B);
      return;
    }
  }
  b.copy_(at::linalg_solve_triangular(a, b, upper, /*left=*/true, unit_diagonal));
}

at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b) {
  GLINT_ASSERT(a.dim() >= 3 && b.dim() == a.dim() && a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2),
               "batched_matmul: a ", a.sizes(), " x b ", b.sizes());
  std::vector<int64_t> shape = a.sizes().vec();
  shape.back() = b.size(-1);
  at::Tensor out = at::empty(shape, a.options());
  batched_gemm(out.flatten(0, out.dim() - 3), a.flatten(0, a.dim() - 3), b.flatten(0, b.dim() - 3));
  return out;
}

}  // namespace glint::blas
