// The Qwen3 family: qwen3 (dense) and qwen3_moe (sparse MoE, softmax top-k routing).
// Followed: transformers models/qwen3 and models/qwen3_moe (v5: packed experts in memory,
// per-expert keys on the Hub).
#pragma once

#include "model/family.h"

namespace glint {

const ModelFamily& qwen3_family();

}  // namespace glint
