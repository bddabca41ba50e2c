// `glint data preview` on pre-tokenized data: read as `glint train` reads it, decoded
// with the tokenizer, trained tokens marked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace {

// A tokenizer directory holding only the fixture's tokenizer.json (no chat template):
// pre-tokenized data needs nothing else.
std::string fixture_tokenizer_dir(const std::string& name) {
  std::string d = glint::testing::fresh_temp_dir("cli_preview_" + name);
  std::filesystem::copy_file(std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json",
                             d + "/tokenizer.json");
  return d;
}

std::string preview(const std::string& args, int* code) {
  return glint::testing::run_command(std::string(GLINT_BINARY) + " data preview " + args, code);
}

TEST(CliDataPreview, PreTokenizedFileShowsTrainedTokensMarked) {
  std::string dir = fixture_tokenizer_dir("pretokenized");
  // Fixture ids: hello 259, Ġworld 264, <|im_start|> 269, <|im_end|> 270, cat 272.
  std::ofstream(dir + "/data.jsonl") << R"({"input_ids":[269,259,264,270],"labels":[-100,-100,264,270]})" << "\n"
                                     << "\n"
                                     << R"({"input_ids":[272,264]})" << "\n";
  int code;
  std::string out = preview("--tokenizer " + dir + " --data " + dir + "/data.jsonl --count 2", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("--- sample 0: 4 tokens, 2 trained\n<|im_start|>hello⟦ world<|im_end|>⟧\n"), std::string::npos)
      << out;
  // Without labels every token is trained (labels = input_ids).
  EXPECT_NE(out.find("--- sample 1: 2 tokens, 2 trained\n⟦cat world⟧\n"), std::string::npos) << out;
  EXPECT_NE(out.find("--- 2 samples from 2 lines"), std::string::npos) << out;

  // --model works the same, and --seq-len cuts as for text data.
  out = preview("--model " + dir + " --data " + dir + "/data.jsonl --seq-len 3", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("--- sample 0: 3 tokens, 1 trained\n<|im_start|>hello⟦ world⟧\n"), std::string::npos) << out;

  // Ids are checked against the tokenizer's vocabulary (274 tokens), naming the line.
  std::ofstream(dir + "/bad.jsonl") << R"({"input_ids":[259,264]})" << "\n" << R"({"input_ids":[259,274]})" << "\n";
  out = preview("--tokenizer " + dir + " --data " + dir + "/bad.jsonl", &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("bad.jsonl:2"), std::string::npos) << out;
  EXPECT_NE(out.find("274"), std::string::npos) << out;
}

}  // namespace
