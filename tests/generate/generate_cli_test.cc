// `glint generate` as a user meets it: token ids in and out for a model without a
// tokenizer, text for one with a tokenizer (raw and through a chat template), the
// errors, --help, and the built-in task's adapter changing the digits it answers with.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/fs.h"
#include "data/synthetic.h"
#include "generate/generate.h"
#include "lora/lora.h"
#include "lora/peft_io.h"
#include "model/causal_lm.h"
#include "model/weights.h"
#include "model_util.h"
#include "template/chat_template.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace glint {
namespace {

using glint::testing::kF32;

namespace fs = std::filesystem;

// The built-in task's base model, as the trainer makes it for seed `seed`.
CausalLM digits_model(uint64_t seed = 0) {
  CausalLM m(tiny_moe_config(ReverseDigitsTask::kVocabSize), kF32);
  init_weights(*m, seed);
  return m;
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

std::vector<int64_t> greedy(CausalLMImpl& m, const std::vector<int64_t>& prompt, int64_t n,
                            std::vector<int64_t> stops = {}) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = n;
  r.sampling.stop_token_ids = std::move(stops);
  return generate(m, {r})[0].tokens;
}

// The output's last line (the command prints only the generation on stdout).
std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  size_t at = s.rfind('\n');
  return at == std::string::npos ? s : s.substr(at + 1);
}

TEST(GenerateCli, PromptIdsOnAModelWithoutTokenizer) {
  std::string d = testing::fresh_temp_dir("gen_ids");
  CausalLM m = digits_model(3);
  save_pretrained(*m, d + "/base");
  std::vector<int64_t> prompt = {11, 1, 2, 3, 12};
  auto r = testing::run_glint("generate --model " + d + "/base --prompt-ids '11 1 2 3 12' --max-new-tokens 6 "
                              "--temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(last_line(r.output), ids_text(greedy(*m, prompt, 6))) << r.output;
  // A stop id ends it, included; sampling with a seed repeats itself.
  std::vector<int64_t> free = greedy(*m, prompt, 6);
  r = testing::run_glint("generate --model " + d + "/base --prompt-ids 11,1,2,3,12 --max-new-tokens 6 "
                         "--temperature 0 --stop-ids " + std::to_string(free[1]));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(last_line(r.output), ids_text(greedy(*m, prompt, 6, {free[1]}))) << r.output;
  std::string sample = "generate --model " + d + "/base --prompt-ids '11 4 5 12' --temperature 1 --top-k 5 --seed 9";
  auto a = testing::run_glint(sample), b = testing::run_glint(sample);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  // generation_config.json's eos_token_id (an int or a list) stops it too.
  std::ofstream(d + "/base/generation_config.json") << "{\"eos_token_id\": [" << free[0] << "], \"do_sample\": false}";
  r = testing::run_glint("generate --model " + d + "/base --prompt-ids '11 1 2 3 12' --max-new-tokens 6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(last_line(r.output), std::to_string(free[0])) << r.output;
}

TEST(GenerateCli, TextWithATokenizerRawAndThroughTheChatTemplate) {
  std::string d = testing::fresh_temp_dir("gen_text");
  const std::string fixture = std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json";
  Tokenizer tok = Tokenizer::load(fixture);
  CausalLM m(tiny_moe_config(tok.vocab_size()), kF32);
  init_weights(*m, 1);
  save_pretrained(*m, d + "/model");
  fs::copy_file(fixture, d + "/model/tokenizer.json");
  auto expected_text = [&](const std::string& text, bool special) {
    std::vector<int32_t> ids = tok.encode(text, special);
    std::vector<int64_t> out = greedy(*m, std::vector<int64_t>(ids.begin(), ids.end()), 12);
    return tok.decode(std::vector<int32_t>(out.begin(), out.end()), /*skip_special_tokens=*/true);
  };
  // No chat template: the prompt is encoded as it is.
  auto r = testing::run_glint("generate --model " + d + "/model --prompt 'the cat sat' --max-new-tokens 12 "
                              "--temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, expected_text("the cat sat", true) + "\n");
  // A chat template wraps --prompt (and --system) as messages with the assistant turn opened.
  const std::string tmpl =
      "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}";
  std::ofstream(d + "/model/tokenizer_config.json")
      << "{\"chat_template\": \"" << tmpl << "\", \"eos_token\": \"<|im_end|>\"}";
  ChatTemplate chat = ChatTemplate::load(d + "/model");
  ChatRenderOptions gen_prompt;
  gen_prompt.add_generation_prompt = true;
  nlohmann::ordered_json messages = {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}};
  std::string rendered = chat.render(messages, gen_prompt);
  std::vector<int32_t> ids = tok.encode(rendered, false);
  const int64_t eos = tok.token_to_id("<|im_end|>");
  std::vector<int64_t> out = greedy(*m, std::vector<int64_t>(ids.begin(), ids.end()), 12, {eos});
  std::string want = tok.decode(std::vector<int32_t>(out.begin(), out.end()), true) + "\n";
  r = testing::run_glint("generate --model " + d + "/model --system 'be brief' --prompt hi --max-new-tokens 12 "
                         "--temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, want);
  std::ofstream(d + "/messages.json") << messages.dump();
  r = testing::run_glint("generate --model " + d + "/model --messages " + d + "/messages.json --max-new-tokens 12 "
                         "--temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, want);
}

TEST(GenerateCli, ErrorsNameWhatIsWrong) {
  std::string d = testing::fresh_temp_dir("gen_errors");
  CausalLM m = digits_model();
  save_pretrained(*m, d + "/base");
  struct Case {
    std::string args, word;
    int code;
  };
  const std::string base = "generate --model " + d + "/base ";
  std::vector<Case> cases = {
      {"generate --prompt-ids 1", "--model", 2},
      {base + "--prompt-ids '1 x 3'", "--prompt-ids: 'x'", 2},
      {base + "--prompt-ids '1 99'", "vocabulary", 1},
      {base, "exactly one of --prompt", 2},
      {base + "--prompt hi", "no tokenizer.json", 1},
      {base + "--prompt-ids 1 --adapter " + d + "/nowhere", "nowhere: no such directory", 2},
      {base + "--prompt-ids 1 --adapter " + d, "neither a PEFT adapter directory", 1},
      {base + "--prompt-ids 1 --top-p 2", "--top-p", 2},
      {"generate --model " + d + "/nowhere --prompt-ids 1", "no such directory", 1},
      {base + "--prompt-ids 1 --memory-budget 2x", "--memory-budget 2x", 2},
      // Weights alone exceed a budget of 1 MB: refused before the weights are read.
      {base + "--prompt-ids 1 --memory-budget 1M", "smaller --max-new-tokens (now 256)", 1},
  };
  for (const Case& c : cases) {
    auto r = testing::run_glint(c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.word), std::string::npos) << c.args << "\n" << r.output;
  }
  // The refusal names the estimate, and --ignore-memory-estimate starts anyway.
  auto over = testing::run_glint(base + "--prompt-ids 1 --max-new-tokens 3 --memory-budget 1M");
  EXPECT_NE(over.output.find("estimated peak"), std::string::npos) << over.output;
  over = testing::run_glint(base + "--prompt-ids 1 --max-new-tokens 3 --memory-budget 1M --ignore-memory-estimate");
  EXPECT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("warning: the estimated peak"), std::string::npos) << over.output;
  // An adapter made for another model (other sizes) is refused, naming both.
  ModelConfig other_config = tiny_moe_config(ReverseDigitsTask::kVocabSize);
  other_config.hidden_size = 32;
  CausalLM other(other_config, kF32);
  LoraOptions o;
  o.r = 2;
  LoraModel lora = apply_lora(*other, o, 1);
  save_adapter(d + "/other_adapter", lora, "other");
  auto r = testing::run_glint(base + "--prompt-ids 1 --adapter " + d + "/other_adapter");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("does not fit this qwen3_moe model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trained on other"), std::string::npos) << r.output;
}

// Token ids as the command prints them.
std::vector<int64_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> ids;
  for (int64_t id; in >> id;) ids.push_back(id);
  return ids;
}

