#include "cli/config_file.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "core/config_keys.h"
#include "core/error.h"
#include "core/fs.h"

namespace glint::cli {

namespace {

// A configurable option of the subcommand under one of its long names.
struct Key {
  std::string normalized;  // normalize_key(the long name)
  std::string flag;        // "--" + the long name, as the parser takes it
  const CLI::Option* option;
};

// Every long name of every configurable option of cmd (so an option registered as
// "--lr,--learning-rate" is reachable as `lr` and `learning-rate`, and a flag
// "--pack,!--no-pack" as `pack` and `no-pack`). Not --help, not --config.
std::vector<Key> config_keys(const CLI::App& cmd) {
  std::vector<Key> keys;
  for (const CLI::Option* opt : cmd.get_options())
    if (opt->get_configurable())
      for (const std::string& name : opt->get_lnames()) keys.push_back({normalize_key(name), "--" + name, opt});
  return keys;
}

// "glint train": cmd's name after its parents' (the root app's is the program's).
std::string command_path(const CLI::App& cmd) {
  std::string path = cmd.get_name();
  for (const CLI::App* p = cmd.get_parent(); p != nullptr; p = p->get_parent())
    if (!p->get_name().empty()) path = p->get_name() + " " + path;
  return path;
}

// A value as TOML would write it, for messages: numbers and booleans bare, anything
// else quoted; several as an array. (The parser has dropped the quotes of the file.)
std::string toml_literal(const std::vector<std::string>& values) {
  auto one = [](const std::string& s) {
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    if (s == "true" || s == "false" || (!s.empty() && end == s.c_str() + s.size())) return s;
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  };
  if (values.size() == 1) return one(values[0]);
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + one(values[i]);
  return out + "]";
}

// What a value of `opt` must be when `value` is not one, else "". The conversions are
// CLI11's own for the option's type (Option::get_type_name()), so the file is checked
// as strictly as the command line, but the message can name the file and the key.
std::string unmet_expectation(const CLI::Option& opt, const std::string& value) {
  if (opt.get_expected_max() == 0) {  // a flag: true/false, on/off, yes/no, 1/0
    bool v;
    return CLI::detail::lexical_cast(value, v) ? "" : "true or false";
  }
  std::string type = opt.get_type_name();
  type = type.substr(0, type.find(':'));  // "INT:POSITIVE": validators follow the type
  if (type == "INT") {
    std::int64_t v;
    return CLI::detail::lexical_cast(value, v) ? "" : "an integer";
  }
  if (type == "UINT") {
    std::uint64_t v;
    return CLI::detail::lexical_cast(value, v) ? "" : "a non-negative integer";
  }
  if (type == "FLOAT") {
    double v;
    return CLI::detail::lexical_cast(value, v) ? "" : "a number";
  }
  if (type == "BOOLEAN") {
    bool v;
    return CLI::detail::lexical_cast(value, v) ? "" : "true or false";
  }
  return "";  // TEXT and the rest: the command checks the value itself
}

std::vector<std::string> config_args(const std::string& path, const CLI::App& cmd) {
  GLINT_USAGE_CHECK(path_exists(path), path, ": config file not found");
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    usage_fail(path, ": cannot parse: ", e.what());
  }
  const std::vector<Key> keys = config_keys(cmd);
  std::vector<std::string> out;
  for (const auto& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    GLINT_USAGE_CHECK(item.parents.empty(), path, ": unexpected section [", item.parents.front(),
                      "]; write the options at the top level (e.g. steps = 100)");
    GLINT_USAGE_CHECK(item.name != "config", path, ": a config file cannot name another config file");
    const std::string normalized = normalize_key(item.name);
    const Key* key = nullptr;
    for (const Key& k : keys)
      if (k.normalized == normalized) key = &k;
    if (key == nullptr) {
      std::vector<std::string> valid;
      for (const Key& k : keys) valid.push_back(k.normalized);
      std::string suggestion = closest_key(item.name, valid);
      if (!suggestion.empty())
        usage_fail(path, ": unknown key '", item.name, "'; did you mean '", suggestion, "'?");
      usage_fail(path, ": unknown key '", item.name, "'; `", command_path(cmd),
                 " --help` lists the options (keys are their names without --)");
    }
    // An option that takes several values (--tenant: specs that hold commas themselves)
    // gets one argument per array entry; any other joins an array with commas
    // (lora-targets = ["q_proj", "v_proj"]).
    std::vector<std::string> values;
    if (key->option->get_items_expected_max() > 1) {
      values = item.inputs;
    } else {
      std::string joined;
      for (size_t i = 0; i < item.inputs.size(); ++i) joined += (i ? "," : "") + item.inputs[i];
      values = {joined};
    }
    for (const std::string& value : values) {
      // An empty value is an option left at its default (the resolved config.toml writes
      // unset paths as ""); "--name=" would make the parser take the next argument.
      if (value.empty()) continue;
      std::string expected = unmet_expectation(*key->option, value);
      GLINT_USAGE_CHECK(expected.empty(), path, ": ", item.name, " = ", toml_literal(item.inputs),
                        ": expected ", expected);
      out.push_back(key->flag + "=" + value);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_config_file(const std::vector<std::string>& args, const CLI::App& cmd) {
  std::vector<std::string> from_file, rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--config") {
      GLINT_USAGE_CHECK(i + 1 < args.size(), "--config needs a file name");
      auto more = config_args(args[++i], cmd);
      from_file.insert(from_file.end(), more.begin(), more.end());
    } else if (a.rfind("--config=", 0) == 0) {
      auto more = config_args(a.substr(9), cmd);
      from_file.insert(from_file.end(), more.begin(), more.end());
    } else {
      rest.push_back(a);
    }
  }
  from_file.insert(from_file.end(), rest.begin(), rest.end());
  return from_file;
}

}  // namespace glint::cli
