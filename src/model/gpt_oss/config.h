// gpt-oss's names for its layer kinds (ModelConfig::layer_types) and the constants of its
// experts' activation (transformers' GptOssExperts: alpha 1.702, up + 1).
#pragma once

namespace glint {

inline constexpr const char* kGptOssSliding = "sliding_attention";
inline constexpr const char* kGptOssFull = "full_attention";
inline constexpr double kGptOssGluAlpha = 1.702;
inline constexpr double kGptOssGluUpOffset = 1.0;

}  // namespace glint
