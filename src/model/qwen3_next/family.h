// The Qwen3-Next family (qwen3_next: Qwen3-Next-80B-A3B and its tiny test checkpoints):
// the layers of Qwen3.5-MoE (model/qwen3_5/attention.h) with Gated DeltaNet's input
// projections fused per key head (in_proj_qkvz, in_proj_ba), (1+w) RMSNorms, gated full
// attention with partial RoPE, and a softmax top-k MoE (renormalised when norm_topk_prob)
// with one shared expert behind a sigmoid gate; layers in mlp_only_layers, or off the
// decoder_sparse_step, are dense SwiGLU of width intermediate_size. Keys are flat
// ("model.layers.N..."), experts per expert on disk ("mlp.experts.E.{gate,up,down}_proj.weight")
// and written back that way; multi-token-prediction weights ("mtp.") are skipped.
//
// Followed: huggingface/transformers src/transformers/models/qwen3_next/
//   modeling_qwen3_next.py @ 01cdc6081c7500f9e50c98b1b943c90ecb665db3 (fix_query_key_value_ordering,
//     the router, the decoder layer's MoE/dense choice),
//   configuration_qwen3_next.py @ 008e574391258935f3ecc3035c882e73bbcac419 (defaults; layer_types from
//     full_attention_interval, default 4; partial_rotary_factor default 0.25) and
//     @ 249ef8164cfbd8e288c2f6d8395539b9e90e8300 (rope_theta and partial_rotary_factor at the top level).
#pragma once

#include "model/family.h"

namespace glint {

const ModelFamily& qwen3_next_family();

}  // namespace glint
