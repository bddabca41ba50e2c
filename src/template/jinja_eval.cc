#include "template/jinja_eval.h"

#include <algorithm>
#include <cmath>

#include "template/jinja_text.h"

namespace glint::jinja {
namespace {

struct BreakSignal {
  int line;
};
struct ContinueSignal {
  int line;
};

constexpr int kMaxCallDepth = 200;
// Bounds evaluation recursion (nested blocks inside recursive macros) below the stack size.
constexpr int kMaxEvalDepth = 1500;

// True when `name` appears as a variable anywhere in `nodes` (macro kwargs / varargs).
bool mentions(const std::vector<NodePtr>& nodes, const std::string& name);
bool mentions(const Node* n, const std::string& name) {
  if (!n) return false;
  if (n->kind == NodeKind::kIdent && n->str == name) return true;
  return mentions(n->a.get(), name) || mentions(n->b.get(), name) || mentions(n->c.get(), name) ||
         mentions(n->args, name) || mentions(n->body, name) || mentions(n->alt, name);
}
bool mentions(const std::vector<NodePtr>& nodes, const std::string& name) {
  for (const auto& n : nodes)
    if (mentions(n.get(), name)) return true;
  return false;
}

// Python-style slice with @huggingface/jinja's bounds rules.
template <typename T>
std::vector<T> slice_items(const std::vector<T>& v, const Value& start_v, const Value& stop_v,
                           const Value& step_v) {
  int64_t len = static_cast<int64_t>(v.size());
  int64_t step = step_v.is_undefined() ? 1 : step_v.i;
  int64_t dir = step > 0 ? 1 : step < 0 ? -1 : 0;
  int64_t start, stop;
  if (dir >= 0) {
    start = start_v.is_undefined() ? 0 : start_v.i;
    stop = stop_v.is_undefined() ? len : stop_v.i;
    start = start < 0 ? std::max<int64_t>(len + start, 0) : std::min(start, len);
    stop = stop < 0 ? std::max<int64_t>(len + stop, 0) : std::min(stop, len);
  } else {
    start = start_v.is_undefined() ? len - 1 : start_v.i;
    stop = stop_v.is_undefined() ? -1 : stop_v.i;
    start = start < 0 ? std::max<int64_t>(len + start, -1) : std::min(start, len - 1);
    stop = stop < -1 ? std::max<int64_t>(len + stop, -1) : std::min(stop, len - 1);
  }
  std::vector<T> out;
  if (dir == 0) return out;
  for (int64_t i = start; dir * i < dir * stop; i += step) out.push_back(v[static_cast<size_t>(i)]);
  return out;
}

void set_target(const Node& target, const Value& v, const ScopePtr& env, const char* what) {
  if (target.kind == NodeKind::kIdent) {
    env->set(target.str, v);
    return;
  }
  if (target.kind != NodeKind::kTuple) fail("cannot assign to this expression in ", what);
  if (!v.is_list()) fail("cannot unpack ", v.a_type(), " in ", what);
  if (v.list->size() != target.args.size())
    fail("too ", v.list->size() < target.args.size() ? "few" : "many", " values to unpack in ", what,
         " (expected ", target.args.size(), ", got ", v.list->size(), ")");
  for (size_t k = 0; k < target.args.size(); ++k) {
    if (target.args[k]->kind != NodeKind::kIdent) fail("can only unpack into names in ", what);
    env->set(target.args[k]->str, (*v.list)[k]);
  }
}

}  // namespace

Value Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    if (const Value* v = s->vars.find(name)) return *v;
  return Value::undefined();
}

std::string Interpreter::render(const std::vector<NodePtr>& program, const ScopePtr& globals) {
  try {
    return eval_block(program, globals);
  } catch (const BreakSignal& b) {
    fail(name_, " line ", b.line, ": {% break %} outside a loop");
  } catch (const ContinueSignal& c) {
    fail(name_, " line ", c.line, ": {% continue %} outside a loop");
  }
}

