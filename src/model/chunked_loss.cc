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

at::ScalarType compute_type(const at::Tensor& hidden) {
  return hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// inputs: hidden [N,H], weight [V,H], target [N]; output: nll [N].
struct ChunkedCrossEntropy : torch::autograd::Function<ChunkedCrossEntropy> {
  // early_grad (the head is frozen): one pass over the vocabulary gives the loss and the
  // hidden states' gradient for a unit output gradient, which backward only scales. The
  // pass is an online softmax over vocabulary tiles (as flash attention's, with the
  // head's rows as the values): for each tile, l = h W_tile^T, the running max m and sum
  // S are updated and U = sum_v exp(l_v - m) W_v is rescaled and accumulated; at the end
  // lse = m + log S and dnll/dh = U / S - W[target]. Both GEMMs of a tile have a large
  // dimension on each side, and no buffer spans the vocabulary.
  // Otherwise: token chunks over the whole vocabulary through the fused row-wise
  // log-softmax, and backward recomputes each chunk's logits.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& target, int64_t chunk_elements, int64_t tile_tokens,
                            bool early_grad) {
    const int64_t N = hidden.size(0), V = weight.size(0);
    const auto compute = compute_type(hidden);
    at::Tensor nll = at::empty({N}, hidden.options().dtype(compute));  // [N]
    if (early_grad) {
      at::Tensor unit_grad_h = at::empty({N, hidden.size(1)}, hidden.options().dtype(compute));  // [N,H]
      // Tiles of up to tile_tokens tokens by chunk_elements / C rows of the head.
      const int64_t C = std::max<int64_t>(1, std::min(N, tile_tokens));
      const int64_t Vb = std::min(V, std::max<int64_t>(1, chunk_elements / C));
      for (int64_t c0 = 0; c0 < N; c0 += C) {
        const int64_t n = std::min(C, N - c0);
        at::Tensor h = hidden.narrow(0, c0, n);                                                 // [C,H]
        at::Tensor m = at::full({n}, -std::numeric_limits<double>::infinity(), nll.options());  // [C]
        at::Tensor S = at::zeros({n}, nll.options());                                           // [C]
        at::Tensor U = at::zeros({n, hidden.size(1)}, nll.options());                           // [C,H]
        for (int64_t v0 = 0; v0 < V; v0 += Vb) {
          const int64_t vb = std::min(Vb, V - v0);
          at::Tensor w = weight.narrow(0, v0, vb);                                 // [Vb,H]
          at::Tensor l = at::matmul(h, w.t()).to(compute);                         // [C,Vb]
          at::Tensor m_new = at::maximum(m, std::get<0>(l.max(1)));
          at::Tensor rescale = (m - m_new).exp_();                                 // [C]
          l.sub_(m_new.unsqueeze(1)).exp_();
          S.mul_(rescale).add_(l.sum(1));
          U.mul_(rescale.unsqueeze(1)).addmm_(l.to(hidden.scalar_type()), w);
          m = m_new;
        }
        at::Tensor t = target.narrow(0, c0, n);
        at::Tensor w_t = weight.index_select(0, t).to(compute);                    // [C,H] target rows
        at::Tensor picked = (h.to(compute) * w_t).sum(1);                          // target logits
        nll.narrow(0, c0, n).copy_(m + S.log() - picked);
        unit_grad_h.narrow(0, c0, n).copy_(U.div_(S.unsqueeze(1)).sub_(w_t));
      }
      ctx->save_for_backward({unit_grad_h.to(hidden.scalar_type())});
    } else {
      const int64_t chunk = std::max<int64_t>(1, chunk_elements / std::max<int64_t>(1, V));
      for (int64_t c0 = 0; c0 < N; c0 += chunk) {
        const int64_t n = std::min(chunk, N - c0);
        at::Tensor t = target.narrow(0, c0, n).unsqueeze(1);                        // [C,1]
        at::Tensor logp = at::log_softmax(at::matmul(hidden.narrow(0, c0, n), weight.t()).to(compute), 1);  // [C,V]
        nll.narrow(0, c0, n).copy_(logp.gather(1, t).squeeze(1).neg());
      }
      ctx->save_for_backward({hidden, weight, target});
    }
    ctx->saved_data["chunk"] = std::max<int64_t>(1, chunk_elements / std::max<int64_t>(1, V));
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
    const at::Tensor &hidden = saved[0], &weight = saved[1], &target = saved[2];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const int64_t N = hidden.size(0);
    const auto compute = compute_type(hidden);
    at::Tensor g = grad_out[0].to(compute);  // [N]
    const bool want_h = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    at::Tensor grad_h = want_h ? at::empty_like(hidden) : at::Tensor();                  // [N,H]
    // The weight's gradient accumulates over chunks in the compute type.
    at::Tensor grad_w = want_w ? at::zeros(weight.sizes(), weight.options().dtype(compute)) : at::Tensor();
    for (int64_t c0 = 0; c0 < N; c0 += chunk) {
      const int64_t n = std::min(chunk, N - c0);
      at::Tensor h = hidden.narrow(0, c0, n);                                     // [C,H]
      at::Tensor p = at::softmax(at::matmul(h, weight.t()).to(compute), 1);      // [C,V]
      at::Tensor t = target.narrow(0, c0, n).unsqueeze(1);
      p.scatter_add_(1, t, at::full({n, 1}, -1.0, p.options()));                  // - one-hot
      p.mul_(g.narrow(0, c0, n).unsqueeze(1));                                    // dL/dlogits
      at::Tensor d = p.to(hidden.scalar_type());
      if (want_h) grad_h.narrow(0, c0, n).copy_(at::matmul(d, weight));
      if (want_w) grad_w.addmm_(d.t().to(compute), h.to(compute));
    }
    if (want_w) grad_w = grad_w.to(weight.scalar_type());
    return {grad_h, grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t loss_chunk_tokens(int64_t vocab, int64_t chunk_elements) {
  return std::max<int64_t>(1, chunk_elements / std::max<int64_t>(1, vocab));
}

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
