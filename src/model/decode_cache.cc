// Legend: B rows, S new tokens per row, T cached + new positions, Cap allocated positions,
// Nh / Nkv query / kv heads, D head dim, H hidden.
#include "model/decode_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace glint {

DecodeCache::DecodeCache(int64_t rows, const c10::Device& device, int64_t capacity)
    : lengths_(size_t(std::max<int64_t>(rows, 0)), 0), device_(device), capacity_(std::max<int64_t>(capacity, 0)) {
  GLINT_CHECK(rows > 0, "decode cache: needs at least one row, got ", rows);
}

DecodeCache::~DecodeCache() = default;

void DecodeCache::keep_rows(const std::vector<int64_t>& rows) {
  GLINT_ASSERT(!in_forward_, "keep_rows during a forward");
  std::vector<bool> seen(lengths_.size(), false);
  std::vector<int64_t> lengths;
  for (int64_t r : rows) {
    GLINT_ASSERT(r >= 0 && r < this->rows() && !seen[r], "keep_rows: row ", r, " of ", this->rows());
    seen[r] = true;
    lengths.push_back(lengths_[r]);
  }
  GLINT_ASSERT(!rows.empty(), "keep_rows: no rows left");
  at::Tensor index = at::tensor(rows, at::kLong).to(device_);
  for (auto& [owner, state] : states_) state->keep_rows(index);
  if (history_ids_.defined()) history_ids_ = history_ids_.index_select(0, index);
  lengths_ = std::move(lengths);
}

void DecodeCache::begin(const at::Tensor& segment_ids, const at::Tensor& position_ids) {
  GLINT_ASSERT(!in_forward_, "decode cache: a forward began before the previous one ended");
  GLINT_CHECK(segment_ids.dim() == 2 && segment_ids.size(0) == rows() && position_ids.sizes() == segment_ids.sizes(),
              "decode cache of ", rows(), " rows: a forward needs segment_ids and position_ids of [", rows(),
              ", S]; got ", segment_ids.sizes(), " and ", position_ids.sizes());
  const int64_t B = rows(), S = segment_ids.size(1);
  at::Tensor seg = segment_ids.to(at::kCPU, at::kLong).contiguous(), pos = position_ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t *sg = seg.data_ptr<int64_t>(), *ps = pos.data_ptr<int64_t>();
  new_counts_.assign(B, 0);
  prefill_ = true;
  span_ = 0;
  std::vector<int64_t> index(B * S);
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    while (n < S && sg[b * S + n] >= 0) ++n;
    for (int64_t i = n; i < S; ++i)
      GLINT_CHECK(sg[b * S + i] < 0, "decode cache: row ", b, " has a token (segment ", sg[b * S + i], ") at ", i,
                  " after padding; new tokens must be a prefix of their row");
    for (int64_t i = 0; i < n; ++i)
      GLINT_CHECK(ps[b * S + i] == lengths_[b] + i, "decode cache: row ", b, " holds ", lengths_[b],
                  " tokens, so its new token ", i, " is at position ", lengths_[b] + i, ", not ", ps[b * S + i]);
    for (int64_t i = 0; i < S; ++i) index[b * S + i] = lengths_[b] + i;
    new_counts_[b] = n;
    prefill_ = prefill_ && lengths_[b] == 0;
    span_ = std::max(span_, lengths_[b] + S);
  }
  if (span_ > capacity_) capacity_ = std::max(span_, 2 * capacity_);
  write_index_ = at::tensor(index, at::kLong).view({B, S}).to(device_);
  step_ = S;
  history.reset();
  in_forward_ = true;
}

void DecodeCache::commit() {
  GLINT_ASSERT(in_forward_, "decode cache: commit without begin");
  for (size_t b = 0; b < lengths_.size(); ++b) lengths_[b] += new_counts_[b];
  in_forward_ = false;
  history.reset();
}

