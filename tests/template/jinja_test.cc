// The Jinja interpreter on hand-written templates with hand-derived outputs: one test
// per group of constructs, then bad input (each error names the construct and its line).
// Where Jinja implementations differ, the expected value is @huggingface/jinja's (the
// reference for chat templates); comments mark those places.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <string>

#include "core/error.h"
#include "template/jinja.h"

namespace {

std::string render(const std::string& tpl, const std::string& ctx = "{}") {
  return glint::jinja::Template(tpl, "t").render(nlohmann::ordered_json::parse(ctx));
}

// The message of the glint::Error that rendering (or parsing) throws; "" if none.
std::string error_of(const std::string& tpl, const std::string& ctx = "{}") {
  try {
    render(tpl, ctx);
  } catch (const glint::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(tpl, ...)                                           \
  do {                                                                   \
    std::string msg_ = error_of(tpl);                                    \
    EXPECT_FALSE(msg_.empty()) << "no error for " << tpl;                \
    for (const char* part : {__VA_ARGS__})                               \
      EXPECT_NE(msg_.find(part), std::string::npos) << "'" << part << "' not in: " << msg_; \
  } while (0)

TEST(Jinja, PrintsValuesLikeHuggingFaceJinja) {
  EXPECT_EQ(render("{{ 1 }}|{{ 2.0 }}|{{ 1.5 }}|{{ -0.25 }}"), "1|2.0|1.5|-0.25");
  EXPECT_EQ(render("{{ true }}|{{ false }}|{{ True }}"), "true|false|true");  // not Python's True
  EXPECT_EQ(render("[{{ none }}][{{ nothing }}][{{ x.y.z }}]"), "[][][]");
  EXPECT_EQ(render("{{ [1, 'a', none, 2.5, true] }}"), "[1, \"a\", null, 2.5, true]");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [2, 3]} }}"), "{\"a\": 1, \"b\": [2, 3]}");
  EXPECT_EQ(render("{{ 'caf\\u00e9 \\x41\\n' }}"), "café A\n");
  EXPECT_EQ(render("{{ 'ab' 'cd' }}"), "abcd");  // adjacent literals concatenate
  EXPECT_EQ(render("{{ x }}", R"({"x": 3.0})"), "3");  // JSON 3.0 is the integer 3 in JavaScript
}

TEST(Jinja, ArithmeticComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 4 - 3 }}"), "7 9 3");
  EXPECT_EQ(render("{{ 10 / 4 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }}"), "2.5 2.0 3 -4 1 1024");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1 + 1.0 }} {{ -(3) }} {{ - 2.5 }}"), "0.30000000000000004 2.0 -3 -2.5");
  EXPECT_EQ(render("{{ 1 < 2 }} {{ 2 <= 1 }} {{ 3 > 2.5 }} {{ 2 >= 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}"),
            "true false true true true true");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ [] or 'empty' }} {{ not [] }} {{ not not 1 }}"), "x b empty true true");
  EXPECT_EQ(render("{{ none == undefined_name }} {{ 1 == true }} {{ '1' == 1 }}"), "true true true");  // JavaScript ==
  EXPECT_EQ(render("{{ [] == '' }} {{ ['a', 1] == 'a,1' }} {{ [1] == [1] }} {{ l == l }}", R"({"l": [1]})"),
            "true true false true");  // lists compare by identity, or as their joined string
  EXPECT_EQ(render("{{ 'y' if 1 > 2 else 'n' }} [{{ 'y' if false }}] {{ 'a' if 0 else 'b' if 1 else 'c' }}"), "n [] b");
}

TEST(Jinja, ConcatenationAndMembership) {
  EXPECT_EQ(render("{{ 1 ~ 'a' ~ 2.5 ~ true }}"), "1a2.5true");
  EXPECT_EQ(render("{{ 'v' ~ 2.0 }} {{ 'a' + 1 }}"), "v2 a1");  // String(2.0) is "2" in JavaScript
  EXPECT_EQ(render("{{ [1] + [2, 3] }}"), "[1, 2, 3]");
  EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1, 2] }} {{ 'x' in nothing }}"),
            "true true true true false");
  EXPECT_EQ(render("{{ 'ab' not in 'cab' }} {{ 2.0 in [1, 2] }}"), "false true");
}

