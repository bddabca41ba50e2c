// Decoding state for incremental generation: what each layer keeps of the tokens it has
// already seen, per batch row, so that a forward of the next tokens costs work for those
// tokens only. Passed through the model in LayerContext::cache; model code stays
// single-device and knows nothing of who drives the decoding (src/generate/).
//
// A cache serves one batch of rows. Row b holds lengths()[b] tokens at positions
// 0 .. lengths()[b]-1. A forward with a cache appends, per row, the tokens of that row
// whose segment id is >= 0: they must be a prefix of the row (the rest is right padding,
// segment -1), and their positions must continue the row (lengths()[b] + i). Each
// attention module keeps what it needs under its own key:
//   - full attention: keys and values of every cached token (KvState, cached_attention);
//   - linear attention (GatedDeltaNet): its convolution tail and recurrent state;
//   - sliding-window and compressed attention (DeepSeek-V4): its window's last keys
//     (append_recent), its compressors' unfinished blocks and finished entries;
//   - a module with no state of its own (AttentionModule::keeps_decode_state() false):
//     the inputs of its sublayer, over which it is recomputed, row by row, for the new
//     tokens (history_forward). Exact, and O(history) per step instead of O(1).
// Rows can be dropped (keep_rows) when they finish; the adapters' row tags must then be
// reset by the caller to match.
//
// Legend: B rows, S new tokens per row in this forward, T cached + new positions,
// Cap allocated positions, N heads, D head dim, H hidden.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "model/family.h"

namespace glint {

// One module's decoding state. Every tensor it holds has the batch row on dim 0.
class LayerState {
 public:
  virtual ~LayerState() = default;
  // The tensors it holds (some may still be undefined).
  virtual std::vector<at::Tensor*> tensors() = 0;
  // Keeps rows `rows` ([B'] int64 on the cache's device) of every tensor, in that order.
  void keep_rows(const at::Tensor& rows);
  int64_t bytes();  // of its tensors' storage
};

class DecodeCache {
 public:
  // A cache of `rows` empty rows on `device`; `capacity` positions per row are
  // allocated up front (more are added as needed).
  DecodeCache(int64_t rows, const c10::Device& device, int64_t capacity = 0);
  ~DecodeCache();
  DecodeCache(const DecodeCache&) = delete;
  DecodeCache& operator=(const DecodeCache&) = delete;

  int64_t rows() const { return int64_t(lengths_.size()); }
  // Bytes its states and token history hold (train/memory_estimate.h estimates them).
  int64_t bytes() const;
  const std::vector<int64_t>& lengths() const { return lengths_; }  // cached tokens per row
  const c10::Device& device() const { return device_; }
  int64_t capacity() const { return capacity_; }
  // Every attention module decodes by recomputing its sublayer over the history
  // (history_forward), whether or not it keeps a state of its own: the baseline that
  // `glint bench decode --compare` times. Set before the first forward.
  bool recompute = false;

  // Keeps rows `rows` (indices into the current rows, each at most once), in that order.
  void keep_rows(const std::vector<int64_t>& rows);

  // --- Used by the model during one forward. ---
  // Starts a forward of [B,S] tokens: checks the rows, that the tokens are a prefix of
  // each row and that position_ids continue it; throws glint::Error naming the row.
  void begin(const at::Tensor& segment_ids, const at::Tensor& position_ids);
  // Ends it: the new tokens join the cached ones.
  void commit();
  // This forward's new tokens per row (valid between begin and commit).
  const std::vector<int64_t>& new_counts() const { return new_counts_; }
  int64_t new_tokens() const { return step_; }  // S
  // Whether every row was empty at begin(): the forward is a prefill of whole prompts.
  bool prefill() const { return prefill_; }
  // [B,S] int64 on device(): position lengths()[b] + i of the i-th new token of row b.
  const at::Tensor& write_index() const { return write_index_; }
  // Positions every layer state must hold for this forward: max_b lengths()[b] + S.
  int64_t span() const { return span_; }
  // Grows `t` [B, Cap, ...] along dim `dim` to capacity() positions (zeros), keeping its
  // contents; allocates it (zeros of `shape` with Cap at `dim`) when undefined.
  void fit(at::Tensor& t, int64_t dim, std::vector<int64_t> shape, const at::TensorOptions& options) const;
  // Writes this forward's x (row b on dim 0, its S new tokens along `dim`) at the tokens'
  // positions along `dim` of t, fitted to capacity() first (zeros shaped like x when
  // undefined): a per-position state's append.
  void store(at::Tensor& t, int64_t dim, const at::Tensor& x) const;

