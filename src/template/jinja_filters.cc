// Filters (x | name, x | name(args)) with @huggingface/jinja's semantics; see
// jinja_builtins.cc for where they depart from Python Jinja and what glint adds.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "template/jinja_eval.h"
#include "template/jinja_text.h"

namespace glint::jinja {
namespace {

// JavaScript parseInt(s, 10) / parseFloat(s); NaN when there is no number prefix.
double js_parse_int(const std::string& s) {
  std::string t = text::trim_start(s);
  size_t k = 0;
  bool neg = false;
  if (k < t.size() && (t[k] == '+' || t[k] == '-')) neg = t[k++] == '-';
  size_t start = k;
  double v = 0;
  while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) v = v * 10 + (t[k++] - '0');
  if (k == start) return NAN;
  return neg ? -v : v;
}
double js_parse_float(const std::string& s) {
  std::string t = text::trim_start(s);
  size_t k = 0;
  if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
  if (t.compare(k, 8, "Infinity") == 0) return t[0] == '-' ? -INFINITY : INFINITY;
  size_t digits = 0;
  while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) ++k, ++digits;
  if (k < t.size() && t[k] == '.') {
    ++k;
    while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) ++k, ++digits;
  }
  if (digits == 0) return NAN;
  if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
    size_t e = k + 1;
    if (e < t.size() && (t[e] == '+' || t[e] == '-')) ++e;
    if (e < t.size() && std::isdigit(static_cast<unsigned char>(t[e]))) {
      while (e < t.size() && std::isdigit(static_cast<unsigned char>(t[e]))) ++e;
      k = e;
    }
  }
  return std::strtod(t.substr(0, k).c_str(), nullptr);
}

