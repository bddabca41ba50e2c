#include "core/error.h"

namespace glint::detail {

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << "internal error: " << file << ":" << line << ": assertion `" << expr << "` failed";
  if (!msg.empty()) os << ": " << msg;
  throw std::logic_error(os.str());
}

}  // namespace glint::detail
