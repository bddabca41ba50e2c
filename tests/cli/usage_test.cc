// The glint binary as a user meets it: --config keys spelled with '_' or '-', errors
// that name the file, the key and what was expected, exit status 2 for every usage
// error, --version, usage lines that name the program, and help text for every option.
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;

using glint::testing::run_glint;
using glint::testing::RunResult;

using glint::testing::write_file;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The `key=value` lines of a resolved OUT/config.toml (CLI11's writer: one per line,
// strings quoted).
std::map<std::string, std::string> read_resolved_config(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

// A run of the built-in job short enough for a test: 2 steps, no held-out evaluation.
const char* kQuickJob = "--steps 2 --eval-samples 0";

TEST(ConfigFile, UnderscoreAndDashKeysBothSetTheirOption) {
  std::string d = glint::testing::fresh_temp_dir("usage_keys");
  // The defaults are micro-batch-size 0 and max-grad-norm 1 (see `glint train --help`).
  write_file(d + "/run.toml",
        "steps = 2\n"
        "eval_samples = 0\n"
        "batch_size = 4\n"
        "micro_batch_size = 2\n"
        "max-grad-norm = 0.5\n");
  RunResult r = run_glint("train --config " + d + "/run.toml --output " + d + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto cfg = read_resolved_config(d + "/out/config.toml");
  EXPECT_EQ(cfg["micro-batch-size"], "2") << read(d + "/out/config.toml");
  EXPECT_EQ(cfg["max-grad-norm"], "0.5") << read(d + "/out/config.toml");
  EXPECT_EQ(cfg["batch-size"], "4") << read(d + "/out/config.toml");
  EXPECT_EQ(cfg["eval-samples"], "0") << read(d + "/out/config.toml");
  EXPECT_EQ(glint::testing::read_jsonl(d + "/out/metrics.jsonl").size(), 2u);
}

TEST(ConfigFile, CommandLineOverridesTheFile) {
  std::string d = glint::testing::fresh_temp_dir("usage_override");
  write_file(d + "/run.toml", "steps = 5\neval_samples = 0\nbatch_size = 2\n");
  RunResult r = run_glint("train --config " + d + "/run.toml --steps 1 --output " + d + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_resolved_config(d + "/out/config.toml")["steps"], "1");
  EXPECT_EQ(glint::testing::read_jsonl(d + "/out/metrics.jsonl").size(), 1u);
}

TEST(ConfigFile, ResolvedConfigLoadsBackAndRepeatsTheRun) {
  // Every key and value CLI11 writes (flags as true/false, floats, quoted strings, empty
  // paths) must pass the file's own checks.
  std::string d = glint::testing::fresh_temp_dir("usage_resolved");
  RunResult first = run_glint(std::string("train ") + kQuickJob + " --batch-size 4 --output " + d + "/out");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  RunResult again = run_glint("train --config " + d + "/out/config.toml --output " + d + "/out2");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  auto a = read_resolved_config(d + "/out/config.toml");
  auto b = read_resolved_config(d + "/out2/config.toml");
  ASSERT_GT(a.size(), 20u) << read(d + "/out/config.toml");
  a.erase("output");
  b.erase("output");
  EXPECT_EQ(a, b) << read(d + "/out/config.toml") << "\n---\n" << read(d + "/out2/config.toml");
}

TEST(ConfigFile, UnknownKeyNamesFileKeyAndClosestKey) {
  std::string d = glint::testing::fresh_temp_dir("usage_unknown_key");
  struct Case {
    std::string line;
    std::vector<std::string> expect_any;  // the message holds one of these
  };
  const Case cases[] = {
      {"micro_bach_size = 2", {"run.toml: unknown key 'micro_bach_size'; did you mean 'micro-batch-size'?"}},
      {"setps = 2", {"run.toml: unknown key 'setps'; did you mean 'steps'?"}},
      // By its initials, or by the long alias once --lr has one.
      {"learning_rat = 0.1",
       {"run.toml: unknown key 'learning_rat'; did you mean 'lr'?",
        "run.toml: unknown key 'learning_rat'; did you mean 'learning-rate'?"}},
      {"temperature = 0.7", {"run.toml: unknown key 'temperature'; `glint train --help` lists the options"}},
  };
  for (const Case& c : cases) {
    write_file(d + "/run.toml", "steps = 2\n" + c.line + "\n");
    RunResult r = run_glint("train --config " + d + "/run.toml --output " + d + "/out");
    EXPECT_EQ(r.exit_code, 2) << c.line << "\n" << r.output;
    bool found = false;
    for (const std::string& e : c.expect_any) found = found || r.output.find(e) != std::string::npos;
    EXPECT_TRUE(found) << c.line << "\n" << r.output;
    EXPECT_NE(r.output.find("glint: error: " + d + "/run.toml"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(d + "/out")) << "a usage error must stop before any work: " << c.line;
  }
}

TEST(ConfigFile, WrongTypeNamesFileKeyAndExpectation) {
  std::string d = glint::testing::fresh_temp_dir("usage_bad_value");
  const std::pair<std::string, std::string> cases[] = {
      {"steps = \"abc\"", "run.toml: steps = \"abc\": expected an integer"},
      {"lora_r = 1.5", "run.toml: lora_r = 1.5: expected an integer"},
      {"lr = \"fast\"", "run.toml: lr = \"fast\": expected a number"},
      {"max_grad_norm = [1, 2]", "run.toml: max_grad_norm = [1, 2]: expected a number"},
      {"pack = \"maybe\"", "run.toml: pack = \"maybe\": expected true or false"},
  };
  for (const auto& [line, expect] : cases) {
    write_file(d + "/run.toml", line + "\n");
    RunResult r = run_glint("train --config " + d + "/run.toml --output " + d + "/out");
    EXPECT_EQ(r.exit_code, 2) << line << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << line << "\n" << r.output;
    EXPECT_FALSE(fs::exists(d + "/out")) << line;
  }
}

TEST(ConfigFile, FileErrorsAreUsageErrors) {
  std::string d = glint::testing::fresh_temp_dir("usage_file_errors");
  const std::pair<std::string, std::string> cases[] = {
      {"[train]\nsteps = 2\n", "run.toml: unexpected section [train]"},
      {"config = \"other.toml\"\n", "run.toml: a config file cannot name another config file"},
  };
  for (const auto& [text, expect] : cases) {
    write_file(d + "/run.toml", text);
    RunResult r = run_glint("train --config " + d + "/run.toml --output " + d + "/out");
    EXPECT_EQ(r.exit_code, 2) << text << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << text << "\n" << r.output;
  }
  RunResult missing = run_glint("train --config " + d + "/absent.toml");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find(d + "/absent.toml: config file not found"), std::string::npos) << missing.output;
  RunResult no_name = run_glint("train --config");
  EXPECT_EQ(no_name.exit_code, 2) << no_name.output;
  EXPECT_NE(no_name.output.find("--config needs a file name"), std::string::npos) << no_name.output;
}

TEST(Usage, ParseErrorsExitTwoWithTheParsersMessage) {
  const std::pair<std::string, std::string> cases[] = {
      {"train --no-such-flag", "--no-such-flag"},          // CLI11: 109 (ExtrasError)
      {"train --steps abc", "abc"},                          // CLI11: 105 (ConversionError)
      {"init-model --seed 1", "--output"},                   // CLI11: 106 (RequiredError)
      {"no-such-command", "no-such-command"},                // CLI11: 109
      {"bench", "subcommand"},                               // CLI11: 106 (a subcommand is required)
  };
  for (const auto& [args, expect] : cases) {
    RunResult r = run_glint(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("Run with --help for more information."), std::string::npos) << args << "\n" << r.output;
  }
  for (const char* args : {"--help", "train --help", "bench train --help", ""}) {
    RunResult r = run_glint(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  }
}

TEST(Usage, AnFsdpOverlapOtherThanAutoOnOrOffIsRefused) {
  std::string d = glint::testing::fresh_temp_dir("usage_fsdp_overlap");
  RunResult r = run_glint("train --steps 1 --fsdp --fsdp-overlap sometimes --output " + d + "/out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--fsdp-overlap must be auto, on or off, got 'sometimes'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d + "/out"));
}

TEST(Usage, AGpuTheMachineLacksIsRefusedByName) {
  std::string d = glint::testing::fresh_temp_dir("usage_cuda");
  if (!at::hasCUDA()) {  // a CPU build, or no GPU: any CUDA device is a usage error
    RunResult r = run_glint("train --steps 1 --device cuda --output " + d + "/out");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--device cuda: this build of glint has no CUDA"), std::string::npos) << r.output;
  } else {  // on a GPU machine: one index past its last GPU
    const std::string past = "cuda:" + std::to_string(at::getNumGPUs());
    RunResult r = run_glint("train --steps 1 --device " + past + " --output " + d + "/out");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("would take " + past + " but the machine has"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(d + "/out"));
}

TEST(Usage, VersionNamesGlintLibtorchAndCommit) {
  RunResult r = run_glint("--version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::regex line(std::string(R"(glint [0-9]+\.[0-9]+\.[0-9]+ \(libtorch )") +
                        std::regex_replace(TORCH_VERSION, std::regex(R"(\.)"), R"(\.)") + R"(, [^ ()]+\)\n)");
  EXPECT_TRUE(std::regex_match(r.output, line)) << r.output;
}

TEST(Usage, UsageLinesNameTheProgram) {
  const std::pair<std::string, std::string> cases[] = {
      {"--help", "Usage: glint [OPTIONS] [SUBCOMMAND]"},
      {"train --help", "Usage: glint train [OPTIONS]"},
      {"data preview --help", "Usage: glint data preview [OPTIONS]"},
  };
  for (const auto& [args, expect] : cases) {
    RunResult r = run_glint(args);
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(expect), std::string::npos) << args << "\n" << r.output;
  }
}

// What one --help text lists: its subcommands, and its entries (options, positionals,
// subcommands) that have no description. CLI11's formatter writes each entry as two
// spaces and the name, padded to column 30 where the description starts; a name that
// reaches column 30 puts its description on the next line, indented to column 30.
struct HelpListing {
  std::vector<std::string> subcommands;
  std::vector<std::string> entries;
  std::vector<std::string> undescribed;
};

HelpListing parse_help(const std::string& help) {
  constexpr size_t kColumn = 30;
  std::vector<std::string> lines;
  std::istringstream in(help);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  HelpListing out;
  std::string section;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (!l.empty() && l[0] != ' ' && l.back() == ':') {
      section = l;
      continue;
    }
    if (l.empty() || l[0] != ' ') {
      section = l.empty() ? section : "";
      continue;
    }
    if (section.empty() || l.size() < 3 || l[1] != ' ' || l[2] == ' ') continue;  // not an entry
    std::string name = l.substr(2, l.find("  ", 2) == std::string::npos ? std::string::npos : l.find("  ", 2) - 2);
    bool described = (l.size() > kColumn && l[kColumn - 1] == ' ' && l[kColumn] != ' ');
    if (!described && i + 1 < lines.size()) {
      const std::string& next = lines[i + 1];
      described = next.size() > kColumn && next.find_first_not_of(' ') == kColumn;
    }
    out.entries.push_back(name);
    if (section == "Subcommands:") out.subcommands.push_back(name.substr(0, name.find(' ')));
    if (!described) out.undescribed.push_back(name);
  }
  return out;
}

TEST(Usage, HelpParserFindsEntriesWithoutDescription) {
  // The shapes CLI11 writes: a short name, a name that fills the column, a multi-line
  // description; and the mistakes: no text after a short name or after a long one.
  const std::string help =
      "glint: something\n"
      "Usage: glint x [OPTIONS]\n"
      "\n"
      "Options:\n"
      "  -h,--help                   Print this help message and exit\n"
      "  --steps INT=1000            optimizer steps\n"
      "  --no-text INT=3             \n"
      "  --a-very-long-option-name TEXT=default\n"
      "                              described on the next line\n"
      "  --multi TEXT                first line\n"
      "                              second line\n"
      "  --long-and-undescribed-option TEXT=x\n"
      "  --last                      \n"
      "\n"
      "Subcommands:\n"
      "  preview                     show samples\n"
      "  hidden-text                 \n";
  HelpListing h = parse_help(help);
  EXPECT_EQ(h.entries.size(), 9u);
  EXPECT_EQ(h.subcommands, (std::vector<std::string>{"preview", "hidden-text"}));
  EXPECT_EQ(h.undescribed, (std::vector<std::string>{"--no-text INT=3", "--long-and-undescribed-option TEXT=x",
                                                     "--last", "hidden-text"}));
}

TEST(Usage, EveryOptionOfEveryCommandHasADescription) {
  // Every command reachable from `glint --help`, and the internal ones it hides (each
  // still answers --help).
  std::vector<std::string> todo = {"", "bench ep-rank", "bench tenants-run"};
  std::set<std::string> seen;
  std::vector<std::string> undescribed;
  size_t entries = 0;
  while (!todo.empty()) {
    std::string cmd = todo.back();
    todo.pop_back();
    if (!seen.insert(cmd).second) continue;
    RunResult r = run_glint(cmd + (cmd.empty() ? "" : " ") + "--help");
    ASSERT_EQ(r.exit_code, 0) << "glint " << cmd << " --help\n" << r.output;
    HelpListing h = parse_help(r.output);
    EXPECT_FALSE(h.entries.empty()) << "glint " << cmd << " --help lists nothing:\n" << r.output;
    entries += h.entries.size();
    for (const std::string& e : h.undescribed) undescribed.push_back("glint " + cmd + ": " + e);
    for (const std::string& s : h.subcommands) todo.push_back(cmd.empty() ? s : cmd + " " + s);
  }
  // The walk reached the nested commands (so an empty listing cannot pass).
  for (const char* c : {"train", "init-model", "merge", "launch", "data", "data preview", "bench", "bench train",
                        "bench tokenize", "bench tenants", "template", "tokenize"})
    EXPECT_TRUE(seen.count(c)) << "not reached from glint --help: " << c;
  EXPECT_GT(entries, 80u);
  std::string list;
  for (const std::string& u : undescribed) list += "\n  " + u;
  EXPECT_TRUE(undescribed.empty()) << "options without a description (add the text to add_option):" << list;
}

}  // namespace