void DecodeCache::begin_history(const at::Tensor& input_ids,
                                const std::function<std::vector<RotaryTables>(const at::Tensor&)>& rotary) {
  GLINT_ASSERT(in_forward_, "begin_history outside a forward");
  const int64_t B = rows(), S = step_, T = span_;
  GLINT_ASSERT(input_ids.dim() == 2 && input_ids.size(0) == B && input_ids.size(1) == S, "begin_history: ids ",
               input_ids.sizes(), " for [", B, ", ", S, "]");
  fit(history_ids_, 1, {B, 0}, write_index_.options());
  history_ids_.scatter_(1, write_index_, input_ids.to(device_, at::kLong));
  std::vector<int64_t> segments(B * T, -1);
  for (int64_t b = 0; b < B; ++b)
    std::fill_n(segments.begin() + b * T, lengths_[b] + new_counts_[b], int64_t(0));
  at::Tensor positions = at::arange(T, write_index_.options()).unsqueeze(0).expand({B, T}).contiguous();
  history = std::make_unique<LayerContext>();
  history->layout = sequence_layout(at::tensor(segments, at::kLong).view({B, T}), device_);
  history->rope = rotary(positions);
  history->input_ids = history_ids_.narrow(1, 0, T);
}

void DecodeCache::fit(at::Tensor& t, int64_t dim, std::vector<int64_t> shape, const at::TensorOptions& options) const {
  if (t.defined() && t.size(dim) >= capacity_) return;
  shape.at(dim) = capacity_;
  at::Tensor grown = at::zeros(shape, options);
  if (t.defined()) grown.narrow(dim, 0, t.size(dim)).copy_(t);
  t = grown;
}

void DecodeCache::store(at::Tensor& t, int64_t dim, const at::Tensor& x) const {
  GLINT_ASSERT(dim > 0 && dim < x.dim() && x.size(0) == rows() && x.size(dim) == step_, "DecodeCache::store: x ",
               x.sizes(), " at dim ", dim, " for ", rows(), " rows of ", step_, " new tokens");
  fit(t, dim, x.sizes().vec(), x.options());
  std::vector<int64_t> index_shape(x.dim(), 1);
  index_shape[0] = x.size(0);
  index_shape[dim] = x.size(dim);
  t.scatter_(dim, write_index_.view(index_shape).expand(x.sizes()), x);
}

void LayerState::keep_rows(const at::Tensor& rows) {
  for (at::Tensor* t : tensors())
    if (t->defined()) *t = t->index_select(0, rows);
}

int64_t LayerState::bytes() {
  int64_t n = 0;
  for (at::Tensor* t : tensors())
    if (t->defined()) n += int64_t(t->storage().nbytes());
  return n;
}

int64_t DecodeCache::bytes() const {
  int64_t n = history_ids_.defined() ? int64_t(history_ids_.storage().nbytes()) : 0;
  for (const auto& [owner, state] : states_) n += state->bytes();
  return n;
}

at::Tensor append_recent(at::Tensor& recent, int64_t keep, const at::Tensor& x, const DecodeCache& cache) {
  const int64_t B = x.size(0), S = x.size(1);
  GLINT_ASSERT(B == cache.rows() && S == cache.new_tokens() && keep >= 0, "append_recent: x ", x.sizes(), " for a cache of ",
               cache.rows(), " rows and ", cache.new_tokens(), " new tokens");
  if (!recent.defined()) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[1] = keep;
    recent = at::zeros(shape, x.options());
  }
  at::Tensor all = at::cat({recent, x.to(recent.scalar_type())}, 1);  // [B,keep+S,...]
  // Row b's last `keep` real positions: slots new_counts[b] .. new_counts[b] + keep - 1.
  std::vector<int64_t> index(B * keep);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < keep; ++j) index[b * keep + j] = cache.new_counts()[b] + j;
  std::vector<int64_t> view(x.dim(), 1), shape = all.sizes().vec();
  view[0] = B;
  view[1] = keep;
  shape[1] = keep;
  at::Tensor at_slot = at::tensor(index, at::kLong).to(x.device()).view(view).expand(shape);
  recent = all.gather(1, at_slot);
  return all;
}

