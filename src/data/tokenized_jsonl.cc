#include "data/tokenized_jsonl.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace glint {

namespace {

std::vector<int64_t> read_ids(const nlohmann::json& arr, const char* field, const std::string& where,
                              int64_t vocab, bool allow_ignore) {
  GLINT_CHECK(arr.is_array(), where, ": '", field, "' must be an array of token ids, got ",
              arr.type_name());
  std::vector<int64_t> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const auto& v = arr[i];
    GLINT_CHECK(v.is_number_integer(), where, ": ", field, "[", i, "] is not an integer: ", v.dump());
    int64_t id = v.get<int64_t>();
    bool ok = (id >= 0 && id < vocab) || (allow_ignore && id == kIgnoreIndex);
    GLINT_CHECK(ok, where, ": ", field, "[", i, "] = ", id, " is outside the vocabulary [0, ", vocab,
                ")", allow_ignore ? " and is not -100" : "");
    out.push_back(id);
  }
  return out;
}

}  // namespace

std::vector<Sample> read_tokenized_jsonl(const std::string& path, int64_t vocab_size) {
  std::ifstream in(path);
  GLINT_CHECK(in, path, ": cannot open (", std::strerror(errno), ")");
  std::vector<Sample> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = path + ":" + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(where, ": invalid JSON: ", e.what());
    }
    GLINT_CHECK(j.is_object(), where, ": expected a JSON object with \"input_ids\"");
    auto it = j.find("input_ids");
    GLINT_CHECK(it != j.end(), where, ": missing \"input_ids\"");
    Sample s;
    s.input_ids = read_ids(*it, "input_ids", where, vocab_size, false);
    GLINT_CHECK(!s.input_ids.empty(), where, ": \"input_ids\" is empty");
    auto lt = j.find("labels");
    if (lt != j.end()) {
      s.labels = read_ids(*lt, "labels", where, vocab_size, true);
      GLINT_CHECK(s.labels.size() == s.input_ids.size(), where, ": labels has ", s.labels.size(),
                  " entries but input_ids has ", s.input_ids.size());
    } else {
      s.labels = s.input_ids;
    }
    out.push_back(std::move(s));
  }
  GLINT_CHECK(!in.bad(), path, ": read failed at line ", lineno);
  GLINT_CHECK(!out.empty(), path, ": no samples");
  return out;
}

}  // namespace glint
