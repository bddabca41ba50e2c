// The causal depthwise convolution in front of the delta rule (declared in gated_delta.h),
// with the SiLU that follows it in the layer.
//
// On the CPU in float32/float64 one pass each way: every output row is its W taps summed
// in place, the SiLU applied as it is written; the backward forms the SiLU's gradient once
// and then each row of dx and its share of dw from it, in fixed blocks of rows whose dw
// parts are added in block order (the same sums whatever the thread count). Elsewhere (a
// GPU, bf16) ATen's operators: one multiply-add per tap over the whole tensor.
//
// Legend: B rows, S positions, C channels, W kernel width, N = B S token rows.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "core/cpu_clones.h"
#include "core/cpu_kernels.h"
#include "core/cpu_math.h"
#include "core/error.h"
#include "core/fixed_blocks.h"
#include "core/op_profile.h"
#include "model/qwen3_5/gated_delta.h"

namespace glint {
namespace {

using Span = SequenceLayout::Span;

// Offset of every token from the start of its sequence, [B,S] int64 on the host; a padding
// token is a sequence of one (offset 0).
at::Tensor offsets_in_sequence(const SequenceLayout& layout) {
  at::Tensor offsets = at::zeros({layout.rows, layout.seq_len}, at::kLong);
  auto a = offsets.accessor<int64_t, 2>();
  for (const Span& span : layout.spans) {
    GLINT_ASSERT(
        span.row >= 0 && span.row < layout.rows && span.start >= 0 && span.start + span.length <= layout.seq_len,
        "span row ", span.row, " [", span.start, ", +", span.length, ") outside [", layout.rows, ", ", layout.seq_len,
        "]");
    if (span.padding) continue;
    for (int64_t i = 0; i < span.length; ++i) a[span.row][span.start + i] = i;
  }
  return offsets;
}

// ---- ATen's operators (any device and dtype) ---------------------------------------

// Where lag reaches back inside the token's sequence, for positions [lag, S): [B, S - lag, 1]
// in `dtype`; undefined for empty offsets (no sequence starts after its row's first position).
at::Tensor inside_mask(const at::Tensor& offsets, int64_t lag, c10::ScalarType dtype) {
  if (offsets.numel() == 0) return at::Tensor();
  return offsets.narrow(1, lag, offsets.size(1) - lag).ge(lag).unsqueeze(-1).to(dtype);
}

// The convolution with a backward of its own: it keeps x only when the kernel trains, and
// the masks are remade from the sequence offsets.
struct CausalConv : torch::autograd::Function<CausalConv> {
  // x [B,S,C], w [C,W] in the compute type, offsets [B,S] int64 or empty.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& offsets) {
    const int64_t S = x.size(1), W = w.size(1);
    at::Tensor out = x * w.select(1, W - 1);
    for (int64_t lag = 1; lag < W && lag < S; ++lag) {
      at::Tensor earlier = x.narrow(1, 0, S - lag);  // x[b, t - lag] for t in [lag, S)
      const at::Tensor inside = inside_mask(offsets, lag, x.scalar_type());
      if (inside.defined()) earlier = earlier * inside;
      out.narrow(1, lag, S - lag).addcmul_(earlier, w.select(1, W - 1 - lag));
    }
    ctx->save_for_backward({w.requires_grad() ? x : at::Tensor(), w, offsets});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &offsets = saved[2];
    const at::Tensor& d_out = grads[0];
    const int64_t S = d_out.size(1), W = w.size(1);
    at::Tensor dx = d_out * w.select(1, W - 1);
    at::Tensor dw;
    if (x.defined()) {
      dw = at::zeros_like(w);
      dw.select(1, W - 1).copy_((d_out * x).sum(at::IntArrayRef{0, 1}));
    }
    for (int64_t lag = 1; lag < W && lag < S; ++lag) {
      at::Tensor reaching = d_out.narrow(1, lag, S - lag);  // the gradients at positions that read back lag
      const at::Tensor inside = inside_mask(offsets, lag, d_out.scalar_type());
      if (inside.defined()) reaching = reaching * inside;
      dx.narrow(1, 0, S - lag).addcmul_(reaching, w.select(1, W - 1 - lag));
      if (x.defined()) dw.select(1, W - 1 - lag).copy_((reaching * x.narrow(1, 0, S - lag)).sum(at::IntArrayRef{0, 1}));
    }
    return {dx, dw, at::Tensor()};
  }
};

// ---- float32/float64 on the CPU ----------------------------------------------------

// The shape of one convolution: x [N, C] as B rows of S, taps wt [W, C] (tap j multiplies
// the token W-1-j back), and how far back each token may read (its offset in its sequence,
// or its position when offsets is null).
template <typename T>
struct ConvShape {
  int64_t B, S, C, W;
  const T* wt;
  const int64_t* offsets;  // [N] or null
  int64_t reach(int64_t n) const {
    const int64_t back = offsets ? offsets[n] : n % S;
    return std::min(back, W - 1);
  }
};

// y = the taps over x at row n (reach rows back), then silu(y) into o where o is not null.
template <typename T>
GLINT_CPU_CLONES void conv_row(const T* x, const T* wt, int64_t C, int64_t W, int64_t reach, T* y, T* o) {
  const T* last = wt + (W - 1) * C;
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t c = 0; c < C; ++c) y[c] = last[c] * x[c];
  for (int64_t lag = 1; lag <= reach; ++lag) {
    const T* tap = wt + (W - 1 - lag) * C;
    const T* back = x - lag * C;
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t c = 0; c < C; ++c) y[c] += tap[c] * back[c];
  }
  if (!o) return;
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t c = 0; c < C; ++c) o[c] = y[c] / (T(1) + exp_approx(-y[c]));
}

