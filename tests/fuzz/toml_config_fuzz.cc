// `glint train --config FILE.toml`: expand_config_file checks the file's keys and values
// against train's options, then the command line made of them is parsed as main() parses
// it (the action is not run). A usage error (glint::UsageError) or CLI11's parse error is
// the answer to a bad file; both are what glint reports with exit status 2.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "core/error.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      glint::fuzz::write_scratch("train.toml", std::string_view(reinterpret_cast<const char*>(data), size));
  CLI::App app("glint");
  app.require_subcommand(0, 1);
  // The action owns the options the parser writes into: kept alive as main() keeps it.
  const glint::cli::Action action = glint::cli::add_train(app);
  try {
    std::vector<std::string> args = {"train"};
    for (const std::string& a : glint::cli::expand_config_file({"--config", path}, *app.get_subcommand("train")))
      args.push_back(a);
    std::reverse(args.begin(), args.end());
    app.parse(args);
  } catch (const glint::Error&) {
  } catch (const CLI::ParseError&) {
  }
  return 0;
}
