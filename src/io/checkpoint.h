// A Hugging Face checkpoint directory: `model.safetensors`, or shards listed in
// `model.safetensors.index.json` ({"weight_map": {key: file}}). Keys resolve to the
// file that holds them; files open lazily and stay open. Not thread-safe: the lazy
// open mutates a cache, so share one reader between threads only behind a lock.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
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
  at::Tensor read_flat(const std::string& key, int64_t start, int64_t count) const;

  // Renames the keys as the model's weight map names them: every stored key k is seen as
  // name(k) from then on, or not at all when name(k) is empty. Two keys renamed to one
  // name throw glint::Error naming both.
  void rename_keys(const std::function<std::string(const std::string&)>& name);

 private:
  const std::string& stored(const std::string& key) const;  // the key in the file
  const SafetensorsFile& file_for(const std::string& key) const;
  std::string dir_;
  std::map<std::string, std::string> key_to_file_;  // stored key -> file name inside dir_
  bool renamed_ = false;
  std::map<std::string, std::string> renamed_to_stored_;  // after rename_keys
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// Writes `tensors` as a checkpoint into `dir`: one `model.safetensors`, or, when the
// total exceeds `max_shard_bytes`, shards `model-0000i-of-0000n.safetensors` plus
// `model.safetensors.index.json` ({"metadata": {"total_size": bytes}, "weight_map": ..}).
// Tensors are never split; one larger than max_shard_bytes gets a shard of its own.
// Each file is written atomically; files of an earlier write that the new checkpoint
// does not use (a stale index, single file or `model-*-of-*` shard) are removed
// afterwards, since transformers prefers `model.safetensors` over an index.
// Duplicate names throw glint::Error before anything is written.
void write_checkpoint(const std::string& dir,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      uint64_t max_shard_bytes = 5ull << 30);

}  // namespace glint
