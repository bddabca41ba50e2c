// DeepSeek-V4 attention: one shared key/value head (kv_proj, used as both K and V) read by
// every query head over a sliding window, plus, in compressed layers, entries that pool
// windows of m tokens each:
//   "sliding_attention"            the window only, "main" RoPE (ctx.rope[0]);
//   "heavily_compressed_attention" (HCA) + one entry per window of compress_rate_hca tokens,
//                                  each visible once its window is complete;
//   "compressed_sparse_attention"  (CSA) + overlapping entries of 2 * compress_rate_csa
//                                  tokens, of which each query sees only the index_topk its
//                                  lightning indexer scores best.
// Compressed layers use the "compress" RoPE (ctx.rope[1]) for queries, keys, entries and
// the indexer. RoPE is interleaved on the last rd dims of a head; the output is turned back
// at the query's position (V carried the keys' rotation). A learned sink logit per head
// joins each softmax's denominator. The heads' outputs go through a grouped low-rank
// projection (o_a_proj per group of heads, then o_b_proj).
//
// Every packed sequence is independent: positions, windows and entries restart at its start.
//
// Legend: B rows, S positions, H hidden, N heads, D head_dim, rd qk_rope_head_dim, Cq
// q_lora_rank, G o_groups, R o_lora_rank, P = N*D/G one group's inputs, m compress rate,
// C compressor channels (2*dim overlapping, dim otherwise), T entries of one sequence,
// nI index heads, dI index_head_dim, L tokens of one sequence.
#pragma once

#include <memory>
#include <string>

#include "model/family.h"

namespace glint {

// DeepSeek-V4's layer kinds, as its config's layer_types and compress_rates name them.
inline constexpr const char* kDeepseekV4Sliding = "sliding_attention";
inline constexpr const char* kDeepseekV4Csa = "compressed_sparse_attention";
inline constexpr const char* kDeepseekV4Hca = "heavily_compressed_attention";
// Whether `kind` is one of the three; the message of a refusal lists them.
inline bool deepseek_v4_layer_kind_known(const std::string& kind) {
  return kind == kDeepseekV4Sliding || kind == kDeepseekV4Csa || kind == kDeepseekV4Hca;
}

class DeepseekV4IndexerImpl;

// Pools each complete window of `rate` tokens of a sequence into one entry [dim]: per
// channel, a softmax over the window's tokens of gate + position_bias weights their kv.
// Overlapping (CSA): C = 2*dim channels [a | b]; entry w pools the a-half of window w-1's
// tokens with the b-half of window w's (window 0 only its b-half).
class DeepseekV4CompressorImpl : public torch::nn::Module {
 public:
  DeepseekV4CompressorImpl(int64_t hidden, int64_t dim, int64_t rate, bool overlap, double eps,
                           const TensorPlacement& place);
  // kv, gate [L,C]: this sequence's kv_proj / gate_proj outputs; cos, sin [L,rd]: its rope
  // rows (rotate-half tables). Returns [T,dim], T = L / rate (the tail window is dropped):
  // pooled, kv_norm'ed, rotated at each window's first token. Undefined when T == 0.
  at::Tensor entries(const at::Tensor& kv, const at::Tensor& gate, const at::Tensor& cos, const at::Tensor& sin);

  int64_t dim, rate;
  bool overlap;
  Linear kv_proj{nullptr}, gate_proj{nullptr};  // [C,H]
  RMSNorm kv_norm{nullptr};                      // [dim]
  at::Tensor position_bias;                      // [m,C], in the model dtype (FSDP flattens a layer to one dtype); used in float32
  std::shared_ptr<DeepseekV4IndexerImpl> indexer;  // CSA only
};
TORCH_MODULE(DeepseekV4Compressor);

// The indexer's head weights: weights_proj [nI,H] on the attention input.
class DeepseekV4IndexerScorerImpl : public torch::nn::Module {
 public:
  DeepseekV4IndexerScorerImpl(int64_t hidden, int64_t heads, const TensorPlacement& place);
  Linear weights_proj{nullptr};
};
TORCH_MODULE(DeepseekV4IndexerScorer);

// CSA's lightning indexer: an overlapping compressor of its own at dI (keys K[w]) and
// queries q_b_proj(qr) per index head. score[t][w] = sum_h wgt[t,h] ReLU(q[t,h] . K[w]) /
// sqrt(dI), wgt = weights_proj(x) / sqrt(nI). Its selection carries no gradient, so none of
// its parameters receives one through the attention.
class DeepseekV4IndexerImpl : public DeepseekV4CompressorImpl {
 public:
  DeepseekV4IndexerImpl(const ModelConfig& c, const TensorPlacement& place);
  int64_t heads, topk;
  Linear q_b_proj{nullptr};  // [nI*dI, Cq]
  DeepseekV4IndexerScorer scorer{nullptr};
};

class DeepseekV4AttentionImpl : public AttentionModule {
 public:
  // REQUIRES: c.layer_types[layer] is one of the three kinds above; q_lora_rank > 0;
  // o_groups divides the heads; rd even and at most head_dim (and index_head_dim for CSA).
  DeepseekV4AttentionImpl(const ModelConfig& c, int64_t layer, const TensorPlacement& place);
  // x [B,S,H] (normed) -> [B,S,H]. ctx.rope[0] "main", ctx.rope[1] "compress" tables
  // [B,S,rd] at each token's position (restarting in every packed sequence). Projections
  // run once over [B,S]; attention runs per sequence of ctx.layout, in blocks of
  // query_block queries, each against its window keys and its sequence's entries:
  // O(N * D * (query_block + window + L/m)) per token, the entries masked (CSA: to the
  // indexer's picks) rather than gathered.
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx) override;
  // Decoding keeps, per row, the window's last keys, the compressors' unfinished blocks and
  // their finished entries (and CSA's indexer keys): each new token reads that state only,
  // O(N * D * (window + L/m)) (CSA: the indexer scores every entry, the attention reads
  // index_topk). Without a window (window 0) every key is needed: the history fallback.
  at::Tensor forward_cached(const at::Tensor& x, const LayerContext& ctx) override;
  bool keeps_decode_state() const override { return window > 0; }
  double decode_state_bytes(int64_t positions, int64_t dtype_bytes) const override;
  double score_macs_per_token(int64_t seq_len) const override;
  ActivationMemory activation_memory(const ActivationShape& shape) const override;

  std::string kind;                 // the layer type
  int64_t num_heads, head_dim, rope_dim, groups, group_rank, window;  // window 0: unlimited
  double eps;
  int64_t query_block = 128;        // queries per block of the blocked attention
  Linear q_a_proj{nullptr};         // [Cq,H]
  RMSNorm q_a_norm{nullptr};        // [Cq]
  Linear q_b_proj{nullptr};         // [N*D,Cq]
  Linear kv_proj{nullptr};          // [D,H]
  RMSNorm kv_norm{nullptr};         // [D]
  Linear o_a_proj{nullptr};         // [G*R,P], applied per group (see forward)
  Linear o_b_proj{nullptr};         // [H,G*R]
  at::Tensor sinks;                 // [N], in the model dtype; the softmax it joins runs in float32
  DeepseekV4Compressor compressor{nullptr};  // CSA / HCA

 private:
  const RotaryTables& rope_tables(const LayerContext& ctx, const at::Tensor& x) const;  // this layer's tables, checked
};
TORCH_MODULE(DeepseekV4Attention);

}  // namespace glint
