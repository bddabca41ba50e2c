#include "template/jinja_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <utility>

#include "core/error.h"

namespace glint::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& t, const std::string& name) : toks_(t), name_(name) {
    end_.type = Tok::kEnd;
    end_.line = t.empty() ? 1 : t.back().line;
  }

  std::vector<NodePtr> program() {
    std::vector<NodePtr> out;
    while (cur_ < toks_.size()) out.push_back(any());
    return out;
  }

 private:
  const std::vector<Token>& toks_;
  std::string name_;
  size_t cur_ = 0;
  int depth_ = 0;  // nesting of expressions and blocks being parsed

  // Bounds the parser's recursion so that a hostile template cannot overflow the stack.
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > kMaxDepth) p->error_at(p->line(), "template nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~DepthGuard() { --p->depth_; }
  };
  static constexpr int kMaxDepth = 512;

  // Sets n->height from its expression children; a tree taller than kMaxDepth (a
  // thousand chained `+` or `[0]`) is an error, so evaluation recursion stays bounded.
  NodePtr seal(NodePtr n) {
    auto h = [](const NodePtr& p) { return p ? p->height : 0; };
    int m = std::max({h(n->a), h(n->b), h(n->c)});
    for (const auto& x : n->args) m = std::max(m, h(x));
    n->height = m + 1;
    if (n->height > kMaxDepth) error_at(n->line, "expression nested deeper than " + std::to_string(kMaxDepth) + " levels");
    return n;
  }
  Token end_;
  std::vector<std::pair<std::string, int>> open_;  // open blocks: tag and line

  const Token& peek(size_t k = 0) const { return cur_ + k < toks_.size() ? toks_[cur_ + k] : end_; }
  const Token& next() {
    const Token& t = peek();
    if (cur_ < toks_.size()) ++cur_;
    return t;
  }
  int line() const { return peek().line; }

  [[noreturn]] void error_at(int line, const std::string& msg) const { fail(name_, " line ", line, ": ", msg); }
  [[noreturn]] void unexpected(const std::string& expected) const {
    const Token& t = peek();
    if (t.type == Tok::kEnd) {
      std::string msg = "unexpected end of template (expected " + expected + ")";
      if (!open_.empty())
        msg += "; the '" + open_.back().first + "' block opened at line " +
               std::to_string(open_.back().second) + " is not closed (missing {% end" +
               open_.back().first + " %})";
      error_at(t.line, msg);
    }
    std::string got = token_name(t.type);
    if (t.type != Tok::kText && t.type != Tok::kComment && t.type != Tok::kEnd) got += " '" + t.value + "'";
    error_at(t.line, "expected " + expected + ", got " + got);
  }

  bool is(Tok t) const { return peek().type == t; }
  void expect(Tok t, const std::string& what) {
    if (!is(t)) unexpected(what);
    next();
  }
  bool is_ident(const char* v, size_t k = 0) const { return peek(k).type == Tok::kIdent && peek(k).value == v; }
  void expect_ident(const char* v) {
    if (!is_ident(v)) unexpected(std::string("'") + v + "'");
    next();
  }
  bool is_statement(std::initializer_list<const char*> names) const {
    if (peek().type != Tok::kOpenStatement || peek(1).type != Tok::kIdent) return false;
    for (const char* n : names)
      if (peek(1).value == n) return true;
    return false;
  }
  NodePtr make(NodeKind k, int l) { return std::make_unique<Node>(k, l); }

  // {% end<tag> %}
  void close_block(const char* tag) {
    if (!is(Tok::kOpenStatement)) unexpected(std::string("{% end") + tag + " %}");
    next();
    expect_ident((std::string("end") + tag).c_str());
    expect(Tok::kCloseStatement, "'%}'");
    open_.pop_back();
  }

  NodePtr any() {
    DepthGuard guard(this);
    const Token& t = peek();
    switch (t.type) {
      case Tok::kComment: {
        next();
        return make(NodeKind::kComment, t.line);
      }
      case Tok::kText: {
        NodePtr n = make(NodeKind::kText, t.line);
        n->str = next().value;
        return n;
      }
      case Tok::kOpenStatement: return statement();
      case Tok::kOpenExpression: {
        next();
        NodePtr e = expression();
        expect(Tok::kCloseExpression, "'}}'");
        return e;
      }
      default: unexpected("text, '{{' or '{%'");
    }
  }

  NodePtr statement() {
    next();  // {%
    if (!is(Tok::kIdent)) unexpected("a tag name");
    const Token& tag = next();
    int l = tag.line;
    const std::string& name = tag.value;
    if (name == "set") return set_statement(l);
    if (name == "if") {
      open_.emplace_back("if", l);
      NodePtr n = if_statement(l);
      close_block("if");
      return n;
    }
    if (name == "for") {
      open_.emplace_back("for", l);
      NodePtr n = for_statement(l);
      close_block("for");
      return n;
    }
    if (name == "macro") {
      open_.emplace_back("macro", l);
      NodePtr n = make(NodeKind::kMacro, l);
      if (!is(Tok::kIdent)) unexpected("a macro name");
      n->str = next().value;
      n->args = arguments(true);
      expect(Tok::kCloseStatement, "'%}'");
      while (!is_statement({"endmacro"})) n->body.push_back(any());
      close_block("macro");
      return n;
    }
    if (name == "call") {
      open_.emplace_back("call", l);
      NodePtr n = make(NodeKind::kCallBlock, l);
      if (is(Tok::kOpenParen)) n->args = arguments(true);
      if (!is(Tok::kIdent)) unexpected("the name of the macro to call");
      NodePtr callee = make(NodeKind::kIdent, line());
      callee->str = next().value;
      NodePtr call = make(NodeKind::kCall, l);
      call->a = std::move(callee);
      call->args = arguments(false);
      n->a = std::move(call);
      expect(Tok::kCloseStatement, "'%}'");
      while (!is_statement({"endcall"})) n->body.push_back(any());
      close_block("call");
      return n;
    }
    if (name == "filter") {
      open_.emplace_back("filter", l);
      NodePtr n = make(NodeKind::kFilterBlock, l);
      n->a = filter_node(nullptr);
      expect(Tok::kCloseStatement, "'%}'");
      while (!is_statement({"endfilter"})) n->body.push_back(any());
      close_block("filter");
      return n;
    }
    if (name == "break" || name == "continue") {
      expect(Tok::kCloseStatement, "'%}'");
      return make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, l);
    }
    static const std::set<std::string> kInner = {"elif", "else", "endif", "endfor", "endset",
                                                  "endmacro", "endcall", "endfilter"};
    if (kInner.count(name)) {
      std::string msg = "unexpected {% " + name + " %}";
      if (!open_.empty())
        msg += " inside the '" + open_.back().first + "' block opened at line " + std::to_string(open_.back().second);
      else
        msg += " (no open block)";
      error_at(l, msg);
    }
    error_at(l, "unknown tag '" + name + "'");
  }

  NodePtr set_statement(int l) {
    NodePtr n = make(NodeKind::kSet, l);
    n->a = sequence(false);
    if (is(Tok::kEquals)) {
      next();
      n->b = sequence(false);
      expect(Tok::kCloseStatement, "'%}'");
      return n;
    }
    open_.emplace_back("set", l);
    expect(Tok::kCloseStatement, "'=' or '%}'");
    while (!is_statement({"endset"})) n->body.push_back(any());
    close_block("set");
    return n;
  }

  NodePtr if_statement(int l) {
    NodePtr n = make(NodeKind::kIf, l);
    n->a = expression();
    expect(Tok::kCloseStatement, "'%}'");
    while (!is_statement({"elif", "else", "endif"})) n->body.push_back(any());
    if (is_statement({"elif"})) {
      int el = peek(1).line;
      next();
      next();
      n->alt.push_back(if_statement(el));
    } else if (is_statement({"else"})) {
      next();
      next();
      expect(Tok::kCloseStatement, "'%}'");
      while (!is_statement({"endif"})) n->alt.push_back(any());
    }
    return n;
  }

  NodePtr for_statement(int l) {
    NodePtr n = make(NodeKind::kFor, l);
    n->a = sequence(true);
    if (n->a->kind != NodeKind::kIdent && n->a->kind != NodeKind::kTuple)
      error_at(l, "expected a name or a tuple of names as the loop variable");
    if (!is_ident("in")) unexpected("'in'");
    next();
    NodePtr it = expression();
    if (it->kind == NodeKind::kSelect) {  // for x in xs if cond
      n->b = std::move(it->a);
      n->c = std::move(it->b);
    } else {
      n->b = std::move(it);
    }
    expect(Tok::kCloseStatement, "'%}'");
    while (!is_statement({"endfor", "else"})) n->body.push_back(any());
    if (is_statement({"else"})) {
      next();
      next();
      expect(Tok::kCloseStatement, "'%}'");
      while (!is_statement({"endfor"})) n->alt.push_back(any());
    }
    return n;
  }

  // a, b, c -> tuple; a single item stays itself.
  NodePtr sequence(bool primary) {
    int l = line();
    NodePtr first = primary ? primary_expr() : expression();
    if (!is(Tok::kComma)) return first;
    NodePtr t = make(NodeKind::kTuple, l);
    t->args.push_back(std::move(first));
    while (is(Tok::kComma)) {
      next();
      t->args.push_back(primary ? primary_expr() : expression());
    }
    return seal(std::move(t));
  }

  NodePtr expression() {
    DepthGuard guard(this);
    NodePtr a = or_expr();
    if (is_ident("if")) {
      int l = next().line;
      NodePtr test = or_expr();
      if (is_ident("else")) {
        next();
        NodePtr n = make(NodeKind::kTernary, l);
        n->a = std::move(test);
        n->b = std::move(a);
        n->c = expression();
        return seal(std::move(n));
      }
      NodePtr n = make(NodeKind::kSelect, l);
      n->a = std::move(a);
      n->b = std::move(test);
      return seal(std::move(n));
    }
    return a;
  }

  NodePtr binary(std::string op, NodePtr a, NodePtr b, int l) {
    NodePtr n = make(NodeKind::kBinary, l);
    n->str = std::move(op);
    n->a = std::move(a);
    n->b = std::move(b);
    return seal(std::move(n));
  }

  NodePtr or_expr() {
    NodePtr left = and_expr();
    while (is_ident("or")) {
      int l = next().line;
      left = binary("or", std::move(left), and_expr(), l);
    }
    return left;
  }
  NodePtr and_expr() {
    NodePtr left = not_expr();
    while (is_ident("and")) {
      int l = next().line;
      left = binary("and", std::move(left), not_expr(), l);
    }
    return left;
  }
  NodePtr not_expr() {
    DepthGuard guard(this);
    if (is_ident("not")) {
      int l = next().line;
      NodePtr n = make(NodeKind::kUnary, l);
      n->str = "not";
      n->a = not_expr();
      return seal(std::move(n));
    }
    return comparison();
  }
  NodePtr comparison() {
    NodePtr left = additive();
    while (true) {
      std::string op;
      int l = line();
      if (is_ident("not") && is_ident("in", 1)) {
        next();
        next();
        op = "not in";
      } else if (is_ident("in") || is(Tok::kComparison)) {
        op = next().value;
      } else {
        break;
      }
      left = binary(op, std::move(left), additive(), l);
    }
    return left;
  }
  NodePtr additive() {
    NodePtr left = multiplicative();
    while (is(Tok::kAdditive)) {
      const Token& op = next();
      left = binary(op.value, std::move(left), multiplicative(), op.line);
    }
    return left;
  }
  NodePtr multiplicative() {
    NodePtr left = power();
    while (is(Tok::kMultiplicative)) {
      const Token& op = next();
      left = binary(op.value, std::move(left), power(), op.line);
    }
    return left;
  }
  NodePtr power() {
    NodePtr left = test_expr();
    while (is(Tok::kPower)) {
      const Token& op = next();
      left = binary(op.value, std::move(left), test_expr(), op.line);
    }
    return left;
  }
  NodePtr test_expr() {
    NodePtr operand = filter_expr();
    while (is_ident("is")) {
      int l = next().line;
      NodePtr n = make(NodeKind::kTest, l);
      if (is_ident("not")) {
        next();
        n->flag = true;
      }
      if (!is(Tok::kIdent)) unexpected("a test name after 'is'");
      n->str = next().value;
      if (is(Tok::kOpenParen)) n->args = arguments(false);
      n->a = std::move(operand);
      operand = seal(std::move(n));
    }
    return operand;
  }
  NodePtr filter_node(NodePtr operand) {
    if (!is(Tok::kIdent)) unexpected("a filter name");
    const Token& t = next();
    NodePtr n = make(NodeKind::kFilter, t.line);
    n->str = t.value;
    n->a = std::move(operand);
    if (is(Tok::kOpenParen)) {
      n->flag = true;
      n->args = arguments(false);
      // @huggingface/jinja parses `x | f(a).b(c)` and fails only when it is evaluated.
      if (is(Tok::kDot) || is(Tok::kOpenBracket) || is(Tok::kOpenParen)) {
        NodePtr tail = member(make(NodeKind::kIdent, t.line));
        while (is(Tok::kOpenParen)) {
          NodePtr c = make(NodeKind::kCall, line());
          c->a = std::move(tail);
          c->args = arguments(false);
          tail = member(seal(std::move(c)));
        }
        n->b = std::move(tail);
      }
    }
    return seal(std::move(n));
  }
  NodePtr filter_expr() {
    NodePtr operand = unary_sign();
    while (is(Tok::kPipe)) {
      next();
      operand = filter_node(std::move(operand));
    }
    return operand;
  }
  NodePtr unary_sign() {
    DepthGuard guard(this);
    const Token& t = peek();
    if ((t.type == Tok::kUnary || t.type == Tok::kAdditive) && (t.value == "-" || t.value == "+")) {
      next();
      NodePtr n = make(NodeKind::kUnary, t.line);
      n->str = t.value;
      n->a = unary_sign();
      return seal(std::move(n));
    }
    return call_member();
  }
  NodePtr call_member() {
    NodePtr e = member(primary_expr());
    while (is(Tok::kOpenParen)) {
      NodePtr c = make(NodeKind::kCall, line());
      c->a = std::move(e);
      c->args = arguments(false);
      e = member(seal(std::move(c)));
    }
    return e;
  }

  // ( ... ) argument list of a call (`parameters` false) or of a macro definition.
  std::vector<NodePtr> arguments(bool parameters) {
    expect(Tok::kOpenParen, "'('");
    std::vector<NodePtr> out;
    bool saw_keyword = false;
    while (!is(Tok::kCloseParen)) {
      int l = line();
      if (!parameters && is(Tok::kPower)) {
        next();
        NodePtr n = make(NodeKind::kKwSpread, l);
        n->a = expression();
        out.push_back(seal(std::move(n)));
        if (is(Tok::kComma)) next();
        if (!is(Tok::kCloseParen)) unexpected("')' after a ** argument");
        break;
      }
      if (!parameters && is(Tok::kMultiplicative) && peek().value == "*") {
        next();
        NodePtr n = make(NodeKind::kSpread, l);
        n->a = expression();
        out.push_back(seal(std::move(n)));
      } else {
        NodePtr arg = expression();
        if (is(Tok::kEquals)) {
          next();
          if (arg->kind != NodeKind::kIdent) error_at(l, "expected a name before '=' in an argument list");
          NodePtr kw = make(NodeKind::kKwarg, l);
          kw->str = arg->str;
          kw->a = expression();
          arg = seal(std::move(kw));
          saw_keyword = true;
        } else if (saw_keyword) {
          error_at(l, parameters ? "non-default parameter follows a default parameter"
                                 : "positional argument follows a keyword argument");
        }
        if (parameters && arg->kind != NodeKind::kIdent && arg->kind != NodeKind::kKwarg)
          error_at(l, "expected a parameter name");
        out.push_back(std::move(arg));
      }
      if (is(Tok::kComma)) next();
    }
    next();
    return out;
  }

  NodePtr member(NodePtr object) {
    while (is(Tok::kDot) || is(Tok::kOpenBracket)) {
      const Token& op = next();
      NodePtr m = make(NodeKind::kMember, op.line);
      m->a = std::move(object);
      if (op.type == Tok::kOpenBracket) {
        m->flag = true;
        m->b = subscript(op.line);
        expect(Tok::kCloseBracket, "']'");
      } else {
        const Token& t = next();
        if (t.type == Tok::kIdent) {
          m->b = make(NodeKind::kString, t.line);
          m->b->str = t.value;
        } else if (t.type == Tok::kNumber && t.value.find('.') == std::string::npos) {
          m->b = make(NodeKind::kInt, t.line);
          m->b->ival = std::strtoll(t.value.c_str(), nullptr, 10);
        } else {
          error_at(t.line, "expected a name or an integer after '.'");
        }
      }
      object = seal(std::move(m));
    }
    return object;
  }

  // Inside [...]: an index expression or a slice a:b:c.
  NodePtr subscript(int l) {
    std::vector<NodePtr> parts;
    bool is_slice = false;
    while (!is(Tok::kCloseBracket)) {
      if (is(Tok::kEnd)) unexpected("']'");
      if (is(Tok::kColon)) {
        parts.push_back(nullptr);
        next();
        is_slice = true;
      } else {
        parts.push_back(expression());
        if (is(Tok::kColon)) {
          next();
          is_slice = true;
        }
      }
    }
    if (parts.empty()) error_at(l, "expected an index or a slice inside []");
    if (!is_slice) {
      if (parts.size() != 1) error_at(l, "expected one index inside []");
      return std::move(parts[0]);
    }
    if (parts.size() > 3) error_at(l, "a slice takes at most 3 parts (start:stop:step)");
    NodePtr s = make(NodeKind::kSlice, l);
    parts.resize(3);
    s->a = std::move(parts[0]);
    s->b = std::move(parts[1]);
    s->c = std::move(parts[2]);
    return seal(std::move(s));
  }

  NodePtr primary_expr() {
    const Token& t = peek();
    switch (t.type) {
      case Tok::kNumber: {
        next();
        NodePtr n;
        if (t.value.find('.') != std::string::npos) {
          n = make(NodeKind::kFloat, t.line);
          n->fval = std::strtod(t.value.c_str(), nullptr);
        } else {
          n = make(NodeKind::kInt, t.line);
          errno = 0;
          n->ival = std::strtoll(t.value.c_str(), nullptr, 10);
          if (errno == ERANGE) error_at(t.line, "integer literal " + t.value + " is out of range");
        }
        return n;
      }
      case Tok::kString: {
        NodePtr n = make(NodeKind::kString, t.line);
        n->str = next().value;
        while (is(Tok::kString)) n->str += next().value;  // adjacent literals concatenate
        return n;
      }
      case Tok::kIdent: {
        NodePtr n = make(NodeKind::kIdent, t.line);
        n->str = next().value;
        return n;
      }
      case Tok::kOpenParen: {
        next();
        NodePtr e = sequence(false);
        expect(Tok::kCloseParen, "')'");
        return e;
      }
      case Tok::kOpenBracket: {
        next();
        NodePtr n = make(NodeKind::kList, t.line);
        while (!is(Tok::kCloseBracket)) {
          n->args.push_back(expression());
          if (is(Tok::kComma)) next();  // optional, as in @huggingface/jinja
        }
        next();
        return seal(std::move(n));
      }
      case Tok::kOpenBrace: {
        next();
        NodePtr n = make(NodeKind::kDict, t.line);
        while (!is(Tok::kCloseBrace)) {
          n->args.push_back(expression());
          expect(Tok::kColon, "':' between a key and its value");
          n->args.push_back(expression());
          if (is(Tok::kComma)) next();
        }
        next();
        return seal(std::move(n));
      }
      default: unexpected("an expression");
    }
  }
};

}  // namespace

std::vector<NodePtr> parse(const std::vector<Token>& tokens, const std::string& name) {
  return Parser(tokens, name).program();
}

}  // namespace glint::jinja
