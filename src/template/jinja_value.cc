#include "template/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "template/jinja_text.h"

namespace glint::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

Value* Dict::find(const std::string& key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  if (Value* old = find(key)) {
    *old = std::move(v);
    return;
  }
  items.emplace_back(key, std::move(v));
}

bool Dict::erase(const std::string& key) {
  for (auto it = items.begin(); it != items.end(); ++it)
    if (it->first == key) {
      items.erase(it);
      return true;
    }
  return false;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

std::string Value::a_type() const {
  switch (kind) {
    case Kind::kUndefined: return "an undefined value";
    case Kind::kNone: return "none";
    case Kind::kInt: return "an int";
    default: return std::string("a ") + kind_name(kind);
  }
}

Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(List x) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<List>(std::move(x));
  return v;
}
Value Value::make_dict(Dict x) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::make_namespace(Dict x) {
  Value v = make_dict(std::move(x));
  v.kind = Kind::kNamespace;
  return v;
}
Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::kFunction;
  v.fn = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0 && !std::isnan(f);
    case Kind::kString: return !s.empty();
    case Kind::kList: return !list->empty();
    case Kind::kDict: return dict->size() > 0;
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

namespace {

// "0", "17": keys that JavaScript objects order first, ascending (array indices).
bool is_array_index(const std::string& k, uint64_t* out) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : k) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v >= 4294967295ull) return false;
  *out = v;
  return true;
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= uint64_t(INT64_MAX)) return Value::integer(int64_t(u));
      return Value::number(double(u));
    }
    case T::number_float: {
      double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return Value::integer(int64_t(d));
      return Value::number(d);
    }
    case T::string: return Value::string(j.get<std::string>());
    case T::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::make_list(std::move(l));
    }
    case T::object: {
      std::vector<std::pair<uint64_t, std::string>> index_keys;
      Dict rest;
      for (auto it = j.begin(); it != j.end(); ++it) {
        uint64_t idx;
        if (is_array_index(it.key(), &idx)) index_keys.emplace_back(idx, it.key());
        else rest.set(it.key(), from_json(it.value()));
      }
      if (index_keys.empty()) return Value::make_dict(std::move(rest));
      std::sort(index_keys.begin(), index_keys.end());
      Dict d;
      for (const auto& [idx, key] : index_keys) d.set(key, from_json(j.at(key)));
      for (auto& kv : rest.items) d.items.push_back(std::move(kv));
      return Value::make_dict(std::move(d));
    }
    default: fail("cannot convert JSON value of type ", j.type_name(), " to a template value");
  }
}

std::string to_output(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return "";
    case Kind::kBool: return v.b ? "true" : "false";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: {
      if (v.f == 0 && std::signbit(v.f)) return "-0.0";
      if (std::isfinite(v.f) && v.f == std::floor(v.f) && std::fabs(v.f) < 1e21) {
        char buf[400];
        std::snprintf(buf, sizeof buf, "%.1f", v.f);
        return buf;
      }
      return text::js_number(v.f);
    }
    case Kind::kString: return v.s;
    case Kind::kList:
    case Kind::kDict:
    case Kind::kNamespace: return to_json(v, JsonOptions{}, false);
    case Kind::kFunction: fail("cannot print function '", v.fn->name, "' (call it with ())");
  }
  return "";
}

std::string to_json(const Value& v, const JsonOptions& o, bool undefined_as_null, int depth) {
  std::string item_sep = ", ", key_sep = ": ";
  if (o.custom_separators) {
    item_sep = o.item_sep;
    key_sep = o.key_sep;
  } else if (o.indent > 0) {
    item_sep = ",";
  }
  switch (v.kind) {
    case Kind::kNone: return "null";
    case Kind::kUndefined: return undefined_as_null ? "null" : "undefined";
    case Kind::kBool: return v.b ? "true" : "false";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: return std::isfinite(v.f) ? text::js_number(v.f) : "null";
    case Kind::kString: return text::json_quote(v.s, o.ensure_ascii);
    case Kind::kFunction: fail("cannot convert function '", v.fn->name, "' to JSON");
    default: break;
  }
  std::string indent = o.indent > 0 ? std::string(o.indent, ' ') : "";
  std::string base = "\n";
  for (int d = 0; d < depth; ++d) base += indent;
  std::string child = base + indent;
  bool pretty = o.indent > 0;
  std::vector<std::string> core;
  if (v.kind == Kind::kList) {
    for (const Value& e : *v.list) core.push_back(to_json(e, o, undefined_as_null, depth + 1));
    std::string out = "[";
    if (pretty && !core.empty()) {
      out += child;
      for (size_t k = 0; k < core.size(); ++k) out += (k ? item_sep + child : "") + core[k];
      return out + base + "]";
    }
    for (size_t k = 0; k < core.size(); ++k) out += (k ? item_sep : "") + core[k];
    return out + "]";
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& kv : v.dict->items) entries.push_back(&kv);
  if (o.sort_keys) {
    // Approximates String.prototype.localeCompare: case-insensitive, lower case first.
    std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) {
      std::string la = text::to_lower(a->first), lb = text::to_lower(b->first);
      if (la != lb) return la < lb;
      return a->first > b->first;
    });
  }
  for (auto* kv : entries) {
    std::string e = text::json_quote(kv->first, o.ensure_ascii) + key_sep +
                    to_json(kv->second, o, undefined_as_null, depth + 1);
    core.push_back(pretty ? child + e : e);
  }
  std::string out = "{";
  for (size_t k = 0; k < core.size(); ++k) out += (k ? item_sep : "") + core[k];
  return out + (pretty && !core.empty() ? base : "") + "}";
}

