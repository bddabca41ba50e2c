#include "data/tokenized_jsonl.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "core/error.h"

namespace glint {

namespace {

using nlohmann::json;

// "path:line", streamed into error messages only when one is thrown.
struct Where {
  const std::string& path;
  int64_t line;
};
std::ostream& operator<<(std::ostream& os, const Where& w) { return os << w.path << ':' << w.line; }

// The array under `field`, or a glint::Error saying what was found instead.
const json& token_array(const json& obj, const char* field, const Where& at) {
  auto it = obj.find(field);
  GLINT_CHECK(it != obj.end(), at, ": missing \"", field, "\"");
  GLINT_CHECK(it->is_array(), at, ": \"", field, "\" must be an array of token ids, got ",
              it->type_name());
  return *it;
}

// Converts a JSON array of token ids, checking every element. Valid values are ids in
// [0, vocab) and, when allow_ignore, kIgnoreIndex. Only type tests and comparisons run
// per element: nothing throws unless the input is bad.
std::vector<int64_t> to_ids(const json& arr, const char* field, const Where& at, int64_t vocab,
                            bool allow_ignore) {
  std::vector<int64_t> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    // nlohmann keeps non-negative integers as unsigned; those above INT64_MAX must not
    // wrap to a negative id (which could pass as -100), so compare them unsigned.
    bool ok;
    int64_t id = 0;
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      ok = u < uint64_t(vocab);
      id = int64_t(u);
    } else if (v.is_number_integer()) {
      id = v.get<int64_t>();
      ok = (id >= 0 && id < vocab) || (allow_ignore && id == kIgnoreIndex);
    } else {
      fail(at, ": ", field, "[", i, "] is not an integer: ", v.dump());
    }
    if (!ok) {
      if (allow_ignore)
        fail(at, ": ", field, "[", i, "] = ", v.dump(), " is neither ", kIgnoreIndex,
             " nor a token id in [0, ", vocab, ")");
      fail(at, ": ", field, "[", i, "] = ", v.dump(), " is outside the vocabulary [0, ", vocab, ")");
    }
    out.push_back(id);
  }
  return out;
}

Sample parse_sample(const std::string& line, const Where& at, int64_t vocab) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    fail(at, ": invalid JSON: ", e.what());
  }
  GLINT_CHECK(j.is_object(), at, ": expected a JSON object with \"input_ids\", got ", j.type_name());
  Sample s;
  s.input_ids = to_ids(token_array(j, "input_ids", at), "input_ids", at, vocab, false);
  GLINT_CHECK(!s.input_ids.empty(), at, ": \"input_ids\" is empty");
  if (j.contains("labels")) {
    const json& labels = token_array(j, "labels", at);
    // The length is checked before the values: a misaligned array is the likelier mistake.
    GLINT_CHECK(labels.size() == s.input_ids.size(), at, ": labels has ", labels.size(),
                " entries but input_ids has ", s.input_ids.size());
    s.labels = to_ids(labels, "labels", at, vocab, true);
  } else {
    s.labels = s.input_ids;
  }
  return s;
}

}  // namespace

std::vector<Sample> read_tokenized_jsonl(const std::string& path, int64_t vocab_size) {
  GLINT_CHECK(vocab_size > 0, path, ": vocabulary size must be positive, got ", vocab_size);
  std::error_code ec;
  GLINT_CHECK(!std::filesystem::is_directory(path, ec), path,
              ": is a directory, expected a JSONL file");
  std::ifstream in(path);
  GLINT_CHECK(in, path, ": cannot open (", std::strerror(errno), ")");
  std::vector<Sample> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
    out.push_back(parse_sample(line, Where{path, lineno}, vocab_size));
    out.back().line = lineno;
  }
  GLINT_CHECK(!in.bad(), path, ":", lineno + 1, ": read failed (", std::strerror(errno), ")");
  if (out.empty()) {
    if (lineno == 0) fail(path, ": no samples (the file is empty)");
    fail(path, ": no samples (all ", lineno, " lines are blank)");
  }
  return out;
}

}  // namespace glint
