// Random Jinja templates rendered by glint and by @huggingface/jinja (npm) must agree.
//
// Two seeded generators: expressions (literals, variables of every kind, operators,
// filters, tests, methods, slices, inline if) inside {{ }}, {% if %}, {% for %} and
// {% set %}; and template structure (text full of spaces, tabs, newlines and brace
// characters, with nested blocks, comments, {% generation %} tags and random - markers)
// to pin the whitespace rules. A case agrees when both render the same text or both
// fail. glint may also render where the reference fails (glint's additions, e.g. `|list`
// of a string). It may fail where the reference renders only for its documented
// refusals: concatenating a list/dict into a string ("[object Map]" in JavaScript) and
// division by zero (Infinity/NaN in JavaScript). The cases are the same on every run of
// one build (operand evaluation order in `a + b` may differ between compilers).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "reference/splitmix.h"
#include "template/jinja.h"
#include "test_util.h"

namespace {

using ojson = nlohmann::ordered_json;

using Rng = glint::testing::SplitMix64;

// ---- expressions ----

const std::vector<std::string> kStrings = {"'a'", "'abc'", "' pad '", "'A,b,c'", "'é Ω'", "''", "'Hello World'",
                                           "'x-y'", "'42'", "'3.5'", "'\\n x\\t'", "'a\\u00a0'"};
const std::vector<std::string> kVars = {"s", "n", "f", "l", "d", "u", "z", "e", "b", "nn", "ls", "ld"};
const std::vector<std::string> kNumbers = {"0", "1", "2", "3", "-1", "10", "7", "1.5", "2.0", "0.1", "-0.5"};
const std::vector<std::string> kFilters = {
    "length", "upper", "lower", "trim", "title", "capitalize", "tojson", "tojson(indent=2)", "string", "int",
    "float", "first", "last", "join(',')", "join", "default('x')", "default('x', true)", "list", "reverse", "sort",
    "unique", "items", "abs", "replace('a', 'b')", "indent(2)", "map(attribute='name')", "selectattr('t')",
    "rejectattr('t')", "selectattr('name', 'equalto', 'x')", "dictsort", "safe", "int(7)", "float(1.5)",
    "sort(reverse=true)", "tojson(sort_keys=true)", "map(attribute='v', default=0)", "bool", "sort(attribute='name')"};
const std::vector<std::string> kTests = {"defined", "undefined", "none", "string", "number", "integer", "mapping",
                                         "iterable", "sequence", "boolean", "true", "false", "odd", "even",
                                         "lower", "upper", "callable"};
const std::vector<std::string> kMethods = {
    ".upper()", ".lower()", ".strip()", ".lstrip()", ".rstrip()", ".split()", ".split(',')", ".split(' ', 1)",
    ".startswith('S')", ".endswith(('t', 'x'))", ".get('k')", ".get('q', 1)", ".keys()", ".values()", ".items()",
    ".title()", ".capitalize()", ".replace('e', 'E')", ".replace('', '.', 2)", ".length", "[0]", "[-1]", "[1:]",
    "[::-1]", "[:2]", "[1:3:2]", "['k']", ".k", ".a"};
const std::vector<std::string> kOps = {"+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=",
                                       ">=", "and", "or", "in", "not in"};

std::string expr(Rng& r, int depth);

std::string atom(Rng& r, int depth) {
  int k = r.below(100);
  if (k < 25) return r.pick(kVars);
  if (k < 40) return r.pick(kStrings);
  if (k < 60) return r.pick(kNumbers);
  if (k < 66) return r.pick({"true", "false", "none"});
  if (depth >= 3) return r.pick(kVars);
  if (k < 74) {
    std::string s = "[";
    for (int i = 0, n = r.below(4); i < n; ++i) s += (i ? ", " : "") + expr(r, depth + 1);
    return s + "]";
  }
  if (k < 80) {
    std::string s = "{";
    for (int i = 0, n = r.below(4); i < n; ++i) s += std::string(i ? ", " : "") + "'" + "abck"[i] + "': " + expr(r, depth + 1);
    return s + "}";
  }
  return "(" + expr(r, depth + 1) + ")";
}

std::string expr(Rng& r, int depth) {
  std::string e = atom(r, depth);
  for (int i = 0, n = r.below(3); i < n; ++i) {
    int k = r.below(100);
    if (k < 30) e = (std::string("'-0123456789").find(e[0]) != std::string::npos ? "(" + e + ")" : e) + r.pick(kMethods);
    else if (k < 60) e += " | " + r.pick(kFilters);
    else if (k < 75) e += " is " + std::string(r.chance(0.5) ? "not " : "") + r.pick(kTests);
    else if (depth < 3) e += " " + r.pick(kOps) + " " + atom(r, depth + 1);
  }
  if (r.chance(0.1)) e = "not " + e;
  if (r.chance(0.08)) e += " if " + atom(r, depth + 1) + " else " + atom(r, depth + 1);
  return e;
}

std::string expression_template(Rng& r) {
  std::string t;
  for (int i = 0, n = 1 + r.below(2); i < n; ++i) {
    int k = r.below(100);
    if (k < 50) {
      t += "{{ " + expr(r, 0) + " }}";
    } else if (k < 65) {
      t += "{% for x in " + r.pick({"l", "ls", "ld", "d", "s", "[1, 2]", "range(3)", "d.items()", "u"}) +
           (r.chance(0.2) ? " if x" : "") +
           " %}[{{ x }}{{ loop.index }}{{ loop.last }}{{ loop.previtem }}]{% else %}E{% endfor %}";
    } else if (k < 80) {
      t += "{% if " + expr(r, 0) + " %}T{% else %}F{% endif %}";
    } else {
      t += "{% set v = " + expr(r, 0) + " %}<{{ v }}>";
    }
    t += " ";
  }
  return t;
}

ojson expression_context() {
  return ojson::parse(R"({"s": "Some text", "n": 3, "f": 2.5, "l": [3, 1, 2], "d": {"k": "v", "b": 2, "a": [1, null]},
    "z": 0, "e": "", "b": true, "nn": null, "ls": ["b", "A", "c", "b"],
    "ld": [{"name": "x", "v": 1}, {"name": "y", "v": 2, "t": true}, {"name": "Z"}]})");
}