TEST(Jinja, WhitespaceControlAndComments) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it.
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("x\n    {% if true %}\n    y\n    {% endif %}\nz"), "x\n    y\nz");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");  // expressions keep their newline
  EXPECT_EQ(render("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true -%}\n  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a{# a comment #}b {#- trimmed -#}  c"), "abc");
  EXPECT_EQ(render("x\n"), "x");  // one trailing newline is dropped
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a {% generation %}b{% endgeneration %} c"), "a b c");  // transformers' tag is ignored
  EXPECT_EQ(render("a {%- generation -%} b"), "ab");
}

TEST(Jinja, ForLoops) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "1032truefalse3|2121falsefalse3|3210falsetrue3|");
  EXPECT_EQ(render("{% for x in ['a', 'b', 'c'] %}{{ loop.previtem | default('-') }}{{ x }}{{ loop.nextitem | default('-') }} {% endfor %}"),
            "-ab abc bc- ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x % 2 == 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}"),
            "2:1/2 4:2/2 ");
  EXPECT_EQ(render("{% for x in [1, 3] if x > 5 %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(render("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}"), "ab");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}"), "3 7 ");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in [1, 2] %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}"),
            "121;122;");
  EXPECT_EQ(render("{% for m in messages[::-1] %}{{ m }}{% endfor %}", R"({"messages": [1, 2, 3]})"), "321");
}

TEST(Jinja, IfAndSet) {
  const char* t = "{% if x > 2 %}big{% elif x > 1 %}mid{% elif x > 0 %}small{% else %}none{% endif %}";
  EXPECT_EQ(render(t, R"({"x": 3})"), "big");
  EXPECT_EQ(render(t, R"({"x": 2})"), "mid");
  EXPECT_EQ(render(t, R"({"x": 1})"), "small");
  EXPECT_EQ(render(t, R"({"x": 0})"), "none");
  EXPECT_EQ(render("{% set a = 1 %}{% set a = a + 1 %}{{ a }}"), "2");
  EXPECT_EQ(render("{% set b %}hi {{ 1 + 1 }}{% endset %}[{{ b }}]"), "[hi 2]");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set c, d = [3, 4] %}{{ c }}{{ d }}"), "12 34");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");  // loops scope set
  EXPECT_EQ(render("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}"), "2");
  EXPECT_EQ(render("{% set ns = namespace(n=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% set ns.items = ns.items + [i * 10] %}{% endfor %}{{ ns.n }} {{ ns.items }}"),
            "6 [10, 20, 30]");
  EXPECT_EQ(render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c }}"), "12");
}

TEST(Jinja, MacrosAndCallBlocks) {
  EXPECT_EQ(render("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ greet('Cy', 'Yo') }} {{ greet(name='Di') }}"),
            "Hello, Ann! Hi, Bob! Yo, Cy! Hello, Di!");
  EXPECT_EQ(render("{% macro f(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ f(3) }}"), "3,6");
  EXPECT_EQ(render("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k='v') }}"),
            "1[2, 3]{\"k\": \"v\"}");
  EXPECT_EQ(render("{% macro box(tag='b') %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call box('i') %}in{{ 1 + 1 }}{% endcall %}"),
            "<i>in2</i>");
  EXPECT_EQ(render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}"),
            "[1][2]");
  EXPECT_EQ(render("{% macro count(n) %}{% if n > 0 %}{{ n }}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}"), "321");
  EXPECT_EQ(render("{% filter upper %}shout {{ 'it' }}{% endfilter %}"), "SHOUT IT");
}

