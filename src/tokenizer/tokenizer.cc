#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "core/error.h"
#include "core/fs.h"
#include "tokenizer/tokenizer_bpe.h"
#include "tokenizer/tokenizer_pretokenizer.h"
#include "tokenizer/tokenizer_tiktoken.h"
#include "tokenizer/unicode_text.h"

namespace glint {

using nlohmann::json;

namespace {

// ---- JSON access with errors that name the file and the key path ----

const json& require(const json& obj, const std::string& key, const std::string& where,
                    const std::string& path) {
  GLINT_CHECK(obj.is_object(), where, ": ", path.empty() ? "top level" : path,
              ": expected a JSON object, found ", obj.type_name());
  auto it = obj.find(key);
  std::string full = path.empty() ? key : path + "." + key;
  GLINT_CHECK(it != obj.end(), where, ": missing key \"", full, "\"");
  return *it;
}

std::string key_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string get_string(const json& obj, const std::string& key, const std::string& where,
                       const std::string& path) {
  const json& v = require(obj, key, where, path);
  GLINT_CHECK(v.is_string(), where, ": \"", key_path(path, key), "\": expected a string, found ",
              v.type_name(), " ", v.dump());
  return v.get<std::string>();
}

bool get_bool(const json& obj, const std::string& key, bool dflt, const std::string& where,
              const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  GLINT_CHECK(it->is_boolean(), where, ": \"", key_path(path, key),
              "\": expected true or false, found ", it->dump());
  return it->get<bool>();
}

int32_t get_id(const json& v, const std::string& where, const std::string& path) {
  GLINT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
              where, ": \"", path, "\": expected a token id (integer 0..2^31-1), found ", v.dump());
  return int32_t(v.get<int64_t>());
}

// Calls f(element, its key path) for each element of the array obj[key].
template <typename F>
void for_each_element(const json& obj, const char* key, const std::string& where,
                      const std::string& path, F f) {
  const json& list = require(obj, key, where, path);
  std::string at = key_path(path, key);
  GLINT_CHECK(list.is_array(), where, ": \"", at, "\": expected an array, found ", list.type_name());
  for (size_t i = 0; i < list.size(); ++i) f(list[i], at + "[" + std::to_string(i) + "]");
}

// ---- model ----

std::unique_ptr<BpeModel> parse_model(const json& j, const std::string& where) {
  const json& m = require(j, "model", where, "");
  GLINT_CHECK(m.is_object(), where, ": \"model\": expected an object, found ", m.type_name());
  if (m.contains("type")) {
    std::string type = get_string(m, "type", where, "model");
    GLINT_CHECK(type == "BPE", where, ": \"model.type\": unsupported model type \"", type,
                "\" (glint supports BPE)");
  }
  const json& vocab_j = require(m, "vocab", where, "model");
  GLINT_CHECK(vocab_j.is_object(), where, ": \"model.vocab\": expected an object token -> id, found ",
              vocab_j.type_name());
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(vocab_j.size());
  for (auto it = vocab_j.begin(); it != vocab_j.end(); ++it)
    vocab.emplace(it.key(), get_id(it.value(), where, "model.vocab." + it.key()));
  const json& merges_j = require(m, "merges", where, "model");
  GLINT_CHECK(merges_j.is_array(), where, ": \"model.merges\": expected an array, found ",
              merges_j.type_name());
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_j.size());
  for (size_t i = 0; i < merges_j.size(); ++i) {
    const json& e = merges_j[i];
    std::string at = "model.merges[" + std::to_string(i) + "]";
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      if (s.rfind("#version", 0) == 0) continue;  // a merges.txt header line
      size_t sp = s.find(' ');
      GLINT_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where,
                  ": \"", at, "\": expected \"left right\" (one space), found ", e.dump());
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      GLINT_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), where,
                  ": \"", at, "\": expected \"left right\" or [left, right], found ", e.dump());
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
  auto dropout = m.find("dropout");
  GLINT_CHECK(dropout == m.end() || dropout->is_null() ||
                  (dropout->is_number() && dropout->get<double>() == 0.0),
              where, ": \"model.dropout\": BPE dropout is not supported (found ", dropout->dump(), ")");
  GLINT_CHECK(!get_bool(m, "byte_fallback", false, where, "model"), where,
              ": \"model.byte_fallback\": byte fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    GLINT_CHECK(it == m.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()),
                where, ": \"model.", key, "\": not supported (found ", it->dump(), ")");
  }
  bool ignore_merges = get_bool(m, "ignore_merges", false, where, "model");
  return std::make_unique<BpeModel>(std::move(vocab), merges, ignore_merges, where);
}