Value number_from(double d, bool as_int) {
  if (as_int) return Value::integer(static_cast<int64_t>(d));
  return Value::number(d);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

const std::set<std::string>& known_filters() {
  static const std::set<std::string> k = {
      "safe", "tojson", "default", "d", "join", "int", "float", "escape", "e", "list", "first", "last",
      "length", "count", "reverse", "sort", "string", "unique", "selectattr", "rejectattr", "select",
      "reject", "map", "upper", "lower", "title", "capitalize", "trim", "indent", "replace", "abs",
      "items", "bool", "keys", "values", "dictsort", "get"};
  return k;
}

Value select_items(const std::string& name, const Value& operand, const CallArgs& a) {
  bool attr_mode = name == "selectattr" || name == "rejectattr";
  bool keep = name == "selectattr" || name == "select";
  size_t test_at = attr_mode ? 1 : 0;
  if (attr_mode && (a.pos.empty() || !a.pos[0].is_string())) fail(name, ": needs an attribute name");
  std::string test;
  if (a.pos.size() > test_at) {
    if (!a.pos[test_at].is_string()) fail(name, ": the test name must be a string");
    test = a.pos[test_at].s;
  }
  std::vector<Value> test_args(a.pos.begin() + std::min(a.pos.size(), test_at + 1), a.pos.end());
  List out;
  for (const Value& item : *operand.list) {
    Value v = item;
    bool present = true;
    if (attr_mode) {
      if (!item.is_dict() && item.kind != Kind::kNamespace) fail(name, " can only be applied to a list of dicts");
      const Value* x = item.dict->find(a.pos[0].s);
      present = x != nullptr;
      if (x) v = *x;
    }
    bool r = present && (test.empty() ? v.truthy() : run_test(test, v, test_args));
    if (r == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, bool called, const Value& operand, CallArgs& a) {
  const Kind k = operand.kind;
  if (name == "safe") return operand;
  if (name == "tojson") {
    JsonOptions o;
    if (const Value* v = a.kw.find("indent"); v && !v->is_none()) {
      if (v->kind != Kind::kInt) fail("tojson: indent must be an integer, got ", v->a_type());
      o.indent = static_cast<int>(v->i);
    }
    if (const Value* v = a.kw.find("ensure_ascii")) {
      if (v->kind != Kind::kBool) fail("tojson: ensure_ascii must be a boolean");
      o.ensure_ascii = v->b;
    }
    if (const Value* v = a.kw.find("sort_keys")) {
      if (v->kind != Kind::kBool) fail("tojson: sort_keys must be a boolean");
      o.sort_keys = v->b;
    }
    if (const Value* v = a.kw.find("separators"); v && !v->is_none()) {
      if (!v->is_list() || v->list->size() != 2 || !(*v->list)[0].is_string() || !(*v->list)[1].is_string())
        fail("tojson: separators must be a tuple of two strings");
      o.custom_separators = true;
      o.item_sep = (*v->list)[0].s;
      o.key_sep = (*v->list)[1].s;
    }
    return Value::string(to_json(operand, o));
  }
  if (name == "default" || name == "d") {
    Value dflt = a.pos.size() > 0 ? a.pos[0] : a.kw.find("default_value") ? *a.kw.find("default_value") : Value::string("");
    bool boolean = bool_arg(a, 1, "boolean", false, "default");
    return operand.is_undefined() || (boolean && !operand.truthy()) ? dflt : operand;
  }
  if (name == "join" && (k == Kind::kString || k == Kind::kList)) {
    const Value* sep = arg(a, 0, "separator");
    if (sep && !sep->is_string()) fail("join: the separator must be a string");
    std::string s = sep ? sep->s : "", out;
    if (k == Kind::kString) {
      std::vector<char32_t> cps = text::decode(operand.s);
      for (size_t i = 0; i < cps.size(); ++i) {
        if (i) out += s;
        text::append_utf8(out, cps[i]);
      }
    } else {
      for (size_t i = 0; i < operand.list->size(); ++i) out += (i ? s : "") + join_piece((*operand.list)[i]);
    }
    return Value::string(out);
  }
  if ((name == "int" || name == "float") && (k == Kind::kString || k == Kind::kInt || k == Kind::kFloat || k == Kind::kBool)) {
    bool as_int = name == "int";
    if (k == Kind::kBool) return number_from(operand.b ? 1 : 0, as_int);
    if (k == Kind::kString) {
      double d = as_int ? js_parse_int(operand.s) : js_parse_float(operand.s);
      if (!std::isnan(d)) return number_from(d, as_int);
      if (!called) return number_from(0, as_int);
      const Value* dflt = arg(a, 0, "default");
      return dflt ? *dflt : number_from(0, as_int);
    }
    if (called) return operand;  // as @huggingface/jinja: int(default) keeps numbers as they are
    return as_int ? Value::integer(static_cast<int64_t>(std::floor(operand.as_double()))) : Value::number(operand.as_double());
  }
  if (name == "escape" || name == "e") {
    if (k == Kind::kString || k == Kind::kInt || k == Kind::kFloat || k == Kind::kBool)
      return Value::string(html_escape(to_concat_string(operand)));
  }
  if (k == Kind::kList) {
    const List& l = *operand.list;
    if (name == "list") return operand;
    if (name == "first") return l.empty() ? Value::undefined() : l.front();
    if (name == "last") return l.empty() ? Value::undefined() : l.back();
    if (name == "length" || name == "count") return Value::integer(int64_t(l.size()));
    if (name == "reverse") return Value::make_list(List(l.rbegin(), l.rend()));
    if (name == "string") return Value::string(to_output(operand));
    if (name == "unique") {
      List out;
      for (const Value& v : l)
        if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return strict_equals(o, v); })) out.push_back(v);
      return Value::make_list(std::move(out));
    }
    if (name == "sort") {
      bool rev = bool_arg(a, 0, "reverse", false, "sort");
      bool cs = bool_arg(a, 1, "case_sensitive", false, "sort");
      const Value* attr = arg(a, 2, "attribute");
      List out = l;
      auto key = [&](const Value& v) {
        if (!attr || attr->is_none()) return v;
        return attribute_path(v, attr->kind == Kind::kInt ? std::to_string(attr->i) : attr->s);
      };
      std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
        int r = compare_values(key(x), key(y), cs);
        return rev ? r > 0 : r < 0;
      });
      return Value::make_list(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject")
      return select_items(name, operand, a);
    if (name == "map") {
      List out;
      if (const Value* attr = a.kw.find("attribute")) {
        if (!attr->is_string()) fail("map: attribute must be a string");
        const Value* dflt = a.kw.find("default");
        for (const Value& item : l) {
          if (!item.is_dict() && item.kind != Kind::kNamespace) fail("map(attribute=...) needs a list of dicts, found ", item.a_type());
          Value v = attribute_path(item, attr->s);
          out.push_back(v.is_undefined() && dflt ? *dflt : v);
        }
      } else if (!a.pos.empty() && a.pos[0].is_string()) {
        CallArgs rest{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
        for (const Value& item : l) out.push_back(apply_filter(a.pos[0].s, rest.pos.size() + rest.kw.size() > 0, item, rest));
      } else {
        fail("map needs attribute=... or a filter name");
      }
      return Value::make_list(std::move(out));
    }
  } else if (k == Kind::kString) {
    const std::string& s = operand.s;
    if (name == "length" || name == "count") return Value::integer(text::utf16_length(s));
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      std::vector<Value> none;
      Dict nokw;
      return string_method(s, name).fn->fn(none, nokw, nullptr);
    }
    if (name == "trim") return Value::string(text::trim(s));
    if (name == "string") return operand;
    if (name == "replace") {
      if (a.pos.size() < 2 || !a.pos[0].is_string() || !a.pos[1].is_string()) fail("replace needs two string arguments");
      return Value::string(replace_all(s, a.pos[0].s, a.pos[1].s, arg(a, 2, "count")));
    }
    if (name == "indent") {
      const Value* w = arg(a, 0, "width");
      if (w && w->kind != Kind::kInt) fail("indent: width must be an integer");
      std::string pad(w ? size_t(std::max<int64_t>(0, w->i)) : 4, ' ');
      const Value* first = arg(a, 1, "first");
      const Value* blank = arg(a, 2, "blank");
      bool f = first && first->truthy(), b = blank && blank->truthy();
      std::string out;
      size_t pos = 0, line = 0;
      while (true) {
        size_t nl = s.find('\n', pos);
        std::string part = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        bool skip = (!f && line == 0) || (!b && part.empty());
        out += (skip ? "" : pad) + part;
        if (nl == std::string::npos) break;
        out += '\n';
        pos = nl + 1;
        ++line;
      }
      return Value::string(out);
    }
    if (name == "list" || name == "first" || name == "last" || name == "reverse") {
      std::vector<char32_t> cps = text::decode(s);
      if (name == "first" || name == "last") {
        if (cps.empty()) return Value::undefined();
        return Value::string(text::encode({name == "first" ? cps.front() : cps.back()}));
      }
      if (name == "reverse") return Value::string(text::encode(std::vector<char32_t>(cps.rbegin(), cps.rend())));
      List out;
      for (char32_t c : cps) out.push_back(Value::string(text::encode({c})));
      return Value::make_list(std::move(out));
    }
  } else if (k == Kind::kInt || k == Kind::kFloat) {
    if (name == "abs") return k == Kind::kInt ? Value::integer(std::llabs(operand.i)) : Value::number(std::fabs(operand.f));
    if (name == "string") return Value::string(to_output(operand));
  } else if (k == Kind::kDict) {
    if (name == "items") return pairs_of(*operand.dict);
    if (name == "length" || name == "count") return Value::integer(int64_t(operand.dict->size()));
    if (name == "string") return Value::string(to_output(operand));
    if (name == "list") return dict_method(operand, "keys").fn->fn(a.pos, a.kw, nullptr);
    Value m = dict_method(operand, name);
    if (m.kind == Kind::kFunction) return m.fn->fn(a.pos, a.kw, nullptr);
  } else if (k == Kind::kBool) {
    if (name == "bool") return operand;
    if (name == "string") return Value::string(operand.b ? "true" : "false");
  }
  if (!known_filters().count(name)) fail("unknown filter '", name, "'");
  fail("filter '", name, "' cannot be applied to ", operand.a_type());
}

}  // namespace glint::jinja
