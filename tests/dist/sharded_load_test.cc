// What each rank reads of the base model's checkpoint at the start of a multi-rank run,
// as the setup line reports it ("weights read of the checkpoint's X MB: rank 0 A MB, rank
// 1 B MB (S MB in all)"), against the bytes this test sums from the safetensors header
// itself: under FSDP each rank reads its half of every tensor (the embeddings and lm_head
// too) and the ranks together read the checkpoint once; under EP alone each rank reads
// every non-expert tensor and its half of the experts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"
#include "tiny_run.h"

namespace {

namespace fs = std::filesystem;

// Tensor bytes of every *.safetensors file in `dir`, read from the files' headers here (8
// bytes of header length, then {"key": {"data_offsets": [begin, end], ...}, ...}).
struct CheckpointBytes {
  double total = 0, experts = 0;  // MB (1e6 bytes); experts: keys under ".mlp.experts."
};

CheckpointBytes checkpoint_bytes(const std::string& dir) {
  CheckpointBytes out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream in(e.path(), std::ios::binary);
    unsigned char len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];  // little-endian
    std::string header(n, '\0');
    in.read(header.data(), std::streamsize(n));
    EXPECT_TRUE(in) << e.path();
    const nlohmann::json j = nlohmann::json::parse(header);
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      const nlohmann::json& v = it.value();
      if (key == "__metadata__") continue;
      const double mb = double(v["data_offsets"][1].get<uint64_t>() - v["data_offsets"][0].get<uint64_t>()) / 1e6;
      out.total += mb;
      if (key.find(".mlp.experts.") != std::string::npos) out.experts += mb;
    }
  }
  return out;
}

struct ReadLine {
  double checkpoint = -1;
  std::vector<double> ranks;
};

ReadLine read_line(const std::string& log) {
  ReadLine r;
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("weights read of the checkpoint's ([0-9.]+) MB:([^(]*)\\("))) return r;
  r.checkpoint = std::stod(m[1]);
  const std::string per_rank = m[2];
  std::regex each("rank ([0-9]+) ([0-9.]+) MB");
  for (auto it = std::sregex_iterator(per_rank.begin(), per_rank.end(), each); it != std::sregex_iterator(); ++it)
    r.ranks.push_back(std::stod((*it)[2]));
  return r;
}

// A tiny model whose embeddings and lm_head (4,096 ids) are most of its bytes, as a
// real vocabulary makes them of a small model: reading them whole on every rank shows.
TEST(ShardedLoad, EachRankReadsItsShareOfTheCheckpoint) {
  const std::string dir = glint::testing::fresh_temp_dir("sharded_load");
  const std::string model = glint::testing::make_model(dir, 32, 16, /*vocab=*/4096);
  const std::string data = glint::testing::make_data(dir + "/data.jsonl", 8, 1);
  const CheckpointBytes bytes = checkpoint_bytes(model);
  ASSERT_GT(bytes.total, 1.0);
  ASSERT_GT(bytes.experts, 0.0);
  const double printed = 0.0015;  // the line's 3 decimals, and a few elements of padding
  struct Case {
    std::string flags;
    double per_rank;  // MB each of the 2 ranks reads
  };
  const std::vector<Case> cases = {{"--fsdp", bytes.total / 2},
                                   {"--fsdp --ep 2", bytes.total / 2},
                                   {"--ep 2", bytes.total - bytes.experts / 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    glint::testing::RunResult r = glint::testing::launch(
        2, "train --model " + model + " --data " + data + " --steps 1 --batch-size 2 --eval-samples 0 " + c.flags +
               " --output " + dir + "/out" + std::to_string(&c - cases.data()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const ReadLine line = read_line(r.output);
    ASSERT_GE(line.checkpoint, 0) << r.output;
    EXPECT_NEAR(line.checkpoint, bytes.total, printed);
    ASSERT_EQ(line.ranks.size(), 2u) << r.output;
    for (size_t k = 0; k < 2; ++k)
      EXPECT_NEAR(line.ranks[k], c.per_rank, printed)
          << "rank " << k << " of 2 read " << line.ranks[k] << " MB of the checkpoint's " << bytes.total << " MB";
  }
}

}  // namespace