void reserve_slots(at::Tensor& t, int64_t dim, int64_t need, std::vector<int64_t> shape, const at::TensorOptions& options) {
  if (t.defined() && t.size(dim) >= need) return;
  shape.at(dim) = t.defined() ? std::max(need, 2 * t.size(dim)) : need;
  at::Tensor grown = at::zeros(shape, options);
  if (t.defined()) grown.narrow(dim, 0, t.size(dim)).copy_(t);
  t = grown;
}

at::Tensor keys_out_of_sight(const DecodeCache& cache, int64_t T, int64_t window) {
  // Query i of row b sees the keys at positions <= lengths[b] + i (write_index).
  const at::Tensor at_pos = cache.write_index().unsqueeze(-1);  // [B,S,1]
  const at::Tensor j = at::arange(T, at_pos.options()).view({1, 1, T});
  at::Tensor out = j.gt(at_pos);
  if (window > 0) out = out.logical_or(j.le(at_pos - window));
  return out;
}

at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, KvState& state,
                            const LayerContext& ctx, const at::Tensor& sinks, int64_t window) {
  GLINT_ASSERT(ctx.cache != nullptr, "cached_attention without a cache");
  const DecodeCache& cache = *ctx.cache;
  const int64_t B = q.size(0), Nh = q.size(1), S = q.size(2), D = q.size(3), Nkv = k.size(1), Dv = v.size(3);
  GLINT_ASSERT(B == cache.rows() && S == cache.new_tokens() && k.size(2) == S && v.size(2) == S && Nh % Nkv == 0,
               "cached_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), " for a cache of ",
               cache.rows(), " rows and ", cache.new_tokens(), " new tokens");
  cache.store(state.k, 2, k);
  cache.store(state.v, 2, v);
  // Whole prompts: the packed-sequence kernels, which never see the cache.
  if (cache.prefill() && !sinks.defined() && window == 0) return sequence_attention(q, k, v, ctx.layout);

  const int64_t T = cache.span(), rep = Nh / Nkv;
  const auto compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor keys = state.k.narrow(2, 0, T), values = state.v.narrow(2, 0, T);     // [B,Nkv,T,D], [B,Nkv,T,Dv]
  at::Tensor qg = q.reshape({B, Nkv, rep * S, D});                                  // head h = g*rep + r
  at::Tensor scores = at::matmul(qg, keys.transpose(2, 3)).to(compute).mul(1.0 / std::sqrt(double(D)));
  scores = scores.view({B, Nkv, rep, S, T})
               .masked_fill(keys_out_of_sight(cache, T, window).view({B, 1, 1, S, T}),
                            -std::numeric_limits<double>::infinity());
  if (sinks.defined())  // one more logit per query, dropped after the softmax
    scores = at::cat({scores, sinks.to(compute).view({1, Nkv, rep, 1, 1}).expand({B, Nkv, rep, S, 1})}, -1);
  at::Tensor p = at::softmax(scores, -1).narrow(-1, 0, T).to(v.scalar_type()).view({B, Nkv, rep * S, T});
  at::Tensor out = at::matmul(p, values).view({B, Nh, S, Dv});  // [B,Nh,S,Dv]
  return out.transpose(1, 2).reshape({B, S, Nh * Dv});
}

at::Tensor history_forward(AttentionModule& module, const at::Tensor& x, const LayerContext& ctx) {
  GLINT_ASSERT(ctx.cache != nullptr && ctx.cache->history, "history_forward without a history context");
  const DecodeCache& cache = *ctx.cache;
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2);
  auto& state = ctx.cache->state<HistoryState>(&module, [] { return std::make_unique<HistoryState>(); });
  cache.store(state.x, 1, x);
  at::Tensor out = module.forward(state.x.narrow(1, 0, cache.span()), *cache.history);  // [B,T,H]
  return out.gather(1, cache.write_index().unsqueeze(-1).expand({B, S, H}));
}

}  // namespace glint

namespace glint {

at::Tensor AttentionModule::forward_cached(const at::Tensor& x, const LayerContext& ctx) {
  return history_forward(*this, x, ctx);
}

double AttentionModule::decode_state_bytes(int64_t, int64_t) const {
  GLINT_ASSERT(!keeps_decode_state(), "an attention module that keeps a decoding state does not say its size");
  return 0;
}

}  // namespace glint
