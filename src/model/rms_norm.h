// RMSNorm over the last dimension, and the gated form that closes a Gated DeltaNet layer
// (the norm of the rule's output times silu of the gate projection).
//
// Legend: D the normalized dimension.
#pragma once

#include <ATen/core/Tensor.h>

namespace glint {

// y = x / sqrt(mean(x²) + eps) · s with s = weight, or 1 + weight with unit_offset (Qwen3.5),
// and with `gate` defined (same shape as x) times silu(gate). Computed in float32 (float64
// for float64 inputs) and returned in x's dtype; s multiplies after the cast to x's dtype
// for the plain form (transformers' Qwen3 order) and before it with unit_offset, and the
// gate's product is taken in the compute type. x [..., D], weight [D].
// On the CPU in float32/float64 (core/cpu_kernels.h) it runs as one pass each way and keeps
// x (and the gate) and one reciprocal norm per vector; ATen's operators keep the normalized
// vector in the compute type too, and the gate's SiLU and the normalized product.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool unit_offset,
                    const at::Tensor& gate = at::Tensor());

}  // namespace glint