Value Interpreter::eval(const Node& n, const ScopePtr& env) {
  struct Guard {
    int& d;
    explicit Guard(int& depth) : d(depth) { ++d; }
    ~Guard() { --d; }
  } guard(depth_);
  try {
    if (depth_ > kMaxEvalDepth) fail("evaluation nested deeper than ", kMaxEvalDepth, " levels (runaway macro recursion?)");
    return eval_node(n, env);
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& e) {
    throw LocatedError(detail::concat(name_, " line ", n.line, ": ", e.what()));
  }
}

std::string Interpreter::eval_block(const std::vector<NodePtr>& body, const ScopePtr& env) {
  std::string out;
  for (const auto& st : body) {
    Value v = eval(*st, env);
    if (!v.is_none() && !v.is_undefined()) out += to_output(v);
  }
  return out;
}

CallArgs Interpreter::eval_args(const std::vector<NodePtr>& args, const ScopePtr& env) {
  CallArgs out;
  for (const auto& a : args) {
    if (a->kind == NodeKind::kSpread) {
      Value v = eval(*a->a, env);
      if (!v.is_list()) fail("cannot unpack ", v.a_type(), " with *");
      for (const Value& x : *v.list) out.pos.push_back(x);
    } else if (a->kind != NodeKind::kKwarg && a->kind != NodeKind::kKwSpread) {
      out.pos.push_back(eval(*a, env));
    }
  }
  auto add = [&](const std::string& k, Value v) {
    if (out.kw.find(k)) fail("got multiple values for keyword argument '", k, "'");
    out.kw.set(k, std::move(v));
  };
  for (const auto& a : args) {
    if (a->kind == NodeKind::kKwarg) {
      add(a->str, eval(*a->a, env));
    } else if (a->kind == NodeKind::kKwSpread) {
      Value v = eval(*a->a, env);
      if (!v.is_dict()) fail("the argument after ** must be a dict, not ", v.a_type());
      for (const auto& kv : v.dict->items) add(kv.first, kv.second);
    }
  }
  return out;
}

Value Interpreter::eval_node(const Node& n, const ScopePtr& env) {
  switch (n.kind) {
    case NodeKind::kText:
    case NodeKind::kString: return Value::string(n.str);
    case NodeKind::kInt: return Value::integer(n.ival);
    case NodeKind::kFloat: return Value::number(n.fval);
    case NodeKind::kIdent: return env->lookup(n.str);
    case NodeKind::kList:
    case NodeKind::kTuple: {
      List l;
      for (const auto& a : n.args) l.push_back(eval(*a, env));
      return Value::make_list(std::move(l));
    }
    case NodeKind::kDict: {
      Dict d;
      for (size_t k = 0; k + 1 < n.args.size(); k += 2) {
        Value key = eval(*n.args[k], env);
        if (!key.is_string()) fail("dict keys must be strings, got ", key.a_type());
        d.set(key.s, eval(*n.args[k + 1], env));
      }
      return Value::make_dict(std::move(d));
    }
    case NodeKind::kMember: return eval_member(n, env);
    case NodeKind::kCall: return eval_call(n, env);
    case NodeKind::kUnary: {
      Value v = eval(*n.a, env);
      if (n.str == "not") return Value::boolean(!v.truthy());
      int sign = n.str == "-" ? -1 : 1;
      if (v.kind == Kind::kFloat) return Value::number(sign * v.f);
      if (v.kind == Kind::kInt || v.kind == Kind::kBool) return Value::integer(sign * (v.kind == Kind::kBool ? int64_t(v.b) : v.i));
      fail("unary '", n.str, "' needs a number, got ", v.a_type());
    }
    case NodeKind::kBinary: return eval_binary(n, env);
    case NodeKind::kFilter: {
      if (n.b) fail("a call or member access after the filter call '", n.str, "(...)' is not supported");
      Value operand = eval(*n.a, env);
      CallArgs args = eval_args(n.args, env);
      return apply_filter(n.str, n.flag, operand, args);
    }
    case NodeKind::kTest: {
      Value operand = eval(*n.a, env);
      CallArgs args = eval_args(n.args, env);
      bool r = run_test(n.str, operand, args.pos);
      return Value::boolean(n.flag ? !r : r);
    }
    case NodeKind::kSelect: return eval(*n.b, env).truthy() ? eval(*n.a, env) : Value::undefined();
    case NodeKind::kTernary: return eval(*n.a, env).truthy() ? eval(*n.b, env) : eval(*n.c, env);
    case NodeKind::kIf: return Value::string(eval_block(eval(*n.a, env).truthy() ? n.body : n.alt, env));
    case NodeKind::kFor: return eval_for(n, env);
    case NodeKind::kSet: eval_set(n, env); return Value::none();
    case NodeKind::kMacro: env->set(n.str, make_macro(n)); return Value::none();
    case NodeKind::kCallBlock: {
      const Node* node = &n;
      bool kw = mentions(n.body, "kwargs"), va = mentions(n.body, "varargs");
      ScopePtr def_env = env;
      Value caller = Value::function("caller", [this, node, def_env, kw, va](std::vector<Value>& a, Dict& k, const ScopePtr&) {
        auto scope = std::make_shared<Scope>(def_env);
        bind_parameters("caller", node->args, kw, va, a, k, scope);
        return Value::string(eval_block(node->body, scope));
      });
      CallArgs ca = eval_args(n.a->args, env);
      Value fn = eval(*n.a->a, env);
      if (fn.kind != Kind::kFunction) fail("{% call %} needs a macro, '", n.a->a->str, "' is ", fn.a_type());
      auto call_env = std::make_shared<Scope>(env);
      call_env->set("caller", caller);
      return fn.fn->fn(ca.pos, ca.kw, call_env);
    }
    case NodeKind::kFilterBlock: {
      Value body = Value::string(eval_block(n.body, env));
      CallArgs args = eval_args(n.a->args, env);
      return apply_filter(n.a->str, n.a->flag, body, args);
    }
    case NodeKind::kBreak: throw BreakSignal{n.line};
    case NodeKind::kContinue: throw ContinueSignal{n.line};
    case NodeKind::kComment: return Value::none();
    default: fail("unexpected expression here");
  }
}

