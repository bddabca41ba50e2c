// SafetensorsWriter and CheckpointWriter: files planned from specs, values appended in
// pieces, byte-identical to writing the whole tensors at once.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/fs.h"
#include "core/error.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::read_file;

namespace fs = std::filesystem;


int temp_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

std::vector<std::pair<std::string, at::Tensor>> sample_tensors() {
  return {{"a", at::randn({5, 3}, at::kFloat)},
          {"empty", at::zeros({0, 4}, at::kDouble)},
          {"b", at::randn({7}, at::kFloat).to(at::kBFloat16)},
          {"c", at::arange(6, at::kLong).view({2, 3})}};
}

std::vector<TensorSpec> specs_of(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  return specs;
}

// Each tensor in pieces of up to 4 values (rows cut mid-way): the file equals the one
// written whole.
TEST(StreamingWriter, PiecesGiveTheSameFileAsWholeTensors) {
  const std::string d = testing::fresh_temp_dir("io_stream_pieces");
  auto tensors = sample_tensors();
  write_safetensors(d + "/whole.safetensors", tensors, {{"format", "pt"}});
  SafetensorsWriter w(d + "/pieces.safetensors", specs_of(tensors), {{"format", "pt"}});
  for (const auto& [name, t] : tensors) {
    at::Tensor flat = t.reshape({-1});
    for (int64_t i = 0; i < flat.numel(); i += 4) w.append(flat.narrow(0, i, std::min<int64_t>(4, flat.numel() - i)));
  }
  EXPECT_FALSE(fs::exists(d + "/pieces.safetensors"));  // not before finish
  w.finish();
  EXPECT_EQ(read_file(d + "/pieces.safetensors"), read_file(d + "/whole.safetensors"));
  EXPECT_EQ(temp_files(d), 0);
}

TEST(StreamingWriter, WrongPiecesAndUnfinishedFilesAreErrorsAndLeaveNothing) {
  const std::string d = testing::fresh_temp_dir("io_stream_errors");
  auto tensors = sample_tensors();
  {
    SafetensorsWriter w(d + "/x.safetensors", specs_of(tensors));
    testing::expect_error_naming([&] { w.append(at::zeros({15}, at::kDouble)); }, "'a'");  // wrong dtype
    testing::expect_error_naming([&] { w.append(at::zeros({16}, at::kFloat)); }, "15 more values");
    w.append(at::zeros({15}, at::kFloat));
    testing::expect_error_naming([&] { w.finish(); }, "'b'");  // b is not full
  }
  EXPECT_EQ(temp_files(d), 0);
  EXPECT_FALSE(fs::exists(d + "/x.safetensors"));
  {
    SafetensorsWriter w(d + "/y.safetensors", specs_of(tensors));
    w.append(at::zeros({15}, at::kFloat));
  }  // destroyed unfinished
  EXPECT_EQ(temp_files(d), 0);
  EXPECT_FALSE(fs::exists(d + "/y.safetensors"));
  // A plan safetensors cannot store: refused before any file exists.
  testing::expect_error_naming(
      [&] { SafetensorsWriter(d + "/z.safetensors", {{"q", at::kComplexFloat, {2}}}); }, "'q'");
  testing::expect_error_naming(
      [&] { CheckpointWriter(d + "/ckpt", {{"q", at::kFloat, {2}}, {"q", at::kFloat, {2}}}); }, "duplicate");
  EXPECT_FALSE(fs::exists(d + "/ckpt"));
}

// Shards filled in order: the same files and index as write_checkpoint of the whole tensors.
TEST(StreamingWriter, CheckpointShardsMatchWriteCheckpoint) {
  const std::string d = testing::fresh_temp_dir("io_stream_ckpt");
  auto tensors = sample_tensors();
  write_checkpoint(d + "/whole", tensors, 64);
  CheckpointWriter w(d + "/pieces", specs_of(tensors), 64);
  for (const auto& [name, t] : tensors) {
    at::Tensor flat = t.reshape({-1});
    for (int64_t i = 0; i < flat.numel(); i += 2) w.append(flat.narrow(0, i, std::min<int64_t>(2, flat.numel() - i)));
  }
  w.finish();
  EXPECT_EQ(w.num_files(), 2u);  // a (60 B) and empty | b (14 B) and c (48 B)
  EXPECT_EQ(w.total_bytes(), 60u + 14 + 48);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d + "/whole")) names.push_back(e.path().filename().string());
  ASSERT_EQ(names.size(), 3u);  // two shards and the index
  for (const auto& n : names) EXPECT_EQ(read_file(d + "/pieces/" + n), read_file(d + "/whole/" + n)) << n;
}

}  // namespace
}  // namespace glint
