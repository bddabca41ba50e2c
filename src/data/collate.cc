#include "data/collate.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"

// Legend: B rows in a batch, S = seq_len tokens per row.

namespace glint {

namespace {

// One sample placed in a row: its first `len` tokens (after truncation) start at
// column `offset` and form segment `segment` of the row.
struct Span {
  const Sample* sample;
  int64_t len;
  int64_t offset;
  int64_t segment;
};
using Row = std::vector<Span>;

// The number of tokens of sample `index` that go into a row, checking the sample.
int64_t placed_length(const Sample& s, size_t index, const CollateOptions& o) {
  const int64_t n = int64_t(s.input_ids.size());
  GLINT_CHECK(n > 0, "sample ", index, " is empty");
  GLINT_CHECK(s.labels.size() == s.input_ids.size(), "sample ", index, ": labels has ",
              s.labels.size(), " entries but input_ids has ", n);
  if (n <= o.seq_len) return n;
  GLINT_CHECK(o.truncate, "sample ", index, " has ", n, " tokens, more than the sequence length ",
              o.seq_len, " (truncation is off)");
  return o.seq_len;  // keep the first seq_len tokens
}

// Assigns samples to rows in order: one per row, or greedily packed.
std::vector<Row> plan_rows(const std::vector<const Sample*>& samples, const CollateOptions& o) {
  std::vector<Row> rows;
  int64_t used = 0;  // tokens already placed in rows.back()
  for (size_t i = 0; i < samples.size(); ++i) {
    GLINT_ASSERT(samples[i] != nullptr, "sample ", i, " is null");
    const int64_t len = placed_length(*samples[i], i, o);
    if (rows.empty() || !o.pack || used + len > o.seq_len) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(Span{samples[i], len, used, int64_t(rows.back().size())});
    used += len;
  }
  return rows;
}

// Writes rows [first, first + count) into one batch.
Batch make_batch(const std::vector<Row>& rows, size_t first, int64_t count,
                 const CollateOptions& o) {
  int64_t S = o.seq_len;
  if (o.pad_to_longest && count > 0) {
    S = 2;  // the model's shift needs two columns
    for (int64_t r = 0; r < count; ++r) {
      const Span& last = rows[first + r].back();
      S = std::max(S, last.offset + last.len);
    }
  }
  const int64_t B = count;
  Batch b;
  b.input_ids = at::full({B, S}, o.pad_id, at::kLong);          // [B, S]
  b.labels = at::full({B, S}, kIgnoreIndex, at::kLong);         // [B, S]
  b.position_ids = at::zeros({B, S}, at::kLong);                // [B, S]
  b.segment_ids = at::full({B, S}, int64_t(-1), at::kLong);     // [B, S]
  int64_t* ids = b.input_ids.data_ptr<int64_t>();
  int64_t* labels = b.labels.data_ptr<int64_t>();
  int64_t* pos = b.position_ids.data_ptr<int64_t>();
  int64_t* seg = b.segment_ids.data_ptr<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    for (const Span& sp : rows[first + r]) {
      const int64_t base = r * S + sp.offset;
      for (int64_t i = 0; i < sp.len; ++i) {
        ids[base + i] = sp.sample->input_ids[i];
        labels[base + i] = sp.sample->labels[i];
        pos[base + i] = i;
        seg[base + i] = sp.segment;
      }
      // With packing, the model's shift would train this sample's first label as a
      // prediction from the previous sample's last token: never train across a
      // boundary. The row's first sample gets the same treatment; the shift drops
      // that label anyway, and one rule for every sample is easier to check.
      if (o.pack) labels[base] = kIgnoreIndex;
    }
    // labels[r, 1:] != kIgnoreIndex; padding holds kIgnoreIndex.
    for (int64_t j = 1; j < S; ++j) b.label_tokens += labels[r * S + j] != kIgnoreIndex;
  }
  return b;
}

}  // namespace

void CollateOptions::validate() const {
  GLINT_CHECK(seq_len >= 2, "sequence length must be at least 2, got ", seq_len);
  GLINT_CHECK(pad_id >= 0, "pad id must be a token id (>= 0), got ", pad_id);
}

