// Kimi-K2's tiktoken tokenizer (tiktoken.model + tokenizer_config.json) on a small
// hand-written tiktoken.model: glint's encode against a naive tiktoken BPE written here
// (shares no code with src/tokenizer/), Kimi's regex on hand-split texts, the special
// tokens, exact-byte decode, Kimi's long-run cuts, and the errors for bad files.
// No npm package ships Kimi-K2's real tiktoken.model, so the real file is not checked.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_regex.h"
#include "tokenizer/tokenizer_tiktoken.h"

namespace glint {
namespace {

using Ids = std::vector<int32_t>;

std::string tiktoken_base64(const std::string& bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += abc[(v >> (6 * k)) & 63];
  }
  if (bytes.size() - i == 1) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += "==";
  } else if (bytes.size() - i == 2) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += abc[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// The vocabulary: the 256 bytes (in a scrambled order), then multi-byte tokens. "aba" is
// reached from "ab"+"a" and from "a"+"ba" (the tie goes left); "xyzw" has no merge path
// (only a whole piece gives it); "zz" ranks low so that it merges first.
std::vector<std::string> tiktoken_vocabulary() {
  std::vector<std::string> v;
  for (int i = 0; i < 256; ++i) v.push_back(std::string(1, char((i * 167 + 13) & 255)));
  for (const char* t : {"zz", "he", "ll", "llo", "hello", " w", "or", "ld", " wor", " world", "ab", "ba", "aba",
                        "xyzw", "in", "ing", " th", "the", " the", "'s", "'t", "don", "12", "123", "\n\n",
                        "  ", "    ", "\xe4\xb8\xad", "\xe6\x96\x87", "\xe4\xb8\xad\xe6\x96\x87", "Hel",
                        "\xc3\xa9", "caf", "caf\xc3\xa9", "\xe3\x80\x82"})
    v.push_back(t);
  return v;
}

// tiktoken's algorithm, naively: a piece that is a token is that token; otherwise merge
// the leftmost adjacent pair whose concatenation has the lowest rank until none has one.
Ids naive_tiktoken_bpe(const std::string& piece, const std::map<std::string, int32_t>& rank) {
  auto whole = rank.find(piece);
  if (whole != rank.end()) return {whole->second};
  std::vector<std::string> parts;
  for (char c : piece) parts.push_back(std::string(1, c));
  while (parts.size() > 1) {
    int best = -1;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = rank.find(parts[i] + parts[i + 1]);
      if (it != rank.end() && it->second < best_rank) best_rank = it->second, best = int(i);
    }
    if (best < 0) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + best + 1);
  }
  Ids ids;
  for (const std::string& p : parts) ids.push_back(rank.at(p));
  return ids;
}

struct TiktokenFixture {
  std::string dir;
  std::vector<std::string> vocab;
  std::map<std::string, int32_t> rank;
};

