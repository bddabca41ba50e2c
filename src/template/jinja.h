// A Jinja template interpreter for Hugging Face chat templates.
//
// Renders exactly what @huggingface/jinja (the JavaScript implementation transformers.js
// uses) renders for the constructs chat templates use: the same whitespace handling
// (trim_blocks, lstrip_blocks), printing (true/false, "2.0", none prints nothing), tojson
// spacing and key order, loop variables, namespaces, macros and call blocks. A construct
// it does not know (tag, filter, test, method) is a glint::Error naming it and its line,
// never silent output. See jinja_builtins.cc for the filter/test/method list.
//
// Usage:
//   glint::jinja::Template t(source, "chat template");
//   std::string s = t.render(context);  // context: a JSON object of variables
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "template/jinja_value.h"

namespace glint::jinja {

struct Node;

// What a render reads besides its variables.
struct RenderOptions {
  // The time strftime_now() formats, in seconds since the Unix epoch, shown in the local
  // time zone (as @huggingface/jinja shows `new Date()`); unset: the system clock at the
  // call. Fixing it makes renders of a template that prints today's date reproducible.
  std::optional<int64_t> now;
};

class Template {
 public:
  // Parses `source`. `name` prefixes error messages ("<name> line N: ...").
  // Throws glint::Error on a syntax error.
  Template(const std::string& source, std::string name = "template");
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the entries of `context` (a JSON object) as variables, next to the
  // globals true/false/none, namespace, range, raise_exception and strftime_now.
  // Throws glint::Error "<name> line N: ..." on a render error; a raise_exception()
  // call in the template gives "<name> line N: raise_exception: <its message>".
  // REQUIRES: context is an object whose keys do not redefine a global.
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
  std::string render(const Dict& context, const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Node>> program_;
};

}  // namespace glint::jinja
