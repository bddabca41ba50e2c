// The built-in chat templates (builtin_templates.h).
//
// DeepSeek-V4 (model_type deepseek_v4: deepseek-ai/DeepSeek-V4-Flash and -Pro). The
// release defines its prompt format with a Python encoder, encoding/encoding_dsv4.py of
// the model repositories (DeepSeek-V4-Flash revision 60d8d70770c6, DeepSeek-V4-Pro
// revision b5968e9190ef; the same file in both, sha256 bdbd57c132a1b372...), and its
// model card says the release has no Jinja chat template. The template below is written
// for glint from that encoder's behaviour (encode_messages), which it reproduces string for
// string on tests/data/deepseek_v4_chat/cases.json (made by running the release's file):
//   - "<｜begin▁of▁sentence｜>" first; a system message is its bare content (no marker);
//     a user turn is "<｜User｜>" + content; an assistant turn ends "<｜end▁of▁sentence｜>".
//   - The assistant's opening "<｜Assistant｜>" is written after the user turn it answers,
//     followed by "<think>" in thinking mode (the reply is reasoning + "</think>" +
//     content) and by "</think>" in chat mode (the reply is the content). In thinking mode
//     with drop_thinking (the default), assistant turns before the last user turn lose
//     their reasoning and their user turn's opening ends "</think>" instead.
//   - Tools: the "## Tools" section (DSML calling convention, then one JSON schema per
//     line) follows the system message's content after "\n\n"; tools given with the
//     conversation go on a leading system/developer message, else on a system message of
//     their own (vLLM's DeepseekV4Tokenizer does the same). Any tools turn drop_thinking off.
//   - Tool calls: "\n\n<｜DSML｜tool_calls>\n" + one <｜DSML｜invoke name="..."> per call
//     holding one <｜DSML｜parameter name="k" string="true|false"> per argument (strings
//     as they are, other values as JSON) + "\n</｜DSML｜tool_calls>", after the content.
//   - Tool results: no tool role; a run of tool and user messages is one user turn, each
//     result "<tool_result>...</tool_result>" (in the order of the calls, by id), the
//     parts joined by "\n\n".
//   - reasoning_effort "max" in thinking mode puts a fixed instruction right after BOS.
//   - developer (a user turn with its own tools) and latest_reminder
//     ("<｜latest_reminder｜>") roles as in the encoder; quick instruction tasks ("task")
//     are refused.
// Where glint differs on purpose: add_generation_prompt=false leaves out the opening the
// encoder always writes after a final user turn; tool-call arguments may be a JSON object
// (the serving stacks' form) as well as the encoder's JSON string; enable_thinking picks
// thinking (true, the default as in vLLM) or chat (false). Numbers are printed as
// @huggingface/jinja prints them, so a float such as 1.0 in tool arguments or schemas
// comes out "1" where Python's json.dumps writes "1.0". A later revision of a model
// repository that ships its own chat_template.jinja is rendered with that one instead.
#include "template/builtin_templates.h"

