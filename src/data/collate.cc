#include "data/collate.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace glint {

namespace {

struct RowBuilder {
  std::vector<int64_t> ids, labels, pos, seg;
  int64_t segments = 0;
};

}  // namespace

std::vector<Batch> collate(const std::vector<const Sample*>& samples, const CollateOptions& o,
                           int64_t max_rows_per_batch) {
  GLINT_CHECK(o.seq_len >= 2, "sequence length must be at least 2, got ", o.seq_len);
  GLINT_ASSERT(max_rows_per_batch > 0);
  const int64_t S = o.seq_len;
  std::vector<RowBuilder> rows;
  for (size_t si = 0; si < samples.size(); ++si) {
    const Sample& s = *samples[si];
    int64_t n = int64_t(s.input_ids.size());
    if (n > S) {
      GLINT_CHECK(o.truncate, "sample ", si, " has ", n, " tokens, more than the sequence length ", S);
      n = S;
    }
    bool fits = !rows.empty() && o.pack && int64_t(rows.back().ids.size()) + n <= S;
    if (!fits) rows.emplace_back();
    RowBuilder& r = rows.back();
    for (int64_t i = 0; i < n; ++i) {
      r.ids.push_back(s.input_ids[i]);
      // With packing, a sample's first label would be predicted from the previous
      // sample's last token: never train across the boundary.
      r.labels.push_back(o.pack && i == 0 ? kIgnoreIndex : s.labels[i]);
      r.pos.push_back(i);
      r.seg.push_back(r.segments);
    }
    ++r.segments;
  }
  std::vector<Batch> out;
  for (size_t r0 = 0; r0 < rows.size(); r0 += max_rows_per_batch) {
    int64_t B = std::min<int64_t>(max_rows_per_batch, rows.size() - r0);
    Batch b;
    b.input_ids = at::full({B, S}, o.pad_id, at::kLong);
    b.labels = at::full({B, S}, kIgnoreIndex, at::kLong);
    b.position_ids = at::zeros({B, S}, at::kLong);
    b.segment_ids = at::full({B, S}, -1, at::kLong);
    auto ids = b.input_ids.accessor<int64_t, 2>(), lab = b.labels.accessor<int64_t, 2>(),
         pos = b.position_ids.accessor<int64_t, 2>(), seg = b.segment_ids.accessor<int64_t, 2>();
    for (int64_t i = 0; i < B; ++i) {
      const RowBuilder& r = rows[r0 + i];
      for (size_t j = 0; j < r.ids.size(); ++j) {
        ids[i][j] = r.ids[j];
        lab[i][j] = r.labels[j];
        pos[i][j] = r.pos[j];
        seg[i][j] = r.seg[j];
      }
      for (size_t j = 1; j < r.labels.size(); ++j) b.label_tokens += r.labels[j] != kIgnoreIndex;
    }
    out.push_back(std::move(b));
  }
  return out;
}

Batch collate_rows(const std::vector<const Sample*>& samples, const CollateOptions& options) {
  CollateOptions o = options;
  o.pack = false;
  std::vector<Batch> b = collate(samples, o, std::max<int64_t>(1, samples.size()));
  GLINT_ASSERT(b.size() == 1);
  return b[0];
}

}  // namespace glint