Value Interpreter::eval_member(const Node& n, const ScopePtr& env) {
  Value obj = eval(*n.a, env);
  if (n.flag && n.b->kind == NodeKind::kSlice) {
    const Node& s = *n.b;
    Value part[3];
    const Node* nodes[3] = {s.a.get(), s.b.get(), s.c.get()};
    for (int k = 0; k < 3; ++k) {
      if (nodes[k]) part[k] = eval(*nodes[k], env);
      if (!part[k].is_undefined() && part[k].kind != Kind::kInt)
        fail("slice bounds must be integers, got ", part[k].a_type());
    }
    if (obj.is_list()) return Value::make_list(slice_items(*obj.list, part[0], part[1], part[2]));
    if (obj.is_string()) return Value::string(text::encode(slice_items(text::decode(obj.s), part[0], part[1], part[2])));
    fail("cannot slice ", obj.a_type());
  }
  Value key;
  if (n.flag) key = eval(*n.b, env);
  else if (n.b->kind == NodeKind::kInt) key = Value::integer(n.b->ival);
  else key = Value::string(n.b->str);
  return get_member(obj, key);
}

Value Interpreter::eval_call(const Node& n, const ScopePtr& env) {
  CallArgs args = eval_args(n.args, env);
  Value fn = eval(*n.a, env);
  if (fn.kind != Kind::kFunction) {
    const Node& c = *n.a;
    if (c.kind == NodeKind::kMember && !c.flag && c.b->kind == NodeKind::kString) {
      Value obj = eval(*c.a, env);
      if (fn.is_undefined()) fail("unknown method '", c.b->str, "' of ", obj.a_type());
      fail("'", c.b->str, "' of ", obj.a_type(), " is ", fn.a_type(), ", not a function");
    }
    if (c.kind == NodeKind::kIdent) {
      if (fn.is_undefined()) fail("unknown function '", c.str, "'");
      fail("'", c.str, "' is ", fn.a_type(), ", not a function");
    }
    fail("cannot call ", fn.a_type());
  }
  return fn.fn->fn(args.pos, args.kw, env);
}

