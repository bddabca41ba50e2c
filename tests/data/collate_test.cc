// collate / collate_rows against tensors written out by hand.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/collate.h"

namespace glint {
namespace {

constexpr int64_t X = kIgnoreIndex;

at::Tensor rows(const std::vector<std::vector<int64_t>>& v) {
  at::Tensor t = at::empty({int64_t(v.size()), int64_t(v[0].size())}, at::kLong);
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = 0; j < v[i].size(); ++j) t[i][j] = v[i][j];
  return t;
}

// Expects every tensor of `b` to be int64 [B, S] and equal to the hand-written rows.
void expect_batch(const Batch& b, const std::vector<std::vector<int64_t>>& ids,
                  const std::vector<std::vector<int64_t>>& labels,
                  const std::vector<std::vector<int64_t>>& pos,
                  const std::vector<std::vector<int64_t>>& seg, int64_t label_tokens) {
  for (const at::Tensor* t : {&b.input_ids, &b.labels, &b.position_ids, &b.segment_ids}) {
    EXPECT_EQ(t->scalar_type(), at::kLong);
    EXPECT_TRUE(t->device().is_cpu());
  }
  EXPECT_TRUE(at::equal(b.input_ids, rows(ids))) << "input_ids\n" << b.input_ids;
  EXPECT_TRUE(at::equal(b.labels, rows(labels))) << "labels\n" << b.labels;
  EXPECT_TRUE(at::equal(b.position_ids, rows(pos))) << "position_ids\n" << b.position_ids;
  EXPECT_TRUE(at::equal(b.segment_ids, rows(seg))) << "segment_ids\n" << b.segment_ids;
  EXPECT_EQ(b.label_tokens, label_tokens);
}

std::string error_of(const std::vector<const Sample*>& samples, const CollateOptions& o,
                     int64_t max_rows = 8) {
  try {
    collate(samples, o, max_rows);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Samples of lengths 3, 2 and 4, with some prompt labels already masked.
struct CollateThreeSamples : ::testing::Test {
  Sample a{{1, 2, 3}, {X, 2, 3}};
  Sample b{{4, 5}, {4, 5}};
  Sample c{{6, 7, 8, 9}, {6, X, 8, 9}};
  std::vector<const Sample*> all{&a, &b, &c};
  CollateOptions opts() const {
    CollateOptions o;
    o.seq_len = 6;
    o.pad_id = 0;
    o.pad_to_longest = false;  // fixed-width rows make the layouts below easy to read
    return o;
  }
};

TEST_F(CollateThreeSamples, CollateRowsPadsOneSamplePerRow) {
  CollateOptions o = opts();
  o.pack = true;  // ignored by collate_rows
  Batch r = collate_rows(all, o);
  expect_batch(r,
               {{1, 2, 3, 0, 0, 0}, {4, 5, 0, 0, 0, 0}, {6, 7, 8, 9, 0, 0}},
               {{X, 2, 3, X, X, X}, {4, 5, X, X, X, X}, {6, X, 8, 9, X, X}},
               {{0, 1, 2, 0, 0, 0}, {0, 1, 0, 0, 0, 0}, {0, 1, 2, 3, 0, 0}},
               {{0, 0, 0, -1, -1, -1}, {0, 0, -1, -1, -1, -1}, {0, 0, 0, 0, -1, -1}},
               5);  // labels[:, 1:]: 2, 3 | 5 | 8, 9 (the first column never counts)
}

TEST_F(CollateThreeSamples, CollateWithoutPackingSplitsRowsIntoBatches) {
  CollateOptions o = opts();
  o.pad_id = 15;
  std::vector<Batch> bs = collate(all, o, 2);
  ASSERT_EQ(bs.size(), 2u);
  expect_batch(bs[0], {{1, 2, 3, 15, 15, 15}, {4, 5, 15, 15, 15, 15}},
               {{X, 2, 3, X, X, X}, {4, 5, X, X, X, X}},
               {{0, 1, 2, 0, 0, 0}, {0, 1, 0, 0, 0, 0}},
               {{0, 0, 0, -1, -1, -1}, {0, 0, -1, -1, -1, -1}}, 3);
  expect_batch(bs[1], {{6, 7, 8, 9, 15, 15}}, {{6, X, 8, 9, X, X}}, {{0, 1, 2, 3, 0, 0}},
               {{0, 0, 0, 0, -1, -1}}, 2);
}

TEST_F(CollateThreeSamples, CollatePacksInOrderAndMasksEveryFirstLabel) {
  CollateOptions o = opts();
  o.pack = true;
  std::vector<Batch> bs = collate(all, o, 4);
  ASSERT_EQ(bs.size(), 1u);
  // a and b share row 0 (3 + 2 <= 6); c does not fit in the last column and starts row 1.
  expect_batch(bs[0], {{1, 2, 3, 4, 5, 0}, {6, 7, 8, 9, 0, 0}},
               {{X, 2, 3, X, 5, X}, {X, X, 8, 9, X, X}},
               {{0, 1, 2, 0, 1, 0}, {0, 1, 2, 3, 0, 0}},
               {{0, 0, 0, 1, 1, -1}, {0, 0, 0, 0, -1, -1}},
               5);  // 2, 3, 5 | 8, 9: b's own label 4 is masked at the boundary

  // One row per batch: the same rows, split.
  bs = collate(all, o, 1);
  ASSERT_EQ(bs.size(), 2u);
  expect_batch(bs[0], {{1, 2, 3, 4, 5, 0}}, {{X, 2, 3, X, 5, X}}, {{0, 1, 2, 0, 1, 0}},
               {{0, 0, 0, 1, 1, -1}}, 3);
  expect_batch(bs[1], {{6, 7, 8, 9, 0, 0}}, {{X, X, 8, 9, X, X}}, {{0, 1, 2, 3, 0, 0}},
               {{0, 0, 0, 0, -1, -1}}, 2);
}

TEST_F(CollateThreeSamples, CollatePacksExactFitWithoutPadding) {
  CollateOptions o = opts();
  o.pack = true;
  // c (4) + b (2) fill row 0 exactly; a starts row 1.
  std::vector<Batch> bs = collate({&c, &b, &a}, o, 8);
  ASSERT_EQ(bs.size(), 1u);
  expect_batch(bs[0], {{6, 7, 8, 9, 4, 5}, {1, 2, 3, 0, 0, 0}},
               {{X, X, 8, 9, X, 5}, {X, 2, 3, X, X, X}},
               {{0, 1, 2, 3, 0, 1}, {0, 1, 2, 0, 0, 0}},
               {{0, 0, 0, 0, 1, 1}, {0, 0, 0, -1, -1, -1}}, 5);
}

// The default pads each batch to its longest row, and the losses do not change: the
// columns it drops are padding (checked through the model in the trainer tests).
TEST_F(CollateThreeSamples, PadsEachBatchToItsLongestRow) {
  CollateOptions o = opts();
  o.pad_to_longest = true;
  std::vector<Batch> bs = collate(all, o, 2);
  ASSERT_EQ(bs.size(), 2u);
  expect_batch(bs[0], {{1, 2, 3}, {4, 5, 0}}, {{X, 2, 3}, {4, 5, X}}, {{0, 1, 2}, {0, 1, 0}},
               {{0, 0, 0}, {0, 0, -1}}, 3);
  expect_batch(bs[1], {{6, 7, 8, 9}}, {{6, X, 8, 9}}, {{0, 1, 2, 3}}, {{0, 0, 0, 0}}, 2);
  // Packed rows: as long as the fullest row.
  o.pack = true;
  bs = collate({&b, &b}, o, 4);
  ASSERT_EQ(bs.size(), 1u);
  expect_batch(bs[0], {{4, 5, 4, 5}}, {{X, 5, X, 5}}, {{0, 1, 0, 1}}, {{0, 0, 1, 1}}, 2);
  // concat_rows widens the shorter part with padding.
  Batch wide = concat_rows({collate_rows({&b}, opts()), bs[0]}, 9);
  EXPECT_EQ(wide.input_ids.sizes(), (std::vector<int64_t>{2, 6}));
  wide = concat_rows({collate(all, o, 1)[1], collate({&b}, o, 1)[0]}, 9);  // [1,4] + [1,2]
  expect_batch(wide, {{6, 7, 8, 9}, {4, 5, 9, 9}}, {{X, X, 8, 9}, {X, 5, X, X}}, {{0, 1, 2, 3}, {0, 1, 0, 0}},
               {{0, 0, 0, 0}, {0, 0, -1, -1}}, 3);
}

TEST(Collate, TruncatesToTheFirstSeqLenTokens) {
  Sample lng{{1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}}, b{{7, 8}, {7, 8}};
  CollateOptions o;
  o.seq_len = 4;
  o.pad_id = 0;
  expect_batch(collate_rows({&lng, &b}, o), {{1, 2, 3, 4}, {7, 8, 0, 0}},
               {{1, 2, 3, 4}, {7, 8, X, X}}, {{0, 1, 2, 3}, {0, 1, 0, 0}},
               {{0, 0, 0, 0}, {0, 0, -1, -1}}, 4);
  // Packed: the truncated sample fills its row, the next one starts a new row.
  o.pack = true;
  std::vector<Batch> bs = collate({&lng, &b}, o, 2);
  ASSERT_EQ(bs.size(), 1u);
  expect_batch(bs[0], {{1, 2, 3, 4}, {7, 8, 0, 0}}, {{X, 2, 3, 4}, {X, 8, X, X}},
               {{0, 1, 2, 3}, {0, 1, 0, 0}}, {{0, 0, 0, 0}, {0, 0, -1, -1}}, 4);
}

TEST(Collate, RejectsLongSamplesWhenTruncationIsOff) {
  Sample fits{{1, 2, 3}, {1, 2, 3}}, lng{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}};
  CollateOptions o;
  o.seq_len = 3;
  o.truncate = false;
  EXPECT_EQ(collate_rows({&fits}, o).input_ids.size(1), 3);  // exactly seq_len is fine
  std::string msg = error_of({&fits, &lng}, o);
  EXPECT_NE(msg.find("sample 1 has 5 tokens, more than the sequence length 3"), std::string::npos)
      << msg;
  o.pack = true;
  EXPECT_NE(error_of({&fits, &lng}, o).find("sample 1 has 5 tokens"), std::string::npos);
  EXPECT_THROW(collate_rows({&lng}, o), Error);
}

TEST(Collate, RejectsBadSamplesAndOptions) {
  Sample ok{{1, 2}, {1, 2}}, empty{{}, {}}, misaligned{{1, 2, 3}, {1, 2}};
  CollateOptions o;
  o.seq_len = 4;
  EXPECT_NE(error_of({&ok, &empty}, o).find("sample 1 is empty"), std::string::npos);
  EXPECT_NE(error_of({&misaligned}, o).find("sample 0: labels has 2 entries but input_ids has 3"),
            std::string::npos);
  EXPECT_NE(error_of({&ok}, o, 0).find("rows per batch must be at least 1, got 0"),
            std::string::npos);
  CollateOptions bad = o;
  bad.seq_len = 1;
  EXPECT_NE(error_of({&ok}, bad).find("sequence length must be at least 2, got 1"),
            std::string::npos);
  EXPECT_THROW(collate_rows({&ok}, bad), Error);
  bad = o;
  bad.pad_id = -1;
  EXPECT_NE(error_of({&ok}, bad).find("pad id"), std::string::npos);
}

TEST(Collate, NoSamplesGiveNoRows) {
  CollateOptions o;
  o.seq_len = 5;
  EXPECT_TRUE(collate({}, o, 4).empty());
  Batch b = collate_rows({}, o);
  EXPECT_EQ(b.input_ids.sizes(), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(b.segment_ids.sizes(), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(b.label_tokens, 0);
}

}  // namespace
}  // namespace glint
