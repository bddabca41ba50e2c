// Folding a LoRA adapter into its base model and writing the result as a Hugging Face
// checkpoint (glint merge).
//
//   adapted linear [out, in]:           W'   = W   + scale · B·A        (A [r,in], B [out,r])
//   adapted packed experts [E, out, in]: W'_e = W_e + scale · B_e·A_e    (A [E,r,in], B [E,out,r])
//   router correction biases:           the adapter's (router_biases.safetensors beside it)
//                                       replace the base's when it has them
//
// The output has the family's Hub form (model/weights.h hub_tensors: per-expert keys for
// Qwen3-MoE and DeepSeek-V3, packed experts for the families whose releases store them so),
// sharded as transformers shards, each tensor in the dtype the base stored it in
// (quantised FP8/FP4 weights dequantised to bfloat16), the base's own config.json and its
// tokenizer and generation files.
//
// Streaming: the base is never loaded. Each output tensor is read from the base checkpoint
// (only its bytes), corrected in float32 (float64 for a float64 tensor), converted and
// appended to its shard, in pieces of at most MergeOptions::piece_bytes; memory holds one
// piece besides the adapter and a model skeleton whose weights are never touched
// (TensorPlacement::lazy), never a layer nor the model.
//
// Legend: r LoRA rank, in/out features of the adapted projection, E experts.
#pragma once

#include <cstdint>
#include <string>

namespace glint {

struct MergeOptions {
  std::string model_dir;      // the base model: a Hugging Face model directory
  std::string adapter_dir;    // a PEFT LoRA adapter directory (adapter_config.json + weights), or a
                              // glint run or checkpoint directory (export/from_checkpoint.h)
  std::string tenant;         // with a multi-tenant run's checkpoint: the tenant's adapter
  std::string output;         // the merged model directory: written whole or not at all
  std::string dtype = "keep";  // keep (each tensor as the base stored it), float32, bfloat16, float16
  uint64_t max_shard_bytes = 5ull << 30;  // largest shard file; a larger tensor gets its own
  bool overwrite = false;     // replace a non-empty output (only once the new one is complete)
  uint64_t piece_bytes = 64ull << 20;  // largest part of one tensor held at once (compute dtype)

  // Throws glint::UsageError naming the bad value.
  void validate() const;
};

struct MergeReport {
  int64_t tensors = 0;        // tensors written
  int64_t adapted = 0;        // of them, those the adapter changed
  int64_t files = 0;          // safetensors files written
  uint64_t bytes = 0;         // tensor bytes written (the index's total_size)
  int64_t config_files = 0;   // tokenizer and generation files copied from the base
  bool dequantised = false;   // the base held FP8/FP4 weights: written dequantised in bfloat16,
                              // quantization_config removed from config.json
  bool router_biases = false;  // the adapter's router biases replaced the base's
  std::string config_note;    // how config.json was made when it is not the base's own, or ""
  uint64_t largest_piece_bytes = 0;  // the largest piece of a tensor held at once
};

// Merges options.adapter_dir into options.model_dir and writes options.output. The output
// is staged in a temporary directory beside it and renamed into place only when complete;
// on any error nothing is left at options.output (an existing one stays as it was).
// Throws glint::UsageError for an output that may not be written (a non-empty directory
// without overwrite, a file, the model or adapter directory itself), glint::Error naming
// the file and key for an adapter that does not fit the model (a missing
// adapter_config.json, a key the model lacks, a shape mismatch) or a broken base.
MergeReport merge_adapter(const MergeOptions& options);

}  // namespace glint