// The index of a token worth stopping at in a free greedy run: the first after the first
// that has not come before (the run then stops there, not earlier); 0 when there is none.
size_t stop_index(const std::vector<int64_t>& free) {
  for (size_t k = 1; k < free.size(); ++k)
    if (std::find(free.begin(), free.begin() + k, free[k]) == free.begin() + k) return k;
  return 0;
}

// The token ids a greedy run of `args` prints when nothing stops it: all 8 of them.
std::vector<int64_t> unstopped_ids(const std::string& args) {
  auto r = testing::run_glint(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<int64_t> ids = parse_ids(last_line(r.output));
  EXPECT_EQ(ids.size(), 8u) << r.output;
  return ids;
}

// The model's EOS from config.json (no generation_config.json) ends the generation. The
// EOS is the token the greedy model produces, found by a run without any.
TEST(GenerateCli, StopsAtTheEosOfConfigJson) {
  const std::string d = testing::fresh_temp_dir("gen_config_eos");
  CausalLM m = digits_model(5);
  save_pretrained(*m, d + "/model");
  const std::string args = "generate --model " + d + "/model --prompt-ids '11 4 5 6 12' --max-new-tokens 8 "
                           "--temperature 0";
  const std::vector<int64_t> free = unstopped_ids(args);
  ASSERT_EQ(free.size(), 8u);
  const size_t k = stop_index(free);
  for (bool as_list : {false, true}) {
    SCOPED_TRACE(as_list ? "a list" : "an int");
    nlohmann::json cfg = read_json_file(d + "/model/config.json");
    cfg["eos_token_id"] = as_list ? nlohmann::json({free[k]}) : nlohmann::json(free[k]);
    std::ofstream(d + "/model/config.json") << cfg.dump();
    auto r = testing::run_glint(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(parse_ids(last_line(r.output)), std::vector<int64_t>(free.begin(), free.begin() + k + 1)) << r.output;
  }
}

// With --prompt-ids, the eos_token of a tokenizer in the model directory ends it too.
TEST(GenerateCli, StopsAtTheTokenizersEosWithPromptIds) {
  const std::string d = testing::fresh_temp_dir("gen_tokenizer_eos");
  const std::string fixture = std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture/tokenizer.json";
  Tokenizer tok = Tokenizer::load(fixture);
  CausalLM m(tiny_moe_config(tok.vocab_size()), kF32);
  init_weights(*m, 4);
  save_pretrained(*m, d + "/model");
  fs::copy_file(fixture, d + "/model/tokenizer.json");
  const std::string args = "generate --model " + d + "/model --prompt-ids '40 41 42 43' --max-new-tokens 8 "
                           "--temperature 0";
  const std::vector<int64_t> free = unstopped_ids(args);
  ASSERT_EQ(free.size(), 8u);
  const size_t k = stop_index(free);
  // The token's spelling, from tokenizer.json itself.
  const nlohmann::json tj = read_json_file(fixture);
  std::string spelling;
  for (const auto& [text, id] : tj["model"]["vocab"].items())
    if (id.get<int64_t>() == free[k]) spelling = text;
  for (const auto& added : tj["added_tokens"])
    if (added["id"].get<int64_t>() == free[k]) spelling = added["content"].get<std::string>();
  ASSERT_FALSE(spelling.empty()) << free[k];
  std::ofstream(d + "/model/tokenizer_config.json") << nlohmann::json({{"eos_token", spelling}}).dump();
  auto r = testing::run_glint(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(parse_ids(last_line(r.output)), std::vector<int64_t>(free.begin(), free.begin() + k + 1)) << r.output;
}

// Without sampling flags the model's generation config decides, as in transformers:
// greedy when it does not set do_sample (or there is none); with do_sample alone,
// temperature 1.0 and top-k 50.
TEST(GenerateCli, DecodesAsTransformersWithoutSamplingFlags) {
  const std::string d = testing::fresh_temp_dir("gen_default_sampling");
  CausalLM m = digits_model(6);
  save_pretrained(*m, d + "/model");
  const std::string args = "generate --model " + d + "/model --prompt-ids '11 7 8 9 12' --max-new-tokens 12 --seed 3";
  auto greedy_run = testing::run_glint(args + " --temperature 0");
  auto plain = testing::run_glint(args);
  ASSERT_EQ(greedy_run.exit_code, 0) << greedy_run.output;
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(last_line(plain.output), last_line(greedy_run.output));
  std::ofstream(d + "/model/generation_config.json") << R"({"do_sample": true})";
  auto sampled = testing::run_glint(args);
  auto explicit_run = testing::run_glint(args + " --temperature 1 --top-k 50 --top-p 1");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(last_line(sampled.output), last_line(explicit_run.output));
  EXPECT_NE(last_line(sampled.output), last_line(greedy_run.output));
}

TEST(GenerateCli, OutOfRangeSamplingFlagsAreUsageErrors) {
  const std::string d = testing::fresh_temp_dir("gen_flag_ranges");
  CausalLM m = digits_model();
  save_pretrained(*m, d + "/base");
  const std::string base = "generate --model " + d + "/base --prompt-ids 1 ";
  for (const char* flag : {"--temperature -1", "--temperature -0.5", "--top-k -1", "--top-p -1", "--top-p 0"}) {
    auto r = testing::run_glint(base + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(flag).substr(0, std::string(flag).find(' '))), std::string::npos)
        << flag << "\n" << r.output;
  }
}

TEST(GenerateCli, HelpDescribesEveryFlag) {
  auto r = testing::run_glint("generate --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* flag : {"--model", "--adapter", "--tokenizer", "--prompt", "--messages", "--prompt-ids", "--system",
                           "--raw", "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--stop-ids",
                           "--dtype", "--device", "--threads"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << "\n" << r.output;
  // The sampling defaults say whose they are.
  EXPECT_NE(r.output.find("as transformers"), std::string::npos) << r.output;
}

// The built-in task: a briefly trained adapter answers the digit prompt reversed, where
// the base model alone does not. The base model is the one the trainer builds (seed 0).
TEST(GenerateCli, TheBuiltInTaskAdapterChangesTheAnswer) {
  std::string d = testing::fresh_temp_dir("gen_builtin");
  auto r = testing::run_glint("train --steps 600 --eval-samples 0 --output " + d + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string base = d + "/out/base-model";
  if (!fs::exists(base + "/config.json")) {  // a trainer that does not write it: the same model
    CausalLM m = digits_model(0);
    save_pretrained(*m, base);
  }
  const std::string args = "generate --model " + base + " --prompt-ids '11 1 2 3 12' --max-new-tokens 4 "
                           "--temperature 0 --stop-ids 13";
  auto with = testing::run_glint(args + " --adapter " + d + "/out/adapter");
  auto without = testing::run_glint(args);
  ASSERT_EQ(with.exit_code, 0) << with.output;
  ASSERT_EQ(without.exit_code, 0) << without.output;
  EXPECT_EQ(last_line(with.output), "3 2 1 13") << with.output;
  EXPECT_NE(last_line(without.output), "3 2 1 13") << without.output;
}

}  // namespace
}  // namespace glint
