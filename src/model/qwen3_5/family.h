// The Qwen3.5-MoE family (qwen3_5_moe, the multimodal release, read for its text model;
// qwen3_5_moe_text): hybrid layers of Gated DeltaNet linear attention and gated full
// attention (model/qwen3_5/attention.h), (1+w) RMSNorms, every layer a softmax top-k MoE
// (always renormalised) with one shared expert behind a sigmoid gate. The release's
// "model.language_model." keys load as the text model's "model."; vision and
// multi-token-prediction weights are skipped. save_pretrained writes the text model
// (qwen3_5_moe_text, Qwen3_5MoeForCausalLM).
//
// Followed: huggingface/transformers src/transformers/models/qwen3_5_moe/
//   modeling_qwen3_5_moe.py @ 5fd974ea3af798c79b3b70d2fd9e52fb58869894,
//   configuration_qwen3_5_moe.py and modular_qwen3_5_moe.py @ e36255cb9af68ea2c16fefd6b1c798882cafda16,
//   and for the chunked delta rule qwen3_next/modeling_qwen3_next.py @ 01cdc6081c7500f9e50c98b1b943c90ecb665db3.
#pragma once

#include "model/family.h"

namespace glint {

const ModelFamily& qwen3_5_family();

}  // namespace glint