// ---- normalizer ----

void parse_normalizer(const json& n, const std::string& where, const std::string& path,
                      std::vector<NormalizationForm>* forms) {
  if (n.is_null()) return;
  std::string type = get_string(n, "type", where, path);
  if (type == "NFC") forms->push_back(NormalizationForm::kNFC);
  else if (type == "NFD") forms->push_back(NormalizationForm::kNFD);
  else if (type == "NFKC") forms->push_back(NormalizationForm::kNFKC);
  else if (type == "NFKD") forms->push_back(NormalizationForm::kNFKD);
  else if (type == "Sequence") {
    for_each_element(n, "normalizers", where, path, [&](const json& e, const std::string& at) {
      parse_normalizer(e, where, at, forms);
    });
  } else {
    fail(where, ": \"", path, ".type\": unsupported normalizer type \"", type,
         "\" (glint supports NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

// ---- pre-tokenizer ----

void parse_pre_tokenizer(const json& p, const std::string& where, const std::string& path,
                         std::vector<PreTokenizerStep>* steps) {
  std::string type = get_string(p, "type", where, path);
  if (type == "Sequence") {
    for_each_element(p, "pretokenizers", where, path, [&](const json& e, const std::string& at) {
      parse_pre_tokenizer(e, where, at, steps);
    });
    return;
  }
  PreTokenizerStep step;
  if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    const json& pat = require(p, "pattern", where, path);
    bool literal;
    std::string text;
    if (pat.is_object() && pat.contains("Regex")) {
      literal = false;
      text = get_string(pat, "Regex", where, path + ".pattern");
    } else if (pat.is_object() && pat.contains("String")) {
      literal = true;
      text = get_string(pat, "String", where, path + ".pattern");
    } else {
      fail(where, ": \"", path, ".pattern\": expected {\"Regex\": ...} or {\"String\": ...}, found ",
           pat.dump());
    }
    step.regex = std::make_shared<TokenizerRegex>(text, literal, where + ": \"" + path + ".pattern\"");
    std::string behavior = get_string(p, "behavior", where, path);
    if (behavior == "Isolated") step.behavior = SplitBehavior::kIsolated;
    else if (behavior == "Removed") step.behavior = SplitBehavior::kRemoved;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous") step.behavior = SplitBehavior::kContiguous;
    else fail(where, ": \"", path, ".behavior\": unknown split behavior \"", behavior, "\"");
    step.invert = get_bool(p, "invert", false, where, path);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = get_bool(p, "add_prefix_space", true, where, path);
    step.use_regex = get_bool(p, "use_regex", true, where, path);
  } else {
    fail(where, ": \"", path, ".type\": unsupported pre_tokenizer type \"", type,
         "\" (glint supports Split, ByteLevel, Sequence)");
  }
  steps->push_back(std::move(step));
}

// ---- post-processor: the ids it puts before and after the sequence ----

struct PostIds {
  std::vector<int32_t> prefix, suffix;
};

int32_t named_token_id(const json& pair, const std::string& where, const std::string& path) {
  GLINT_CHECK(pair.is_array() && pair.size() == 2 && pair[1].is_number_integer(), where, ": \"",
              path, "\": expected [token, id], found ", pair.dump());
  return get_id(pair[1], where, path + "[1]");
}

void parse_post_processor(const json& p, const std::string& where, const std::string& path,
                          PostIds* ids) {
  if (p.is_null()) return;
  std::string type = get_string(p, "type", where, path);
  if (type == "ByteLevel") return;  // only trims offsets
  if (type == "Sequence") {
    for_each_element(p, "processors", where, path, [&](const json& e, const std::string& at) {
      parse_post_processor(e, where, at, ids);
    });
    return;
  }
  PostIds mine;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    mine.prefix.push_back(named_token_id(require(p, "cls", where, path), where, path + ".cls"));
    mine.suffix.push_back(named_token_id(require(p, "sep", where, path), where, path + ".sep"));
  } else if (type == "TemplateProcessing") {
    const json& single = require(p, "single", where, path);
    const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
    GLINT_CHECK(single.is_array(), where, ": \"", path, ".single\": expected an array");
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      std::string at = path + ".single[" + std::to_string(i) + "]";
      const json& item = single[i];
      if (item.is_object() && item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      GLINT_CHECK(item.is_object() && item.contains("SpecialToken"), where, ": \"", at,
                  "\": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, found ", item.dump());
      std::string name = get_string(item["SpecialToken"], "id", where, at + ".SpecialToken");
      GLINT_CHECK(specials.is_object() && specials.contains(name), where, ": \"", at,
                  "\": special token \"", name, "\" is not in ", path, ".special_tokens");
      const json& tok_ids = require(specials[name], "ids", where, path + ".special_tokens." + name);
      GLINT_CHECK(tok_ids.is_array(), where, ": \"", path, ".special_tokens.", name,
                  ".ids\": expected an array");
      for (const json& id : tok_ids)
        (seen_sequence ? mine.suffix : mine.prefix)
            .push_back(get_id(id, where, path + ".special_tokens." + name + ".ids"));
    }
  } else {
    fail(where, ": \"", path, ".type\": unsupported post_processor type \"", type,
         "\" (glint supports ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, "
         "Sequence)");
  }
  // A later processor wraps what the earlier ones produced.
  mine.prefix.insert(mine.prefix.end(), ids->prefix.begin(), ids->prefix.end());
  mine.suffix.insert(mine.suffix.begin(), ids->suffix.begin(), ids->suffix.end());
  *ids = std::move(mine);
}

// The bytes that the ByteLevel decoder makes of one token.
std::string byte_level_decode_token(const std::string& token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    int b = byte_level_byte(next_code_point(token, &pos));
    if (b < 0) return token;  // not all byte-level characters: the token stands for itself
    out.push_back(char(b));
  }
  return out;
}

}  // namespace

