// CheckpointReader and write_checkpoint: single-file and sharded Hugging Face layouts.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "io/model_files.h"
#include "io/safetensors.h"

#include "test_util.h"

namespace glint {
namespace {

namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string temp_dir(const std::string& name) {
  return glint::testing::fresh_temp_dir("io_ckpt_" + name);
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

nlohmann::json read_index(const std::string& dir) {
  std::ifstream in(dir + "/model.safetensors.index.json");
  return nlohmann::json::parse(in);
}

// Five [4, 8] F32 tensors: 128 bytes each.
Tensors five_tensors() {
  at::manual_seed(2);
  Tensors ts;
  for (int i = 0; i < 5; ++i) ts.emplace_back("t" + std::to_string(i), at::randn({4, 8}));
  return ts;
}

// Constructing a reader over `dir` and reading `key` throws glint::Error whose message
// contains every string in `words`.
void expect_error(const std::string& dir, const std::string& key,
                  const std::vector<std::string>& words) {
  try {
    CheckpointReader r(dir);
    r.read(key);
    ADD_FAILURE() << "no error; expected: " << words[0];
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg;
  }
}

TEST(Checkpoint, SingleFile) {
  Tensors ts = five_tensors();
  ts.emplace_back("bf16", at::randn({3, 2}).to(at::kBFloat16));
  std::string d = temp_dir("single");
  write_checkpoint(d, ts);
  EXPECT_EQ(files_in(d), std::set<std::string>{"model.safetensors"});
  EXPECT_EQ(SafetensorsFile(d + "/model.safetensors").metadata().at("format"), "pt");
  CheckpointReader r(d);
  EXPECT_EQ(r.dir(), d);
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"bf16", "t0", "t1", "t2", "t3", "t4"}));
  EXPECT_TRUE(r.contains("t3"));
  EXPECT_FALSE(r.contains("t9"));
  for (const auto& [name, t] : ts) {
    EXPECT_TRUE(at::equal(r.read(name), t)) << name;
    EXPECT_EQ(r.info(name).shape, t.sizes().vec()) << name;
  }
  EXPECT_EQ(r.info("bf16").dtype, at::kBFloat16);
  EXPECT_TRUE(at::equal(r.read_rows("t2", 1, 2), ts[2].second.narrow(0, 1, 2)));
  // A directory holding only a hand-placed model.safetensors reads the same way.
  std::string d2 = temp_dir("single_plain");
  write_safetensors(d2 + "/model.safetensors", {{"x", at::arange(3)}});
  EXPECT_TRUE(at::equal(CheckpointReader(d2).read("x"), at::arange(3)));
}

TEST(Checkpoint, ShardedWriteAndRead) {
  Tensors ts = five_tensors();
  std::string d = temp_dir("sharded");
  write_checkpoint(d, ts, /*max_shard_bytes=*/300);  // two 128-byte tensors per shard
  const std::vector<std::string> shards = {"model-00001-of-00003.safetensors",
                                           "model-00002-of-00003.safetensors",
                                           "model-00003-of-00003.safetensors"};
  std::set<std::string> expected_files(shards.begin(), shards.end());
  expected_files.insert("model.safetensors.index.json");
  EXPECT_EQ(files_in(d), expected_files);
  nlohmann::json index = read_index(d);
  EXPECT_EQ(index["metadata"]["total_size"], 5 * 128);
  const std::map<std::string, std::string> expected_map = {
      {"t0", shards[0]}, {"t1", shards[0]}, {"t2", shards[1]}, {"t3", shards[1]}, {"t4", shards[2]}};
  EXPECT_EQ(index["weight_map"].get<decltype(expected_map)>(), expected_map);
  // Each shard holds exactly the keys the index gives it, and nothing is split.
  for (const auto& s : shards) {
    std::vector<std::string> want;
    for (const auto& [k, f] : expected_map)
      if (f == s) want.push_back(k);
    EXPECT_EQ(SafetensorsFile(d + "/" + s).keys(), want) << s;
  }
  CheckpointReader r(d);
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"}));
  for (const auto& [name, t] : ts) {
    EXPECT_TRUE(at::equal(r.read(name), t)) << name;
    EXPECT_TRUE(at::equal(r.read_rows(name, 1, 2), t.narrow(0, 1, 2))) << name;
  }
}

TEST(Checkpoint, OversizedTensorGetsItsOwnShard) {
  Tensors ts = {{"small0", at::ones({4})},       // 16 bytes
                {"big", at::zeros({100})},       // 400 bytes > limit
                {"small1", at::ones({2}) * 2}};  // 8 bytes
  std::string d = temp_dir("oversized");
  write_checkpoint(d, ts, /*max_shard_bytes=*/64);
  nlohmann::json index = read_index(d);
  EXPECT_EQ(index["metadata"]["total_size"], 424);
  EXPECT_EQ(index["weight_map"]["small0"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["small1"], "model-00003-of-00003.safetensors");
  CheckpointReader r(d);
  for (const auto& [name, t] : ts) EXPECT_TRUE(at::equal(r.read(name), t)) << name;
}

TEST(Checkpoint, RewriteRemovesStaleFiles) {
  Tensors ts = five_tensors();
  std::string d = temp_dir("rewrite");
  std::ofstream(d + "/config.json") << "{}";  // files that are not ours stay
  write_checkpoint(d, ts, 300);
  EXPECT_EQ(files_in(d).size(), 5u);
  // Sharded -> single: the index and the shards go, or they would shadow the new file.
  Tensors changed = {{"t0", at::zeros({2})}};
  write_checkpoint(d, changed);
  EXPECT_EQ(files_in(d), (std::set<std::string>{"config.json", "model.safetensors"}));
  EXPECT_TRUE(at::equal(CheckpointReader(d).read("t0"), at::zeros({2})));
  // Single -> sharded: model.safetensors goes (transformers would prefer it).
  write_checkpoint(d, ts, 600);
  EXPECT_EQ(files_in(d), (std::set<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors",
                                                "model.safetensors.index.json"}));
  EXPECT_TRUE(at::equal(CheckpointReader(d).read("t4"), ts[4].second));
}

