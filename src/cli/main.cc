// glint: fine-tune Mixture-of-Experts language models.
//
// Exit status:
//   0  success; also --help and --version
//   1  the work failed (glint::Error: a bad data line, a model that does not load, ...)
//   2  usage: the command line or a --config file is wrong (a CLI11 parse error such as
//      an unknown flag, a value of the wrong type or a missing required option;
//      glint::UsageError); nothing heavy has run
//   3  internal error: any other exception (a bug in glint)
#include <CLI/CLI.hpp>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "core/error.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

// "glint 0.3.0 (libtorch 1.13.0, v0.3.0-5-gabc1234-dirty)": GLINT_VERSION and
// GLINT_GIT_DESCRIBE come from CMakeLists.txt, computed when the build was configured.
std::string version_line() {
  return std::string("glint ") + GLINT_VERSION + " (libtorch " + TORCH_VERSION + ", " + GLINT_GIT_DESCRIBE + ")";
}

}  // namespace

// libgomp reads OMP_WAIT_POLICY once, when it is loaded. Its default spin-waiting keeps
// idle OpenMP workers on the cores that OpenBLAS's own threads need for every GEMM;
// passive waiting made a training step 1.5x faster on 2 cores (docs/BENCHMARKS.md). So
// unless the user chose a policy, glint sets it before libgomp starts: from the
// executable's .preinit_array, which the dynamic loader runs before the initializers of
// any shared library, it points `environ` at a copy of the environment with the policy
// appended (static storage: nothing allocates this early). glibc sets `environ` back to
// the process's own environment before main, so the policy is libgomp's alone and
// children choose again. (glint used to execute itself with the variable set: every
// command paid the loading of libtorch twice, 0.25 s on the 2-core machine.) An
// environment of more than kMaxEnvironment variables keeps libgomp's default.
namespace {
constexpr size_t kMaxEnvironment = 4096;
char* g_environment[kMaxEnvironment + 2];
char g_policy[] = "OMP_WAIT_POLICY=PASSIVE";
}  // namespace

static void glint_passive_openmp(int argc, char** argv, char** envp) {
  (void)argc, (void)argv;
  const size_t name_length = sizeof("OMP_WAIT_POLICY=") - 1;  // the name in g_policy, with its '='
  size_t n = 0;
  for (; envp[n] != nullptr; ++n) {
    size_t i = 0;
    while (i < name_length && envp[n][i] == g_policy[i]) ++i;
    if (i == name_length) return;  // the user's choice stands
  }
  if (n > kMaxEnvironment) return;
  for (size_t i = 0; i < n; ++i) g_environment[i] = envp[i];
  g_environment[n] = g_policy;
  g_environment[n + 1] = nullptr;
  environ = g_environment;
}
__attribute__((section(".preinit_array"), used)) static void (*const glint_preinit)(int, char**, char**) =
    glint_passive_openmp;

int main(int argc, char** argv) {
  CLI::App app{"glint: fine-tune Mixture-of-Experts language models (LoRA and full)", "glint"};
  app.set_version_flag("--version", version_line(), "print the version of glint and of libtorch, and exit");
  app.require_subcommand(0, 1);
  std::vector<std::pair<CLI::App*, glint::cli::Action>> actions;
  auto add = [&](glint::cli::Action (*f)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    glint::cli::Action a = f(app);
    actions.emplace_back(app.get_subcommands({})[before], std::move(a));
  };
  add(glint::cli::add_train);
  add(glint::cli::add_init_model);
  add(glint::cli::add_merge);
  add(glint::cli::add_export);
  add(glint::cli::add_bench);
  add(glint::cli::add_launch);
  add(glint::cli::add_data);
  add(glint::cli::add_template);
  add(glint::cli::add_tokenize);
  add(glint::cli::add_generate);
  add(glint::cli::add_serve);
  add(glint::cli::add_plot);
  try {
    // CLI11 parses in reverse order; expand --config of the subcommand first.
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "train") {
      std::vector<std::string> sub(args.begin() + 1, args.end());
      sub = glint::cli::expand_config_file(glint::cli::with_resumed_config(sub), *app.get_subcommand("train"));
      args.resize(1);
      args.insert(args.end(), sub.begin(), sub.end());
    }
    std::reverse(args.begin(), args.end());
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse error is a usage error
    // (CLI11's own codes, 104 to 115, would tell a script nothing more).
    int code = app.exit(e);
    return code == static_cast<int>(CLI::ExitCodes::Success) ? 0 : kExitUsage;
  } catch (const glint::UsageError& e) {  // e.g. a bad --config file
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const glint::Error& e) {
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitFailure;
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
    std::cout << app.help();
    return 0;
  } catch (const glint::UsageError& e) {  // options that do not fit together, found by the command
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const glint::Error& e) {
    std::cerr << "glint: error: " << e.what() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "glint: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}
