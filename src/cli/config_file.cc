#include "cli/config_file.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/fs.h"

namespace glint::cli {

namespace {

std::vector<std::string> config_args(const std::string& path) {
  GLINT_CHECK(path_exists(path), path, ": config file not found");
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    fail(path, ": cannot parse: ", e.what());
  }
  std::vector<std::string> out;
  for (const auto& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    GLINT_CHECK(item.parents.empty(), path, ": unexpected section [", item.parents.front(),
                "]; write the options at the top level (e.g. steps = 100)");
    GLINT_CHECK(item.name != "config", path, ": a config file cannot name another config file");
    if (item.name == "tenant") {  // a list of specs that hold commas themselves
      for (const auto& spec : item.inputs)
        if (!spec.empty()) out.push_back("--tenant=" + spec);
      continue;
    }
    std::string value;
    for (size_t i = 0; i < item.inputs.size(); ++i) value += (i ? "," : "") + item.inputs[i];
    // An empty value is an option left at its default (the resolved config.toml writes
    // unset paths as ""); "--name=" would make the parser take the next argument.
    if (value.empty()) continue;
    out.push_back("--" + item.name + "=" + value);
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_config_file(const std::vector<std::string>& args) {
  std::vector<std::string> from_file, rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--config") {
      GLINT_CHECK(i + 1 < args.size(), "--config needs a file name");
      auto more = config_args(args[++i]);
      from_file.insert(from_file.end(), more.begin(), more.end());
    } else if (a.rfind("--config=", 0) == 0) {
      auto more = config_args(a.substr(9));
      from_file.insert(from_file.end(), more.begin(), more.end());
    } else {
      rest.push_back(a);
    }
  }
  from_file.insert(from_file.end(), rest.begin(), rest.end());
  return from_file;
}

}  // namespace glint::cli
