// glint tokenize: encode (or --decode) lines of JSON with a tokenizer.json.
//
//   encode: stdin has one JSON string per line; stdout gets one JSON array of ids per line.
//   decode: stdin has one JSON array of ids per line; stdout gets one JSON string per line.
// Output is flushed after every line, so another process can talk to it line by line.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace glint::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;         // directory with tokenizer.json, or the file
  bool decode = false;           // ids -> text instead of text -> ids
  bool no_special = false;       // encode: leave out the post-processor's special tokens
  bool skip_special = false;     // decode: leave out special added tokens
};

int run_tokenize(const TokenizeOptions& o) {
  Tokenizer tok = Tokenizer::load(o.tokenizer);
  std::ios::sync_with_stdio(false);
  std::string line, out;
  for (int64_t lineno = 1; std::getline(std::cin, line); ++lineno) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (o.decode) {
      GLINT_CHECK(j.is_array(), "stdin line ", lineno, ": expected a JSON array of token ids, found ",
                  line.substr(0, 200));
      std::vector<int32_t> ids;
      ids.reserve(j.size());
      for (size_t i = 0; i < j.size(); ++i) {
        const auto& v = j[i];
        GLINT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
                    "stdin line ", lineno, ": element ", i, " is not a token id: ", v.dump());
        ids.push_back(int32_t(v.get<int64_t>()));
      }
      std::string text;
      try {
        text = tok.decode(ids, o.skip_special);
      } catch (const Error& e) {
        fail("stdin line ", lineno, ": ", e.what());
      }
      std::cout << nlohmann::json(text).dump() << std::endl;
    } else {
      GLINT_CHECK(j.is_string(), "stdin line ", lineno,
                  ": expected a JSON string (valid UTF-8, quoted and escaped), found ",
                  line.substr(0, 200));
      std::vector<int32_t> ids;
      try {
        ids = tok.encode(j.get_ref<const std::string&>(), !o.no_special);
      } catch (const Error& e) {
        fail("stdin line ", lineno, ": ", e.what());
      }
      out.assign("[");
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(ids[i]);
      }
      out += ']';
      std::cout << out << std::endl;
    }
  }
  return 0;
}

}  // namespace

Action add_tokenize(CLI::App& app) {
  CLI::App* cmd = add_command(app, "tokenize");
  auto o = std::make_shared<TokenizeOptions>();
  cmd->add_option("--tokenizer", o->tokenizer, "directory holding tokenizer.json, or the file")
      ->required();
  cmd->add_flag("--decode", o->decode, "read arrays of ids, write strings");
  cmd->add_flag("--no-special-tokens", o->no_special,
                "encode without the post-processor's special tokens (add_special_tokens=false)");
  cmd->add_flag("--skip-special-tokens", o->skip_special, "decode without special added tokens");
  return [o]() { return run_tokenize(*o); };
}

}  // namespace glint::cli