// Per-thread working memory for encode.
struct EncodeScratch {
  std::vector<std::string_view> chunks;
  std::vector<TextSegment> raw_segments, norm_segments;
  PreTokenizeScratch pre;
};

struct Tokenizer::Impl {
  std::string where;
  std::unique_ptr<BpeModel> bpe;
  std::vector<NormalizationForm> normalizers;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::vector<AddedToken> added;  // not resized after the matchers point into it
  std::unordered_map<std::string, int32_t> added_ids;
  AddedTokenMatcher raw_matcher, normalized_matcher;
  PostIds post;
  std::vector<std::string> decoded;  // id -> bytes the decoder makes of it
  std::vector<uint8_t> known, special;
  // tiktoken (Kimi): decode gives added tokens' contents as they are, and encode first
  // cuts the text (kimi_chunks) when max_run_chars > 0.
  bool raw_added_bytes = false;
  size_t max_chunk_chars = 0, max_run_chars = 0;
};

void Tokenizer::finish(Impl* impl) {
  std::vector<const AddedToken*> raw, norm;
  std::vector<std::string> raw_pat, norm_pat;
  std::unordered_map<int32_t, std::string> spelled;  // id -> the text decode gives it
  for (const AddedToken& a : impl->added) {
    impl->added_ids.emplace(a.content, a.id);
    if (a.normalized) {
      // Found in normalized text, so searched for in normalized form; `tokenizers` also
      // decodes it to that form.
      std::string p = a.content;
      for (NormalizationForm f : impl->normalizers) p = normalize_unicode(p, f);
      spelled[a.id] = p;
      norm.push_back(&a);
      norm_pat.push_back(std::move(p));
    } else {
      spelled[a.id] = a.content;
      raw.push_back(&a);
      raw_pat.push_back(a.content);
    }
  }
  impl->raw_matcher = AddedTokenMatcher(raw, raw_pat);
  impl->normalized_matcher = AddedTokenMatcher(norm, norm_pat);

  // Decoding table: added tokens take precedence over the model's token with the same id.
  const auto& model_tokens = impl->bpe->id_to_token();
  size_t n = model_tokens.size();
  for (const AddedToken& a : impl->added) n = std::max(n, size_t(a.id) + 1);
  impl->decoded.assign(n, std::string());
  impl->known.assign(n, 0);
  impl->special.assign(n, 0);
  for (size_t id = 0; id < model_tokens.size(); ++id) {
    if (model_tokens[id].empty()) continue;
    impl->decoded[id] = byte_level_decode_token(model_tokens[id]);
    impl->known[id] = 1;
  }
  for (const AddedToken& a : impl->added) {
    impl->decoded[size_t(a.id)] = impl->raw_added_bytes ? spelled[a.id] : byte_level_decode_token(spelled[a.id]);
    impl->known[size_t(a.id)] = 1;
    impl->special[size_t(a.id)] = a.special;
  }
  const std::string& where = impl->where;
  for (int32_t id : impl->post.prefix)
    GLINT_CHECK(size_t(id) < n && impl->known[size_t(id)], where,
                ": \"post_processor\": special token id ", id, " is not in the vocabulary");
  for (int32_t id : impl->post.suffix)
    GLINT_CHECK(size_t(id) < n && impl->known[size_t(id)], where,
                ": \"post_processor\": special token id ", id, " is not in the vocabulary");
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "tokenizer.json").string();
    std::string tiktoken = (fs::path(path) / "tiktoken.model").string();
    if (!fs::exists(file, ec) && fs::exists(tiktoken, ec))
      return from_tiktoken(tiktoken, (fs::path(path) / "tokenizer_config.json").string());
  } else if (fs::path(path).filename() == "tiktoken.model") {
    return from_tiktoken(path, (fs::path(path).parent_path() / "tokenizer_config.json").string());
  }
  GLINT_CHECK(fs::exists(file, ec), file, ": no such file (expected a tokenizer.json or a tiktoken.model, or a",
              " directory that holds one)");
  return from_json(read_json_file(file), file);
}