TEST(Jinja, StringFilters) {
  EXPECT_EQ(render("[{{ '  a b \\n' | trim }}] {{ 'héllo🙂' | length }}"), "[a b] 7");  // UTF-16 length
  EXPECT_EQ(render("{{ 'Ab' | lower }} {{ 'ab' | upper }} {{ 'élan' | upper }}"), "ab AB ÉLAN");
  EXPECT_EQ(render("{{ 'hello wORLD-wide x_y' | title }}"), "Hello WORLD-Wide X_y");  // other letters unchanged
  EXPECT_EQ(render("{{ 'hello World' | capitalize }}"), "Hello World");
  EXPECT_EQ(render("{{ 'a-b-c' | replace('-', '+') }} {{ 'a-b-c' | replace('-', '', 1) }}"), "a+b+c ab-c");
  EXPECT_EQ(render("{{ 'abc' | join('.') }} {{ 'x' | string }} {{ 'a<b>&\"' | escape }}"), "a.b.c x a&lt;b&gt;&amp;&#34;");
  EXPECT_EQ(render("{{ '42' | int + 1 }} {{ ' 4.7x' | int }} {{ 'abc' | int }} {{ 'abc' | int(7) }} {{ '2.5' | float }} {{ 'z' | float }}"),
            "43 4 0 7 2.5 0.0");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n    b\n\n    c|  a\n  b");
  EXPECT_EQ(render("{{ 'x' | safe }} {{ 'abc' | list }} {{ 'abc' | first }}{{ 'abc' | last }} {{ 'abc' | reverse }}"),
            "x [\"a\", \"b\", \"c\"] ac cba");
}

TEST(Jinja, NumberAndBoolFilters) {
  EXPECT_EQ(render("{{ 3.7 | int }} {{ -3.5 | int }} {{ 2 | float }} {{ -3 | abs }} {{ 2.5 | string }} {{ 2.0 | string }}"),
            "3 -4 2.0 3 2.5 2.0");  // |int floors (JavaScript Math.floor)
  EXPECT_EQ(render("{{ true | int }} {{ false | string }} {{ true | bool }} {{ 1 | string ~ 2 }}"), "1 false true 12");
}

TEST(Jinja, ListAndDictFilters) {
  const char* people = R"({"people": [{"name": "Ann", "age": 31, "admin": true}, {"name": "bob", "age": 25},
                                      {"name": "Cy", "age": 40, "admin": false}]})";
  EXPECT_EQ(render("{{ people | map(attribute='name') | join(', ') }}", people), "Ann, bob, Cy");
  EXPECT_EQ(render("{{ people | map(attribute='admin', default='?') | list }}", people), "[true, \"?\", false]");
  EXPECT_EQ(render("{{ people | selectattr('admin') | map(attribute='name') | join }}", people), "Ann");
  EXPECT_EQ(render("{{ people | rejectattr('admin') | map(attribute='name') | join(',') }}", people), "bob,Cy");
  EXPECT_EQ(render("{{ people | selectattr('name', 'equalto', 'Cy') | map(attribute='age') | first }}", people), "40");
  EXPECT_EQ(render("{{ people | selectattr('admin', 'defined') | length }}", people), "2");
  EXPECT_EQ(render("{{ people | sort(attribute='age') | map(attribute='name') | join(' ') }}", people), "bob Ann Cy");
  EXPECT_EQ(render("{{ people | sort(attribute='name') | map(attribute='name') | join(' ') }}", people), "Ann bob Cy");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }}"),
            "[1, 2, 3] [3, 2, 1] [\"A\", \"b\", \"c\"]");
  EXPECT_EQ(render("{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ [1, 2] | length }} {{ [1, 2] | count }} "
                   "{{ [1, 2, 1, '1'] | unique }} {{ [1, 2] | reverse }} {{ [1, 2] | list }}"),
            "1 3 2 2 [1, 2, \"1\"] [2, 1] [1, 2]");
  EXPECT_EQ(render("{{ [1, none, 'a', 2.5] | join('-') }} {{ [1, 2] | string }}"), "1--a-2.5 [1, 2]");
  EXPECT_EQ(render("{{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3] | reject('odd') | list }} "
                   "{{ [0, 1, '', 'a'] | select | list }}"),
            "[2, 4] [2] [1, \"a\"]");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }}"), "AB");
  const char* d = R"({"d": {"b": 2, "a": 1, "C": 3}})";
  EXPECT_EQ(render("{{ d | items | list }}", d), "[[\"b\", 2], [\"a\", 1], [\"C\", 3]]");
  EXPECT_EQ(render("{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}", d), "a1b2C3");
  EXPECT_EQ(render("{% for k, v in d | dictsort(reverse=true) %}{{ k }}{% endfor %}", d), "Cba");
  EXPECT_EQ(render("{% for k, v in d.dictsort(by='value') %}{{ k }}{% endfor %} {{ d | length }}", d), "abC 3");
}

