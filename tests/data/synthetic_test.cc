// ReverseDigitsTask: sample structure, label mask, determinism, prompt/answer split.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/error.h"
#include "data/synthetic.h"

namespace glint {
namespace {

using Task = ReverseDigitsTask;

// Checks one sample against the documented layout, from scratch (not via prompt_of).
void expect_well_formed(const Task& task, const Sample& s) {
  const auto& ids = s.input_ids;
  ASSERT_EQ(s.labels.size(), ids.size());
  ASSERT_EQ(ids.size() % 2, 1u);  // BOS + n + SEP + n + EOS = 2n + 3
  const size_t n = (ids.size() - 3) / 2;
  EXPECT_GE(int64_t(n), task.min_digits);
  EXPECT_LE(int64_t(n), task.max_digits);
  EXPECT_LE(int64_t(ids.size()), task.max_sample_len());
  EXPECT_EQ(ids[0], Task::kBos);
  EXPECT_EQ(ids[n + 1], Task::kSep);
  EXPECT_EQ(ids.back(), Task::kEos);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_GE(ids[1 + i], 0);
    EXPECT_LE(ids[1 + i], 9);
    EXPECT_EQ(ids[n + 2 + i], ids[n - i]) << "answer digit " << i << " is not the reverse";
  }
  // Labels: ignored over BOS, the digits and SEP; equal to the ids over the answer.
  for (size_t j = 0; j < ids.size(); ++j)
    EXPECT_EQ(s.labels[j], j <= n + 1 ? kIgnoreIndex : ids[j]) << "label " << j;
}

TEST(Synthetic, SamplesHaveTheDocumentedStructure) {
  Task task;
  std::vector<Sample> samples = task.generate(200, 3);
  ASSERT_EQ(samples.size(), 200u);
  for (const Sample& s : samples) expect_well_formed(task, s);
}

TEST(Synthetic, DigitCountsCoverTheRange) {
  Task task;
  task.min_digits = 2;
  task.max_digits = 4;
  std::set<size_t> lengths;
  for (const Sample& s : task.generate(300, 11)) {
    expect_well_formed(task, s);
    lengths.insert((s.input_ids.size() - 3) / 2);
  }
  EXPECT_EQ(lengths, (std::set<size_t>{2, 3, 4}));

  task.min_digits = task.max_digits = 1;
  for (const Sample& s : task.generate(20, 1)) EXPECT_EQ(s.input_ids.size(), 5u);
}

TEST(Synthetic, DeterministicPerSeed) {
  Task task;
  std::vector<Sample> a = task.generate(50, 3), b = task.generate(50, 3), c = task.generate(50, 4);
  bool all_same_as_c = true;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input_ids, b[i].input_ids);
    EXPECT_EQ(a[i].labels, b[i].labels);
    all_same_as_c = all_same_as_c && a[i].input_ids == c[i].input_ids;
  }
  EXPECT_FALSE(all_same_as_c);
  // A longer run starts with the shorter one.
  std::vector<Sample> longer = task.generate(60, 3);
  EXPECT_EQ(longer[49].input_ids, a[49].input_ids);
}

TEST(Synthetic, PromptAndAnswerReconstructTheSample) {
  Task task;
  for (const Sample& s : task.generate(100, 9)) {
    std::vector<int64_t> prompt = Task::prompt_of(s), answer = Task::answer_of(s);
    EXPECT_EQ(prompt.front(), Task::kBos);
    EXPECT_EQ(prompt.back(), Task::kSep);
    EXPECT_EQ(answer.back(), Task::kEos);
    EXPECT_EQ(answer.size() + 1, prompt.size());  // n + 1 vs n + 2
    std::vector<int64_t> joined = prompt;
    joined.insert(joined.end(), answer.begin(), answer.end());
    EXPECT_EQ(joined, s.input_ids);
  }
}

TEST(Synthetic, RejectsBadParameters) {
  Task task;
  task.min_digits = 0;
  EXPECT_THROW(task.generate(1, 0), Error);
  task.min_digits = 5;
  task.max_digits = 4;
  EXPECT_THROW(task.generate(1, 0), Error);
  task.max_digits = 5;
  EXPECT_THROW(task.generate(-1, 0), Error);
  EXPECT_TRUE(task.generate(0, 0).empty());
}

}  // namespace
}  // namespace glint
