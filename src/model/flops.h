// The model's FLOP count from its shape: what a benchmark divides by its time to report
// an achieved rate (glint bench train).
#pragma once

#include <cstdint>

namespace glint {

class CausalLMImpl;

// Multiply-add FLOPs of one forward pass over B rows of S tokens (matmuls only: the
// elementwise work is small next to them): every linear and expert tensor the model's
// walk visits (experts once per routed copy), the routers, each attention module's
// score and value products over the full S x S, and the output head. The model may be
// unwritten (lazy placement): only shapes are read.
double forward_flops(CausalLMImpl& model, int64_t B, int64_t S);

}  // namespace glint