bool Tokenizer::found_in(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / "tokenizer.json", ec) ||
         std::filesystem::is_regular_file(std::filesystem::path(dir) / "tiktoken.model", ec);
}

Tokenizer Tokenizer::from_tiktoken(const std::string& model_file, const std::string& config_file) {
  auto impl = std::make_unique<Impl>();
  impl->where = model_file;
  std::vector<std::string> ranks = read_tiktoken_ranks(model_file);
  impl->bpe = BpeModel::from_ranks(ranks, model_file);
  PreTokenizerStep split;  // keep the regex's matches only, as tiktoken does
  split.kind = PreTokenizerStep::Kind::kSplit;
  split.regex = std::make_shared<TokenizerRegex>(tiktoken_pattern_to_pcre2(kKimiPattern, "Kimi's pat_str"), false,
                                                 "Kimi's pat_str");
  split.behavior = SplitBehavior::kRemoved;
  split.invert = true;
  std::vector<PreTokenizerStep> steps;
  steps.push_back(std::move(split));
  impl->pre_tokenizer = std::make_unique<PreTokenizer>(std::move(steps));
  std::error_code ec;
  nlohmann::json config = json::object();
  if (!config_file.empty() && std::filesystem::exists(config_file, ec)) config = read_json_file(config_file);
  GLINT_CHECK(config.is_object(), config_file, ": expected a JSON object at the top level, found ", config.type_name());
  impl->added = kimi_special_tokens(config, int32_t(ranks.size()), config_file);
  impl->raw_added_bytes = true;
  impl->max_chunk_chars = kKimiMaxChunkChars;
  impl->max_run_chars = kKimiMaxRunChars;
  finish(impl.get());
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json(const json& j, const std::string& where) {
  GLINT_CHECK(j.is_object(), where, ": expected a JSON object at the top level, found ", j.type_name());
  auto impl = std::make_unique<Impl>();
  impl->where = where;
  impl->bpe = parse_model(j, where);
  for (const char* key : {"truncation", "padding"})
    GLINT_CHECK(!j.contains(key) || j[key].is_null(), where, ": \"", key,
                "\": not supported (glint encodes whole texts; found ", j[key].dump(), ")");
  if (j.contains("normalizer")) parse_normalizer(j["normalizer"], where, "normalizer", &impl->normalizers);

  std::vector<PreTokenizerStep> steps;
  const json& pre = require(j, "pre_tokenizer", where, "");
  GLINT_CHECK(!pre.is_null(), where, ": \"pre_tokenizer\": glint needs a ByteLevel pre-tokenizer, found null");
  parse_pre_tokenizer(pre, where, "pre_tokenizer", &steps);
  GLINT_CHECK(!steps.empty() && steps.back().kind == PreTokenizerStep::Kind::kByteLevel, where,
              ": \"pre_tokenizer\": glint supports byte-level BPE only: ByteLevel must be the last "
              "pre-tokenizer step");
  for (size_t i = 0; i + 1 < steps.size(); ++i)
    GLINT_CHECK(steps[i].kind != PreTokenizerStep::Kind::kByteLevel, where,
                ": \"pre_tokenizer\": ByteLevel must be the last step (found it at step ", i, ")");
  impl->pre_tokenizer = std::make_unique<PreTokenizer>(std::move(steps));

  if (j.contains("post_processor")) parse_post_processor(j["post_processor"], where, "post_processor", &impl->post);
  const json& dec = require(j, "decoder", where, "");
  std::string dec_type = dec.is_null() ? "null" : get_string(dec, "type", where, "decoder");
  GLINT_CHECK(dec_type == "ByteLevel", where, ": \"decoder.type\": unsupported decoder \"", dec_type,
              "\" (glint supports ByteLevel)");

  // Added tokens. Like `tokenizers`, the ids come from the contents, not from the "id"
  // fields: a token already in model.vocab keeps that id, a repeated content keeps its
  // first id, and the others are numbered in file order from the model vocabulary's
  // size. (Files that Hugging Face writes agree with their "id" fields.)
  int64_t next_id = int64_t(impl->bpe->vocab_size());
  std::unordered_map<std::string, size_t> added_index;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    const json& list = j["added_tokens"];
    GLINT_CHECK(list.is_array(), where, ": \"added_tokens\": expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      std::string at = "added_tokens[" + std::to_string(i) + "]";
      const json& t = list[i];
      AddedToken a;
      a.id = get_id(require(t, "id", where, at), where, at + ".id");
      a.content = get_string(t, "content", where, at);
      GLINT_CHECK(find_invalid_utf8(a.content) == std::string::npos, where, ": \"", at,
                  ".content\" is not valid UTF-8");
      a.special = get_bool(t, "special", false, where, at);
      a.normalized = get_bool(t, "normalized", !a.special, where, at);
      a.lstrip = get_bool(t, "lstrip", false, where, at);
      a.rstrip = get_bool(t, "rstrip", false, where, at);
      a.single_word = get_bool(t, "single_word", false, where, at);
      if (a.content.empty()) continue;  // ignored by `tokenizers` too
      auto seen = added_index.find(a.content);
      if (seen != added_index.end()) {  // same content again: new flags, same id
        a.id = impl->added[seen->second].id;
        impl->added[seen->second] = std::move(a);
        continue;
      }
      int32_t in_vocab = impl->bpe->token_to_id(a.content);
      if (in_vocab >= 0) {
        a.id = in_vocab;
      } else {
        GLINT_CHECK(next_id <= INT32_MAX, where, ": \"", at, "\": too many tokens");
        a.id = int32_t(next_id++);
      }
      added_index.emplace(a.content, impl->added.size());
      impl->added.push_back(std::move(a));
    }
  }
  finish(impl.get());
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(text[bad]));
    fail("tokenizer input is not valid UTF-8: ill-formed sequence at byte offset ", bad,
         " (byte ", hex, ")");
  }
  const Impl& m = *impl_;
  thread_local EncodeScratch s;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), m.post.prefix.begin(), m.post.prefix.end());
  s.chunks.clear();
  if (m.max_run_chars > 0) kimi_chunks(text, m.max_chunk_chars, m.max_run_chars, &s.chunks);
  else s.chunks.push_back(text);
  for (std::string_view chunk : s.chunks) encode_text(chunk, &s, &ids);
  if (add_special_tokens) ids.insert(ids.end(), m.post.suffix.begin(), m.post.suffix.end());
  return ids;
}

