// The GLM-4.5 family (glm4_moe: GLM-4.5, GLM-4.5-Air, GLM-4.6). Grouped-query attention
// with q/k/v biases, an optional RMSNorm on each query and key head, and partial RoPE
// (model/glm4_moe/attention.h); the first first_k_dense_replace layers dense, the others
// an MoE with a sigmoid router, a selection-only correction bias, group-limited top-k,
// renormalised and scaled weights, and shared experts every token passes. The releases
// store experts per expert, and their multi-token-prediction layers after the decoder's
// (layers num_hidden_layers..): those are skipped when read.
//
// Followed: huggingface/transformers src/transformers/models/glm4_moe/
//   modeling_glm4_moe.py @ a0699c971daff96403489086fcfd07469d20b17f,
//   configuration_glm4_moe.py @ c7ec229ad64cdcf0176f669969c66c9a652e7f38.
#pragma once

#include "model/family.h"

namespace glint {

const ModelFamily& glm4_moe_family();

}  // namespace glint
