// Tests and global functions of the Jinja interpreter; filters are in jinja_filters.cc,
// methods and member access in jinja_methods.cc.
//
// The set and the behaviour of all built-ins follow @huggingface/jinja (so that chat templates render
// byte-identically), including its departures from Python Jinja: str.strip/lstrip/rstrip
// ignore their argument and strip all whitespace, `title` and `capitalize` leave the other
// letters alone, `|int` on a float floors, `|length` of a string counts UTF-16 units.
// Additions that @huggingface/jinja rejects (so no template relies on a different result
// there): select/reject, escape, map('filter'), default without parentheses, list/first/
// last/reverse on strings, string methods find/count/join, tests with arguments
// (divisibleby, in, equalto(x), ne, sameas, lt/gt/le/ge), float.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "template/jinja_eval.h"
#include "template/jinja_text.h"

namespace glint::jinja {

bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  const Kind k = v.kind;
  auto need_arg = [&]() -> const Value& {
    if (args.empty()) fail("test '", name, "' needs an argument");
    return args[0];
  };
  if (name == "boolean") return k == Kind::kBool;
  if (name == "callable") return k == Kind::kFunction;
  if (name == "odd" || name == "even") {
    if (k != Kind::kInt) fail("test '", name, "' needs an integer, got ", v.a_type());
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "false") return k == Kind::kBool && !v.b;
  if (name == "true") return k == Kind::kBool && v.b;
  if (name == "none") return k == Kind::kNone;
  if (name == "string") return k == Kind::kString;
  if (name == "number") return k == Kind::kInt || k == Kind::kFloat;
  if (name == "integer") return k == Kind::kInt;
  if (name == "float") return k == Kind::kFloat;
  if (name == "iterable") return k == Kind::kList || k == Kind::kString;
  if (name == "mapping") return k == Kind::kDict;
  if (name == "sequence") return k == Kind::kList || k == Kind::kDict || k == Kind::kString;
  if (name == "lower" || name == "upper")
    return k == Kind::kString && v.s == (name == "lower" ? text::to_lower(v.s) : text::to_upper(v.s));
  if (name == "defined") return k != Kind::kUndefined;
  if (name == "undefined") return k == Kind::kUndefined;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return strict_equals(v, args.empty() ? Value::undefined() : args[0]);
  if (name == "ne" || name == "!=") return !strict_equals(v, need_arg());
  if (name == "divisibleby") {
    const Value& d = need_arg();
    if (k != Kind::kInt || d.kind != Kind::kInt || d.i == 0) fail("test 'divisibleby' needs integers (and a non-zero divisor)");
    return v.i % d.i == 0;
  }
  if (name == "in") {
    const Value& c = need_arg();
    if (c.is_list()) return std::any_of(c.list->begin(), c.list->end(), [&](const Value& x) { return strict_equals(x, v); });
    if (c.is_string() && v.is_string()) return c.s.find(v.s) != std::string::npos;
    if (c.is_dict() && v.is_string()) return c.dict->find(v.s) != nullptr;
    fail("test 'in' needs a list, string or dict, got ", c.a_type());
  }
  if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
    int c = compare_values(v, need_arg(), true);
    return name == "lt" ? c < 0 : name == "gt" ? c > 0 : name == "le" ? c <= 0 : c >= 0;
  }
  fail("unknown test '", name, "'");
}

void install_globals(Scope& s, std::optional<int64_t> fixed_now) {
  s.set("true", Value::boolean(true));
  s.set("false", Value::boolean(false));
  s.set("none", Value::none());
  s.set("True", Value::boolean(true));
  s.set("False", Value::boolean(false));
  s.set("None", Value::none());
  s.set("namespace", Value::function("namespace", [](std::vector<Value>& a, Dict& kw, const ScopePtr&) {
    if (a.size() > 1) fail("namespace() takes at most 1 positional argument, got ", a.size());
    Dict d;
    if (a.size() == 1) {
      if (a[0].is_dict()) {
        d = *a[0].dict;
      } else if (a[0].is_list()) {
        for (const Value& p : *a[0].list) {
          if (!p.is_list() || p.list->size() != 2 || !(*p.list)[0].is_string())
            fail("namespace() expects a dict or a list of [key, value] pairs");
          d.set((*p.list)[0].s, (*p.list)[1]);
        }
      } else {
        fail("namespace() expects a dict or a list of pairs, got ", a[0].a_type());
      }
    }
    for (const auto& kv : kw.items) d.set(kv.first, kv.second);
    return Value::make_namespace(std::move(d));
  }));
  s.set("range", Value::function("range", [](std::vector<Value>& a, Dict&, const ScopePtr&) {
    for (const Value& v : a)
      if (v.kind != Kind::kInt) fail("range() needs integer arguments, got ", v.a_type());
    if (a.empty() || a.size() > 3) fail("range() takes 1 to 3 arguments");
    int64_t start = a.size() == 1 ? 0 : a[0].i, stop = a.size() == 1 ? a[0].i : a[1].i, step = a.size() == 3 ? a[2].i : 1;
    if (step == 0) fail("range() step must not be zero");
    if ((stop - start) / step > 10000000) fail("range() of more than 10^7 items");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
    return Value::make_list(std::move(out));
  }));
  s.set("raise_exception", Value::function("raise_exception", [](std::vector<Value>& a, Dict&, const ScopePtr&) -> Value {
    std::string msg = a.empty() ? "" : a[0].is_string() ? a[0].s : to_output(a[0]);
    fail("raise_exception: ", msg);
  }));
  s.set("strftime_now", Value::function("strftime_now", [fixed_now](std::vector<Value>& a, Dict&, const ScopePtr&) {
    if (a.empty() || !a[0].is_string()) fail("strftime_now() needs a format string");
    static const char* kMonths[] = {"January", "February", "March", "April", "May", "June", "July",
                                    "August", "September", "October", "November", "December"};
    time_t now = fixed_now ? static_cast<time_t>(*fixed_now) : time(nullptr);
    struct tm t;
    localtime_r(&now, &t);
    const std::string& f = a[0].s;
    std::string out;
    char buf[16];
    for (size_t i = 0; i < f.size(); ++i) {
      if (f[i] != '%' || i + 1 >= f.size()) {
        out += f[i];
        continue;
      }
      char c = f[i + 1];
      switch (c) {
        case 'Y': out += std::to_string(t.tm_year + 1900); break;
        case 'm': std::snprintf(buf, sizeof buf, "%02d", t.tm_mon + 1); out += buf; break;
        case 'd': std::snprintf(buf, sizeof buf, "%02d", t.tm_mday); out += buf; break;
        case 'H': std::snprintf(buf, sizeof buf, "%02d", t.tm_hour); out += buf; break;
        case 'M': std::snprintf(buf, sizeof buf, "%02d", t.tm_min); out += buf; break;
        case 'B': out += kMonths[t.tm_mon]; break;
        case 'b': out += std::string(kMonths[t.tm_mon]).substr(0, 3); break;
        case '%': out += '%'; break;
        default: out += '%'; out += c; break;
      }
      ++i;
    }
    return Value::string(out);
  }));
}

}  // namespace glint::jinja
