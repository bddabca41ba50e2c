// gpt-oss attention: grouped-query attention with biases on q, k, v and o, rotate-half RoPE
// over the whole head (YaRN-scaled tables, model/layers.h), and a learned logit per query
// head, its sink, that joins every softmax denominator and takes no value: each query's
// weights sum to less than one. Sliding-window layers let a query see the keys of its own
// sequence at most `window - 1` positions back (itself included: `window` keys); full layers
// see the whole causal prefix.
//
// Legend: B rows, S positions, H hidden, Nh query heads, Nkv key/value heads, D head_dim,
// L one sequence's length.
#pragma once

#include <array>

#include "model/family.h"

namespace glint {

// Causal softmax attention within each sequence of `layout`, with a sink logit per head
// and an optional window: q [B,Nh,S,D], k, v [B,Nkv,S,D] (query head h reads kv head
// h / (Nh / Nkv)), sinks [Nh] -> [B,S,Nh*D]. Scores scaled by `scale`; probabilities
// computed in float32 (float64 for float64 inputs). window 0: no window. A padding token
// attends to itself and the sink. Block attention per sequence (model/block_attention.h):
// no [S, S] probabilities, and a sliding layer scores only the keys in its window.
at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const SequenceLayout& layout, int64_t window, double scale);

class GptOssAttentionImpl : public AttentionModule {
 public:
  // The layer's kind comes from c.layer_types[layer]: "sliding_attention" or "full_attention".
  GptOssAttentionImpl(const ModelConfig& c, int64_t layer, const TensorPlacement& place);
  // x [B,S,H] -> [B,S,H]; RoPE from ctx.rope[0].
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx) override;
  // Keys and values cached; the window and the sinks apply to the cached keys alike.
  at::Tensor forward_cached(const at::Tensor& x, const LayerContext& ctx) override;
  bool keeps_decode_state() const override { return true; }
  double decode_state_bytes(int64_t positions, int64_t dtype_bytes) const override;
  double score_macs_per_token(int64_t seq_len) const override;
  ActivationMemory activation_memory(const ActivationShape& shape) const override;

  int64_t num_heads, num_kv_heads, head_dim;
  int64_t window;  // sliding_window on a sliding layer, else 0
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  at::Tensor sinks;  // [Nh]

 private:
  // q [B,Nh,S,D], k, v [B,Nkv,S,D] of x [B,S,H], RoPE applied.
  std::array<at::Tensor, 3> qkv(const at::Tensor& x, const LayerContext& ctx);
};
TORCH_MODULE(GptOssAttention);

}  // namespace glint
