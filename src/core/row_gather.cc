#include "core/row_gather.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/cpu_clones.h"
#include "core/cpu_kernels.h"
#include "core/cpu_math.h"
#include "core/error.h"

namespace glint {

namespace {

bool on_cpu_kernels(std::initializer_list<at::Tensor> ts) {
  const at::Tensor& first = *ts.begin();
  for (const at::Tensor& x : ts)
    if (x.device() != first.device() || x.scalar_type() != first.scalar_type()) return false;
  return cpu_kernels_run(first.device(), first.scalar_type());
}

// dy = s g; returns y . g.
template <typename T>
GLINT_CPU_CLONES T scaled_row_and_dot(T* dy, const T* y, const T* g, T s, int64_t H) {
  T dot = 0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : dot)
#endif
  for (int64_t h = 0; h < H; ++h) {
    dy[h] = s * g[h];
    dot += y[h] * g[h];
  }
  return dot;
}

// out[m] = sum over r of w[n] rows[n], n = readers[m, r] (w null: weight 1), in the readers' order.
template <typename T>
void row_sums(const T* rows, const T* w, const int64_t* readers, int64_t M, int64_t R, int64_t H, T* out) {
  at::parallel_for(0, M, rows_per_task(H * R), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m)
      for (int64_t r = 0; r < R; ++r) {
        const int64_t n = readers[m * R + r];
        scaled_row<T>(out + m * H, rows + n * H, w ? w[n] : T(1), H, r > 0);
      }
  });
}

// For each reader n of row m of g: d_rows[n] = w[n] g[m], d_w[n] = rows[n] . g[m].
template <typename T>
void weighted_sum_backward(const T* g, const T* rows, const T* w, const int64_t* readers, int64_t M, int64_t R,
                           int64_t H, T* d_rows, T* d_w) {
  at::parallel_for(0, M, rows_per_task(H * R), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m)
      for (int64_t r = 0; r < R; ++r) {
        const int64_t n = readers[m * R + r];
        d_w[n] = scaled_row_and_dot<T>(d_rows + n * H, rows + n * H, g + m * H, w[n], H);
      }
  });
}

void check_fan_out(const at::Tensor& rows_gathered, const at::Tensor& index, const at::Tensor& readers,
                   const char* what) {
  GLINT_ASSERT(readers.dim() == 2 && index.dim() == 1 && index.numel() == readers.numel(), what, ": index ",
               index.sizes(), " and readers ", readers.sizes(), " do not describe one fan-out");
  GLINT_ASSERT(rows_gathered.size(0) == index.numel(), what, ": ", rows_gathered.size(0), " gathered rows for ",
               index.numel(), " indices");
}

// [M, H] sums of the readers' rows (weighted when w is defined), by the kernel above.
at::Tensor sums_by_readers(const at::Tensor& rows, const at::Tensor& w, const at::Tensor& readers) {
  const at::Tensor y = rows.contiguous(), rd = readers.contiguous(), wc = w.defined() ? w.contiguous() : w;
  const int64_t M = rd.size(0), R = rd.size(1), H = y.size(1);
  at::Tensor out = at::empty({M, H}, y.options());
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "glint_row_sums", [&] {
    row_sums<scalar_t>(y.data_ptr<scalar_t>(), wc.defined() ? wc.data_ptr<scalar_t>() : nullptr,
                       rd.data_ptr<int64_t>(), M, R, H, out.data_ptr<scalar_t>());
  });
  return out;
}

struct GatherRows : torch::autograd::Function<GatherRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& index,
                            const at::Tensor& readers) {
    ctx->save_for_backward({readers});
    return x.index_select(0, index);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    const at::Tensor readers = ctx->get_saved_variables()[0];
    return {sums_by_readers(grads[0], at::Tensor(), readers), at::Tensor(), at::Tensor()};
  }
};

struct WeightedRowSum : torch::autograd::Function<WeightedRowSum> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& weight,
                            const at::Tensor& readers) {
    const at::Tensor y = rows.contiguous(), w = weight.contiguous();
    ctx->save_for_backward({y, w, readers});
    return sums_by_readers(y, w, readers);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    const at::Tensor &y = saved[0], &w = saved[1], rd = saved[2].contiguous();
    const at::Tensor g = grads[0].contiguous();
    const int64_t M = rd.size(0), R = rd.size(1), H = y.size(1);
    at::Tensor d_rows = at::empty_like(y), d_w = at::empty_like(w);
    AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "glint_weighted_row_sum_backward", [&] {
      weighted_sum_backward<scalar_t>(g.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
                                      rd.data_ptr<int64_t>(), M, R, H, d_rows.data_ptr<scalar_t>(),
                                      d_w.data_ptr<scalar_t>());
    });
    return {d_rows, d_w, at::Tensor()};
  }
};

}  // namespace

at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& index, const at::Tensor& readers) {
  GLINT_ASSERT(x.dim() == 2 && readers.dim() == 2 && readers.size(0) == x.size(0), "gather_rows: x ", x.sizes(),
               ", readers ", readers.sizes());
  GLINT_ASSERT(index.dim() == 1 && index.numel() == readers.numel(), "gather_rows: index ", index.sizes(),
               ", readers ", readers.sizes());
  if (!on_cpu_kernels({x}) || !at::GradMode::is_enabled() || !x.requires_grad()) return x.index_select(0, index);
  return GatherRows::apply(x, index, readers);
}

at::Tensor weighted_row_sum(const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& index,
                            const at::Tensor& readers) {
  check_fan_out(rows, index, readers, "weighted_row_sum");
  GLINT_ASSERT(rows.dim() == 2 && weight.dim() == 1 && weight.numel() == rows.size(0), "weighted_row_sum: rows ",
               rows.sizes(), ", weight ", weight.sizes());
  if (!on_cpu_kernels({rows, weight}))
    return at::zeros({readers.size(0), rows.size(1)}, rows.options()).index_add(0, index, rows * weight.unsqueeze(1));
  if (at::GradMode::is_enabled() && (rows.requires_grad() || weight.requires_grad()))
    return WeightedRowSum::apply(rows, weight, readers);
  return sums_by_readers(rows, weight, readers);
}

}  // namespace glint
