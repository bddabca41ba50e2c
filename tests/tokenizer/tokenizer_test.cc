// Tokenizer unit tests on the hand-written fixture tests/data/tokenizer_fixture
// (see its README.md for the vocabulary). Expected ids are derived by hand from the
// merge ranks; no npm package is needed.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "test_util.h"
#include "tokenizer/tokenizer_bpe.h"
#include "tokenizer/tokenizer_regex.h"
#include "tokenizer/unicode_text.h"

namespace glint {
namespace {

using glint::testing::error_message;
using glint::testing::run_command_stdout;

using Ids = std::vector<int32_t>;

const std::string kFixture = std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture";

nlohmann::json fixture_json() { return read_json_file(kFixture + "/tokenizer.json"); }

const Tokenizer& fixture() {
  static const Tokenizer tok = Tokenizer::load(kFixture);
  return tok;
}

void expect_contains(const std::string& err, const std::string& what) {
  EXPECT_NE(err.find(what), std::string::npos) << "expected \"" << what << "\" in: " << err;
}

TEST(Tokenizer, MergesApplyInRankOrder) {
  // "hello": h e l l o -> (l,l) rank 0 -> (h,e) 1 -> (he,ll) 2 -> (hell,o) 3 = 259.
  // " world": Ġ w o r l d -> (Ġ,w) 4 -> (o,r) 5 -> (Ġw,or) 6 -> (l,d) 7 -> (Ġwor,ld) 8 = 264.
  EXPECT_EQ(fixture().encode("hello world"), (Ids{259, 264}));
  EXPECT_EQ(fixture().encode("hello"), (Ids{259}));
  // "helo": (h,e) -> he; (he,l) has no merge; "lo" neither.
  EXPECT_EQ(fixture().encode("helo"), (Ids{257, 'l', 'o'}));
  // Equal ranks merge leftmost first: a a a -> aa a.
  EXPECT_EQ(fixture().encode("aaa"), (Ids{266, 'a'}));
  EXPECT_EQ(fixture().encode("aaaa"), (Ids{266, 266}));
  // Digits are split one by one by the Qwen regex, so "12" never merges.
  EXPECT_EQ(fixture().encode("12"), (Ids{'1', '2'}));
}

TEST(Tokenizer, LongWordUsesTheSameMergeOrder) {
  // 100 'a's are one piece (past the short-word path): 50 x "aa".
  EXPECT_EQ(fixture().encode(std::string(100, 'a')), Ids(50, 266));
  EXPECT_EQ(fixture().encode(std::string(101, 'a')).back(), 'a');
  // A long word mixing merges: ("hello" x 30) is one \p{L}+ piece.
  std::string w;
  for (int i = 0; i < 30; ++i) w += "hello";
  // ll everywhere first (rank 0), then he, hell, hello: 30 x 259.
  EXPECT_EQ(fixture().encode(w), Ids(30, 259));
}

TEST(Tokenizer, ByteLevelMapping) {
  EXPECT_EQ(uint32_t(byte_level_char(' ')), 0x120u);  // "Ġ"
  EXPECT_EQ(uint32_t(byte_level_char('\n')), 0x10Au);  // "Ċ"
  EXPECT_EQ(uint32_t(byte_level_char('a')), uint32_t('a'));
  EXPECT_EQ(byte_level_byte(0x120), ' ');
  EXPECT_EQ(byte_level_byte(0x4E00), -1);
  // Control and non-ASCII bytes: id = byte value in the fixture.
  EXPECT_EQ(fixture().encode("\n"), (Ids{10}));
  EXPECT_EQ(fixture().encode("\t"), (Ids{9}));
  EXPECT_EQ(fixture().encode(std::string("\0", 1)), (Ids{0}));
  // "ÿ" = C3 BF: no merge.  "é" = C3 A9: merged to 265.
  EXPECT_EQ(fixture().encode("\xC3\xBF"), (Ids{0xC3, 0xBF}));
  EXPECT_EQ(fixture().encode("\xC3\xA9"), (Ids{265}));
  // A 4-byte emoji is four byte tokens.
  EXPECT_EQ(fixture().encode("\xF0\x9F\x98\x80"), (Ids{0xF0, 0x9F, 0x98, 0x80}));
  // Spaces: "a  b" -> "a", " ", " b" (\s+(?!\S) leaves the last space to the word).
  EXPECT_EQ(fixture().encode("a  b"), (Ids{'a', ' ', ' ', 'b'}));
}

TEST(Tokenizer, NfcNormalizesBeforeSplitting) {
  // e + U+0301 becomes é (C3 A9) -> 265.
  EXPECT_EQ(fixture().encode("e\xCC\x81"), (Ids{265}));
  // A mark of Unicode 10.0 (U+1DF6) is left alone, as in `tokenizers` (Unicode 9.0 tables):
  // a U+1DF6 U+0316 keeps its order; with a 9.0 mark (U+1AB0) NFC reorders.
  EXPECT_EQ(normalize_unicode("a\u1DF6\u0316", NormalizationForm::kNFC), "a\u1DF6\u0316");
  EXPECT_EQ(normalize_unicode("a\u1AB0\u0316", NormalizationForm::kNFC), "a\u0316\u1AB0");
  EXPECT_EQ(normalize_unicode("\u212B", NormalizationForm::kNFC), "\u00C5");
}

TEST(Tokenizer, AddedTokensAreMatchedBeforeSplitting) {
  EXPECT_EQ(fixture().encode("<|im_start|>hello<|im_end|>"), (Ids{269, 259, 270}));
  EXPECT_EQ(fixture().encode("<|im_start|><|im_start|>"), (Ids{269, 269}));
  // A broken token is plain text: x, "<|", "im", "_start", "|".
  EXPECT_EQ(fixture().encode("x<|im_start|"),
            (Ids{'x', '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|'}));
  // single_word: "cat" alone or before punctuation is the token; inside a word it is not.
  EXPECT_EQ(fixture().encode("a cat sat"), (Ids{'a', ' ', 272, ' ', 's', 'a', 't'}));
  EXPECT_EQ(fixture().encode("cat."), (Ids{272, '.'}));
  EXPECT_EQ(fixture().encode("concat"), (Ids{'c', 'o', 'n', 'c', 'a', 't'}));
  // lstrip: "<mask>" swallows the spaces before it.
  EXPECT_EQ(fixture().encode("a  <mask>b"), (Ids{'a', 271, 'b'}));
  // normalized: the token "cafe\u0301" is found in the NFC text, so both spellings match.
  Ids like = {'I', ' ', 'l', 'i', 'k', 'e', ' ', 273};
  EXPECT_EQ(fixture().encode("I like caf\xC3\xA9"), like);
  EXPECT_EQ(fixture().encode("I like cafe\xCC\x81"), like);
  EXPECT_EQ(fixture().token_to_id("<|im_end|>"), 270);
  EXPECT_EQ(fixture().token_to_id("hello"), 259);
  EXPECT_EQ(fixture().token_to_id("nope"), -1);
  EXPECT_EQ(fixture().vocab_size(), 274);
}

TEST(Tokenizer, AddedTokenIdsFollowTokenizers) {
  // The "id" fields are not used: ids continue the vocabulary in file order, and a
  // content already in the vocabulary keeps its vocabulary id.
  nlohmann::json j = fixture_json();
  j["added_tokens"][0]["id"] = 999;
  j["added_tokens"].push_back({{"id", 5}, {"content", "hello"}, {"special", true}, {"normalized", false}});
  j["added_tokens"].push_back({{"id", 7}, {"content", "<new>"}, {"special", true}, {"normalized", false}});
  Tokenizer tok = Tokenizer::from_json(j, "ids.json");
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), 269);
  EXPECT_EQ(tok.token_to_id("<new>"), 274);
  EXPECT_EQ(tok.encode("<|im_start|>hello<new>x"), (Ids{269, 259, 274, 'x'}));
  // "hello" is now a special token: skipped by decode(skip_special_tokens).
  EXPECT_EQ(tok.decode({259, 264}, /*skip_special_tokens=*/true), " world");
}

