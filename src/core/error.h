// glint::Error: the one exception type for user-facing failures.
//
// A message names the evidence: the file, key, line or rank, what was expected and
// what was found. Programmer bugs use GLINT_ASSERT instead (std::logic_error).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace glint {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A mistake in how glint was called: a flag, a config-file key or value, an option that
// does not fit the others, an output directory it must not write into. Found before
// any heavy work; the CLI prints it and exits with status 2 (other errors: 1).
class UsageError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}
[[noreturn]] void assert_fail(const char* expr, const char* file, int line,
                              const std::string& msg);
}  // namespace detail

// Throws glint::Error with the streamed arguments as the message.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

// Throws glint::UsageError with the streamed arguments as the message.
template <typename... Args>
[[noreturn]] void usage_fail(const Args&... args) {
  throw UsageError(detail::concat(args...));
}

}  // namespace glint

// User-facing check: throws glint::Error with the streamed message when cond is false.
#define GLINT_CHECK(cond, ...)        \
  do {                                \
    if (!(cond)) ::glint::fail(__VA_ARGS__); \
  } while (0)

// Usage check: throws glint::UsageError (exit status 2) when cond is false.
#define GLINT_USAGE_CHECK(cond, ...)  \
  do {                                \
    if (!(cond)) ::glint::usage_fail(__VA_ARGS__); \
  } while (0)

// Internal invariant: a failure is a bug in glint, not in the user's input.
#define GLINT_ASSERT(cond, ...)                                                  \
  do {                                                                           \
    if (!(cond))                                                                 \
      ::glint::detail::assert_fail(#cond, __FILE__, __LINE__,                    \
                                   ::glint::detail::concat(__VA_ARGS__)); \
  } while (0)