void Tokenizer::encode_text(std::string_view text, EncodeScratch* scratch, std::vector<int32_t>* out) const {
  const Impl& m = *impl_;
  EncodeScratch& s = *scratch;
  std::vector<int32_t>& ids = *out;
  s.raw_segments.clear();
  m.raw_matcher.split(text, &s.raw_segments);
  for (const TextSegment& seg : s.raw_segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    if (seg.end <= seg.begin) continue;
    std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized;
    for (NormalizationForm f : m.normalizers) {
      if (is_normalized_unicode(part, f)) continue;
      std::string next = normalize_unicode(part, f);
      normalized.swap(next);
      part = normalized;
    }
    s.norm_segments.clear();
    m.normalized_matcher.split(part, &s.norm_segments);
    for (const TextSegment& sub : s.norm_segments) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      if (sub.end <= sub.begin) continue;
      m.pre_tokenizer->split(part.substr(sub.begin, sub.end - sub.begin), &s.pre);
      for (std::string_view piece : s.pre.pieces) m.bpe->encode_word(piece, &ids);
    }
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    GLINT_CHECK(id >= 0 && size_t(id) < m.decoded.size() && m.known[size_t(id)], "decode: ids[", i,
                "] = ", id, " is not a token of ", m.where, " (ids run 0..", m.decoded.size() - 1, ")");
    if (skip_special_tokens && m.special[size_t(id)]) continue;
    bytes += m.decoded[size_t(id)];
  }
  return utf8_lossy(bytes);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  const Impl& m = *impl_;
  GLINT_CHECK(id >= 0 && size_t(id) < m.decoded.size() && m.known[size_t(id)], "token id ", id,
              " is not a token of ", m.where, " (ids run 0..", m.decoded.size() - 1, ")");
  return m.decoded[size_t(id)];
}

int32_t Tokenizer::token_to_id(const std::string& token) const {
  auto it = impl_->added_ids.find(token);
  if (it != impl_->added_ids.end()) return it->second;
  return impl_->bpe->token_to_id(token);
}

int64_t Tokenizer::vocab_size() const { return int64_t(impl_->decoded.size()); }

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

}  // namespace glint
