// Jinja syntax tree. One node type with a kind tag; the fields each kind uses:
//
//   kText, kString  str = text               kInt ival, kFloat fval
//   kIdent          str = name               kList, kTuple: args = items
//   kDict           args = key0, value0, key1, value1, ...
//   kMember         a = object, b = property (kString for `.name`, kInt for `.0`, any
//                   expression or kSlice for `[...]`), flag = computed (`[...]`)
//   kSlice          a, b, c = start, stop, step (each may be null)
//   kCall           a = callee, args (kKwarg / kSpread / kKwSpread allowed)
//   kUnary          str = "not" | "-" | "+", a
//   kBinary         str = operator ("and", "or", "in", "not in", "==", "+", "~", ...), a, b
//   kFilter         a = operand (null in a {% filter %} block), str = filter name,
//                   flag = called with parentheses, args; b = a member/call chain after
//                   the call (`| f(x).y`), parsed but an error when evaluated
//   kTest           a = operand, str = test name, flag = negated (`is not`), args
//   kSelect         a = value, b = condition (`a if b` without else)
//   kTernary        a = condition, b = if true, c = if false
//   kKwarg          str = name, a = value   kSpread / kKwSpread: a (`*x`, `**x`)
//   kIf             a = test, body, alt (elif is a nested kIf in alt)
//   kFor            a = target (kIdent or kTuple), b = iterable, c = filter or null,
//                   body, alt (the else block)
//   kSet            a = target (kIdent, kTuple or kMember), b = value or null (block
//                   set: body)
//   kMacro          str = name, args = parameters (kIdent or kKwarg with default), body
//   kCallBlock      a = kCall of the macro, args = caller parameters, body
//   kFilterBlock    a = kFilter (operand null), body
//   kBreak, kContinue, kComment
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace glint::jinja {

enum class NodeKind {
  kText, kString, kInt, kFloat, kIdent, kList, kTuple, kDict, kMember, kSlice, kCall, kUnary,
  kBinary, kFilter, kTest, kSelect, kTernary, kKwarg, kSpread, kKwSpread, kIf, kFor, kSet,
  kMacro, kCallBlock, kFilterBlock, kBreak, kContinue, kComment
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  NodeKind kind;
  int line = 0;  // 1-based source line
  int height = 1;  // 1 + the largest height among a, b, c and args (bounded by the parser)
  std::string str;
  int64_t ival = 0;
  double fval = 0;
  bool flag = false;
  NodePtr a, b, c;
  std::vector<NodePtr> args;
  std::vector<NodePtr> body, alt;

  Node(NodeKind k, int l) : kind(k), line(l) {}
};

}  // namespace glint::jinja