Value Interpreter::eval_binary(const Node& n, const ScopePtr& env) {
  const std::string& op = n.str;
  Value l = eval(*n.a, env);
  if (op == "and") return l.truthy() ? eval(*n.b, env) : l;
  if (op == "or") return l.truthy() ? l : eval(*n.b, env);
  Value r = eval(*n.b, env);
  if (op == "==") return Value::boolean(loose_equals(l, r));
  if (op == "!=") return Value::boolean(!loose_equals(l, r));
  bool membership = op == "in" || op == "not in";
  if (l.is_undefined() || r.is_undefined()) {
    if (r.is_undefined() && membership) return Value::boolean(op == "not in");
    fail("cannot apply '", op, "' to an undefined value (", l.is_undefined() ? "left" : "right", " side)");
  }
  if (l.is_none() || r.is_none())
    fail("cannot apply '", op, "' to none (", l.is_none() ? "left" : "right", " side)");
  if (op == "~") return Value::string(to_concat_string(l) + to_concat_string(r));
  bool l_num = l.is_numeric() || l.kind == Kind::kBool, r_num = r.is_numeric() || r.kind == Kind::kBool;
  if (op == "**" && l_num && r_num) {
    double a = l.as_double(), b = r.as_double();
    if (a == 0 && b < 0) fail("0 cannot be raised to a negative power");
    double res = std::pow(a, b);
    if (!std::isfinite(res)) fail("'**' result is not a finite real number");
    if (l.kind == Kind::kFloat || r.kind == Kind::kFloat || b < 0) return Value::number(res);
    return Value::integer(static_cast<int64_t>(res));
  }
  if (l.is_numeric() && r.is_numeric()) {
    bool is_float = l.kind == Kind::kFloat || r.kind == Kind::kFloat;
    double a = l.as_double(), b = r.as_double();
    if (op == "+" || op == "-" || op == "*") {
      if (!is_float) return Value::integer(op == "+" ? l.i + r.i : op == "-" ? l.i - r.i : l.i * r.i);
      return Value::number(op == "+" ? a + b : op == "-" ? a - b : a * b);
    }
    if ((op == "/" || op == "//" || op == "%") && b == 0)
      fail("division or modulo by zero");  // @huggingface/jinja would print Infinity or NaN
    if (op == "/") return Value::number(a / b);
    if (op == "//" || op == "%") {
      if (!is_float) {
        if (op == "%") return Value::integer(l.i % r.i);
        return Value::integer(static_cast<int64_t>(std::floor(a / b)));
      }
      return Value::number(op == "%" ? std::fmod(a, b) : std::floor(a / b));
    }
    if (op == "<") return Value::boolean(a < b);
    if (op == ">") return Value::boolean(a > b);
    if (op == "<=") return Value::boolean(a <= b);
    if (op == ">=") return Value::boolean(a >= b);
  } else if (l.is_list() && r.is_list()) {
    if (op == "+") {
      List out = *l.list;
      out.insert(out.end(), r.list->begin(), r.list->end());
      return Value::make_list(std::move(out));
    }
  } else if (r.is_list() && membership) {
    bool found = false;
    for (const Value& x : *r.list)
      if (strict_equals(x, l)) found = true;
    return Value::boolean(found == (op == "in"));
  }
  if ((l.is_string() || r.is_string()) && op == "+") return Value::string(to_concat_string(l) + to_concat_string(r));
  if (l.is_string() && r.is_string() && membership)
    return Value::boolean((r.s.find(l.s) != std::string::npos) == (op == "in"));
  if (l.is_string() && r.is_dict() && membership) return Value::boolean((r.dict->find(l.s) != nullptr) == (op == "in"));
  fail("unsupported operator '", op, "' between ", l.a_type(), " and ", r.a_type());
}

