// The DeepSeek-V3 family (deepseek_v3; Kimi-K2 and other checkpoints of this architecture
// load through it): multi-head latent attention with YaRN RoPE, dense first layers, then
// MoE layers with sigmoid group-limited routing, a correction bias and shared experts.
// FP8 checkpoints (e4m3 with float32 weight_scale_inv per 128x128 block) are dequantised
// while read (model/weights.cc).
//
// Followed: huggingface/transformers src/transformers/models/deepseek_v3/
//   modeling_deepseek_v3.py @ 00b676f8f0489b88652a31d70751cc540dd06305,
//   configuration_deepseek_v3.py @ 001f85b38fb432858ace93f18622f07cec46d874,
//   modeling_rope_utils.py (YaRN: _compute_yarn_parameters), and for the group mask
//   (-inf, not 0) DeepSeek's release code and transformers PR #45441.
#pragma once

#include "model/family.h"

namespace glint {

const ModelFamily& deepseek_v3_family();

}  // namespace glint