namespace glint {
namespace {

const char* const kDeepSeekV4 = R"jinja(
{#- DeepSeek-V4: the prompt format of the release's reference encoder (encode_messages),
    as a chat template. Variables: messages, tools, add_generation_prompt,
    enable_thinking (default true: the "thinking" mode; false: "chat"), drop_thinking
    (default true), reasoning_effort ("max", "high" or none). -#}
{%- set user_tag = '<｜User｜>' -%}
{%- set eos = '<｜end▁of▁sentence｜>' -%}
{%- set thinking = enable_thinking is not defined or enable_thinking -%}
{%- set drop = drop_thinking is not defined or drop_thinking -%}
{%- set effort = reasoning_effort if reasoning_effort is defined else none -%}
{%- if effort is not none and effort not in ['max', 'high'] -%}
  {{- raise_exception("reasoning_effort must be 'max', 'high' or none, got " ~ effort) -}}
{%- endif -%}
{%- set request_tools = tools if tools is defined and tools is not none and tools | length > 0 else none -%}

{#- The tools section a system or developer message carries. -#}
{%- macro tools_section(ts) -%}
  {%- set acc = namespace(schemas=[]) -%}
  {%- for t in ts -%}
    {%- set acc.schemas = acc.schemas + [(t.function if t.function is defined else t) | tojson] -%}
  {%- endfor -%}
  {{- '## Tools\n\n'
      ~ 'You have access to a set of tools to help answer the user\'s question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:\n\n'
      ~ '<｜DSML｜tool_calls>\n'
      ~ '<｜DSML｜invoke name="$TOOL_NAME">\n'
      ~ '<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>\n'
      ~ '...\n'
      ~ '</｜DSML｜invoke>\n'
      ~ '<｜DSML｜invoke name="$TOOL_NAME2">\n'
      ~ '...\n'
      ~ '</｜DSML｜invoke>\n'
      ~ '</｜DSML｜tool_calls>\n\n'
      ~ 'String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.\n\n'
      ~ 'If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n'
      ~ 'Otherwise, output directly after </think> with tool calls or final response.\n\n'
      ~ '### Available Tool Schemas\n\n'
      ~ (acc.schemas | join('\n'))
      ~ '\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n' -}}
{%- endmacro -%}

{#- A system or developer message's string content. -#}
{%- macro plain(m, what) -%}
  {%- if m.content is defined and m.content is not none and m.content is not string -%}
    {{- raise_exception(what ~ ' content must be a string') -}}
  {%- endif -%}
  {{- m.content if m.content is string else '' -}}
{%- endmacro -%}

{#- Turns: every run of consecutive user and tool messages is one user turn (tool results
    become <tool_result> blocks in it); request tools go to a leading system or developer
    message, else to a system message of their own put first. -#}
{%- set ns = namespace(turns=[], run=[], view=[], any_tools=request_tools is not none, last_user=-1, call_ids=[]) -%}
{%- set lead_holds_tools = messages | length > 0 and messages[0].role is string and messages[0].role in ['system', 'developer'] -%}
{%- if request_tools is not none and not lead_holds_tools -%}
  {%- set ns.turns = [{'role': 'system', 'msg': {}, 'tools': request_tools}] -%}
{%- endif -%}
{%- for m in messages -%}
  {%- set i = loop.index0 -%}
  {%- if m.role is not string -%}
    {{- raise_exception('message ' ~ i ~ ' has no string "role"') -}}
  {%- endif -%}
  {%- if m.task is defined and m.task is not none -%}
    {{- raise_exception('message ' ~ i ~ ': quick instruction tasks ("task") are not supported') -}}
  {%- endif -%}
  {%- if m.tools -%}{%- set ns.any_tools = true -%}{%- endif -%}
  {%- if m.role in ['user', 'tool'] -%}
    {%- set ns.run = ns.run + [m] -%}
  {%- else -%}
    {%- if ns.run -%}
      {%- set ns.turns = ns.turns + [{'role': 'user', 'run': ns.run}] -%}
      {%- set ns.run = [] -%}
    {%- endif -%}
    {%- if i == 0 and request_tools is not none and lead_holds_tools -%}
      {%- set ns.turns = ns.turns + [{'role': m.role, 'msg': m, 'tools': request_tools}] -%}
    {%- else -%}
      {%- set ns.turns = ns.turns + [{'role': m.role, 'msg': m}] -%}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if ns.run -%}
  {%- set ns.turns = ns.turns + [{'role': 'user', 'run': ns.run}] -%}
{%- endif -%}

{#- Thinking mode with drop_thinking (and no tools anywhere): developer messages before the
    last user turn are left out; assistant turns before it lose their reasoning below. -#}
{%- set drop = drop and not ns.any_tools -%}
{%- for t in ns.turns -%}
  {%- if t.role in ['user', 'developer'] -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- if thinking and drop -%}
  {%- for t in ns.turns -%}
    {%- if t.role in ['user', 'system', 'tool', 'latest_reminder', 'direct_search_results', 'assistant'] or loop.index0 >= ns.last_user -%}
      {%- set ns.view = ns.view + [t] -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set ns.last_user = -1 -%}
  {%- for t in ns.view -%}
    {%- if t.role in ['user', 'developer'] -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
  {%- endfor -%}
{%- else -%}
  {%- set ns.view = ns.turns -%}
{%- endif -%}

{{- '<｜begin▁of▁sentence｜>' -}}
{%- set n = ns.view | length -%}
{%- for t in ns.view -%}
  {%- set i = loop.index0 -%}
  {%- if i == 0 and thinking and effort == 'max' -%}
    {{- 'Reasoning Effort: Absolute maximum with no shortcuts permitted.\n'
        ~ 'You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n'
        ~ 'Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n' -}}
  {%- endif -%}

  {%- if t.role == 'system' or t.role == 'developer' -%}
    {%- set m = t.msg -%}
    {%- set section_tools = t.tools if t.tools is defined else m.tools -%}
    {%- if t.role == 'developer' -%}
      {%- if not m.content -%}{{- raise_exception('a developer message needs content') -}}{%- endif -%}
      {{- user_tag -}}
    {%- endif -%}
    {{- plain(m, t.role) -}}
    {%- if section_tools -%}{{- '\n\n' ~ tools_section(section_tools) -}}{%- endif -%}
    {%- if m.response_format -%}
      {{- '\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n' ~ (m.response_format | tojson) -}}
    {%- endif -%}

  {%- elif t.role == 'user' -%}
    {#- Tool results in the order of the latest assistant turn's tool calls (by id; an
        unknown id counts as the first call), text blocks in place. -#}
    {%- set nk = ns.call_ids | length if ns.call_ids | length > 0 else 1 -%}
    {%- set u = namespace(keyed=[], sorted=[], parts=[], next=0) -%}
    {%- for x in t.run -%}
      {%- if x.role == 'tool' -%}
        {%- set k = namespace(v=0) -%}
        {%- for c in ns.call_ids -%}
          {%- if c != '' and x.tool_call_id is defined and c == x.tool_call_id -%}{%- set k.v = loop.index0 -%}{%- endif -%}
        {%- endfor -%}
        {%- set u.keyed = u.keyed + [[k.v, x]] -%}
      {%- endif -%}
    {%- endfor -%}
    {%- for key in range(nk) -%}
      {%- for pair in u.keyed -%}
        {%- if pair[0] == key -%}{%- set u.sorted = u.sorted + [pair[1]] -%}{%- endif -%}
      {%- endfor -%}
    {%- endfor -%}
    {%- for x in t.run -%}
      {%- if x.role == 'user' -%}
        {%- if x.content is defined and x.content is not string -%}
          {{- raise_exception('user message content must be a string') -}}
        {%- endif -%}
        {%- set u.parts = u.parts + [x.content if x.content is defined else ''] -%}
      {%- else -%}
        {%- set r = u.sorted[u.next] -%}
        {%- set u.next = u.next + 1 -%}
        {%- set c = r.content if r.content is defined else '' -%}
        {%- if c is string -%}
          {%- set u.parts = u.parts + ['<tool_result>' ~ c ~ '</tool_result>'] -%}
        {%- elif c is iterable and c is not mapping -%}
          {%- set b = namespace(texts=[]) -%}
          {%- for p in c -%}
            {%- if p.type == 'text' -%}
              {%- set b.texts = b.texts + [p.text if p.text is string else ''] -%}
            {%- else -%}
              {%- set b.texts = b.texts + ['[Unsupported ' ~ (p.type if p.type is defined and p.type is not none else 'None') ~ ']'] -%}
            {%- endif -%}
          {%- endfor -%}
          {%- set u.parts = u.parts + ['<tool_result>' ~ (b.texts | join('\n\n')) ~ '</tool_result>'] -%}
        {%- else -%}
          {{- raise_exception('tool message content must be a string or a list of content parts') -}}
        {%- endif -%}
      {%- endif -%}
    {%- endfor -%}
    {{- user_tag ~ (u.parts | join('\n\n')) -}}

  {%- elif t.role == 'latest_reminder' -%}
    {%- if t.msg.content is defined and t.msg.content is not none and t.msg.content is not string -%}
      {{- raise_exception('latest_reminder message content must be a string') -}}
    {%- endif -%}
    {#- (the reference encoder prints a missing content as "None") -#}
    {{- '<｜latest_reminder｜>' ~ (t.msg.content if t.msg.content is string else 'None') -}}

  {%- elif t.role == 'assistant' -%}
    {%- set m = t.msg -%}
    {%- set calls = namespace(text='', invokes=[]) -%}
    {%- if m.tool_calls -%}
      {%- set ns.call_ids = [] -%}
      {%- for tc in m.tool_calls -%}
        {%- set f = tc.function if tc.function is defined else tc -%}
        {%- set id = tc.id if tc.id else (tc.function.id if tc.function is defined and tc.function.id is defined else '') -%}
        {%- set ns.call_ids = ns.call_ids + [id if id else ''] -%}
        {%- if f.arguments is not mapping -%}
          {{- raise_exception('tool call arguments must be a JSON object') -}}
        {%- endif -%}
        {%- set p = namespace(list=[]) -%}
        {%- for key, value in f.arguments.items() -%}
          {%- set p.list = p.list + ['<｜DSML｜parameter name="' ~ key ~ '" string="' ~ ('true' if value is string else 'false') ~ '">'
                                     ~ (value if value is string else value | tojson) ~ '</｜DSML｜parameter>'] -%}
        {%- endfor -%}
        {%- set calls.invokes = calls.invokes + ['<｜DSML｜invoke name="' ~ f.name ~ '">\n' ~ (p.list | join('\n')) ~ '\n</｜DSML｜invoke>'] -%}
      {%- endfor -%}
      {%- set calls.text = '\n\n<｜DSML｜tool_calls>\n' ~ (calls.invokes | join('\n')) ~ '\n</｜DSML｜tool_calls>' -%}
    {%- endif -%}
    {%- if m.content is defined and m.content is not none and m.content is not string -%}
      {{- raise_exception('assistant message content must be a string') -}}
    {%- endif -%}
    {%- if thinking and (not drop or i > ns.last_user) -%}
      {{- (m.reasoning_content if m.reasoning_content is string else '') ~ '</think>' -}}
    {%- endif -%}
    {{- (m.content if m.content is string else '') ~ calls.text -}}
    {%- if not m.wo_eos -%}{{- eos -}}{%- endif -%}

  {%- else -%}
    {{- raise_exception('unknown role: ' ~ t.role) -}}
  {%- endif -%}

  {#- After a user or developer turn that an assistant turn follows (or that ends the
      conversation, with add_generation_prompt): the assistant's opening. -#}
  {%- set follows = ns.view[i + 1].role if i + 1 < n else 'end' -%}
  {%- if t.role in ['user', 'developer'] and (follows in ['assistant', 'latest_reminder'] or (follows == 'end' and add_generation_prompt is defined and add_generation_prompt)) -%}
    {{- '<｜Assistant｜>' ~ ('<think>' if thinking and (not drop or i >= ns.last_user) else '</think>') -}}
  {%- endif -%}
{%- endfor -%}
)jinja";

const BuiltinChatTemplate kBuiltins[] = {
    {"deepseek_v4", kDeepSeekV4, /*parses_tool_arguments=*/true},
};

}  // namespace

const BuiltinChatTemplate* find_builtin_chat_template(const std::string& name) {
  for (const BuiltinChatTemplate& b : kBuiltins)
    if (b.name == name) return &b;
  return nullptr;
}

std::vector<std::string> builtin_chat_template_names() {
  std::vector<std::string> out;
  for (const BuiltinChatTemplate& b : kBuiltins) out.push_back(b.name);
  return out;
}

}  // namespace glint
