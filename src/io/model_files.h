// A Hugging Face checkpoint directory: `model.safetensors`, or shards listed in
// `model.safetensors.index.json` ({"weight_map": {key: file}}). Keys resolve to the
// file that holds them; files open lazily and stay open. Not thread-safe: the lazy
// open mutates a cache, so share one reader between threads only behind a lock.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
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
  // Bytes of tensor data read through this reader so far, and held by all its tensors:
  // how a sharded load shows that each rank read only its share.
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t tensor_bytes() const;
  // Throws glint::Error when a file read so far changed on disk since it was opened
  // (SafetensorsFile::check_unchanged): a loader calls it when it is done, so a shard
  // replaced after its last read is caught too.
  void check_unchanged() const;

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
  mutable std::atomic<uint64_t> bytes_read_{0};
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

// write_checkpoint for values that arrive piece by piece: the files are planned from the
// specs (the same packing and names), then filled in spec order, one shard file after
// another, so the caller never holds more than a piece. A shard is written atomically
// when its last tensor is full; the index and the removal of stale files come last, in
// finish(). The plan's problems (duplicate names, dtypes safetensors cannot store) throw
// glint::Error before anything is written.
class CheckpointWriter {
 public:
  CheckpointWriter(const std::string& dir, std::vector<TensorSpec> tensors,
                   uint64_t max_shard_bytes = 5ull << 30);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The next values of the first tensor not yet full (SafetensorsWriter::append).
  void append(const at::Tensor& piece);
  // REQUIRES: every tensor full. Writes the index (when sharded), removes stale files.
  void finish();
  size_t num_files() const { return shards_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  void advance();  // past full tensors, finishing and opening shard files on the way
  std::string dir_;
  std::vector<TensorSpec> tensors_;
  std::vector<std::vector<TensorSpec>> shards_;  // the plan
  std::vector<size_t> shard_of_;                 // tensor index -> shard
  std::vector<std::string> names_;               // shard file names
  uint64_t total_bytes_ = 0;
  std::unique_ptr<SafetensorsWriter> open_;      // the shard being filled
  size_t open_shard_ = 0;                        // its index (valid while open_)
  size_t finished_shards_ = 0;
  size_t current_ = 0;   // the tensor being filled
  int64_t filled_ = 0;   // its values written so far
};

}  // namespace glint
