#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"

#include "test_util.h"

namespace glint {
namespace {

TEST(Error, CheckThrowsWithMessage) {
  try {
    GLINT_CHECK(1 + 1 == 3, "file.json: key 'x' expected ", 3, " got ", 2);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "file.json: key 'x' expected 3 got 2");
  }
}

TEST(Error, AssertIsLogicError) {
  EXPECT_THROW(GLINT_ASSERT(false, "bug"), std::logic_error);
}

TEST(Dtype, ParseNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_dtype("bf16", "--dtype"), c10::kBFloat16);
  EXPECT_EQ(parse_dtype("float32", "--dtype"), c10::kFloat);
  EXPECT_THROW(parse_dtype("int3", "--dtype"), Error);
  EXPECT_EQ(parse_device("cpu", "--device").type(), c10::kCPU);
  EXPECT_THROW(parse_device("tpu", "--device"), Error);
}

TEST(Fs, AtomicWriteLeavesNoTempOnFailure) {
  std::string dir = glint::testing::fresh_temp_dir("fs_test");
  make_dirs(dir);
  std::string path = dir + "/out.txt";
  write_text_atomic(path, "first");
  EXPECT_THROW(write_file_atomic(path, [](std::FILE*) { fail("boom"); }), Error);
  EXPECT_EQ(read_file(path), "first");
  EXPECT_THROW(read_json_file(path), Error);  // "first" is not JSON
}

// Found by the fuzz targets of config.json and tokenizer.json: a number beyond double's
// range is nlohmann's out_of_range, not a parse_error, and escaped as that.
TEST(Fs, JsonNumberBeyondDoubleIsInvalidJson) {
  std::string dir = glint::testing::fresh_temp_dir("fs_json_test");
  std::string path = dir + "/config.json";
  write_text_atomic(path, R"({"hidden_size": 40961e308})");
  glint::testing::expect_error_naming([&] { read_json_file(path); }, path + ": invalid JSON");
}

}  // namespace
}  // namespace glint
