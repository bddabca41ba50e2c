// The DeepSeek-V4 family (deepseek_v4: DeepSeek-V4-Flash, -Pro). Every layer is a
// hyper-connection block (model/hyper_connection.h) around attention over a sliding
// window plus compressed entries (model/deepseek_v4/attention.h) and an MoE whose router
// scores with sqrt(softplus), chooses by a correction bias (or, in the first "hash_moe"
// layers, by a table indexed by token id), and whose experts and shared expert clamp
// their SwiGLU. Two RoPE sets: "main" (rope_theta) for sliding-window layers, "compress"
// (compress_rope_theta with the YaRN rope_scaling) for the compressed ones.
//
// The weight map reads the released checkpoint's own key names ("layers.3.attn.wq_a.weight"
// with ".scale") as well as transformers' ("model.layers.3.self_attn.q_a_proj.weight");
// FP8 (E8M0 block scales) and FP4 (routed experts) weights are dequantised while read;
// multi-token-prediction weights ("mtp.*") are skipped. save_pretrained writes
// transformers' names with packed experts.
//
// Followed: huggingface/transformers src/transformers/models/deepseek_v4/
//   modeling_deepseek_v4.py @ 019760818965c71b0a4d38e95820ee0b6cee4240,
//   configuration_deepseek_v4.py @ 015c078164151a049126942989817713e83a8f3e,
//   and the deepseek_v4 entry of src/transformers/conversion_mapping.py for the released names.
#pragma once

#include "model/family.h"

namespace glint {

const ModelFamily& deepseek_v4_family();

}  // namespace glint
