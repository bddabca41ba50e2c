// A state sharded over ranks in any layout (replicated, expert slices, FSDP flat shards),
// saved as named logical tensors so that another layout can read it back.
//
// Each rank describes what it holds as pieces: a flat range [offset, offset + count) of
// a logical tensor (its full shape), backed by `count` contiguous elements of its own
// memory. A rank writes the pieces it owns into one safetensors file of its own (no rank
// writes another's bytes, and of identical copies only one is written), and returns an
// index of them. Reading fills any set of pieces, on any layout, from the union of the
// saved indices, reading only the overlapping bytes of each file.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace glint {

struct StatePiece {
  std::string name;            // logical tensor, e.g. "exp_avg/model.layers.0.mlp.experts.lora_A"
  std::vector<int64_t> shape;  // the logical tensor's full shape
  int64_t offset = 0;          // flat offset of local[0] in the logical tensor
  at::Tensor local;            // [count] contiguous view of this rank's memory
  bool writes = true;          // false: an identical copy that another rank writes
};

// Writes the pieces with writes = true into `path` (a safetensors file, atomically; keys
// "<name>@<offset>"). Returns their index: a JSON list of {name, shape, offset, count,
// dtype, key}, which read_state_pieces takes once `file` is added to each entry.
// Throws glint::Error naming the piece when its range lies outside its shape.
nlohmann::json write_state_pieces(const std::string& path, const std::vector<StatePiece>& pieces);

// Fills every piece's `local` (converting the dtype) from the saved pieces in `index`
// (entries {name, shape, offset, count, dtype, key, file}; file relative to `dir`).
// Throws glint::Error naming the tensor when it is not in the index, its saved shape
// differs, or part of the piece's range was never saved.
void read_state_pieces(const std::string& dir, const nlohmann::json& index, const std::vector<StatePiece>& pieces);

// The pieces of a tensor that every rank of a group holds whole and alike: one piece
// over all of it, written by the group's first rank only.
StatePiece replicated_piece(const std::string& name, const at::Tensor& t, bool writer);
// The pieces of a tensor that is slice `index` of `count` equal dim-0 slices of the
// logical tensor (an expert-parallel slice).
StatePiece slice_piece(const std::string& name, const at::Tensor& t, int64_t index, int64_t count, bool writer);

}  // namespace glint
