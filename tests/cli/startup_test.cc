// The commands that load no model start without libtorch: `glint --version`, the help
// texts, `glint launch` (its ranks may load it), `glint plot`, `glint template` and
// `glint tokenize`. What a process loaded is what the dynamic loader reports with
// LD_DEBUG=libs ("calling init: /usr/lib/.../libtorch_cpu.so" for every library whose
// initializers run). The other commands are glint-core's, and answer through glint as
// glint-core answers them.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using glint::testing::run;
using glint::testing::RunResult;

// The lines of the loader's report that name a libtorch library (libtorch*, libc10*).
std::vector<std::string> torch_libraries(const std::string& report) {
  static const std::regex torch(R"(calling init: \S*/lib(torch|c10)[^/\s]*\.so\S*)");
  std::vector<std::string> out;
  for (std::sregex_iterator it(report.begin(), report.end(), torch), end; it != end; ++it) out.push_back(it->str());
  return out;
}

// `glint ARGS` under LD_DEBUG=libs: its exit status and everything it and the loader wrote.
RunResult run_traced(const std::string& args) { return run("LD_DEBUG=libs " + std::string(GLINT_BINARY) + " " + args); }

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += "\n  " + l;
  return s;
}

TEST(Startup, TheLoaderReportSeesLibtorchWhereItIsLoaded) {
  // The test program itself links libtorch: the report names it (so an empty finding
  // below means no libtorch, not a loader that reports nothing).
  RunResult r = run("LD_DEBUG=libs /proc/" + std::to_string(::getpid()) + "/exe --gtest_list_tests --gtest_filter=-*");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(torch_libraries(r.output).empty()) << r.output.substr(0, 4000);
}

TEST(Startup, CommandsThatLoadNoModelLoadNoLibtorch) {
  const std::string fixture = std::string(GLINT_TEST_DATA_DIR) + "/tokenizer_fixture";
  const std::string d = glint::testing::fresh_temp_dir("startup_plot");
  glint::testing::write_file(d + "/metrics.jsonl", "{\"step\":1,\"loss\":2.5,\"lr\":0.001}\n"
                                                   "{\"step\":2,\"loss\":2.0,\"lr\":0.001}\n");
  glint::testing::write_file(d + "/text.jsonl", "\"hello world\"\n");
  const std::pair<std::string, int> cases[] = {
      {"--version", 0},
      {"--help", 0},
      {"", 0},
      {"no-such-command", 2},
      {"launch --help", 0},
      {"launch -n 1 -- true", 0},
      {"launch -n 2 -- false", 1},
      {"plot --help", 0},
      {"plot " + d, 0},
      {"template --help", 0},
      {"tokenize --help", 0},
      {"tokenize --tokenizer " + fixture + " < " + d + "/text.jsonl", 0},
  };
  for (const auto& [args, status] : cases) {
    RunResult r = run_traced(args);
    EXPECT_EQ(r.exit_code, status) << "glint " << args << "\n" << r.output.substr(0, 4000);
    EXPECT_NE(r.output.find("calling init:"), std::string::npos) << "glint " << args << ": no loader report";
    const std::vector<std::string> loaded = torch_libraries(r.output);
    EXPECT_TRUE(loaded.empty()) << "glint " << args << " loaded libtorch:" << joined(loaded);
  }
}

TEST(Startup, GlintAnswersAsGlintCoreDoes) {
  // What glint runs itself and what it hands to glint-core: the same text, the same status.
  const std::string front = std::string(GLINT_BINARY) + " ", core = std::string(GLINT_CORE_BINARY) + " ";
  for (const char* args : {"--help", "", "--version", "no-such-command", "launch --help", "launch", "plot --help",
                           "plot", "template --help", "tokenize --help", "train --help", "train --no-such-flag",
                           "data preview --help", "bench", "-- train --no-such-flag"}) {
    const RunResult a = run(front + args), b = run(core + args);
    EXPECT_EQ(a.exit_code, b.exit_code) << "glint " << args << "\n" << a.output << "\n" << b.output;
    EXPECT_EQ(a.output, b.output) << "glint " << args;
  }
}

TEST(Startup, WithoutGlintCoreBesideItGlintSaysSo) {
  const std::string d = glint::testing::fresh_temp_dir("startup_alone");
  std::filesystem::copy_file(GLINT_BINARY, d + "/glint");
  std::filesystem::permissions(d + "/glint", std::filesystem::perms::owner_all);
  RunResult r = run(d + "/glint --version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run(d + "/glint train --steps 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot run " + d + "/glint-core for glint train"), std::string::npos) << r.output;
}

}  // namespace
