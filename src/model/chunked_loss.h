// Cross-entropy over a large vocabulary without materialising [tokens, vocab] logits:
// the logits of one chunk of tokens exist at a time, in forward and again (recomputed)
// in backward, so the loss's memory is O(chunk x V) whatever the number of tokens.
//
// Legend: N tokens (label positions only), H hidden, V vocab, C tokens per chunk.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace glint {

// Elements of one chunk's logits: C = max(1, kLossChunkElements / V). 16M float32
// logits are 64 MB (the backward holds one such buffer, the forward two).
constexpr int64_t kLossChunkElements = int64_t(1) << 24;

// Tokens per chunk for a vocabulary of `vocab` (chunk_elements / vocab, at least 1).
int64_t loss_chunk_tokens(int64_t vocab, int64_t chunk_elements = kLossChunkElements);

// Per-token negative log-likelihood -log softmax(hidden_NH weight_VH^T)[target]:
// hidden [N, H], weight [V, H] (the output head), target [N] int64 in [0, V) -> [N],
// float64 for float64 inputs, else float32 (logits are upcast chunk by chunk).
// Differentiable in hidden and weight; the weight's gradient is computed only when it
// requires grad. When it does not (LoRA: a frozen head), the hidden states' gradient is
// computed in the forward pass, one pass over the vocabulary in all; otherwise backward
// recomputes each chunk's logits. chunk_tokens <= 0 picks loss_chunk_tokens(V).
at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& target,
                                 int64_t chunk_tokens = 0);

}  // namespace glint