TEST(Tokenizer, Decode) {
  EXPECT_EQ(fixture().decode({259, 264}), "hello world");
  EXPECT_EQ(fixture().decode({269, 259, 270}), "<|im_start|>hello<|im_end|>");
  EXPECT_EQ(fixture().decode({269, 259, 270}, /*skip_special_tokens=*/true), "hello");
  EXPECT_EQ(fixture().decode({265}), "\xC3\xA9");
  EXPECT_EQ(fixture().decode({10, 0}), std::string("\n\0", 2));
  // Ill-formed UTF-8 becomes U+FFFD, one per maximal subpart.
  EXPECT_EQ(fixture().decode({0xC3}), "\xEF\xBF\xBD");
  EXPECT_EQ(fixture().decode({0xF0, 0x9F, 'a'}), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(fixture().decode({0x80, 0x80}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(fixture().decode({0xC3, 0xA9}), "\xC3\xA9");  // byte tokens rejoin
  std::string err = error_message([] { fixture().decode({259, 999}); });
  EXPECT_NE(err.find("ids[1] = 999"), std::string::npos) << err;
  EXPECT_EQ(fixture().token_bytes(265), "\xC3\xA9");
  EXPECT_EQ(fixture().token_bytes(0xC3), "\xC3");  // half a character
  EXPECT_EQ(fixture().token_bytes(32), " ");
  EXPECT_EQ(fixture().token_bytes(269), "<|im_start|>");
  expect_contains(error_message([] { fixture().token_bytes(9999); }), "token id 9999");
  err = error_message([] { fixture().decode({-1}); });
  EXPECT_NE(err.find("-1"), std::string::npos) << err;
}

TEST(Tokenizer, RoundTrip) {
  for (const char* s : {"hello world", "  tabs\tand\nnewlines\r\n", "na\xC3\xAFve <|im_end|>",
                        "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD 123 x", ""})
    EXPECT_EQ(fixture().decode(fixture().encode(s)), s);
  // Not a round trip: "café" is the normalized added token 273. Like `tokenizers`, decode
  // spells it in NFC, "caf" U+00E9, and the ByteLevel decoder reads U+00E9 as byte 0xE9.
  EXPECT_EQ(fixture().decode(fixture().encode("caf\xC3\xA9")), "caf\xEF\xBF\xBD");
}

TEST(Tokenizer, ConcurrentEncodeAgrees) {
  // encode is const and shares the word cache: threads must see the same ids.
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("hello world " + std::to_string(i) + std::string(size_t(i % 7), 'a') + " caf\xC3\xA9 <|im_end|>");
  std::vector<Ids> expect;
  for (const auto& t : texts) expect.push_back(fixture().encode(t));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) bad[size_t(k)] += fixture().encode(texts[i]) != expect[i];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

// The (start, end) byte spans of every match of `pattern` in `text`.
std::vector<std::pair<size_t, size_t>> regex_spans(const char* pattern, const std::string& text) {
  TokenizerRegex re(pattern, false, "test");
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(text, &m);
  return m;
}

TEST(TokenizerRegex, KnowsCharactersNewerThanPcre2Tables) {
  // U+31350 (CJK Ext H) and U+11F50 (Kawi digit zero) are Unicode 15.0: PCRE2 10.42's
  // tables (Unicode 14) call them unassigned; glint adds ICU's newer characters to \p{..}.
  using M = std::vector<std::pair<size_t, size_t>>;
  std::string han = "\U00031350\U00031351", kawi = "\U00011F50";
  EXPECT_EQ(regex_spans("\\p{L}+", "a" + han + "!"), (M{{0, 9}}));
  EXPECT_EQ(regex_spans("\\pL+", han), (M{{0, 8}}));
  EXPECT_EQ(regex_spans("[^\\s\\p{L}\\p{N}]+", "x" + han + kawi + "!"), (M{{13, 14}}));
  EXPECT_EQ(regex_spans("\\p{N}", kawi), (M{{0, 4}}));
  EXPECT_EQ(regex_spans("\\p{Nd}|\\p{Lo}", kawi + han), (M{{0, 4}, {4, 8}, {8, 12}}));
  // Escapes, \Q..\E and POSIX classes pass through.
  EXPECT_EQ(regex_spans("\\Q\\p{L}\\E", "\\p{L}"), (M{{0, 5}}));
  EXPECT_EQ(regex_spans("[[:alpha:]\\]]+", "ab]"), (M{{0, 3}}));
  std::string err = error_message([] { TokenizerRegex("(\\p{L}", false, "where"); });
  EXPECT_NE(err.find("where: invalid regex (\\p{L} at offset 6"), std::string::npos) << err;
}

TEST(TokenizerRegex, WhiteSpaceIsTheUnicodeProperty) {
  // \s is White_Space, as in the reference's engine: U+180E (a format character since
  // Unicode 6.3) is not a space, though PCRE2's own \s and \h still take it.
  using M = std::vector<std::pair<size_t, size_t>>;
  std::string mvs = "\u180E";  // 3 bytes
  EXPECT_EQ(regex_spans("\\s+", " \t\n\v\f\r\u0085\u00A0\u1680\u2000\u200A\u2028\u2029\u202F\u205F\u3000"),
            (M{{0, 34}}));
  EXPECT_EQ(regex_spans("\\s", mvs + "\u200B\x1C"), (M{}));
  EXPECT_EQ(regex_spans("\\S+", mvs + "."), (M{{0, 4}}));
  EXPECT_EQ(regex_spans("[^\\s\\p{L}]+", mvs + ".t"), (M{{0, 4}}));
  EXPECT_EQ(regex_spans("\\s+(?!\\S)|[\\s-]+", "a -" + mvs), (M{{1, 3}}));
  // o200k's pre-tokenizer: the separator and "." are one punctuation piece, "t" a word.
  EXPECT_EQ(regex_spans(" ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\s+", mvs + ".t"),
            (M{{0, 4}, {4, 5}}));
}

TEST(Tokenizer, InvalidUtf8NamesTheByteOffset) {
  struct Case {
    std::string text;
    size_t offset;
  };
  for (const Case& c : {Case{"ab\xFF", 2}, Case{"\xC3", 0}, Case{"ok\xE0\x80\x80", 2},
                        Case{"\xED\xA0\x80", 0}, Case{"hello \xF4\x90\x80\x80", 6},
                        Case{"\x80", 0}, Case{"12345678\xC3(", 8}}) {
    std::string err = error_message([&] { fixture().encode(c.text); });
    EXPECT_NE(err.find("not valid UTF-8"), std::string::npos) << err;
    EXPECT_NE(err.find("byte offset " + std::to_string(c.offset)), std::string::npos) << err;
  }
  EXPECT_EQ(find_invalid_utf8("\xF0\x9F\x98\x80 \xC3\xA9"), std::string_view::npos);
}

TEST(Tokenizer, MergesAsPairsAndPostProcessorTemplate) {
  nlohmann::json j = fixture_json();
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& m : j["model"]["merges"]) {
    std::string s = m.get<std::string>();
    size_t sp = s.find(' ');
    pairs.push_back({s.substr(0, sp), s.substr(sp + 1)});
  }
  j["model"]["merges"] = pairs;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {269}}, {"tokens", {"<|im_start|>"}}}},
        {"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {270}}, {"tokens", {"<|im_end|>"}}}}}}};
  Tokenizer tok = Tokenizer::from_json(j, "pairs.json");
  EXPECT_EQ(tok.encode("hello world"), (Ids{269, 259, 264, 270}));
  EXPECT_EQ(tok.encode("hello world", /*add_special_tokens=*/false), (Ids{259, 264}));
}