// dy = d_out silu'(y) for one row: with s = sigmoid(y), silu' = s (1 + y (1 - s)).
template <typename T>
GLINT_CPU_CLONES void silu_grad_row(const T* d_out, const T* y, T* dy, int64_t C) {
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t c = 0; c < C; ++c) {
    const T s = T(1) / (T(1) + exp_approx(-y[c]));
    dy[c] = d_out[c] * s * (T(1) + y[c] * (T(1) - s));
  }
}

// dx row n: the taps of the rows that read row n (row n + lag reads lag back when its reach
// allows), in the forward's tap order; and with x, each tap's dw part from row n's reads.
template <typename T>
GLINT_CPU_CLONES void conv_grad_row(const T* dy, const T* x, const T* wt, int64_t C, int64_t W, int64_t n,
                                    const ConvShape<T>& s, T* dx, T* dw) {
  const T* last = wt + (W - 1) * C;
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t c = 0; c < C; ++c) dx[c] = last[c] * dy[c];
  const int64_t row_end = (n / s.S + 1) * s.S;
  for (int64_t lag = 1; lag < W && n + lag < row_end; ++lag) {
    if (s.reach(n + lag) < lag) continue;
    const T* tap = wt + (W - 1 - lag) * C;
    const T* later = dy + lag * C;
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t c = 0; c < C; ++c) dx[c] += tap[c] * later[c];
  }
  if (!x) return;
  const int64_t reach = s.reach(n);
  for (int64_t lag = 0; lag <= reach; ++lag) {
    T* part = dw + (W - 1 - lag) * C;
    const T* back = x - lag * C;
#ifdef _OPENMP
#pragma omp simd
#endif
    for (int64_t c = 0; c < C; ++c) part[c] += dy[c] * back[c];
  }
}

template <typename T>
void conv_forward_cpu(const T* x, const ConvShape<T>& s, T* y, T* o) {
  const int64_t N = s.B * s.S, C = s.C;
  at::parallel_for(0, N, std::max<int64_t>(1, 4096 / C), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      conv_row<T>(x + n * C, s.wt, C, s.W, s.reach(n), y + n * C, o ? o + n * C : nullptr);
  });
}

// dy [N, C] (the gradient before the SiLU) -> dx [N, C], and dw [W, C] where x is not null.
template <typename T>
void conv_backward_cpu(const T* dy, const T* x, const ConvShape<T>& s, T* dx, T* dw) {
  const int64_t C = s.C, W = s.W;
  rows_in_fixed_blocks<T>(s.B * s.S, W * C, x ? dw : nullptr, [&](int64_t n, T* part) {
    conv_grad_row<T>(dy + n * C, x ? x + n * C : nullptr, s.wt, C, W, n, s, dx + n * C, part);
  });
}

template <typename T>
void silu_grad_cpu(const T* d_out, const T* y, T* dy, int64_t N, int64_t C) {
  at::parallel_for(0, N, std::max<int64_t>(1, 4096 / C), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) silu_grad_row<T>(d_out + n * C, y + n * C, dy + n * C, C);
  });
}

template <typename T>
ConvShape<T> shape_of(const at::Tensor& x, const at::Tensor& wt, const at::Tensor& offsets) {
  return ConvShape<T>{x.size(0), x.size(1), x.size(2), wt.size(0), wt.data_ptr<T>(),
                      offsets.numel() ? offsets.data_ptr<int64_t>() : nullptr};
}

