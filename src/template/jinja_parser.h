// Jinja parser: tokens -> syntax tree, with @huggingface/jinja's grammar and operator
// precedence (lowest first): inline if/else, or, and, not, comparisons and `in`, + - ~,
// * / // %, **, `is` tests, | filters, unary +/-, calls/members/subscripts, primaries.
#pragma once

#include <string>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace glint::jinja {

// Parses a whole template into the statements of its top level. Throws glint::Error
// "<name> line N: ..." naming the unknown tag, the unexpected token, or the block left
// open (and the line that opened it).
std::vector<NodePtr> parse(const std::vector<Token>& tokens, const std::string& name);

}  // namespace glint::jinja
