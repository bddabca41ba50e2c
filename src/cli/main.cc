// glint-core: every command of glint, with libtorch. Users run glint (front_main.cc),
// which runs the commands that load no model itself and hands the others to this
// executable with the same arguments; run directly, it behaves the same.
// Exit status: src/cli/command_line.h.
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/config_file.h"

// libgomp reads OMP_WAIT_POLICY once, when it is loaded. Its default spin-waiting keeps
// idle OpenMP workers on the cores that OpenBLAS's own threads need for every GEMM;
// passive waiting made a training step 1.5x faster on 2 cores (docs/BENCHMARKS.md). So
// unless the user chose a policy, glint-core sets it before libgomp starts: from the
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
  using namespace glint::cli;
  CommandLine command_line({
      {"train", add_train},
      {"init-model", add_init_model},
      {"merge", add_merge},
      {"export", add_export},
      {"bench", add_bench},
      {"launch", add_launch},
      {"data", add_data},
      {"template", add_template},
      {"tokenize", add_tokenize},
      {"generate", add_generate},
      {"serve", add_serve},
      {"plot", add_plot},
  });
  // CLI11 parses in reverse order; expand --config of the subcommand first.
  auto expand_train_config = [&](std::vector<std::string> args) {
    if (!args.empty() && args[0] == "train") {
      std::vector<std::string> sub(args.begin() + 1, args.end());
      sub = expand_config_file(with_resumed_config(sub), *command_line.app().get_subcommand("train"));
      args.resize(1);
      args.insert(args.end(), sub.begin(), sub.end());
    }
    return args;
  };
  return command_line.run(std::vector<std::string>(argv + 1, argv + argc), expand_train_config);
}
