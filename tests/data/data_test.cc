#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "data/collate.h"
#include "data/sampler.h"
#include "data/synthetic.h"
#include "data/tokenized_jsonl.h"

namespace glint {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  std::string p = ::testing::TempDir() + "/glint_data_" + name;
  std::ofstream(p) << text;
  return p;
}

at::Tensor rows(std::vector<std::vector<int64_t>> v) {
  at::Tensor t = at::empty({int64_t(v.size()), int64_t(v[0].size())}, at::kLong);
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = 0; j < v[i].size(); ++j) t[i][j] = v[i][j];
  return t;
}

TEST(Jsonl, ReadsSamplesWithAndWithoutLabels) {
  std::string p = write_temp("ok.jsonl", "{\"input_ids\":[1,2,3],\"labels\":[-100,2,3]}\n\n"
                                         "{\"input_ids\":[4,5]}\n");
  auto s = read_tokenized_jsonl(p, 10);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].labels, (std::vector<int64_t>{-100, 2, 3}));
  EXPECT_EQ(s[1].labels, (std::vector<int64_t>{4, 5}));
}

TEST(Jsonl, BadLinesNameFileLineAndProblem) {
  const std::pair<std::string, std::string> cases[] = {
      {"{\"input_ids\":[1]}\n{oops\n", ":2: invalid JSON"},
      {"{\"ids\":[1]}\n", ":1: missing \"input_ids\""},
      {"{\"input_ids\":[1,2.5]}\n", "input_ids[1] is not an integer"},
      {"{\"input_ids\":[1,\"3\"]}\n", "input_ids[1] is not an integer"},
      {"{\"input_ids\":[1,2],\"labels\":[1]}\n", "labels has 1 entries but input_ids has 2"},
      {"{\"input_ids\":[1,12]}\n", "input_ids[1] = 12 is outside the vocabulary [0, 10)"},
      {"{\"input_ids\":[1,2],\"labels\":[1,-5]}\n", "labels[1] = -5"},
      {"{\"input_ids\":[]}\n", "empty"},
      {"\n\n", "no samples"},
  };
  for (const auto& [text, expect] : cases) {
    std::string p = write_temp("bad.jsonl", text);
    try {
      read_tokenized_jsonl(p, 10);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(read_tokenized_jsonl("/nonexistent/x.jsonl", 10), Error);
}

TEST(Collate, PadsOneSamplePerRow) {
  Sample a{{1, 2, 3}, {-100, 2, 3}}, b{{4, 5}, {4, 5}};
  CollateOptions o;
  o.seq_len = 4;
  o.pad_id = 0;
  Batch r = collate_rows({&a, &b}, o);
  EXPECT_TRUE(at::equal(r.input_ids, rows({{1, 2, 3, 0}, {4, 5, 0, 0}})));
  EXPECT_TRUE(at::equal(r.labels, rows({{-100, 2, 3, -100}, {4, 5, -100, -100}})));
  EXPECT_TRUE(at::equal(r.position_ids, rows({{0, 1, 2, 0}, {0, 1, 0, 0}})));
  EXPECT_TRUE(at::equal(r.segment_ids, rows({{0, 0, 0, -1}, {0, 0, -1, -1}})));
  EXPECT_EQ(r.label_tokens, 3);  // labels[:, 1:]: 2, 3 and 5
}

TEST(Collate, PacksWithBoundariesAndSplitsBatches) {
  Sample a{{1, 2, 3}, {1, 2, 3}}, b{{4, 5}, {4, 5}}, c{{6, 7, 8, 9}, {6, 7, 8, 9}};
  CollateOptions o;
  o.seq_len = 6;
  o.pad_id = 0;
  o.pack = true;
  auto batches = collate({&a, &b, &c}, o, 1);
  ASSERT_EQ(batches.size(), 2u);
  const Batch &r0 = batches[0], &r1 = batches[1];
  EXPECT_TRUE(at::equal(r0.input_ids, rows({{1, 2, 3, 4, 5, 0}})));
  EXPECT_TRUE(at::equal(r0.labels, rows({{-100, 2, 3, -100, 5, -100}})));
  EXPECT_TRUE(at::equal(r0.position_ids, rows({{0, 1, 2, 0, 1, 0}})));
  EXPECT_TRUE(at::equal(r0.segment_ids, rows({{0, 0, 0, 1, 1, -1}})));
  EXPECT_EQ(r0.label_tokens, 3);
  EXPECT_TRUE(at::equal(r1.input_ids, rows({{6, 7, 8, 9, 0, 0}})));
  EXPECT_TRUE(at::equal(r1.labels, rows({{-100, 7, 8, 9, -100, -100}})));
  EXPECT_EQ(r1.label_tokens, 3);
}

TEST(Collate, TruncatesOrRejectsLongSamples) {
  Sample a{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}};
  CollateOptions o;
  o.seq_len = 3;
  Batch r = collate_rows({&a}, o);
  EXPECT_TRUE(at::equal(r.input_ids, rows({{1, 2, 3}})));
  o.truncate = false;
  EXPECT_THROW(collate_rows({&a}, o), Error);
}

TEST(Sampler, DeterministicPermutationsPerEpoch) {
  EpochSampler s1(10, 7), s2(10, 7), s3(10, 8);
  auto e1 = s1.next(10), e2 = s1.next(10);
  EXPECT_EQ(e1, s2.next(10));
  EXPECT_NE(e1, e2);
  EXPECT_NE(e1, s3.next(10));
  EXPECT_EQ(std::set<size_t>(e1.begin(), e1.end()).size(), 10u);
  EXPECT_EQ(std::set<size_t>(e2.begin(), e2.end()).size(), 10u);
  EpochSampler s4(10, 7);
  auto cross = s4.next(15);  // crosses into the second epoch
  EXPECT_EQ(std::vector<size_t>(cross.begin(), cross.begin() + 10), e1);
  EXPECT_EQ(std::vector<size_t>(cross.begin() + 10, cross.end()),
            std::vector<size_t>(e2.begin(), e2.begin() + 5));
  EXPECT_EQ(s4.epoch(), 1);
  EXPECT_THROW(EpochSampler(0, 1), Error);
}

TEST(Synthetic, ReverseDigitsStructure) {
  ReverseDigitsTask task;
  auto samples = task.generate(50, 3);
  EXPECT_EQ(samples.size(), 50u);
  auto again = task.generate(50, 3);
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    EXPECT_EQ(s.input_ids, again[i].input_ids);
    auto prompt = ReverseDigitsTask::prompt_of(s), answer = ReverseDigitsTask::answer_of(s);
    ASSERT_GE(prompt.size(), 2u + task.min_digits);
    EXPECT_EQ(prompt.front(), ReverseDigitsTask::kBos);
    EXPECT_EQ(prompt.back(), ReverseDigitsTask::kSep);
    std::vector<int64_t> digits(prompt.begin() + 1, prompt.end() - 1);
    std::vector<int64_t> expected(digits.rbegin(), digits.rend());
    expected.push_back(ReverseDigitsTask::kEos);
    EXPECT_EQ(answer, expected);
    EXPECT_LE(int64_t(s.input_ids.size()), task.max_sample_len());
    for (size_t j = 0; j < s.labels.size(); ++j)
      EXPECT_EQ(s.labels[j], j < prompt.size() ? kIgnoreIndex : s.input_ids[j]);
  }
}

}  // namespace
}  // namespace glint
