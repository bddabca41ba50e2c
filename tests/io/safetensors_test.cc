#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

#include "test_util.h"

namespace glint {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) { return glint::testing::fresh_temp_dir("io_" + name); }

// Writes a safetensors file by hand: 8-byte little-endian length, header, raw bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               int64_t header_len_override = -1) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header_len_override >= 0 ? uint64_t(header_len_override) : header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}

void expect_error(const std::string& path, const std::string& word) {
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << "no error for " << word;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(word), std::string::npos) << msg;
  }
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  std::string d = temp_dir("hand");
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
                       R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  write_raw(d + "/x.safetensors", header, floats({1, 2, 3, 4.5f, -1}));
  SafetensorsFile f(d + "/x.safetensors");
  EXPECT_EQ(f.keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(at::equal(f.read("a"), at::tensor({1.0f, 2.0f, 3.0f})));
  EXPECT_TRUE(at::equal(f.read("b"), at::tensor({4.5f, -1.0f})));
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, RoundTripsEveryDtypeBitExactly) {
  std::string d = temp_dir("roundtrip");
  at::manual_seed(0);
  std::vector<std::pair<std::string, at::Tensor>> ts = {
      {"f32", at::randn({3, 4})},
      {"bf16", at::randn({5, 2}).to(at::kBFloat16)},
      {"f16", at::randn({2, 3, 2}).to(at::kHalf)},
      {"f64", at::randn({4}, at::kDouble)},
      {"i64", at::arange(7, at::kLong)},
      {"empty", at::zeros({0, 4})},
      {"scalar", at::tensor(3.5f).reshape({})},
      {"strided", at::randn({4, 6}).t()},  // non-contiguous input
  };
  write_safetensors(d + "/t.safetensors", ts, {{"k", "v"}});
  SafetensorsFile f(d + "/t.safetensors");
  for (const auto& [name, t] : ts) {
    at::Tensor r = f.read(name);
    EXPECT_EQ(r.scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(at::equal(r, t)) << name;
  }
  EXPECT_EQ(f.metadata().at("k"), "v");

  // Parse the written header independently: offsets are consecutive, the data buffer
  // starts 8-byte aligned.
  std::ifstream in(d + "/t.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string h(n, '\0');
  in.read(h.data(), n);
  auto j = nlohmann::json::parse(h);
  uint64_t expected_begin = 0;
  for (const auto& [name, t] : ts) {
    auto off = j[name]["data_offsets"];
    EXPECT_EQ(off[0].get<uint64_t>(), expected_begin) << name;
    expected_begin += t.numel() * t.element_size();
    EXPECT_EQ(off[1].get<uint64_t>(), expected_begin) << name;
  }
}

TEST(Safetensors, ReadRowsEqualsNarrow) {
  std::string d = temp_dir("rows");
  at::Tensor t = at::randn({6, 3, 2});
  write_safetensors(d + "/r.safetensors", {{"w", t}});
  SafetensorsFile f(d + "/r.safetensors");
  for (auto [start, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {2, 3}, {5, 1}, {4, 0}})
    EXPECT_TRUE(at::equal(f.read_rows("w", start, count), t.narrow(0, start, count)));
  EXPECT_THROW(f.read_rows("w", 4, 3), Error);
  EXPECT_THROW(f.read_rows("w", -1, 1), Error);
}

TEST(Safetensors, BadFilesNameThePathAndProblem) {
  std::string d = temp_dir("bad");
  std::string p = d + "/bad.safetensors";
  std::ofstream(p, std::ios::binary) << "abc";
  expect_error(p, "truncated");
  write_raw(p, "{}", "", 1000);
  expect_error(p, "past the end of file");
  write_raw(p, "{not json", "");
  expect_error(p, "JSON");
  write_raw(p, R"({"a":{"dtype":"F9","shape":[1],"data_offsets":[0,4]}})", floats({1}));
  expect_error(p, "unknown dtype");
  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", floats({1}));
  expect_error(p, "size mismatch");
  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({1}));
  expect_error(p, "out of range");
  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            floats({1, 2}));
  expect_error(p, "overlap");
  write_raw(p, R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", floats({1}));
  expect_error(p, "non-negative");
  write_raw(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({1}));
  SafetensorsFile ok(p);
  try {
    ok.read("missing_key");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing_key"), std::string::npos);
  }
}

TEST(Safetensors, FailedWriteLeavesOldFileAndNoTemp) {
  std::string d = temp_dir("atomic");
  std::string p = d + "/w.safetensors";
  write_safetensors(p, {{"a", at::ones({2})}});
  EXPECT_THROW(write_safetensors(p, {{"a", at::ones({2})}, {"a", at::ones({1})}}), Error);
  EXPECT_THROW(write_safetensors(p, {{"c", at::ones({2}, at::kComplexFloat)}}), Error);
  SafetensorsFile f(p);
  EXPECT_TRUE(at::equal(f.read("a"), at::ones({2})));
  int files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(d)) ++files;
  EXPECT_EQ(files, 1);
}

TEST(Checkpoint, SingleFileAndShardedDirectoriesReadTheSame) {
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (int i = 0; i < 5; ++i) ts.emplace_back("t" + std::to_string(i), at::randn({4, 8}));
  std::string single = temp_dir("ckpt_single"), sharded = temp_dir("ckpt_sharded");
  write_checkpoint(single, ts);
  write_checkpoint(sharded, ts, /*max_shard_bytes=*/300);  // each tensor is 128 bytes
  EXPECT_TRUE(fs::exists(single + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(single + "/model.safetensors.index.json"));
  auto index = nlohmann::json::parse(std::ifstream(sharded + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 5 * 128);
  EXPECT_EQ(index["weight_map"]["t0"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["t4"], "model-00003-of-00003.safetensors");
  CheckpointReader a(single), b(sharded);
  EXPECT_EQ(a.keys(), b.keys());
  for (const auto& [name, t] : ts) {
    EXPECT_TRUE(at::equal(a.read(name), t));
    EXPECT_TRUE(at::equal(b.read(name), t));
    EXPECT_TRUE(at::equal(b.read_rows(name, 1, 2), t.narrow(0, 1, 2)));
  }
}

TEST(Checkpoint, BadDirectoriesAreErrors) {
  auto expect = [](const std::string& dir, const std::string& word) {
    try {
      CheckpointReader r(dir);
      r.read("t0");
      ADD_FAILURE() << word;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  expect(temp_dir("ckpt_empty"), "model.safetensors");
  std::string d = temp_dir("ckpt_missing_shard");
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"weight_map":{"t0":"model-00001-of-00002.safetensors"}})";
  expect(d, "model-00001-of-00002.safetensors");
  std::string d2 = temp_dir("ckpt_lying_index");
  write_safetensors(d2 + "/s.safetensors", {{"other", at::ones({1})}});
  std::ofstream(d2 + "/model.safetensors.index.json") << R"({"weight_map":{"t0":"s.safetensors"}})";
  expect(d2, "t0");
}

}  // namespace
}  // namespace glint