std::vector<Batch> collate(const std::vector<const Sample*>& samples, const CollateOptions& o,
                           int64_t max_rows_per_batch) {
  o.validate();
  GLINT_CHECK(max_rows_per_batch >= 1, "rows per batch must be at least 1, got ",
              max_rows_per_batch);
  const std::vector<Row> rows = plan_rows(samples, o);
  std::vector<Batch> out;
  for (size_t r0 = 0; r0 < rows.size(); r0 += size_t(max_rows_per_batch)) {
    const int64_t count = std::min<int64_t>(max_rows_per_batch, int64_t(rows.size() - r0));
    out.push_back(make_batch(rows, r0, count, o));
  }
  return out;
}

Batch collate_rows(const std::vector<const Sample*>& samples, const CollateOptions& options) {
  CollateOptions o = options;
  o.pack = false;
  o.validate();
  const std::vector<Row> rows = plan_rows(samples, o);
  return make_batch(rows, 0, int64_t(rows.size()), o);
}

Batch concat_rows(const std::vector<Batch>& parts, int64_t pad_id) {
  GLINT_CHECK(!parts.empty(), "concat_rows: no batches");
  int64_t S = 0;
  for (const auto& p : parts) S = std::max(S, p.input_ids.size(1));
  // [B, s] -> [B, S], `value` on the right.
  auto widen = [S](const at::Tensor& t, int64_t value) {
    if (t.size(1) == S) return t;
    at::Tensor w = at::full({t.size(0), S}, value, t.options());
    w.narrow(1, 0, t.size(1)).copy_(t);
    return w;
  };
  std::vector<at::Tensor> ids, labels, pos, seg, tags;
  Batch b;
  for (const auto& p : parts) {
    ids.push_back(widen(p.input_ids, pad_id));
    labels.push_back(widen(p.labels, kIgnoreIndex));
    pos.push_back(widen(p.position_ids, 0));
    seg.push_back(widen(p.segment_ids, -1));
    if (p.row_tags.defined()) tags.push_back(p.row_tags);
    b.label_tokens += p.label_tokens;
  }
  b.input_ids = at::cat(ids);
  b.labels = at::cat(labels);
  b.position_ids = at::cat(pos);
  b.segment_ids = at::cat(seg);
  if (tags.size() == parts.size()) b.row_tags = at::cat(tags);
  return b;
}

std::vector<Batch> split_rows(const Batch& batch, int64_t max_rows) {
  GLINT_CHECK(max_rows >= 1, "split_rows: max_rows must be >= 1, got ", max_rows);
  const int64_t rows = batch.input_ids.size(0);
  std::vector<Batch> out;
  for (int64_t r0 = 0; r0 < rows; r0 += max_rows) {
    int64_t n = std::min(max_rows, rows - r0);
    Batch m;
    // Columns up to the last one any of these rows uses.
    at::Tensor used = batch.segment_ids.narrow(0, r0, n).ge(0).any(0).nonzero();
    const int64_t S = std::max<int64_t>(std::min<int64_t>(2, rows > 0 ? batch.input_ids.size(1) : 0),
                                        used.numel() > 0 ? used.max().item<int64_t>() + 1 : 0);
    m.input_ids = batch.input_ids.narrow(0, r0, n).narrow(1, 0, S);
    m.labels = batch.labels.narrow(0, r0, n).narrow(1, 0, S);
    m.position_ids = batch.position_ids.narrow(0, r0, n).narrow(1, 0, S);
    m.segment_ids = batch.segment_ids.narrow(0, r0, n).narrow(1, 0, S);
    if (batch.row_tags.defined()) m.row_tags = batch.row_tags.narrow(0, r0, n);
    m.label_tokens = m.labels.narrow(1, 1, m.labels.size(1) - 1).ne(kIgnoreIndex).sum().item<int64_t>();
    out.push_back(m);
  }
  return out;
}

}  // namespace glint
