// Jinja evaluator internals shared by jinja_eval.cc (statements, expressions, operators)
// and jinja_builtins.cc (filters, tests, methods, global functions). Semantics follow
// @huggingface/jinja's runtime; where it would print JavaScript artefacts ("[object
// Map]", a function's source) glint raises an error instead.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_value.h"

namespace glint::jinja {

// A variable scope. Lookups walk to the parents; `set` writes this scope only.
struct Scope {
  std::shared_ptr<Scope> parent;
  Dict vars;
  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
  Value lookup(const std::string& name) const;
  void set(const std::string& name, Value v) { vars.set(name, std::move(v)); }
};
using ScopePtr = std::shared_ptr<Scope>;

// An error that already names its template line; rethrown unchanged by outer nodes.
class LocatedError : public Error {
 public:
  using Error::Error;
};

struct CallArgs {
  std::vector<Value> pos;
  Dict kw;
};

class Interpreter {
 public:
  explicit Interpreter(std::string name) : name_(std::move(name)) {}
  // Renders the statements of a template in `globals`. Throws glint::Error
  // "<name> line N: ..." for any failure.
  std::string render(const std::vector<NodePtr>& program, const ScopePtr& globals);

  Value eval(const Node& n, const ScopePtr& env);
  std::string eval_block(const std::vector<NodePtr>& body, const ScopePtr& env);
  CallArgs eval_args(const std::vector<NodePtr>& args, const ScopePtr& env);
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int depth_ = 0;  // nesting of eval() calls, bounded by kMaxEvalDepth
  Value eval_node(const Node& n, const ScopePtr& env);
  Value eval_binary(const Node& n, const ScopePtr& env);
  Value eval_member(const Node& n, const ScopePtr& env);
  Value eval_call(const Node& n, const ScopePtr& env);
  Value eval_for(const Node& n, const ScopePtr& env);
  void eval_set(const Node& n, const ScopePtr& env);
  Value make_macro(const Node& n);
  void bind_parameters(const std::string& what, const std::vector<NodePtr>& params, bool uses_kwargs,
                       bool uses_varargs, std::vector<Value>& args, Dict& kwargs, const ScopePtr& scope);
};

// Built-ins (jinja_builtins.cc).
// Applies filter `name` (called with parentheses when `called`) to `operand`.
Value apply_filter(const std::string& name, bool called, const Value& operand, CallArgs& args);
// Runs test `name`; throws glint::Error "unknown test 'name'" when there is none.
bool run_test(const std::string& name, const Value& operand, const std::vector<Value>& args);
// obj.key / obj[key]: dict keys and dict/string/list methods; undefined when missing.
Value get_member(const Value& obj, const Value& key);
// true, false, none (and title-case forms), namespace, range, raise_exception, strftime_now.
// strftime_now formats `now` (seconds since the epoch, local time), or the clock when unset.
void install_globals(Scope& s, std::optional<int64_t> now);
// JavaScript-style ordering used by sort and dictsort (-1, 0, 1).
int compare_values(const Value& a, const Value& b, bool case_sensitive);

// Helpers shared by the built-in files (jinja_methods.cc).
// Argument i, else keyword `kw`; null when neither was passed.
const Value* arg(const CallArgs& a, size_t i, const char* kw);
// A boolean argument (error naming `filter` and `kw` when it is not a bool).
bool bool_arg(const CallArgs& a, size_t i, const char* kw, bool dflt, const char* filter);
// How join prints an item: none/undefined as "", primitives as JavaScript's String().
std::string join_piece(const Value& v);
// Python str.replace (count null/undefined: all).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, const Value* count);
// [[key, value], ...] of a dict, in its order.
Value pairs_of(const Dict& d);
// Dotted path ("a.b", "items.0") into dicts and lists; undefined when missing.
Value attribute_path(const Value& item, const std::string& path);
// The bound method `name` of a string / dict (undefined when there is none; a string's
// "length" is an int, not a method).
Value string_method(const std::string& s, const std::string& name);
Value dict_method(const Value& dict, const std::string& name);

}  // namespace glint::jinja
