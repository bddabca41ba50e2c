// Collectives as autograd functions: their backward is the adjoint collective.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace glint {

class Comm;

// Uneven all-to-all along dim 0 (Comm::all_to_all) whose backward sends the gradients
// back the way the rows came: the reverse all-to-all with send and receive counts swapped.
// Every rank of `comm` must call it (forward, and backward when the graph is
// differentiated) in the same order. x [sum(send), ...] -> [sum(recv), ...].
at::Tensor all_to_all_differentiable(const std::shared_ptr<Comm>& comm, const at::Tensor& x,
                                     const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts);

}  // namespace glint
