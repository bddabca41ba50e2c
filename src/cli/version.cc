// `glint --version`, in a file of its own: the commit changes with every build, and only
// this file is compiled again. <torch/version.h> is a header of macros: the version of the
// libtorch glint-core was built against, read without linking any of it.
#include <torch/version.h>

#include <string>

#include "cli/command_line.h"

namespace glint::cli {

std::string version_line() {
  // GLINT_VERSION and GLINT_GIT_DESCRIBE come from CMakeLists.txt, computed when the
  // build was configured.
  return std::string("glint ") + GLINT_VERSION + " (libtorch " + TORCH_VERSION + ", " + GLINT_GIT_DESCRIBE + ")";
}

}  // namespace glint::cli
