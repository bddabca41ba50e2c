// glint: the executable users run. It links no libtorch, so the commands that load no
// model start in milliseconds (loading libtorch's ~290 libraries costs every process
// more than a second): --version, --help, launch (its ranks start glint again), plot,
// template and tokenize run here. Every other command is handed to glint-core, the
// executable beside this one, by execv with the same arguments and environment: the
// same process (its pid, its parent, its signals), glint-core's messages and exit status;
// the environment gains the settings its libraries read as they load
// (core/process_settings.h). Exit status: src/cli/command_line.h.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "core/process_settings.h"

namespace {

// glint-core's path: beside this executable (symbolic links resolved).
std::string core_path() {
  std::vector<char> self(4096);
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  std::string dir = ".";
  if (n > 0) {
    const std::string path(self.data(), size_t(n));
    dir = path.substr(0, path.rfind('/'));
  }
  return dir + "/glint-core";
}

bool is_command(const std::string& name) {
  for (const glint::cli::CommandSummary& c : glint::cli::command_summaries())
    if (name == c.name) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, glint::cli::AddCommand> runs_here = {
      {"launch", glint::cli::add_launch},
      {"plot", glint::cli::add_plot},
      {"template", glint::cli::add_template},
      {"tokenize", glint::cli::add_tokenize},
  };
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::string command = glint::cli::selected_command(args);
  if (is_command(command) && runs_here.count(command) == 0) {
    const std::string core = core_path();
    glint::set_process_settings();
    ::execv(core.c_str(), argv);
    std::cerr << "glint: error: cannot run " << core << " for glint " << command << ": " << std::strerror(errno)
              << " (glint-core is built and installed beside glint)\n";
    return glint::cli::kExitFailure;
  }
  glint::cli::CommandLine command_line(runs_here);
  return command_line.run(std::move(args));
}
