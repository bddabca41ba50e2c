// The gpt-oss family (gpt_oss: gpt-oss-20b, gpt-oss-120b). Attention with sinks, biases and
// alternating sliding-window and full layers (model/gpt_oss/attention.h), YaRN RoPE; every
// layer an MoE whose router has a bias and takes the top-k logits' softmax, and whose
// experts are stored input-major with gate and up interleaved, biases on both projections
// and a clamped GLU, gate * sigmoid(1.702 gate) * (up + 1). Releases store the experts in
// MXFP4 (*_blocks, *_scales), dequantised while read; saved and merged models hold them in
// the form transformers' save_pretrained writes after dequantising: bfloat16 gate_up_proj
// [E, H, 2I], down_proj [E, I, H] and their biases.
//
// Followed: huggingface/transformers src/transformers/models/gpt_oss/ (modeling_gpt_oss.py,
// configuration_gpt_oss.py) and integrations/mxfp4.py; PEFT's ParamWrapper for the
// adapter's expert keys (lora/peft_io.h).
#pragma once

#include "model/family.h"

namespace glint {

const ModelFamily& gpt_oss_family();

}  // namespace glint