const TiktokenFixture& tiktoken_fixture() {
  static const TiktokenFixture f = [] {
    TiktokenFixture f;
    f.dir = glint::testing::fresh_temp_dir("tiktoken_fixture");
    f.vocab = tiktoken_vocabulary();
    std::ofstream m(f.dir + "/tiktoken.model", std::ios::binary);
    // Lines out of rank order: the rank, not the line, is the id.
    std::vector<size_t> order(f.vocab.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
    for (size_t r : order) m << tiktoken_base64(f.vocab[r]) << " " << r << "\n";
    for (size_t r = 0; r < f.vocab.size(); ++r) f.rank[f.vocab[r]] = int32_t(r);
    int32_t n = int32_t(f.vocab.size());
    nlohmann::json config = {
        {"added_tokens_decoder",
         {{std::to_string(n), {{"content", "[BOS]"}, {"special", true}}},
          {std::to_string(n + 1), {{"content", "[EOS]"}, {"special", true}}},
          {std::to_string(n + 2), {{"content", "<|im_end|>"}, {"special", true}}},
          {std::to_string(n + 3), {{"content", "<|im_user|>"}, {"special", true}}},
          {std::to_string(n + 4), {{"content", "<|im_assistant|>"}, {"special", true}}},
          {std::to_string(n + 5), {{"content", "<|im_middle|>"}, {"special", true}}},
          {std::to_string(n + 6), {{"content", "<|im_system|>"}, {"special", true}}}}},
        {"bos_token", "[BOS]"},
        {"eos_token", "[EOS]"}};
    std::ofstream(f.dir + "/tokenizer_config.json") << config.dump(1);
    return f;
  }();
  return f;
}

const Tokenizer& kimi() {
  static const Tokenizer tok = Tokenizer::load(tiktoken_fixture().dir);
  return tok;
}

// Kimi's regex pieces of `text`, from glint's translation.
std::vector<std::string> kimi_pieces(const std::string& text) {
  static const TokenizerRegex re(tiktoken_pattern_to_pcre2(kKimiPattern, "test"), false, "test");
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(text, &m);
  std::vector<std::string> out;
  for (auto [b, e] : m) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(Tiktoken, TranslatesKimisPattern) {
  std::string p = tiktoken_pattern_to_pcre2(kKimiPattern, "test");
  EXPECT_EQ(p.find("&&"), std::string::npos) << p;
  EXPECT_NE(p.find(R"((?:(?![\p{sc:Han}])[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)"), std::string::npos) << p;
  EXPECT_EQ(p.substr(0, 14), R"([\p{sc:Han}]+|)");
  std::string err = glint::testing::error_message([] { tiktoken_pattern_to_pcre2("[a&&b]", "pat"); });
  EXPECT_NE(err.find("pat: class intersection"), std::string::npos) << err;
}

// Hand-split by reading tokenization_kimi.py's pat_str.
TEST(Tiktoken, KimiRegexSplitsAsWritten) {
  using V = std::vector<std::string>;
  EXPECT_EQ(kimi_pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(kimi_pieces("don't STOP'S"), (V{"don't", " STOP'S"}));  // contractions stay on the word
  // Han runs stand alone; 。 is Common script (Han only by Script_Extensions), so it
  // leaves the Han run and leads the next word as its one non-letter.
  EXPECT_EQ(kimi_pieces("中文。Hello世界"), (V{"中文", "。Hello", "世界"}));
  EXPECT_EQ(kimi_pieces("中文。"), (V{"中文", "。"}));
  EXPECT_EQ(kimi_pieces(" 中文"), (V{" ", "中文"}));
  EXPECT_EQ(kimi_pieces("12345"), (V{"123", "45"}));
  EXPECT_EQ(kimi_pieces("a\n\n  b"), (V{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(kimi_pieces("x  \n"), (V{"x", "  \n"}));
  EXPECT_EQ(kimi_pieces("!!?\n\nok"), (V{"!!?\n\n", "ok"}));
  EXPECT_EQ(kimi_pieces("caf\xc3\xa9 CAFE\xcc\x81s"), (V{"caf\xc3\xa9", " CAFE\xcc\x81s"}));
  // CJK Extension H (Unicode 15, newer than PCRE2's tables): Han, as in the regex crate.
  EXPECT_EQ(kimi_pieces("a\U00031350b"), (V{"a", "\U00031350", "b"}));
}

TEST(Tiktoken, EncodeMatchesNaiveBpe) {
  const TiktokenFixture& f = tiktoken_fixture();
  const Tokenizer& tok = kimi();
  EXPECT_EQ(tok.vocab_size(), int64_t(f.vocab.size()) + kKimiReservedSpecialTokens);
  EXPECT_TRUE(Tokenizer::found_in(f.dir));
  EXPECT_FALSE(Tokenizer::found_in(f.dir + "/nothing"));
  std::vector<std::string> texts = {
      "hello world", "hello", "helloo", "aba", "abab", "ababa", "baba", "xyzw", "xyzwxyzw", "zzz",
      "the thing's the\n\n    in", "don't", "12345678", "中文。中", "café caf\xc3\xa9s", "Hel",
      "  \t\n", std::string(300, 'a'), std::string(100, 'z') + "ab", "\xf0\x9f\x98\x80 emoji",
  };
  for (int i = 0; i < 200; ++i) {  // words of the vocabulary's letters, in a fixed mix
    std::string t;
    for (int k = 0; k < 1 + i % 7; ++k) t += std::string("abzxyhelowrdtn '12\n").substr((i * 7 + k * 3) % 19, 1 + k % 3);
    texts.push_back(t);
  }
  for (const std::string& t : texts) {
    Ids expected;
    for (const std::string& p : kimi_pieces(t)) {
      Ids ids = naive_tiktoken_bpe(p, f.rank);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    Ids ids = tok.encode(t);
    EXPECT_EQ(ids, expected) << "text: " << nlohmann::json(t).dump();
    EXPECT_EQ(tok.decode(ids), t);
  }
  // The tie: [ab, a, ba] would be ab+a (leftmost), both making "aba".
  EXPECT_EQ(tok.encode("xyzw"), (Ids{f.rank.at("xyzw")}));
  EXPECT_EQ(tok.encode(" world"), (Ids{f.rank.at(" world")}));
}

TEST(Tiktoken, SpecialTokensAndExactBytes) {
  const TiktokenFixture& f = tiktoken_fixture();
  const Tokenizer& tok = kimi();
  int32_t n = int32_t(f.vocab.size());
  EXPECT_EQ(tok.token_to_id("[BOS]"), n);
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), n + 2);
  EXPECT_EQ(tok.token_to_id("<|reserved_token_" + std::to_string(n + 7) + "|>"), n + 7);
  EXPECT_EQ(tok.token_to_id("<|reserved_token_" + std::to_string(n + 255) + "|>"), n + 255);
  Ids ids = tok.encode("<|im_user|>user<|im_middle|>hello<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), n + 3);
  EXPECT_EQ(ids.back(), n + 2);
  EXPECT_EQ(tok.decode(ids), "<|im_user|>user<|im_middle|>hello<|im_end|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "userhello");
  // No BOS/EOS added: tiktoken has no post-processor.
  EXPECT_EQ(tok.encode("hello", true), (Ids{f.rank.at("hello")}));
  // Each byte token decodes to its byte, including the ones that are not UTF-8 alone.
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok.token_bytes(f.rank.at(std::string(1, char(b)))), std::string(1, char(b)));
  EXPECT_EQ(tok.token_bytes(f.rank.at("\xe4\xb8\xad")), "\xe4\xb8\xad");
}

TEST(Tiktoken, KimiCutsLongRuns) {
  std::vector<std::string_view> chunks;
  std::string s = std::string(25001, 'a') + "  " + std::string(3, 'b');
  kimi_chunks(s, kKimiMaxChunkChars, kKimiMaxRunChars, &chunks);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].size(), 25000u);
  EXPECT_EQ(chunks[1], "a  bbb");
  chunks.clear();
  kimi_chunks("\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad x", 10, 2, &chunks);  // runs count code points
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], "\xe4\xb8\xad\xe4\xb8\xad");
  chunks.clear();
  kimi_chunks("ab cd", 2, 100, &chunks);  // 400,000-character chunks, at 2 here
  EXPECT_EQ(chunks, (std::vector<std::string_view>{"ab", " c", "d"}));
  // The encoder cuts too: a 25,001-letter word is two BPE pieces.
  const TiktokenFixture& f = tiktoken_fixture();
  // (naive_bpe on 10 'z' is 5 "zz"; 25,000 'z' are 12,500 "zz", then one "zz" piece.)
  ASSERT_EQ(naive_tiktoken_bpe(std::string(10, 'z'), f.rank), Ids(5, f.rank.at("zz")));
  EXPECT_EQ(kimi().encode(std::string(25002, 'z')), Ids(12501, f.rank.at("zz")));
  Ids odd(12500, f.rank.at("zz"));
  odd.push_back(f.rank.at("z"));
  EXPECT_EQ(kimi().encode(std::string(25001, 'z')), odd);
}

std::string tiktoken_load_error(const std::string& name, const std::string& model, const std::string& config = "{}") {
  std::string dir = glint::testing::fresh_temp_dir("tiktoken_bad_" + name);
  std::ofstream(dir + "/tiktoken.model", std::ios::binary) << model;
  std::ofstream(dir + "/tokenizer_config.json") << config;
  return glint::testing::error_message([&] { Tokenizer::load(dir); });
}

TEST(Tiktoken, BadFilesNameFileAndLine) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += tiktoken_base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  auto expect_has = [](const std::string& err, const std::string& what) {
    EXPECT_NE(err.find(what), std::string::npos) << "expected \"" << what << "\" in: " << err;
  };
  std::string err = tiktoken_load_error("malformed", bytes + "aGVsbG8=256\n");
  expect_has(err, "tiktoken.model:257: expected \"BASE64 RANK\"");
  err = tiktoken_load_error("base64", bytes + "aGVsb!8= 256\n");
  expect_has(err, "tiktoken.model:257: \"aGVsb!8=\" is not base64");
  err = tiktoken_load_error("base64_len", bytes + "aGVsbG8 256\n");
  expect_has(err, "tiktoken.model:257: \"aGVsbG8\" is not base64");
  err = tiktoken_load_error("dup_rank", bytes + "aGVsbG8= 255\n");
  expect_has(err, "tiktoken.model:257: rank 255 is given again (first on line 256)");
  err = tiktoken_load_error("dup_token", bytes + "YQ== 256\n");
  expect_has(err, "tiktoken.model:257: token \"YQ==\" is given again (first on line 98)");
  err = tiktoken_load_error("gap", bytes + "aGVsbG8= 257\n");
  expect_has(err, "tiktoken.model: rank 256 is missing");
  err = tiktoken_load_error("rank", bytes + "aGVsbG8= -3\n");
  expect_has(err, "tiktoken.model:257: rank \"-3\" is not a non-negative integer");
  err = tiktoken_load_error("byte", "YQ== 0\n");
  expect_has(err, "tiktoken.model: byte 0x00 has no token of its own");
  err = tiktoken_load_error("special_id", bytes, R"({"added_tokens_decoder": {"12": {"content": "[BOS]"}}})");
  expect_has(err, "tokenizer_config.json: \"added_tokens_decoder.12\": id 12 is a BPE rank");
  err = tiktoken_load_error("special_dup", bytes,
                   R"({"added_tokens_decoder": {"256": {"content": "[BOS]"}, "257": {"content": "[BOS]"}}})");
  expect_has(err, "\"[BOS]\" is also the content of id 256");
}

}  // namespace
}  // namespace glint
