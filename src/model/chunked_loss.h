// Cross-entropy over a large vocabulary without materialising [tokens, vocab] logits:
// the logits of one chunk of tokens exist at a time, in forward and again (recomputed)
// in backward, so the loss's memory is O(chunk x V) whatever the number of tokens.
//
// Legend: N tokens (label positions only), H hidden, V vocab, C tokens per chunk.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace glint {

// Logits held at a time: 16M float32 elements are 64 MB.
constexpr int64_t kLossChunkElements = int64_t(1) << 24;
// Tokens per tile (a tile is up to kLossTileTokens tokens by chunk_elements / tokens rows
// of the head).
constexpr int64_t kLossTileTokens = 2048;

// Per-token negative log-likelihood -log softmax(hidden_NH weight_VH^T)[target]:
// hidden [N, H], weight [V, H] (the output head), target [N] int64 in [0, V) -> [N],
// float64 for float64 inputs, else float32. Differentiable in hidden and weight. The
// logits are computed in tiles of up to tile_tokens tokens by chunk_elements / tokens rows
// of the head, with an online softmax, so at most ~chunk_elements logits exist at once
// (bf16 operands: in the bytes of as many float32 logits, their bf16 copies included).
// When only hidden needs a gradient (LoRA: a frozen head), that one pass also gives the
// hidden states' gradient; otherwise backward recomputes the tiles and gives the head's
// gradient too.
at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& target,
                                 int64_t chunk_elements = kLossChunkElements, int64_t tile_tokens = kLossTileTokens);

}  // namespace glint