TEST(Jinja, DefaultFilter) {
  EXPECT_EQ(render("{{ missing | default('x') }} [{{ none | default('x') }}] {{ '' | default('x', true) }} "
                   "{{ 0 | default('x', boolean=true) }} {{ 'v' | default('x') }} [{{ missing | default }}]"),
            "x [] x x v []");  // none is defined: default keeps it
}

TEST(Jinja, ToJson) {
  const char* ctx = R"({"v": {"name": "Zürich \"q\"", "n": [1, 2.5, null, true], "e": {}, "l": [], "s": "a\nb\t<"}})";
  EXPECT_EQ(render("{{ v | tojson }}", ctx),
            R"({"name": "Zürich \"q\"", "n": [1, 2.5, null, true], "e": {}, "l": [], "s": "a\nb\t<"})");
  EXPECT_EQ(render("{{ v.n | tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  null,\n  true\n]");
  EXPECT_EQ(render("{{ {'a': {'b': [1]}, 'c': {}} | tojson(indent=4) }}"),
            "{\n    \"a\": {\n        \"b\": [\n            1\n        ]\n    },\n    \"c\": {}\n}");
  EXPECT_EQ(render("{{ 'é🙂' | tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"),
            "\"\\u00e9\\ud83d\\ude42\" {\"a\": 2, \"b\": 1}");
  EXPECT_EQ(render("{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }} {{ missing | tojson }} {{ 3.0 | tojson }}"),
            "{\"a\":[1,2]} null 3");
  // Key order is insertion order, except that JavaScript puts array-index keys first.
  EXPECT_EQ(render("{{ d | tojson }}", R"({"d": {"z": 1, "10": 2, "a": 3, "2": 4}})"), R"({"2": 4, "10": 2, "z": 1, "a": 3})");
}

TEST(Jinja, Tests) {
  const char* ctx = R"({"s": "x", "i": 1, "f": 1.5, "b": true, "n": null, "l": [1], "d": {"k": 1}})";
  EXPECT_EQ(render("{{ s is defined }}{{ zz is defined }}{{ zz is undefined }}{{ n is none }}{{ n is not none }}", ctx),
            "truefalsetruetruefalse");
  EXPECT_EQ(render("{{ s is string }}{{ i is string }}{{ d is mapping }}{{ l is mapping }}", ctx), "truefalsetruefalse");
  EXPECT_EQ(render("{{ l is iterable }}{{ s is iterable }}{{ d is iterable }}{{ d is sequence }}{{ i is sequence }}", ctx),
            "truetruefalsetruefalse");  // @huggingface/jinja: dicts are sequences, not iterables
  EXPECT_EQ(render("{{ i is number }}{{ f is number }}{{ b is number }}{{ i is integer }}{{ f is integer }}{{ f is float }}", ctx),
            "truetruefalsetruefalsetrue");
  EXPECT_EQ(render("{{ b is boolean }}{{ b is true }}{{ b is false }}{{ i is true }}{{ 3 is odd }}{{ 3 is even }}", ctx),
            "truetruefalsefalsetruefalse");
  EXPECT_EQ(render("{{ 'ab' is lower }}{{ 'aB' is upper }}{{ 3 is equalto(3) }}{{ 3 is not equalto(4) }}", ctx),
            "truefalsetruetrue");
  EXPECT_EQ(render("{{ 2 is in([1, 2]) }}{{ 9 is divisibleby(3) }}{{ 1 is ne(2) }}{{ s is callable }}", ctx),
            "truetruetruefalse");
}

TEST(Jinja, StringMethods) {
  EXPECT_EQ(render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.upper() }} {{ 'HeLLo'.lower() }}"),
            "true true HELLO hello");
  // @huggingface/jinja ignores the argument of strip/lstrip/rstrip: all whitespace goes.
  EXPECT_EQ(render("[{{ '\\n x \\n'.strip('\\n') }}][{{ '  x '.lstrip() }}][{{ ' x  '.rstrip() }}][{{ 'xx'.strip('x') }}]"),
            "[x][x ][ x][xx]");
  EXPECT_EQ(render("{{ ' a  b c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ' a b c'.split(none, 1) }}"),
            R"(["a", "b", "c"] ["a", "b", "", "c"] ["a", "b,c"] ["a", "b c"])");
  EXPECT_EQ(render("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'hi you'.title() }} {{ 'hi'.capitalize() }}"), "bba Hi You Hi");
  EXPECT_EQ(render("{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ ', '.join(['a', 'b']) }}"),
            "2 -1 2 a, b");
  EXPECT_EQ(render("{{ 'x</think>\\n\\ny'.split('</think>')[-1].lstrip('\\n') }}"), "y");
}

