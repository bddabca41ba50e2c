// Methods of strings and dicts (s.split(), d.get(), ...), member access and the value
// ordering of sort/dictsort, with @huggingface/jinja's semantics (see jinja_builtins.cc).
#include <algorithm>
#include <cstdlib>

#include "template/jinja_eval.h"
#include "template/jinja_text.h"

namespace glint::jinja {

const Value* arg(const CallArgs& a, size_t i, const char* kw) {
  if (i < a.pos.size()) return &a.pos[i];
  return a.kw.find(kw);
}

bool bool_arg(const CallArgs& a, size_t i, const char* kw, bool dflt, const char* filter) {
  const Value* v = arg(a, i, kw);
  if (!v) return dflt;
  if (v->kind != Kind::kBool) fail(filter, ": '", kw, "' must be a boolean, got ", v->a_type());
  return v->b;
}

std::string join_piece(const Value& v) {
  if (v.is_none() || v.is_undefined()) return "";
  return to_concat_string(v);
}


std::string replace_all(const std::string& s, const std::string& from, const std::string& to, const Value* count_v) {
  int64_t remaining = -1;
  if (count_v && !count_v->is_none() && !count_v->is_undefined()) {
    if (count_v->kind != Kind::kInt) fail("replace: count must be an integer, got ", count_v->a_type());
    remaining = count_v->i;
  }
  if (remaining == 0) return s;
  std::string out;
  if (from.empty()) {
    std::vector<char32_t> cps = text::decode(s);
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (remaining != 0) {
        out += to;
        if (remaining > 0) --remaining;
      }
      if (k < cps.size()) text::append_utf8(out, cps[k]);
    }
    return out;
  }
  size_t pos = 0;
  while (true) {
    size_t f = remaining == 0 ? std::string::npos : s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    if (remaining > 0) --remaining;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

static Value split_string(const std::string& s, const Value* sep, const Value* maxsplit_v) {
  int64_t maxsplit = -1;
  if (maxsplit_v) {
    if (maxsplit_v->kind != Kind::kInt) fail("split: maxsplit must be an integer");
    maxsplit = maxsplit_v->i;
  }
  List out;
  if (!sep || sep->is_none()) {
    std::vector<char32_t> t = text::decode(text::trim_start(s));
    size_t k = 0;
    while (k < t.size()) {
      size_t start = k;
      while (k < t.size() && !text::is_js_space(t[k])) ++k;
      if (maxsplit != -1 && int64_t(out.size()) >= maxsplit) {
        out.push_back(Value::string(text::encode(std::vector<char32_t>(t.begin() + start, t.end()))));
        break;
      }
      out.push_back(Value::string(text::encode(std::vector<char32_t>(t.begin() + start, t.begin() + k))));
      while (k < t.size() && text::is_js_space(t[k])) ++k;
    }
    return Value::make_list(std::move(out));
  }
  if (!sep->is_string()) fail("split: the separator must be a string or none, got ", sep->a_type());
  if (sep->s.empty()) fail("split: empty separator");
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t f = s.find(sep->s, pos);
    if (f == std::string::npos) break;
    parts.push_back(s.substr(pos, f - pos));
    pos = f + sep->s.size();
  }
  parts.push_back(s.substr(pos));
  if (maxsplit != -1 && int64_t(parts.size()) > maxsplit) {
    std::string rest;
    for (size_t k = size_t(maxsplit); k < parts.size(); ++k) rest += (k > size_t(maxsplit) ? sep->s : "") + parts[k];
    parts.resize(size_t(maxsplit));
    parts.push_back(rest);
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::make_list(std::move(out));
}

static bool affix_match(const std::string& s, const Value& pattern, bool prefix, const char* name) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (pattern.is_string()) return one(pattern.s);
  if (pattern.is_list()) {
    for (const Value& v : *pattern.list) {
      if (!v.is_string()) fail(name, ": tuple elements must be strings");
      if (one(v.s)) return true;
    }
    return false;
  }
  fail(name, ": the argument must be a string or a tuple of strings, got ", pattern.a_type());
}

Value pairs_of(const Dict& d) {
  List out;
  for (const auto& kv : d.items) out.push_back(Value::make_list({Value::string(kv.first), kv.second}));
  return Value::make_list(std::move(out));
}

static Value dictsort(const Dict& d, const CallArgs& a) {
  bool cs = bool_arg(a, 0, "case_sensitive", false, "dictsort");
  const Value* by = arg(a, 1, "by");
  std::string by_s = by ? by->s : "key";
  if (by && (!by->is_string() || (by->s != "key" && by->s != "value")))
    fail("dictsort: 'by' must be 'key' or 'value'");
  bool rev = bool_arg(a, 2, "reverse", false, "dictsort");
  List items = *pairs_of(d).list;
  size_t idx = by_s == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    int r = compare_values((*x.list)[idx], (*y.list)[idx], cs);
    return rev ? r > 0 : r < 0;
  });
  return Value::make_list(std::move(items));
}

