#include "dist/autograd.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "dist/comm.h"

namespace glint {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CommHolder : torch::CustomClassHolder {
  std::shared_ptr<Comm> comm;
  std::vector<int64_t> send, recv;
};

struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<CommHolder> h, const at::Tensor& x) {
    ctx->saved_data["comm"] = c10::IValue::make_capsule(h);
    return h->comm->all_to_all(x, h->send, h->recv);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto h = c10::static_intrusive_pointer_cast<CommHolder>(ctx->saved_data["comm"].toCapsule());
    // Undefined output gradients arrive as zeros (materialized), so every rank exchanges.
    return {at::Tensor(), h->comm->all_to_all(grad_out[0].contiguous(), h->recv, h->send)};
  }
};

}  // namespace

at::Tensor all_to_all_differentiable(const std::shared_ptr<Comm>& comm, const at::Tensor& x,
                                     const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts) {
  auto h = c10::make_intrusive<CommHolder>();
  h->comm = comm;
  h->send = send_counts;
  h->recv = recv_counts;
  return AllToAll::apply(h, x);
}

}  // namespace glint
