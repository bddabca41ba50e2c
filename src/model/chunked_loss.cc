#include "model/chunked_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

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
  // early_grad: the hidden states' gradient for a unit output gradient is computed here,
  // while each chunk's softmax is at hand, and only scaled in backward (the head is
  // frozen: no second pass over the vocabulary).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& target, int64_t chunk, bool early_grad) {
    const int64_t N = hidden.size(0);
    const auto compute = compute_type(hidden);
    at::Tensor nll = at::empty({N}, hidden.options().dtype(compute));  // [N]
    at::Tensor lse = at::empty({N}, hidden.options().dtype(compute));  // [N] logsumexp per token
    at::Tensor unit_grad_h = early_grad ? at::empty_like(hidden) : at::Tensor();  // [N,H]
    for (int64_t c0 = 0; c0 < N; c0 += chunk) {
      const int64_t n = std::min(chunk, N - c0);
      at::Tensor logits = at::matmul(hidden.narrow(0, c0, n), weight.t()).to(compute);  // [C,V]
      at::Tensor l = at::logsumexp(logits, {1});                                       // [C]
      at::Tensor t = target.narrow(0, c0, n).unsqueeze(1);
      at::Tensor picked = logits.gather(1, t).squeeze(1);
      lse.narrow(0, c0, n).copy_(l);
      nll.narrow(0, c0, n).copy_(l - picked);
      if (early_grad) {
        at::Tensor& p = logits;
        p.sub_(l.unsqueeze(1)).exp_();                                   // softmax
        p.scatter_add_(1, t, at::full({n, 1}, -1.0, p.options()));       // - one-hot
        unit_grad_h.narrow(0, c0, n).copy_(at::matmul(p.to(hidden.scalar_type()), weight));
      }
    }
    if (early_grad) {
      ctx->save_for_backward({unit_grad_h});
    } else {
      ctx->save_for_backward({hidden, weight, target, lse});
    }
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["early"] = early_grad;
    return nll;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    if (ctx->saved_data["early"].toBool()) {  // [N,H] * [N,1]
      const at::Tensor& unit = saved[0];
      return {unit * grad_out[0].to(unit.scalar_type()).unsqueeze(1), at::Tensor(), at::Tensor(), at::Tensor(),
              at::Tensor()};
    }
    const at::Tensor &hidden = saved[0], &weight = saved[1], &target = saved[2], &lse = saved[3];
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
      at::Tensor p = at::matmul(h, weight.t()).to(compute);                       // [C,V] logits
      p.sub_(lse.narrow(0, c0, n).unsqueeze(1)).exp_();                           // softmax
      at::Tensor t = target.narrow(0, c0, n).unsqueeze(1);
      p.scatter_add_(1, t, at::full({n, 1}, -1.0, p.options()));                  // - one-hot
      p.mul_(g.narrow(0, c0, n).unsqueeze(1));                                    // dL/dlogits
      at::Tensor d = p.to(hidden.scalar_type());
      if (want_h) grad_h.narrow(0, c0, n).copy_(at::matmul(d, weight));
      if (want_w) grad_w.addmm_(d.t().to(compute), h.to(compute));
    }
    if (want_w) grad_w = grad_w.to(weight.scalar_type());
    return {grad_h, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t loss_chunk_tokens(int64_t vocab, int64_t chunk_elements) {
  return std::max<int64_t>(1, chunk_elements / std::max<int64_t>(1, vocab));
}

at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& target,
                                 int64_t chunk_tokens) {
  GLINT_ASSERT(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1) && target.dim() == 1 &&
                   target.size(0) == hidden.size(0),
               "chunked_cross_entropy: hidden ", hidden.sizes(), ", weight ", weight.sizes(), ", target ",
               target.sizes());
  const int64_t chunk = chunk_tokens > 0 ? chunk_tokens : loss_chunk_tokens(weight.size(0));
  // The one-pass form when only the hidden states need a gradient (LoRA: the head is
  // frozen) and a backward will follow.
  const bool early = at::GradMode::is_enabled() && hidden.requires_grad() && !weight.requires_grad();
  return ChunkedCrossEntropy::apply(hidden, weight, target.to(hidden.device()), chunk, early);
}

}  // namespace glint