namespace {

// JavaScript ToNumber(string).
double js_to_number(const std::string& s) {
  std::string t = text::trim(s);
  if (t.empty()) return 0;
  if (t == "Infinity" || t == "+Infinity") return INFINITY;
  if (t == "-Infinity") return -INFINITY;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X' || t[1] == 'o' || t[1] == 'O' ||
                                      t[1] == 'b' || t[1] == 'B')) {
    int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
    double v = 0;
    for (size_t k = 2; k < t.size(); ++k) {
      char c = static_cast<char>(std::tolower(t[k]));
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : 99;
      if (d >= base) return NAN;
      v = v * base + d;
    }
    return v;
  }
  // StrDecimalLiteral: [+-] (digits [. digits] | . digits) [e [+-] digits]
  size_t k = 0;
  if (t[k] == '+' || t[k] == '-') ++k;
  size_t int_digits = 0, frac_digits = 0;
  while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) ++k, ++int_digits;
  if (k < t.size() && t[k] == '.') {
    ++k;
    while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) ++k, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return NAN;
  if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
    ++k;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
    size_t e = 0;
    while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) ++k, ++e;
    if (e == 0) return NAN;
  }
  if (k != t.size()) return NAN;
  return std::strtod(t.c_str(), nullptr);
}

bool is_reference(Kind k) {
  return k == Kind::kList || k == Kind::kDict || k == Kind::kNamespace || k == Kind::kFunction;
}

bool same_reference(const Value& a, const Value& b) {
  if (a.kind == Kind::kFunction || b.kind == Kind::kFunction) return a.fn == b.fn;
  if (a.kind == Kind::kList || b.kind == Kind::kList) return a.list == b.list;
  return a.dict == b.dict;
}

// JavaScript's ToPrimitive of a list (Array.prototype.join(",") of its items' strings)
// or of a dict / namespace (a Map: "[object Map]").
std::string js_primitive(const Value& v) {
  if (v.kind != Kind::kList) return "[object Map]";
  std::string out;
  for (size_t k = 0; k < v.list->size(); ++k) {
    const Value& e = (*v.list)[k];
    out += k ? "," : "";
    out += e.is_none() ? "null" : e.is_undefined() ? "undefined" : e.kind == Kind::kFunction ? "function" : to_output(e);
  }
  return out;
}

}  // namespace

bool loose_equals(const Value& a, const Value& b) {
  bool a_nil = a.is_undefined() || a.is_none(), b_nil = b.is_undefined() || b.is_none();
  if (a_nil || b_nil) return a_nil && b_nil;
  if (is_reference(a.kind) && is_reference(b.kind)) return same_reference(a, b);
  if (a.kind == Kind::kFunction || b.kind == Kind::kFunction) return false;
  if (is_reference(a.kind)) return loose_equals(Value::string(js_primitive(a)), b);
  if (is_reference(b.kind)) return loose_equals(a, Value::string(js_primitive(b)));
  if (a.is_string() && b.is_string()) return a.s == b.s;
  double x = a.is_string() ? js_to_number(a.s) : a.as_double();
  double y = b.is_string() ? js_to_number(b.s) : b.as_double();
  return x == y;
}

bool strict_equals(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric()) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kBool: return a.b == b.b;
    case Kind::kString: return a.s == b.s;
    default: return same_reference(a, b);
  }
}

std::string to_concat_string(const Value& v) {
  switch (v.kind) {
    case Kind::kBool: return v.b ? "true" : "false";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: return text::js_number(v.f);
    case Kind::kString: return v.s;
    default:
      fail("cannot concatenate ", v.a_type(),
           " into a string (convert it explicitly, e.g. with |tojson)");
  }
}

}  // namespace glint::jinja