TEST(Tokenizer, IgnoreMerges) {
  nlohmann::json j = fixture_json();
  EXPECT_EQ(Tokenizer::from_json(j, "t.json").encode("abc"), (Ids{'a', 'b', 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Tokenizer::from_json(j, "t.json").encode("abc"), (Ids{268}));
  EXPECT_EQ(Tokenizer::from_json(j, "t.json").encode("abcd"), (Ids{'a', 'b', 'c', 'd'}));
}

TEST(Tokenizer, SplitBehaviors) {
  // One Split on "-" with each behavior, then ByteLevel; "a-b--c" then BPE per piece.
  // Extra merges ranked first: "- -" = 282, "- a" = 280, "a -" = 281.
  auto with = [](const char* behavior, bool invert) {
    nlohmann::json j = fixture_json();
    j["normalizer"] = nullptr;
    j["model"]["vocab"]["--"] = 282;
    j["model"]["vocab"]["-a"] = 280;
    j["model"]["vocab"]["a-"] = 281;
    auto& merges = j["model"]["merges"];
    merges.insert(merges.begin(), {"- -", "- a", "a -"});
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior},
                             {"invert", invert}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    return Tokenizer::from_json(j, "split.json").encode("aa-aa--aa");
  };
  // Pieces: Isolated aa,-,aa,-,-,aa; Removed aa,aa,aa; MergedWithPrevious aa-,aa-,-,aa
  // ("aa-": (a,-) outranks (a,a) -> a a-); MergedWithNext aa,-aa,-,-aa ("-aa" -> -a a);
  // Contiguous aa,-,aa,--,aa.
  EXPECT_EQ(with("Isolated", false), (Ids{266, '-', 266, '-', '-', 266}));
  EXPECT_EQ(with("Removed", false), (Ids{266, 266, 266}));
  EXPECT_EQ(with("MergedWithPrevious", false), (Ids{'a', 281, 'a', 281, '-', 266}));
  EXPECT_EQ(with("MergedWithNext", false), (Ids{266, 280, 'a', '-', 280, 'a'}));
  EXPECT_EQ(with("Contiguous", false), (Ids{266, '-', 266, 282, 266}));
  // Removed + invert keeps only the matches.
  EXPECT_EQ(with("Removed", true), (Ids{'-', '-', '-'}));
}

// ---- malformed tokenizer.json: each error names the file and the key ----

std::string load_error(const std::string& name, const std::string& text) {
  std::string dir = glint::testing::fresh_temp_dir("tokenizer_" + name);
  std::string path = dir + "/tokenizer.json";
  std::ofstream(path) << text;
  std::string err = error_message([&] { Tokenizer::load(dir); });
  EXPECT_NE(err.find(path), std::string::npos) << "error does not name the file: " << err;
  return err;
}

std::string load_error(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = fixture_json();
  edit(j);
  return load_error(name, j.dump());
}

TEST(Tokenizer, MalformedFilesNameFileAndKey) {
  expect_contains(load_error("notjson", "{ \"model\": "), "invalid JSON");
  expect_contains(load_error("array", "[1, 2]"), "JSON object");
  expect_contains(load_error("nomodel", [](nlohmann::json& j) { j.erase("model"); }),
                  "missing key \"model\"");
  expect_contains(load_error("novocab", [](nlohmann::json& j) { j["model"].erase("vocab"); }),
                  "missing key \"model.vocab\"");
  expect_contains(load_error("nomerges", [](nlohmann::json& j) { j["model"].erase("merges"); }),
                  "missing key \"model.merges\"");
  std::string err = load_error("wordpiece", [](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; });
  expect_contains(err, "model.type");
  expect_contains(err, "WordPiece");
  err = load_error("pretok", [](nlohmann::json& j) {
    j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace";
  });
  expect_contains(err, "pre_tokenizer.pretokenizers[0].type");
  expect_contains(err, "Whitespace");
  err = load_error("norm", [](nlohmann::json& j) { j["normalizer"] = {{"type", "Lowercase"}}; });
  expect_contains(err, "normalizer.type");
  expect_contains(err, "Lowercase");
  err = load_error("regex", [](nlohmann::json& j) {
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  });
  expect_contains(err, "pre_tokenizer.pretokenizers[0].pattern");
  expect_contains(err, "invalid regex");
  err = load_error("merge_oov", [](nlohmann::json& j) { j["model"]["merges"].push_back("q \xE2\x82\xAC"); });
  expect_contains(err, "model.merges[12]");
  expect_contains(err, "\xE2\x82\xAC");
  expect_contains(err, "not in model.vocab");
  err = load_error("merge_result_oov", [](nlohmann::json& j) { j["model"]["merges"].push_back("x y"); });
  expect_contains(err, "merged token \"xy\"");
  expect_contains(load_error("merge_form", [](nlohmann::json& j) { j["model"]["merges"].push_back("a b c"); }),
                  "model.merges[12]");
  expect_contains(load_error("vocab_id", [](nlohmann::json& j) { j["model"]["vocab"]["a"] = "x"; }),
                  "model.vocab.a");
  expect_contains(load_error("decoder", [](nlohmann::json& j) { j["decoder"] = {{"type", "WordPiece"}}; }),
                  "decoder.type");
  expect_contains(load_error("post", [](nlohmann::json& j) { j["post_processor"] = {{"type", "Foo"}}; }),
                  "post_processor.type");
  expect_contains(load_error("no_bytelevel", [](nlohmann::json& j) {
                    j["pre_tokenizer"]["pretokenizers"].erase(1);
                  }),
                  "ByteLevel");
  expect_contains(load_error("added", [](nlohmann::json& j) { j["added_tokens"][0].erase("content"); }),
                  "added_tokens[0].content");
  std::string missing = error_message([] { Tokenizer::load("/nonexistent/glint/dir"); });
  expect_contains(missing, "/nonexistent/glint/dir");
  expect_contains(missing, "no such file");
}

// ---- glint tokenize ----

TEST(TokenizerCli, EncodesAndDecodesLines) {
  std::string dir = glint::testing::fresh_temp_dir("tokenizer_cli");
  std::ofstream(dir + "/in.jsonl") << "\"hello world\"\n\"<|im_start|>aaa\"\n\"\"\n";
  int rc = 0;
  std::string ids = run_command_stdout(std::string(GLINT_BINARY) + " tokenize --tokenizer " + kFixture + " < " + dir +
                            "/in.jsonl",
                        &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ids, "[259,264]\n[269,266,97]\n[]\n");
  std::ofstream(dir + "/ids.jsonl") << ids;
  std::string text = run_command_stdout(std::string(GLINT_BINARY) + " tokenize --decode --tokenizer " + kFixture +
                             " < " + dir + "/ids.jsonl",
                         &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(text, "\"hello world\"\n\"<|im_start|>aaa\"\n\"\"\n");
  text = run_command_stdout(std::string(GLINT_BINARY) + " tokenize --decode --skip-special-tokens --tokenizer " +
                 kFixture + " < " + dir + "/ids.jsonl",
             &rc);
  EXPECT_EQ(text, "\"hello world\"\n\"aaa\"\n\"\"\n");
}

TEST(TokenizerCli, BadLineIsAnErrorNamingTheLine) {
  std::string dir = glint::testing::fresh_temp_dir("tokenizer_cli_bad");
  std::ofstream(dir + "/in.jsonl") << "\"ok\"\nnot json\n";
  int rc = 0;
  std::string out = run_command_stdout(std::string(GLINT_BINARY) + " tokenize --tokenizer " + kFixture + " < " + dir +
                            "/in.jsonl 2>&1",
                        &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("stdin line 2"), std::string::npos) << out;
  std::ofstream(dir + "/ids.jsonl") << "[259, 12345]\n";
  out = run_command_stdout(std::string(GLINT_BINARY) + " tokenize --decode --tokenizer " + kFixture + " < " + dir +
                "/ids.jsonl 2>&1",
            &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("stdin line 1"), std::string::npos) << out;
  EXPECT_NE(out.find("12345"), std::string::npos) << out;
}

TEST(TokenizerCli, BenchPrintsOneJsonObject) {
  int rc = 0;
  std::string out = run_command_stdout(std::string(GLINT_BINARY) + " bench tokenize --passes 1 --tokenizer " + kFixture, &rc);
  EXPECT_EQ(rc, 0);
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["bench"], "tokenize");
  EXPECT_GT(j["encode_mb_s"].get<double>(), 0.0);
  EXPECT_GT(j["bytes"].get<int64_t>(), 1000000);
}

}  // namespace
}  // namespace glint