// Dotted attribute path ("a.b", "items.0") for sort(attribute=) and map(attribute=).
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (v.is_dict() || v.kind == Kind::kNamespace) {
      const Value* x = v.dict->find(part);
      v = x ? *x : Value::undefined();
    } else if (v.is_list()) {
      char* end = nullptr;
      long idx = std::strtol(part.c_str(), &end, 10);
      if (part.empty() || end == part.c_str() || idx < 0 || size_t(idx) >= v.list->size()) return Value::undefined();
      v = (*v.list)[size_t(idx)];
    } else {
      return Value::undefined();
    }
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

static Value bound(const std::string& name, std::function<Value(std::vector<Value>&, Dict&)> f) {
  return Value::function(name, [f](std::vector<Value>& a, Dict& k, const ScopePtr&) { return f(a, k); });
}

Value string_method(const std::string& s, const std::string& name) {
  auto noarg = [&](std::function<std::string(const std::string&)> g) {
    return bound(name, [s, g](std::vector<Value>&, Dict&) { return Value::string(g(s)); });
  };
  if (name == "upper") return noarg(text::to_upper);
  if (name == "lower") return noarg(text::to_lower);
  if (name == "strip") return noarg(text::trim);
  if (name == "lstrip") return noarg(text::trim_start);
  if (name == "rstrip") return noarg(text::trim_end);
  if (name == "title") return noarg(text::title_case);
  if (name == "capitalize")
    return noarg([](const std::string& x) {
      std::vector<char32_t> c = text::decode(x);
      if (c.empty()) return x;
      return text::to_upper(text::encode({c[0]})) + text::encode(std::vector<char32_t>(c.begin() + 1, c.end()));
    });
  if (name == "length") return Value::integer(text::utf16_length(s));
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return bound(name, [s, prefix, name](std::vector<Value>& a, Dict&) {
      if (a.empty()) fail(name, "() needs an argument");
      return Value::boolean(affix_match(s, a[0], prefix, name.c_str()));
    });
  }
  if (name == "split")
    return bound(name, [s](std::vector<Value>& a, Dict& k) {
      CallArgs c{a, k};
      return split_string(s, arg(c, 0, "sep"), arg(c, 1, "maxsplit"));
    });
  if (name == "replace")
    return bound(name, [s](std::vector<Value>& a, Dict& k) {
      if (a.size() < 2 || !a[0].is_string() || !a[1].is_string()) fail("replace() needs two string arguments");
      CallArgs c{a, k};
      return Value::string(replace_all(s, a[0].s, a[1].s, arg(c, 2, "count")));
    });
  if (name == "find" || name == "count")
    return bound(name, [s, name](std::vector<Value>& a, Dict&) {
      if (a.empty() || !a[0].is_string()) fail(name, "() needs a string argument");
      const std::string& sub = a[0].s;
      if (name == "find") {
        size_t f = s.find(sub);
        return Value::integer(f == std::string::npos ? -1 : text::utf16_length(s.substr(0, f)));
      }
      if (sub.empty()) return Value::integer(int64_t(text::decode(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    });
  if (name == "join")
    return bound(name, [s](std::vector<Value>& a, Dict&) {
      if (a.empty() || !a[0].is_list()) fail("join() needs a list argument");
      std::string out;
      for (size_t k = 0; k < a[0].list->size(); ++k) out += (k ? s : "") + join_piece((*a[0].list)[k]);
      return Value::string(out);
    });
  return Value::undefined();
}

Value dict_method(const Value& obj, const std::string& name) {
  std::shared_ptr<Dict> d = obj.dict;
  if (name == "get")
    return bound(name, [d](std::vector<Value>& a, Dict&) {
      if (a.empty() || !a[0].is_string()) fail("get() needs a string key, got ", a.empty() ? "nothing" : a[0].a_type());
      if (const Value* v = d->find(a[0].s)) return *v;
      return a.size() > 1 ? a[1] : Value::none();
    });
  if (name == "items") return bound(name, [d](std::vector<Value>&, Dict&) { return pairs_of(*d); });
  if (name == "keys")
    return bound(name, [d](std::vector<Value>&, Dict&) {
      List out;
      for (const auto& kv : d->items) out.push_back(Value::string(kv.first));
      return Value::make_list(std::move(out));
    });
  if (name == "values")
    return bound(name, [d](std::vector<Value>&, Dict&) {
      List out;
      for (const auto& kv : d->items) out.push_back(kv.second);
      return Value::make_list(std::move(out));
    });
  if (name == "dictsort") return bound(name, [d](std::vector<Value>& a, Dict& k) { return dictsort(*d, CallArgs{a, k}); });
  return Value::undefined();
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (a.is_none() || b.is_none() || a.is_undefined() || b.is_undefined())
    fail("cannot compare ", a.a_type(), " with ", b.a_type());
  bool an = a.is_numeric() || a.kind == Kind::kBool, bn = b.is_numeric() || b.kind == Kind::kBool;
  if (an && bn) {
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind != b.kind) fail("cannot compare ", a.a_type(), " with ", b.a_type());
  if (!a.is_string()) fail("cannot order ", a.a_type(), " values");
  std::string x = case_sensitive ? a.s : text::to_lower(a.s), y = case_sensitive ? b.s : text::to_lower(b.s);
  return x < y ? -1 : x > y ? 1 : 0;
}

Value get_member(const Value& obj, const Value& key) {
  if (obj.is_dict() || obj.kind == Kind::kNamespace) {
    if (!key.is_string()) fail("cannot index ", obj.a_type(), " with ", key.a_type(), " (keys are strings)");
    if (const Value* v = obj.dict->find(key.s)) return *v;
    return obj.is_dict() ? dict_method(obj, key.s) : Value::undefined();
  }
  if (obj.is_list() || obj.is_string()) {
    if (key.kind == Kind::kInt) {
      if (obj.is_list()) {
        int64_t n = int64_t(obj.list->size()), i = key.i < 0 ? key.i + n : key.i;
        return i >= 0 && i < n ? (*obj.list)[size_t(i)] : Value::undefined();
      }
      std::vector<char32_t> cps = text::decode(obj.s);
      int64_t n = int64_t(cps.size()), i = key.i < 0 ? key.i + n : key.i;
      return i >= 0 && i < n ? Value::string(text::encode({cps[size_t(i)]})) : Value::undefined();
    }
    if (key.is_string()) {
      if (obj.is_list()) return key.s == "length" ? Value::integer(int64_t(obj.list->size())) : Value::undefined();
      return string_method(obj.s, key.s);
    }
    fail("cannot index ", obj.a_type(), " with ", key.a_type());
  }
  if (!key.is_string()) {
    std::string shown = key.kind == Kind::kInt ? std::to_string(key.i) : key.type_name();
    fail("cannot index ", obj.a_type(), " with [",
         shown, "]");
  }
  return Value::undefined();
}

}  // namespace glint::jinja