TEST(Jinja, DictMethodsAndSlicing) {
  const char* ctx = R"({"d": {"a": 1, "b": null}, "l": [1, 2, 3, 4]})";
  EXPECT_EQ(render("{{ d.get('a') }} [{{ d.get('zz') }}] {{ d.get('zz', 'dflt') }} {{ d['a'] }} {{ d.a }} [{{ d.b }}]", ctx),
            "1 [] dflt 1 1 []");
  EXPECT_EQ(render("{{ d.keys() }} {{ d.values() }} {{ d.items() }}", ctx), R"(["a", "b"] [1, null] [["a", 1], ["b", null]])");
  EXPECT_EQ(render("{{ l[1:3] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[:-3] }} {{ l[::2] }} {{ l[-1] }} [{{ l[10] }}] {{ l.0 }}", ctx),
            "[2, 3] [4, 3, 2, 1] [3, 4] [1] [1, 3] 4 [] 1");
  EXPECT_EQ(render("{{ 'hello'[1:4] }} {{ 'hello'[-1] }} {{ 'héllo'[1] }} {{ 'abc'[::-1] }} {{ l | length }} {{ l.length }}", ctx),
            "ell o é cba 4 4");
}

TEST(Jinja, GlobalFunctions) {
  EXPECT_EQ(render("{{ range(3) }} {{ range(1, 4) }} {{ range(5, 0, -2) }}"), "[0, 1, 2] [1, 2, 3] [5, 3, 1]");
  std::time_t now = std::time(nullptr);
  std::tm tm;
  localtime_r(&now, &tm);
  std::string year = render("{{ strftime_now('%Y') }}");
  EXPECT_TRUE(year == std::to_string(tm.tm_year + 1900) || year == std::to_string(tm.tm_year + 1901)) << year;
  EXPECT_EQ(render("{{ strftime_now('%%|%q') }}"), "%|%q");
}

// RenderOptions::now fixes the clock; the fields print in the local time zone.
TEST(Jinja, StrftimeNowWithAFixedClock) {
  const std::time_t t = 1750000000;  // 2025-06-15 15:06:40 UTC
  std::tm tm;
  localtime_r(&t, &tm);
  char want[64];
  std::strftime(want, sizeof want, "%Y-%m-%d %H:%M %B %b %%", &tm);
  glint::jinja::RenderOptions o;
  o.now = t;
  glint::jinja::Template tpl("{{ strftime_now('%Y-%m-%d %H:%M %B %b %%') }}", "t");
  EXPECT_EQ(tpl.render(nlohmann::ordered_json::object(), o), want);
  EXPECT_EQ(tpl.render(nlohmann::ordered_json::object(), o), tpl.render(nlohmann::ordered_json::object(), o));
}

TEST(Jinja, ChatTemplateVariables) {
  const char* t =
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if tools %}[{{ tools | length }} tools]{% endif %}"
      "{% if add_generation_prompt %}<assistant>{% if enable_thinking is defined and enable_thinking is false %}"
      "<think></think>{% endif %}{% endif %}";
  EXPECT_EQ(render(t, R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})"),
            "<user>hi<assistant>");
  EXPECT_EQ(render(t, R"({"messages": [], "tools": [{}], "add_generation_prompt": true, "enable_thinking": false})"),
            "[1 tools]<assistant><think></think>");
}

