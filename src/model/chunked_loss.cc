#include "model/chunked_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace glint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType loss_compute_type(const at::Tensor& hidden) {
  return hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Rows of the head per tile of C tokens: the tile holds at most chunk_elements logits in
// the compute type. Narrower operands (bf16) make each tile twice, the GEMM's output beside
// its float32 copy (and the copy that takes it back for the next GEMM): fewer rows then,
// so that a tile takes no more bytes than the float32 run's.
int64_t tile_rows(const at::Tensor& hidden, int64_t V, int64_t C, int64_t chunk_elements) {
  const int64_t cb = int64_t(c10::elementSize(loss_compute_type(hidden))), ob = int64_t(hidden.element_size());
  const int64_t rows = std::min(V, std::max<int64_t>(1, chunk_elements / C));
  return ob < cb ? std::max<int64_t>(1, rows * cb / (cb + ob)) : rows;
}

// inputs: hidden [N,H], weight [V,H], target [N]; output: nll [N].
struct ChunkedCrossEntropy : torch::autograd::Function<ChunkedCrossEntropy> {
  // One pass over the vocabulary gives the loss: an online softmax over tiles of up to
  // tile_tokens tokens by chunk_elements / tokens rows of the head (flash attention's,
  // with the head's rows as the values). For each tile, l = h W_tile^T; the running max
  // m and sum S are updated; with early_grad (the head is frozen) U = sum_v exp(l_v - m)
  // W_v is rescaled and accumulated too. At the end lse = m + log S, and with early_grad
  // dnll/dh = U / S - W[target] for a unit output gradient, which backward only scales.
  // Otherwise backward runs over the same tiles once more with the saved lse, giving the
  // head's gradient as well. Every GEMM has a large dimension on each side, and no
  // buffer spans the vocabulary.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& target, int64_t chunk_elements, int64_t tile_tokens,
                            bool early_grad) {
    const int64_t N = hidden.size(0), V = weight.size(0), H = hidden.size(1);
    const auto compute = loss_compute_type(hidden);
    const int64_t C = std::max<int64_t>(1, std::min(N, tile_tokens));
    const int64_t Vb = tile_rows(hidden, V, C, chunk_elements);
    at::Tensor nll = at::empty({N}, hidden.options().dtype(compute));                            // [N]
    at::Tensor lse = at::empty({N}, nll.options());                                              // [N]
    at::Tensor unit_grad_h = early_grad ? at::empty({N, H}, nll.options()) : at::Tensor();      // [N,H]
    for (int64_t c0 = 0; c0 < N; c0 += C) {
      const int64_t n = std::min(C, N - c0);
      at::Tensor h = hidden.narrow(0, c0, n);                                                   // [C,H]
      at::Tensor m = at::full({n}, -std::numeric_limits<double>::infinity(), nll.options());    // [C]
      at::Tensor S = at::zeros({n}, nll.options());                                             // [C]
      at::Tensor U = early_grad ? at::zeros({n, H}, nll.options()) : at::Tensor();              // [C,H]
      for (int64_t v0 = 0; v0 < V; v0 += Vb) {
        at::Tensor w = weight.narrow(0, v0, std::min(Vb, V - v0));                 // [Vb,H]
        at::Tensor l = at::matmul(h, w.t()).to(compute);                           // [C,Vb]
        at::Tensor m_new = at::maximum(m, std::get<0>(l.max(1)));
        at::Tensor rescale = (m - m_new).exp_();                                   // [C]
        l.sub_(m_new.unsqueeze(1)).exp_();
        S.mul_(rescale).add_(l.sum(1));
        if (early_grad) {  // bf16 operands take a bf16 GEMM, accumulated in float32
          U.mul_(rescale.unsqueeze(1));
          if (w.scalar_type() == compute) U.addmm_(l, w);
          else U.add_(at::mm(l.to(w.scalar_type()), w));
        }
        m = m_new;
      }
      at::Tensor t = target.narrow(0, c0, n);
      at::Tensor w_t = weight.index_select(0, t).to(compute);                      // [C,H] target rows
      at::Tensor l_t = m + S.log();
      lse.narrow(0, c0, n).copy_(l_t);
      nll.narrow(0, c0, n).copy_(l_t - (h.to(compute) * w_t).sum(1));             // lse - target logit
      if (early_grad) unit_grad_h.narrow(0, c0, n).copy_(U.div_(S.unsqueeze(1)).sub_(w_t));
    }
    if (early_grad) {
      ctx->save_for_backward({unit_grad_h.to(hidden.scalar_type())});
    } else {
      ctx->save_for_backward({hidden, weight, target, lse});
    }
    ctx->saved_data["C"] = C;
    ctx->saved_data["Vb"] = Vb;
    ctx->saved_data["early"] = early_grad;
    return nll;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    if (ctx->saved_data["early"].toBool()) {  // [N,H] * [N,1]
      const at::Tensor& unit = saved[0];
      return {unit * grad_out[0].to(unit.scalar_type()).unsqueeze(1), at::Tensor(), at::Tensor(), at::Tensor(),
              at::Tensor(), at::Tensor()};
    }
    const at::Tensor &hidden = saved[0], &weight = saved[1], &target = saved[2], &lse = saved[3];
    const int64_t C = ctx->saved_data["C"].toInt(), Vb = ctx->saved_data["Vb"].toInt();
    const int64_t N = hidden.size(0), V = weight.size(0);
    const auto compute = loss_compute_type(hidden);
    at::Tensor g = grad_out[0].to(compute);  // [N]
    const bool want_h = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    // Accumulated over tiles in the compute type: dL/dlogits = g (softmax - onehot); the
    // softmax part tile by tile, the one-hot part at the end.
    at::Tensor grad_h = want_h ? at::zeros(hidden.sizes(), lse.options()) : at::Tensor();       // [N,H]
    at::Tensor grad_w = want_w ? at::zeros(weight.sizes(), lse.options()) : at::Tensor();       // [V,H]
    for (int64_t c0 = 0; c0 < N; c0 += C) {
      const int64_t n = std::min(C, N - c0);
      at::Tensor h = hidden.narrow(0, c0, n);                                      // [C,H]
      at::Tensor scale = g.narrow(0, c0, n).unsqueeze(1);                          // [C,1]
      for (int64_t v0 = 0; v0 < V; v0 += Vb) {
        const int64_t vb = std::min(Vb, V - v0);
        at::Tensor w = weight.narrow(0, v0, vb);                                   // [Vb,H]
        at::Tensor p = at::matmul(h, w.t()).to(compute);                           // [C,Vb] logits
        p.sub_(lse.narrow(0, c0, n).unsqueeze(1)).exp_().mul_(scale);              // g * softmax
        if (want_h) grad_h.narrow(0, c0, n).addmm_(p, w.to(compute));
        if (want_w) grad_w.narrow(0, v0, vb).addmm_(p.t(), h.to(compute));
      }
    }
    at::Tensor gh = g.unsqueeze(1) * hidden.to(compute);                           // [N,H]
    if (want_h) grad_h.sub_(g.unsqueeze(1) * weight.index_select(0, target).to(compute));
    if (want_w) grad_w.index_add_(0, target, gh.neg());
    return {want_h ? grad_h.to(hidden.scalar_type()) : at::Tensor(),
            want_w ? grad_w.to(weight.scalar_type()) : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& target,
                                 int64_t chunk_elements, int64_t tile_tokens) {
  GLINT_ASSERT(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1) && target.dim() == 1 &&
                   target.size(0) == hidden.size(0) && chunk_elements > 0 && tile_tokens > 0,
               "chunked_cross_entropy: hidden ", hidden.sizes(), ", weight ", weight.sizes(), ", target ",
               target.sizes(), ", chunk_elements ", chunk_elements, ", tile_tokens ", tile_tokens);
  // The one-pass form when only the hidden states need a gradient (LoRA: the head is
  // frozen) and a backward will follow.
  const bool early = at::GradMode::is_enabled() && hidden.requires_grad() && !weight.requires_grad();
  return ChunkedCrossEntropy::apply(hidden, weight, target.to(hidden.device()), chunk_elements, tile_tokens, early);
}

}  // namespace glint
