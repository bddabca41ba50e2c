// Jinja lexer: template source -> tokens, with the whitespace handling Hugging Face chat
// templates are rendered with (trim_blocks and lstrip_blocks on, one trailing newline
// dropped, {%- -%} {{- -}} {#- -#} stripping, the transformers-only {% generation %} /
// {% endgeneration %} tags removed), following @huggingface/jinja's lexer.
#pragma once

#include <string>
#include <vector>

namespace glint::jinja {

enum class Tok {
  kText, kNumber, kString, kIdent, kEquals, kOpenParen, kCloseParen, kOpenStatement,
  kCloseStatement, kOpenExpression, kCloseExpression, kOpenBracket, kCloseBracket,
  kOpenBrace, kCloseBrace, kComma, kDot, kColon, kPipe, kAdditive, kMultiplicative,
  kPower, kComparison, kUnary, kComment, kEnd
};

struct Token {
  Tok type;
  std::string value;  // text, literal contents (escapes resolved), identifier, operator
  int line;           // 1-based line of the token's first character in the original source
};

// How a token kind reads in an error message ("'%}'", "identifier", "end of template").
const char* token_name(Tok t);

// Tokenizes `source`. Throws glint::Error "<name> line N: ..." on a lexical error
// (unterminated string or comment, bad escape, unexpected character).
std::vector<Token> tokenize(const std::string& source, const std::string& name);

}  // namespace glint::jinja