  // The state `owner` keeps, made by `make` on first use.
  template <typename T>
  T& state(const void* owner, const std::function<std::unique_ptr<T>()>& make) {
    auto it = states_.find(owner);
    if (it == states_.end()) it = states_.emplace(owner, make()).first;
    return static_cast<T&>(*it->second);
  }

  // Between begin and commit, for a model with a module that keeps no state: appends
  // input_ids [B,S] (on device()) to the rows' token ids and sets `history`, the context of
  // every row's whole sequence (positions 0 .. T-1, right padded), its RoPE tables made by
  // `rotary` from position ids [B,T].
  void begin_history(const at::Tensor& input_ids,
                     const std::function<std::vector<RotaryTables>(const at::Tensor&)>& rotary);
  std::unique_ptr<LayerContext> history;  // null unless begin_history ran in this forward

 private:
  std::vector<int64_t> lengths_, new_counts_;
  c10::Device device_;
  int64_t capacity_ = 0, step_ = 0, span_ = 0;
  bool prefill_ = false, in_forward_ = false;
  at::Tensor write_index_;
  at::Tensor history_ids_;  // [B,Cap] int64: the rows' token ids, kept once begin_history runs
  std::unordered_map<const void*, std::unique_ptr<LayerState>> states_;
};

// Keys and values of a full-attention module: [B,N,Cap,D] and [B,N,Cap,Dv].
struct KvState : LayerState {
  at::Tensor k, v;
  std::vector<at::Tensor*> tensors() override { return {&k, &v}; }
};

// A KvState's bytes per row for `positions` positions, keys of `key_width` (N*D) and
// values of `value_width` (N*Dv) elements of `dtype_bytes` a position
// (AttentionModule::decode_state_bytes of a module that caches keys and values).
inline double kv_state_bytes(int64_t positions, int64_t key_width, int64_t value_width, int64_t dtype_bytes) {
  return double(positions) * double((key_width + value_width) * dtype_bytes);
}

// Appends this forward's keys and values to `state`, then attends each new query over
// its row's cached and new keys (causal among the new ones). q [B,Nh,S,D], k [B,Nkv,S,D],
// v [B,Nkv,S,Dv] (query head h reads kv head h / (Nh / Nkv)) -> [B,S,Nh*Dv], scores scaled
// by 1/sqrt(D): the contract of sequence_attention, whose kernels run the prefill.
// Outputs at padding positions are finite and meaningless.
// With `sinks` [Nh] each head's sink logit joins its softmax denominator, and with
// window > 0 a query sees only the keys less than `window` positions back (model/gpt_oss
// attention); both are kept in the prefill too.
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, KvState& state,
                            const LayerContext& ctx, const at::Tensor& sinks = at::Tensor(), int64_t window = 0);

// [B,S,T] bool, between begin and commit: whether cached or new position t is out of the
// sight of new token s of row b: after it (t > lengths()[b] + s), or with window > 0 at
// least `window` positions back.
at::Tensor keys_out_of_sight(const DecodeCache& cache, int64_t T, int64_t window = 0);

// The last `keep` positions of each row of a per-token tensor (a sliding window's keys, a
// compressor's unfinished blocks): `recent` [B,keep,...], slot j of row b holding position
// lengths()[b] - keep + j (zeros where that is before the row's start). Between begin and
// commit, appends this forward's x [B,S,...] and returns [B,keep+S,...]: the kept positions
// then the new tokens, slot j of row b at position lengths()[b] - keep + j (padding
// included); `recent` then keeps the last `keep` positions of each row's real tokens. A
// module's state holds these (keep_recent_rows drops rows): O(keep) per step, whatever the
// history.
at::Tensor append_recent(at::Tensor& recent, int64_t keep, const at::Tensor& x, const DecodeCache& cache);

// Grows `t` along dim `dim` to at least `need` slots (doubling, zeros), keeping its contents;
// allocates it (zeros of `shape`, `need` at `dim`) when undefined. For per-row lists that
// grow at their own pace (a compressor's entries), where DecodeCache::fit's one slot per
// position would be too many.
void reserve_slots(at::Tensor& t, int64_t dim, int64_t need, std::vector<int64_t> shape, const at::TensorOptions& options);

// The inputs of a module with no decoding state of its own: [B,Cap,H].
struct HistoryState : LayerState {
  at::Tensor x;
  std::vector<at::Tensor*> tensors() override { return {&x}; }
};

// AttentionModule::forward_cached's default: appends x [B,S,H] to the module's input
// history and runs module.forward over each row's whole history (ctx.cache->history),
// returning the outputs at the new positions [B,S,H].
at::Tensor history_forward(AttentionModule& module, const at::Tensor& x, const LayerContext& ctx);

}  // namespace glint