TEST(JinjaErrors, UnknownConstructsNameThemselvesAndTheirLine) {
  EXPECT_ERROR("line one\n{% frobnicate %}", "unknown tag 'frobnicate'", "t line 2");
  EXPECT_ERROR("a\n\n{{ x | frob }}", "unknown filter 'frob'", "t line 3");
  EXPECT_ERROR("{{ x is frob }}", "unknown test 'frob'", "t line 1");
  EXPECT_ERROR("\n{{ 'a'.frob() }}", "unknown method 'frob' of a string", "line 2");
  EXPECT_ERROR("{{ [1].append(2) }}", "unknown method 'append' of a list");
  EXPECT_ERROR("{{ nosuch(1) }}", "unknown function 'nosuch'");
  EXPECT_ERROR("{{ 5 | upper }}", "filter 'upper' cannot be applied to an int");
  EXPECT_ERROR("{% raw %}x{% endraw %}", "unknown tag 'raw'");
}

TEST(JinjaErrors, UnterminatedAndStrayBlocks) {
  EXPECT_ERROR("{% for x in y %}\nabc", "unexpected end of template", "'for' block opened at line 1 is not closed");
  EXPECT_ERROR("a\n{% if x %}{% for y in z %}{% endfor %}", "'if' block opened at line 2 is not closed");
  EXPECT_ERROR("{% macro m() %}x", "'macro' block opened at line 1");
  EXPECT_ERROR("{% set x %}x", "'set' block opened at line 1");
  EXPECT_ERROR("x\n{% endif %}", "unexpected {% endif %}", "line 2");
  EXPECT_ERROR("{% if x %}{% endfor %}", "unexpected {% endfor %} inside the 'if' block opened at line 1");
  EXPECT_ERROR("{{ 'abc }}", "line 1");
  EXPECT_ERROR("{# never closed", "missing end of comment tag");
  EXPECT_ERROR("{{ x ", "line 1");
  EXPECT_ERROR("{{ (1 + }}", "expected an expression");
  EXPECT_ERROR("\n{% break %}", "{% break %} outside a loop", "line 2");
  EXPECT_ERROR("{{ 'a' $ 'b' }}", "unexpected character '$'");
  // Hostile nesting is an error, not a stack overflow.
  EXPECT_ERROR("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "nested deeper than 512 levels");
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if x %}";
  EXPECT_ERROR(ifs, "nested deeper than 512 levels");
  EXPECT_EQ(render("{{ " + std::string(100, '(') + "1" + std::string(100, ')') + " }}"), "1");
  std::string sum = "1", index = "x";
  for (int i = 0; i < 20000; ++i) sum += " + 1", index += "[0]";
  EXPECT_ERROR("{{ " + sum + " }}", "expression nested deeper than 512 levels");
  EXPECT_ERROR("{{ " + index + " }}", "expression nested deeper than 512 levels");
  std::string blocks;
  for (int i = 0; i < 300; ++i) blocks += "{% if true %}";
  blocks += "{{ m(n - 1) if n > 0 }}";
  for (int i = 0; i < 300; ++i) blocks += "{% endif %}";
  EXPECT_ERROR("{% macro m(n) %}" + blocks + "{% endmacro %}{{ m(100) }}", "evaluation nested deeper than 1500 levels");
}

TEST(JinjaErrors, RuntimeErrorsCarryTheEvidence) {
  EXPECT_ERROR("x\n{{ raise_exception('Conversation roles must alternate') }}",
               "t line 2: raise_exception: Conversation roles must alternate");
  EXPECT_ERROR("{{ messages[0] }}", "cannot index an undefined value with [0]");
  EXPECT_ERROR("{{ none ~ 'a' }}", "cannot apply '~' to none");
  EXPECT_ERROR("{{ 'a' + {'k': 1} }}", "cannot concatenate a dict");
  EXPECT_ERROR("{% macro m() %}{% endmacro %}{{ m }}", "cannot print function 'm'");
  EXPECT_ERROR("{% set x = 1 %}{% set x.y = 2 %}", "only of a namespace");
  EXPECT_ERROR("{% for x in 5 %}{% endfor %}", "cannot loop over an int");
  EXPECT_ERROR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "macro 'm' takes at most 1 argument(s), got 2");
  EXPECT_ERROR("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "unexpected keyword argument 'b'");
  EXPECT_ERROR("{{ 1 // 0 }}", "division or modulo by zero");
  EXPECT_ERROR("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "nested deeper than");
  EXPECT_EQ(error_of("{{ x }}", R"({"true": 1})"), "t: the render context may not redefine the global 'true'");
}

}  // namespace
