// The value type of the Jinja interpreter.
//
// Kinds follow @huggingface/jinja's runtime values: undefined (a missing variable or
// key), none, bool, int, float, string, list, dict (insertion-ordered), namespace (the
// mutable object namespace() returns) and function (macros and built-ins). Lists, dicts
// and namespaces are shared by reference, as in Python and JavaScript: `==` on them is
// identity, and `set ns.x = ...` is seen through every copy of the namespace.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace glint::jinja {

struct Value;
struct Scope;
using List = std::vector<Value>;

// An insertion-ordered string-keyed map. `kwargs` marks the keyword arguments of a call.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  // Inserts at the end, or replaces the value in place when the key exists.
  void set(const std::string& key, Value v);
  bool erase(const std::string& key);
  size_t size() const { return items.size(); }
};

// A callable: positional arguments, keyword arguments, and the caller's scope (macros
// resolve free names in the scope they are called from, as @huggingface/jinja does).
using NativeFn = std::function<Value(std::vector<Value>& args, Dict& kwargs,
                                     const std::shared_ptr<Scope>& caller)>;
struct Function {
  std::string name;
  NativeFn fn;
};

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

// Name of a kind for error messages ("undefined", "string", "dict", ...).
const char* kind_name(Kind k);

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // kDict and kNamespace
  std::shared_ptr<Function> fn;

  static Value undefined() { return Value(); }
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List v = {});
  static Value make_dict(Dict v = {});
  static Value make_namespace(Dict v = {});
  static Value function(std::string name, NativeFn fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_numeric() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double as_double() const { return kind == Kind::kFloat ? f : kind == Kind::kBool ? (b ? 1 : 0) : double(i); }
  const char* type_name() const { return kind_name(kind); }
  // The kind with an article, for messages: "an int", "a string", "an undefined value".
  std::string a_type() const;

  // Python truthiness as @huggingface/jinja defines it: empty string/list/dict, 0, none
  // and undefined are false; namespaces and functions are true.
  bool truthy() const;
};

// Converts JSON data (as JavaScript's JSON.parse would see it) to values: integral
// numbers become ints, object keys keep insertion order except that array-index-like
// keys ("0", "17") come first in ascending order, as in JavaScript objects.
Value from_json(const nlohmann::ordered_json& j);

// How `{{ v }}` prints: none/undefined print nothing (callers skip them), booleans
// "true"/"false", floats with a ".0" when integral, lists/dicts as JSON. Functions are an
// error.
std::string to_output(const Value& v);

struct JsonOptions {
  int indent = -1;             // < 0 or 0: single line
  bool ensure_ascii = false;   // escape non-ASCII as \uXXXX
  bool sort_keys = false;      // sort dict keys (case-insensitive order of localeCompare)
  bool custom_separators = false;
  std::string item_sep, key_sep;  // used when custom_separators
};
// The tojson filter (undefined_as_null) and list/dict printing (undefined as "undefined").
std::string to_json(const Value& v, const JsonOptions& o, bool undefined_as_null = true, int depth = 0);

// JavaScript `a.value == b.value` (what `==` means in @huggingface/jinja) for primitives;
// identity for lists, dicts, namespaces and functions.
bool loose_equals(const Value& a, const Value& b);
// JavaScript `a.value === b.value` (membership tests, unique, equalto).
bool strict_equals(const Value& a, const Value& b);
// JavaScript String(value) of a primitive, as `~` and string `+` use it. Lists, dicts,
// namespaces and functions are an error (JavaScript would print "[object Map]").
std::string to_concat_string(const Value& v);

}  // namespace glint::jinja
