// Exact causal attention over one sequence without its [heads, S, S] probabilities: the
// query rows go in blocks, each against only the keys it can see, and backward recomputes
// each block from the inputs and the rows' log-sum-exp (flash attention's scheme, written
// with ATen GEMMs). Memory beyond inputs and output: one block's scores, O(block x S);
// causal blocks skip the keys after them, so a sequence costs about half the GEMM work of
// a masked S x S product, and a sliding window bounds it by the window.
//
// Legend: b rows, N query heads, Nkv key/value heads (N a multiple: grouped queries read
// their kv head without a copy of it per query head), S tokens, D and Dv head dims.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace glint {

// q [b, N, S, D], k [b, Nkv, S, D], v [b, Nkv, S, Dv] -> [b, N, S, Dv], token i seeing
// keys j <= i (and i - j < window when window > 0), softmax of scale * q.k in float32
// (float64 for float64 inputs). sinks [N] (optional): a logit per head that joins every
// row's softmax denominator and attends to nothing (gpt-oss). Differentiable in q, k, v
// and sinks. `block`: query rows per block (0: chosen to keep one block's scores near
// 4M elements).
at::Tensor block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                           const at::Tensor& sinks = at::Tensor(), int64_t window = 0, int64_t block = 0);

// The query rows of one block when block_attention chooses (block 0), and the elements of
// one block's scores [b, N, rows, keys] in the compute type: what a step holds beyond the
// inputs while one attention runs (the memory estimate, train/memory_estimate.h).
int64_t block_attention_rows(int64_t b, int64_t N, int64_t S, int64_t window);
double block_attention_scores(int64_t b, int64_t N, int64_t S, int64_t window);

// For comparisons only (`glint bench train --attention eager`): sequence_attention's
// default kernel then computes each sequence's whole [S, S] scores and keeps its
// probabilities for backward, as glint did before block attention. Process-wide.
void set_eager_attention(bool on);
bool eager_attention();

}  // namespace glint