// ---- structure and whitespace ----

const std::vector<std::string> kText = {"a", "b c", " ", "  ", "\n", "\n\n", "\t", " \n ", "x\n  ", "\n    ", "é",
                                        "{", "}", "%", "#", "-", "}}", "%}", "#}", "-}", "\u00a0", "\r\n", "{-", " {-x"};

std::string ws(Rng& r) { return r.pick({"", " ", "  ", "\n", " \n  "}); }
std::string marker(Rng& r) { return r.chance(0.35) ? "-" : ""; }
std::string tag(Rng& r, const std::string& body) { return "{%" + marker(r) + ws(r) + body + ws(r) + marker(r) + "%}"; }
std::string text(Rng& r) {
  std::string s;
  for (int i = 0, n = r.below(5); i < n; ++i) s += r.pick(kText);
  return s;
}

std::string block(Rng& r, int depth) {
  std::string out;
  for (int i = 0, n = 1 + r.below(4); i < n; ++i) {
    out += text(r);
    int k = r.below(100);
    if (k < 30) {
      out += "{{" + marker(r) + ws(r) +
             r.pick({"x", "loop.index", "i", "'s'", "ns.n", "m(1)", "[1,2]|length", "x ~ i", "none", "true", "2.0",
                     "y|default('d')", "{'a': 1}"}) +
             ws(r) + marker(r) + "}}";
    } else if (k < 40) {
      std::string c = text(r);
      for (size_t p; (p = c.find("#}")) != std::string::npos;) c.erase(p, 2);
      out += "{#" + marker(r) + c + marker(r) + "#}";
    } else if (k < 55 && depth < 3) {
      out += tag(r, "for i in [1, 2]") + block(r, depth + 1);
      if (r.chance(0.3)) out += tag(r, "else") + block(r, depth + 1);
      out += tag(r, "endfor");
    } else if (k < 70 && depth < 3) {
      out += tag(r, "if x") + block(r, depth + 1);
      if (r.chance(0.3)) out += tag(r, "elif i") + block(r, depth + 1);
      if (r.chance(0.4)) out += tag(r, "else") + block(r, depth + 1);
      out += tag(r, "endif");
    } else if (k < 78) {
      out += tag(r, "set ns.n = ns.n + 1");
    } else if (k < 85 && depth < 3) {
      out += tag(r, "set y") + block(r, depth + 1) + tag(r, "endset");
    } else if (k < 90) {
      out += tag(r, "generation") + text(r) + tag(r, "endgeneration");
    } else if (k < 95 && depth < 2) {
      out += tag(r, "macro m(a, b=2)") + block(r, depth + 1) + tag(r, "endmacro");
    } else {
      out += text(r);
    }
  }
  return out;
}