// The convolution, and the SiLU after it when `silu`, as one function: it keeps the
// convolution's output where the SiLU needs it, x where the kernel trains.
struct CausalConvCpu : torch::autograd::Function<CausalConvCpu> {
  // x [B,S,C] contiguous, w [C,W], offsets [B,S] int64 or empty: all on the CPU, x and w in
  // one of float32/float64.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& offsets, bool silu) {
    const at::Tensor wt = w.t().contiguous();  // [W, C]
    at::Tensor y = at::empty_like(x), o = silu ? at::empty_like(x) : y;
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "causal_conv", [&] {
      conv_forward_cpu<scalar_t>(x.data_ptr<scalar_t>(), shape_of<scalar_t>(x, wt, offsets), y.data_ptr<scalar_t>(),
                                 silu ? o.data_ptr<scalar_t>() : nullptr);
    });
    ctx->save_for_backward({w.requires_grad() ? x : at::Tensor(), w, offsets, silu ? y : at::Tensor()});
    ctx->saved_data["silu"] = silu;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::NoGradGuard no_grad;
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &offsets = saved[2], &y = saved[3];
    const bool silu = ctx->saved_data["silu"].toBool();
    const at::Tensor d_out = grads[0].contiguous();
    const at::Tensor wt = w.t().contiguous();
    at::Tensor dy = silu ? at::empty_like(d_out) : d_out, dx = at::empty_like(d_out);
    at::Tensor dwt = x.defined() ? at::empty_like(wt) : at::Tensor();
    AT_DISPATCH_FLOATING_TYPES(d_out.scalar_type(), "causal_conv_backward", [&] {
      const ConvShape<scalar_t> s = shape_of<scalar_t>(d_out, wt, offsets);
      if (silu)
        silu_grad_cpu<scalar_t>(d_out.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), dy.data_ptr<scalar_t>(),
                                s.B * s.S, s.C);
      conv_backward_cpu<scalar_t>(dy.data_ptr<scalar_t>(), x.defined() ? x.data_ptr<scalar_t>() : nullptr, s,
                                  dx.data_ptr<scalar_t>(), x.defined() ? dwt.data_ptr<scalar_t>() : nullptr);
    });
    return {dx, x.defined() ? dwt.t().contiguous() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor causal_depthwise_conv1d(const at::Tensor& x, const at::Tensor& weight, const SequenceLayout& layout,
                                   bool silu) {
  GLINT_CHECK(x.dim() == 3, "causal_depthwise_conv1d: x must be [B,S,C], got ", x.sizes());
  const int64_t B = x.size(0), S = x.size(1), C = x.size(2);
  GLINT_CHECK(weight.dim() == 3 && weight.size(0) == C && weight.size(1) == 1,
              "causal_depthwise_conv1d: weight must be [", C, ",1,W], got ", weight.sizes());
  GLINT_CHECK(B == layout.rows && S == layout.seq_len, "causal_depthwise_conv1d: x is [", B, ", ", S,
              ", ...] but the layout is [", layout.rows, ", ", layout.seq_len, "]");
  const int64_t W = weight.size(2);
  GLINT_CHECK(W >= 1, "causal_depthwise_conv1d: the kernel width must be at least 1");
  profile::Scope region("short conv");
  const auto compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  // Masks are needed only where a sequence starts after a row's first position (packed
  // sequences, padding): elsewhere every read back inside the row is inside its sequence.
  bool one_sequence_a_row = true;
  for (const Span& span : layout.spans) one_sequence_a_row &= span.start == 0 && !span.padding;
  const at::Tensor offsets = one_sequence_a_row ? at::empty({0}, x.options().dtype(at::kLong))
                                                : offsets_in_sequence(layout).to(x.device());
  const at::Tensor xc = x.to(compute), w = weight.to(compute).reshape({C, W});
  if (cpu_kernels_run(x.device(), compute) && weight.device().is_cpu()) {
    // The SiLU joins the pass where it runs in the compute type, as it would after the
    // convolution; a bf16 model rounds the convolution to bf16 first.
    const bool fused = silu && x.scalar_type() == compute;
    at::Tensor out = CausalConvCpu::apply(xc.contiguous(), w, offsets, fused).to(x.scalar_type());
    return silu && !fused ? at::silu(out) : out;
  }
  // out[b,t] = sum over lags of w[lag] x[b,t-lag] within t's sequence, each lag added in
  // place into the positions it reaches: no shifted copies of x.
  at::Tensor out = CausalConv::apply(xc, w, offsets).to(x.scalar_type());
  return silu ? at::silu(out) : out;
}

}  // namespace glint