Value Interpreter::eval_for(const Node& n, const ScopePtr& env) {
  auto scope = std::make_shared<Scope>(env);
  Value it = eval(*n.b, scope);
  if (it.is_dict()) {
    List keys;
    for (const auto& kv : it.dict->items) keys.push_back(Value::string(kv.first));
    it = Value::make_list(std::move(keys));
  }
  if (!it.is_list()) fail("cannot loop over ", it.a_type(), " (expected a list or a dict)");
  List items;
  for (const Value& x : *it.list) {
    if (n.a->kind == NodeKind::kTuple && !x.is_list()) fail("cannot unpack ", x.a_type(), " into the loop variables");
    if (n.c) {
      auto test_scope = std::make_shared<Scope>(scope);
      set_target(*n.a, x, test_scope, "a for loop");
      if (!eval(*n.c, test_scope).truthy()) continue;
    }
    items.push_back(x);
  }
  std::string out;
  bool iterated = false;
  int64_t len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    Dict loop;
    loop.set("index", Value::integer(i + 1));
    loop.set("index0", Value::integer(i));
    loop.set("revindex", Value::integer(len - i));
    loop.set("revindex0", Value::integer(len - i - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == len - 1));
    loop.set("length", Value::integer(len));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined());
    loop.set("nextitem", i < len - 1 ? items[i + 1] : Value::undefined());
    scope->set("loop", Value::make_dict(std::move(loop)));
    set_target(*n.a, items[i], scope, "a for loop");
    try {
      out += eval_block(n.body, scope);
    } catch (const ContinueSignal&) {
      continue;  // as in @huggingface/jinja, a continued pass does not count for {% else %}
    } catch (const BreakSignal&) {
      break;
    }
    iterated = true;
  }
  if (!iterated) out += eval_block(n.alt, scope);
  return Value::string(std::move(out));
}

void Interpreter::eval_set(const Node& n, const ScopePtr& env) {
  Value rhs = n.b ? eval(*n.b, env) : Value::string(eval_block(n.body, env));
  const Node& t = *n.a;
  if (t.kind == NodeKind::kMember) {
    Value obj = eval(*t.a, env);
    if (obj.kind != Kind::kNamespace)
      fail("cannot assign an attribute of ", obj.a_type(), " (only of a namespace())");
    if (t.flag) fail("assign namespace attributes with ns.name = ..., not ns[...]");
    obj.dict->set(t.b->str, rhs);
    return;
  }
  set_target(t, rhs, env, "set");
}

Value Interpreter::make_macro(const Node& n) {
  const Node* node = &n;
  bool kw = mentions(n.body, "kwargs"), va = mentions(n.body, "varargs");
  return Value::function(n.str, [this, node, kw, va](std::vector<Value>& args, Dict& kwargs, const ScopePtr& caller) {
    static thread_local int depth = 0;
    if (depth >= kMaxCallDepth) fail("macro '", node->str, "' nested deeper than ", kMaxCallDepth, " calls");
    struct Guard {
      Guard() { ++depth; }
      ~Guard() { --depth; }
    } guard;
    auto scope = std::make_shared<Scope>(caller);
    bind_parameters("macro '" + node->str + "'", node->args, kw, va, args, kwargs, scope);
    return Value::string(eval_block(node->body, scope));
  });
}

void Interpreter::bind_parameters(const std::string& what, const std::vector<NodePtr>& params, bool uses_kwargs,
                                  bool uses_varargs, std::vector<Value>& args, Dict& kwargs,
                                  const ScopePtr& scope) {
  Dict kw = kwargs;
  std::vector<const Node*> pending;
  for (size_t k = 0; k < params.size(); ++k) {
    const Node& p = *params[k];
    Value v;
    bool have = false;
    if (k < args.size()) {
      v = args[k];
      have = true;
    } else if (const Value* x = kw.find(p.str)) {
      v = *x;
      kw.erase(p.str);
      have = true;
    }
    if (!have && p.kind == NodeKind::kKwarg) pending.push_back(&p);
    scope->set(p.str, have ? v : Value::undefined());
  }
  if (uses_kwargs) scope->set("kwargs", Value::make_dict(kw));
  else if (kw.size() > 0) fail(what, " got an unexpected keyword argument '", kw.items[0].first, "'");
  if (uses_varargs) {
    List rest;
    for (size_t k = params.size(); k < args.size(); ++k) rest.push_back(args[k]);
    scope->set("varargs", Value::make_list(std::move(rest)));
  } else if (args.size() > params.size()) {
    fail(what, " takes at most ", params.size(), " argument(s), got ", args.size());
  }
  for (const Node* p : pending) scope->set(p->str, eval(*p->a, scope));
}

}  // namespace glint::jinja
