// Mesh validation for expert parallelism: each bad combination is an error naming values.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/config.h"
#include "parallel/expert_parallel.h"

namespace glint {
namespace {

ModelConfig moe_config(int64_t experts, int64_t top_k) {
  ModelConfig c = tiny_moe_config(16);
  c.num_experts = experts;
  c.num_experts_per_tok = top_k;
  return c;
}

std::string error_of(const ModelConfig& c, int world, int64_t ep, const std::string& layout = "contiguous") {
  try {
    validate_expert_mesh(c, world, ep, layout);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ExpertMesh, ValidMeshesPass) {
  EXPECT_EQ(error_of(moe_config(8, 2), 4, 4), "");
  EXPECT_EQ(error_of(moe_config(8, 2), 4, 2), "");
  EXPECT_EQ(error_of(moe_config(8, 2), 4, 2, "strided"), "");
  EXPECT_EQ(error_of(moe_config(8, 2), 3, 1), "");  // no EP: any world
}

TEST(ExpertMesh, BadMeshesNameTheValues) {
  std::string e = error_of(moe_config(6, 2), 4, 4);
  EXPECT_NE(e.find("num_experts (6) must be divisible by --ep (4)"), std::string::npos) << e;
  e = error_of(moe_config(8, 2), 6, 4);
  EXPECT_NE(e.find("--ep (4) must divide the number of ranks (6)"), std::string::npos) << e;
  e = error_of(moe_config(4, 2), 8, 8);
  EXPECT_NE(e.find("--ep (8) exceeds num_experts (4)"), std::string::npos) << e;
  e = error_of(moe_config(8, 2), 4, 0);
  EXPECT_NE(e.find("--ep must be >= 1, got 0"), std::string::npos) << e;
  e = error_of(moe_config(8, 2), 4, 2, "diagonal");
  EXPECT_NE(e.find("--ep-layout must be contiguous or strided, got 'diagonal'"), std::string::npos) << e;
  ModelConfig dense = moe_config(8, 2);
  dense.model_type = "qwen3";
  dense.num_experts = 0;
  dense.mlp_only_layers.clear();
  e = error_of(dense, 2, 2);
  EXPECT_NE(e.find("has no MoE layers"), std::string::npos) << e;
}

TEST(ExpertMesh, TopKAboveExpertsIsRejected) {
  ModelConfig c = moe_config(8, 2);
  c.num_experts_per_tok = 9;
  std::string e = error_of(c, 2, 2);
  EXPECT_NE(e.find("num_experts_per_tok (9) exceeds num_experts (8)"), std::string::npos) << e;
}

}  // namespace
}  // namespace glint