std::string structure_template(Rng& r) {
  return "{% set ns = namespace(n=0) %}{% macro m(a) %}M{{ a }}{% endmacro %}" + block(r, 0) +
         r.pick({"", "\n", "\n\n", " "});
}

// ---- running both ----

std::string run_reference(const std::vector<std::string>& templates, const ojson& context) {
  std::string dir = glint::testing::fresh_temp_dir("jinja_fuzz_reference");
  {
    std::ofstream f(dir + "/cases.jsonl", std::ios::binary);
    for (const std::string& t : templates) f << ojson{{"template", t}, {"context", context}}.dump() << "\n";
  }
  std::string cmd = std::string("node ") + GLINT_SOURCE_DIR + "/tests/reference/render_reference.mjs " +
                    GLINT_REFERENCE_DIR + " < " + dir + "/cases.jsonl";
  int code;
  std::string out = glint::testing::run_command(cmd, &code);
  EXPECT_EQ(code, 0) << out.substr(0, 2000);
  return out;
}

struct Tally {
  int same = 0, both_fail = 0, glint_only = 0, refused = 0;
};

Tally compare(const std::vector<std::string>& templates, const ojson& context) {
  std::istringstream ref(run_reference(templates, context));
  Tally t;
  int failures = 0;
  for (size_t i = 0; i < templates.size() && failures < 5; ++i) {
    std::string line;
    if (!std::getline(ref, line)) {
      ADD_FAILURE() << "the reference gave " << i << " results for " << templates.size() << " cases";
      break;
    }
    nlohmann::json r = nlohmann::json::parse(line);
    std::string mine, error;
    try {
      mine = glint::jinja::Template(templates[i], "t").render(context);
    } catch (const glint::Error& e) {
      error = e.what();
    }
    bool ref_ok = r["ok"].get<bool>();
    std::string where = "case " + std::to_string(i) + ": " + ojson(templates[i]).dump();
    if (ref_ok && error.empty()) {
      ++t.same;
      if (mine != r["text"].get<std::string>()) {
        ++failures;
        ADD_FAILURE() << where << "\nglint:     " << ojson(mine).dump() << "\nreference: " << r["text"].dump();
      }
    } else if (!ref_ok && !error.empty()) {
      ++t.both_fail;
    } else if (!ref_ok) {
      ++t.glint_only;
    } else if (error.find("cannot concatenate a") != std::string::npos ||
               error.find("division or modulo by zero") != std::string::npos) {
      ++t.refused;
    } else {
      ++failures;
      ADD_FAILURE() << where << "\nglint failed: " << error << "\nreference: " << r["text"].dump();
    }
  }
  return t;
}

TEST(JinjaFuzzReference, RandomExpressionsMatchHuggingFaceJinja) {
  Rng r{11};
  std::vector<std::string> templates;
  for (int i = 0; i < 3000; ++i) templates.push_back(expression_template(r));
  Tally t = compare(templates, expression_context());
  EXPECT_GE(t.same, 700) << "too few cases that both render: the generator drifted";
  EXPECT_LE(t.refused, 60);
  std::cout << "rendered identically " << t.same << ", both failed " << t.both_fail << ", glint only " << t.glint_only
            << ", refused by glint " << t.refused << "\n";
}

TEST(JinjaFuzzReference, RandomWhitespaceAndBlocksMatchHuggingFaceJinja) {
  Rng r{12};
  std::vector<std::string> templates;
  for (int i = 0; i < 2500; ++i) templates.push_back(structure_template(r));
  Tally t = compare(templates, ojson{{"x", "X"}});
  EXPECT_GE(t.same, 1000);
  EXPECT_EQ(t.glint_only, 0);
  std::cout << "rendered identically " << t.same << ", both failed " << t.both_fail << "\n";
}

}  // namespace