TEST(Checkpoint, IndexWinsOverSingleFile) {
  std::string d = temp_dir("both");
  write_safetensors(d + "/model.safetensors", {{"x", at::zeros({2})}});
  write_safetensors(d + "/shard.safetensors", {{"x", at::ones({2})}});
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"x":"shard.safetensors"}})";
  EXPECT_TRUE(at::equal(CheckpointReader(d).read("x"), at::ones({2})));
}

TEST(Checkpoint, ShardsOpenLazily) {
  std::string d = temp_dir("lazy");
  write_safetensors(d + "/good.safetensors", {{"g", at::ones({2})}});
  std::ofstream(d + "/broken.safetensors") << "abc";  // truncated
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"weight_map":{"g":"good.safetensors","b":"broken.safetensors"}})";
  CheckpointReader r(d);  // the broken shard is not opened yet
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"b", "g"}));
  EXPECT_TRUE(at::equal(r.read("g"), at::ones({2})));
  try {
    r.read("b");
    ADD_FAILURE() << "broken shard read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(d + "/broken.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

// A shard replaced after its last read: the loader's final check names it, though no
// read of that shard comes after the change.
TEST(Checkpoint, ShardReplacedAfterItsReadsIsCaughtByTheFinalCheck) {
  std::string d = temp_dir("replaced");
  write_safetensors(d + "/one.safetensors", {{"x", at::ones({2})}});
  write_safetensors(d + "/two.safetensors", {{"y", at::zeros({2})}});
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"weight_map":{"x":"one.safetensors","y":"two.safetensors"}})";
  CheckpointReader r(d);
  r.read("x");
  r.check_unchanged();  // nothing changed
  write_safetensors(d + "/one.safetensors", {{"x", at::full({2}, 2.0)}});  // a new version of shard one
  r.read("y");  // shard two is fine
  glint::testing::expect_error_naming([&] { r.check_unchanged(); },
                                      d + "/one.safetensors: changed on disk while it was being read");
}

TEST(Checkpoint, BadDirectoriesAreErrors) {
  std::string missing = temp_dir("missing") + "/nope";
  expect_error(missing, "t0", {missing, "does not exist"});

  std::string empty = temp_dir("empty");
  expect_error(empty, "t0", {empty, "model.safetensors", "model.safetensors.index.json"});

  std::string d = temp_dir("missing_shard");
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"weight_map":{"t0":"model-00001-of-00002.safetensors"}})";
  expect_error(d, "t0", {"model-00001-of-00002.safetensors", "does not exist", "'t0'"});

  // The shard exists but lacks a key the index promises for it: the error names the
  // shard and the key, even when the key first asked for is another one.
  std::string d2 = temp_dir("lying_index");
  write_safetensors(d2 + "/s.safetensors", {{"other", at::ones({1})}});
  std::ofstream(d2 + "/model.safetensors.index.json")
      << R"({"weight_map":{"t0":"s.safetensors","other":"s.safetensors"}})";
  expect_error(d2, "other", {d2 + "/s.safetensors", "'t0'", "promises"});

  const std::vector<std::pair<std::string, std::string>> bad_indexes = {
      {"{not json", "JSON"},
      {R"({"metadata":{}})", "weight_map"},
      {R"({"weight_map":[]})", "weight_map"},
      {R"({"weight_map":{"t0":3}})", "'t0'"},
      {R"({"weight_map":{"t0":"../x.safetensors"}})", "outside the directory"},
      {R"({"metadata":[],"weight_map":{}})", "metadata"},
  };
  for (const auto& [text, word] : bad_indexes) {
    SCOPED_TRACE(text);
    std::string b = temp_dir("bad_index");
    std::ofstream(b + "/model.safetensors.index.json") << text;
    expect_error(b, "t0", {b + "/model.safetensors.index.json", word});
  }

  std::string ok = temp_dir("unknown_key");
  write_checkpoint(ok, five_tensors());
  expect_error(ok, "no.such.key", {ok, "'no.such.key'"});
  EXPECT_THROW(CheckpointReader(ok).info("no.such.key"), Error);
}

TEST(Checkpoint, DuplicateNamesAreRejectedBeforeWriting) {
  std::string d = temp_dir("dup");
  Tensors ts = {{"a", at::ones({100})}, {"b", at::ones({100})}, {"a", at::ones({100})}};
  try {
    write_checkpoint(d, ts, /*max_shard_bytes=*/500);  // the two 'a's land in different shards
    ADD_FAILURE() << "duplicate accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate tensor name 'a'"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(files_in(d).empty());
}

}  // namespace
}  // namespace glint
