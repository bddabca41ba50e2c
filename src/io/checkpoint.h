// A Hugging Face checkpoint directory: `model.safetensors`, or shards listed in
// `model.safetensors.index.json` ({"weight_map": {key: file}}). Keys resolve to the
// file that holds them; files open lazily and stay open.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace glint {

class CheckpointReader {
 public:
  // Throws glint::Error when the directory has neither file, the index is malformed,
  // or a shard named by the index is missing or lacks a key the index promises.
  explicit CheckpointReader(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> keys() const;  // sorted
  bool contains(const std::string& key) const;
  const TensorInfo& info(const std::string& key) const;  // throws naming dir and key
  at::Tensor read(const std::string& key) const;
  at::Tensor read_rows(const std::string& key, int64_t start, int64_t count) const;

 private:
  const SafetensorsFile& file_for(const std::string& key) const;
  std::string dir_;
  std::map<std::string, std::string> key_to_file_;  // key -> file name inside dir_
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// Writes `tensors` as a checkpoint into `dir`: one `model.safetensors`, or, when the
// total exceeds `max_shard_bytes`, shards `model-0000i-of-0000n.safetensors` plus
// `model.safetensors.index.json`. Each file is written atomically.
void write_checkpoint(const std::string& dir,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      uint64_t max_shard_bytes = 5ull << 30);

}  // namespace glint
