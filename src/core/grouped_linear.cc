#include "core/grouped_linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <numeric>

#include "core/error.h"

namespace glint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct GroupedLinear : torch::autograd::Function<GroupedLinear> {
  // A, B, bias: empty tensors for no LoRA, no bias (every input of a custom function must
  // be defined).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& A,
                            const at::Tensor& B, const at::Tensor& bias, std::vector<int64_t> counts, double scale) {
    const bool lora = A.numel() > 0, biased = bias.numel() > 0;
    const int64_t N = x.size(0), E = w.size(0);
    at::Tensor out = at::empty({N, w.size(1)}, x.options());
    at::Tensor low = lora ? at::empty({N, A.size(1)}, x.options()) : at::Tensor();  // x_e A_eᵀ, kept for dB
    int64_t off = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = counts[e];
      if (n == 0) continue;
      at::Tensor xe = x.narrow(0, off, n), ye = out.narrow(0, off, n);
      if (biased)
        at::addmm_out(ye, bias[e], xe, w[e].t());
      else
        at::mm_out(ye, xe, w[e].t());
      if (lora) {
        at::Tensor le = low.narrow(0, off, n);
        at::mm_out(le, xe, A[e].t());
        ye.addmm_(le, B[e].t(), /*beta=*/1, /*alpha=*/scale);
      }
      off += n;
    }
    ctx->save_for_backward({x, w, A, B, lora ? low : A});
    ctx->saved_data["counts"] = counts;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["biased"] = biased;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &A = saved[2], &B = saved[3], &low = saved[4];
    const std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const double scale = ctx->saved_data["scale"].toDouble();
    const bool lora = A.numel() > 0, biased = ctx->saved_data["biased"].toBool();
    const at::Tensor dy = grad_out[0].contiguous();
    const bool want_x = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1),
               want_A = lora && ctx->needs_input_grad(2), want_B = lora && ctx->needs_input_grad(3),
               want_bias = biased && ctx->needs_input_grad(4);
    at::Tensor dx = want_x ? at::empty(x.sizes(), x.options()) : at::Tensor();
    at::Tensor dw = want_w ? at::zeros(w.sizes(), w.options()) : at::Tensor();
    at::Tensor dA = want_A ? at::zeros(A.sizes(), A.options()) : at::Tensor();
    at::Tensor dB = want_B ? at::zeros(B.sizes(), B.options()) : at::Tensor();
    at::Tensor dbias = want_bias ? at::zeros({w.size(0), w.size(1)}, dy.options()) : at::Tensor();
    int64_t off = 0;
    for (int64_t e = 0; e < int64_t(counts.size()); ++e) {
      const int64_t n = counts[e];
      if (n == 0) continue;
      at::Tensor xe = x.narrow(0, off, n), dye = dy.narrow(0, off, n);
      at::Tensor dxe = want_x ? dx.narrow(0, off, n) : at::Tensor();
      if (want_x) at::mm_out(dxe, dye, w[e]);
      if (want_w) {
        at::Tensor dwe = dw[e];
        at::mm_out(dwe, dye.t(), xe);
      }
      if (lora && (want_x || want_A)) {
        at::Tensor g = at::mm(dye, B[e]);  // [n, r]: dy through B
        if (want_x) dxe.addmm_(g, A[e], /*beta=*/1, /*alpha=*/scale);
        if (want_A) dA[e].addmm_(g.t(), xe, /*beta=*/0, /*alpha=*/scale);
      }
      if (want_B) dB[e].addmm_(dye.t(), low.narrow(0, off, n), /*beta=*/0, /*alpha=*/scale);
      if (want_bias) {
        at::Tensor dbe = dbias[e];
        at::sum_out(dbe, dye, {0});
      }
      off += n;
    }
    return {dx, dw, dA, dB, dbias, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& counts,
                          const at::Tensor& lora_A, const at::Tensor& lora_B, double scale, const at::Tensor& bias) {
  GLINT_ASSERT(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2), "grouped_linear: x ", x.sizes(), ", w ",
               w.sizes());
  GLINT_ASSERT(int64_t(counts.size()) == w.size(0), counts.size(), " counts for ", w.size(0), " experts");
  GLINT_ASSERT(std::accumulate(counts.begin(), counts.end(), int64_t(0)) == x.size(0), "grouped_linear: counts ",
               "do not add up to the ", x.size(0), " rows");
  GLINT_ASSERT(lora_A.defined() == lora_B.defined(), "grouped_linear: lora_A and lora_B go together");
  if (lora_A.defined())
    GLINT_ASSERT(lora_A.dim() == 3 && lora_B.dim() == 3 && lora_A.size(0) == w.size(0) &&
                     lora_B.size(0) == w.size(0) && lora_A.size(2) == w.size(2) && lora_B.size(1) == w.size(1) &&
                     lora_B.size(2) == lora_A.size(1),
                 "grouped_linear: lora_A ", lora_A.sizes(), ", lora_B ", lora_B.sizes(), " for w ", w.sizes());
  if (bias.defined())
    GLINT_ASSERT(bias.dim() == 2 && bias.size(0) == w.size(0) && bias.size(1) == w.size(1), "grouped_linear: bias ",
                 bias.sizes(), " for w ", w.sizes());
  const at::Tensor none = at::empty({0}, w.options());
  return GroupedLinear::apply(x, w, lora_A.defined() ? lora_A : none, lora_B.defined() ? lora_B : none,
                              bias.defined() ? bias : none, counts, scale);
}

}  // namespace glint
