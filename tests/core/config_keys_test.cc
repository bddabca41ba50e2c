#include <gtest/gtest.h>

#include "core/config_keys.h"

namespace glint {
namespace {

// Long names of glint train's options (a subset), as the CLI hands them over.
const std::vector<std::string> kTrainKeys = {
    "model", "data", "output", "steps", "batch-size", "micro-batch-size", "seq-len", "lr",
    "min-lr-ratio", "warmup-steps", "weight-decay", "max-grad-norm", "lora-r", "lora-alpha",
    "eval-samples", "eval-every", "ep", "ep-layout"};

TEST(ConfigKeys, NormalizeTurnsUnderscoresIntoDashes) {
  EXPECT_EQ(normalize_key("micro_batch_size"), "micro-batch-size");
  EXPECT_EQ(normalize_key("micro-batch_size"), "micro-batch-size");
  EXPECT_EQ(normalize_key("lr"), "lr");
  EXPECT_EQ(normalize_key("LR_x"), "LR-x");  // case is kept: keys are case-sensitive
}

TEST(ConfigKeys, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("steps", "steps"), 0u);
  EXPECT_EQ(edit_distance("setps", "steps"), 2u);   // a swap is two substitutions
  EXPECT_EQ(edit_distance("step", "steps"), 1u);    // an insertion
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("sitting", "kitten"), 3u);
}

TEST(ConfigKeys, ClosestKeyByInitials) {
  EXPECT_EQ(closest_key("learning_rate", kTrainKeys), "lr");
  EXPECT_EQ(closest_key("learning-rate", kTrainKeys), "lr");
  // A typo of a full name beats the initials.
  std::vector<std::string> with_alias = kTrainKeys;
  with_alias.push_back("learning-rate");
  EXPECT_EQ(closest_key("learning_rat", with_alias), "learning-rate");
  // The other way round: the key is the initials of an option.
  EXPECT_EQ(closest_key("mbs", kTrainKeys), "micro-batch-size");
}

TEST(ConfigKeys, ClosestKeyByTypo) {
  EXPECT_EQ(closest_key("setps", kTrainKeys), "steps");
  EXPECT_EQ(closest_key("step", kTrainKeys), "steps");  // not warmup-steps, which contains it
  EXPECT_EQ(closest_key("micro_bach_size", kTrainKeys), "micro-batch-size");
  EXPECT_EQ(closest_key("Seq_Len", kTrainKeys), "seq-len");
  EXPECT_EQ(closest_key("lora_rank", kTrainKeys), "lora-r");  // not "lr", its initials
}

TEST(ConfigKeys, ClosestKeyByContainment) {
  EXPECT_EQ(closest_key("grad-norm", kTrainKeys), "max-grad-norm");
  EXPECT_EQ(closest_key("min_lr", kTrainKeys), "min-lr-ratio");
}

TEST(ConfigKeys, NoSuggestionWhenNothingIsClose) {
  EXPECT_EQ(closest_key("temperature", kTrainKeys), "");
  EXPECT_EQ(closest_key("xy", kTrainKeys), "");  // two edits would turn it into "ep": too far
  EXPECT_EQ(closest_key("anything", {}), "");
}

}  // namespace
}  // namespace glint
