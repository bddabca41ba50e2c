// read_tokenized_jsonl: the happy path and every rejected input.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenized_jsonl.h"
#include "test_util.h"

namespace glint {
namespace {

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::string p = dir + "/" + name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

// The message of the glint::Error that reading `path` throws ("" when none is thrown).
std::string read_error(const std::string& path, int64_t vocab = 10) {
  try {
    read_tokenized_jsonl(path, vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonlRead, SamplesWithAndWithoutLabels) {
  std::string dir = testing::fresh_temp_dir("jsonl_read");
  std::string p = write_file(dir, "ok.jsonl",
                             "{\"input_ids\":[1,2,3],\"labels\":[-100,2,3]}\n"
                             "\n"
                             "   \t \n"
                             "{\"input_ids\":[4,5], \"extra\": \"ignored\"}\r\n"
                             " {\"labels\":[9,-100],\"input_ids\":[0,9]} ");  // no final newline
  std::vector<Sample> s = read_tokenized_jsonl(p, 10);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].input_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(s[0].labels, (std::vector<int64_t>{-100, 2, 3}));
  EXPECT_EQ(s[1].input_ids, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(s[1].labels, (std::vector<int64_t>{4, 5}));  // labels omitted: copy of the ids
  EXPECT_EQ(s[2].input_ids, (std::vector<int64_t>{0, 9}));
  EXPECT_EQ(s[2].labels, (std::vector<int64_t>{9, -100}));
}

TEST(JsonlRead, ManyLongLines) {
  std::string dir = testing::fresh_temp_dir("jsonl_many");
  std::string text;
  for (int l = 0; l < 200; ++l) {
    text += "{\"input_ids\":[";
    for (int i = 0; i < 300; ++i) text += (i ? "," : "") + std::to_string((l * 7 + i) % 1000);
    text += "]}\n";
  }
  std::vector<Sample> s = read_tokenized_jsonl(write_file(dir, "many.jsonl", text), 1000);
  ASSERT_EQ(s.size(), 200u);
  EXPECT_EQ(s[199].input_ids.size(), 300u);
  EXPECT_EQ(s[199].input_ids[5], (199 * 7 + 5) % 1000);
  EXPECT_EQ(s[199].labels, s[199].input_ids);
}

struct BadCase {
  std::string text;
  int line;              // expected line number; 0: the message names only the file
  std::string problem;   // a fragment the message must contain
};

TEST(JsonlErrors, NameFileLineAndProblem) {
  const std::string ok = "{\"input_ids\":[1]}\n";
  const BadCase cases[] = {
      {ok + "{oops\n", 2, "invalid JSON: [json.exception.parse_error"},
      {ok + "\n  \n{\"input_ids\":[1,2]} trailing\n", 4, "invalid JSON"},
      {ok + "{\"input_ids\": [1, 2], \"labels\": [1e400, 2]}\n", 2, "invalid JSON"},  // found by fuzzing
      {"[1, 2]\n", 1, "expected a JSON object with \"input_ids\", got array"},
      {"{\"ids\":[1]}\n", 1, "missing \"input_ids\""},
      {"{\"input_ids\":5}\n", 1, "\"input_ids\" must be an array of token ids, got number"},
      {"{\"input_ids\":\"1 2\"}\n", 1, "\"input_ids\" must be an array of token ids, got string"},
      {"{\"input_ids\":[1,1.5]}\n", 1, "input_ids[1] is not an integer: 1.5"},
      {"{\"input_ids\":[1,2,\"3\"]}\n", 1, "input_ids[2] is not an integer: \"3\""},
      {"{\"input_ids\":[true]}\n", 1, "input_ids[0] is not an integer: true"},
      {"{\"input_ids\":[[1]]}\n", 1, "input_ids[0] is not an integer: [1]"},
      {"{\"input_ids\":[1,12]}\n", 1, "input_ids[1] = 12 is outside the vocabulary [0, 10)"},
      {"{\"input_ids\":[10]}\n", 1, "input_ids[0] = 10 is outside the vocabulary [0, 10)"},
      {"{\"input_ids\":[-1]}\n", 1, "input_ids[0] = -1 is outside the vocabulary [0, 10)"},
      // -100 is a label value, never a token id.
      {"{\"input_ids\":[-100]}\n", 1, "input_ids[0] = -100 is outside the vocabulary"},
      {"{\"input_ids\":[18446744073709551615]}\n", 1,
       "input_ids[0] = 18446744073709551615 is outside the vocabulary"},
      {"{\"input_ids\":[]}\n", 1, "\"input_ids\" is empty"},
      {ok + "\n \n{\"input_ids\":[1,2],\"labels\":[1]}\n", 4,
       "labels has 1 entries but input_ids has 2"},
      {"{\"input_ids\":[1],\"labels\":[1,2,3]}\n", 1, "labels has 3 entries but input_ids has 1"},
      {"{\"input_ids\":[1],\"labels\":7}\n", 1, "\"labels\" must be an array of token ids, got number"},
      {"{\"input_ids\":[1,2],\"labels\":[1,-5]}\n", 1,
       "labels[1] = -5 is neither -100 nor a token id in [0, 10)"},
      {"{\"input_ids\":[1,2],\"labels\":[10,2]}\n", 1, "labels[0] = 10 is neither -100"},
      // 2^64 - 100 must not wrap around to -100.
      {"{\"input_ids\":[1],\"labels\":[18446744073709551516]}\n", 1,
       "labels[0] = 18446744073709551516 is neither -100"},
      {"{\"input_ids\":[1],\"labels\":[null]}\n", 1, "labels[0] is not an integer: null"},
      {"{\"input_ids\":[1],\"labels\":[-100.0]}\n", 1, "labels[0] is not an integer: -100.0"},
      {"\n  \n\t\n", 0, "no samples (all 3 lines are blank)"},
      {"", 0, "no samples (the file is empty)"},
  };
  std::string dir = testing::fresh_temp_dir("jsonl_errors");
  int index = 0;
  for (const BadCase& c : cases) {
    std::string p = write_file(dir, "bad" + std::to_string(index++) + ".jsonl", c.text);
    std::string msg = read_error(p);
    SCOPED_TRACE("input: " + c.text + "\nmessage: " + msg);
    ASSERT_FALSE(msg.empty()) << "no glint::Error";
    std::string where = c.line > 0 ? p + ":" + std::to_string(c.line) + ": " : p + ": ";
    EXPECT_EQ(msg.rfind(where, 0), 0u) << "expected the message to start with " << where;
    EXPECT_NE(msg.find(c.problem), std::string::npos) << "expected: " << c.problem;
  }
}

TEST(JsonlErrors, FirstBadLineIsReported) {
  std::string dir = testing::fresh_temp_dir("jsonl_first_bad");
  std::string p = write_file(dir, "two_bad.jsonl",
                             "{\"input_ids\":[1]}\n{\"input_ids\":[99]}\n{\"input_ids\":[]}\n");
  std::string msg = read_error(p);
  EXPECT_NE(msg.find(p + ":2: input_ids[0] = 99"), std::string::npos) << msg;
}

TEST(JsonlErrors, UnreadablePaths) {
  std::string dir = testing::fresh_temp_dir("jsonl_paths");
  std::string missing = dir + "/missing.jsonl";
  std::string msg = read_error(missing);
  EXPECT_NE(msg.find(missing + ": cannot open (No such file or directory)"), std::string::npos)
      << msg;
  msg = read_error(dir);
  EXPECT_NE(msg.find(dir + ": is a directory"), std::string::npos) << msg;
}

}  // namespace
}  // namespace glint
