#!/usr/bin/env python3
"""Writes cases.json: conversations and the prompt DeepSeek-V4's own encoder gives each.

The reference is the release's Python encoder, encoding/encoding_dsv4.py of
deepseek-ai/DeepSeek-V4-Flash (revision 60d8d70770c6776ff598c94bb586a859a38244f1) and
deepseek-ai/DeepSeek-V4-Pro (revision b5968e9190ef611bbf34a7229255be88a0e937c1), the same
file in both (sha256 bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0).
It is not part of glint: download it and run

    python3 tests/data/deepseek_v4_chat/generate.py path/to/encoding_dsv4.py \
        > tests/data/deepseek_v4_chat/cases.json

Plain python3, no packages. tests/data/deepseek_v4_chat_test.cc renders every case with
glint's built-in DeepSeek-V4 chat template and expects these strings.

Each case: {"name", "messages", "tools" (optional), "variables" (the template variables
enable_thinking, drop_thinking, reasoning_effort), "add_generation_prompt", "expected"}.
The template variables map to encode_messages as the serving stacks do (vLLM's
DeepseekV4Tokenizer.apply_chat_template):
  enable_thinking  true (or absent) -> thinking_mode="thinking"; false -> "chat"
  drop_thinking    -> drop_thinking (default True)
  reasoning_effort -> reasoning_effort (None, "high" or "max")
  tools            -> put on the leading system/developer message, else on a system
                      message of their own inserted first
Two glint conventions shape the input handed to the encoder:
  - tool-call "arguments" given as a JSON object are the arguments themselves (the
    encoder reads a JSON string; an object would land in one parameter named
    "arguments"), so they reach the encoder as json.dumps of the object;
  - add_generation_prompt: the encoder always opens the assistant turn after a final
    user/tool message; every case that ends with one sets add_generation_prompt (the
    C++ test checks the false case against the same string without that opening).
"""

import copy
import hashlib
import importlib.util
import json
import sys

RELEASE_SHA256 = "bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0"

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "days": {"type": "integer", "minimum": 1},
                    "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Web search.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    },
]


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(call_id, content):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def case(name, messages, tools=None, add_generation_prompt=False, **variables):
    c = {"name": name, "messages": messages}
    if tools is not None:
        c["tools"] = tools
    c["variables"] = variables
    c["add_generation_prompt"] = add_generation_prompt
    return c


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

CASES = [
    case("chat_single_turn",
         [SYSTEM, {"role": "user", "content": "What is 2+2?"},
          {"role": "assistant", "content": "4."}],
         enable_thinking=False),
    case("thinking_single_turn",
         [SYSTEM, {"role": "user", "content": "What is 2+2?"},
          {"role": "assistant", "reasoning_content": "Simple arithmetic.", "content": "2 + 2 = 4."}]),
    case("thinking_explicit_true_generation_prompt",
         [SYSTEM, {"role": "user", "content": "What is 2+2?"}],
         add_generation_prompt=True, enable_thinking=True),
    case("chat_generation_prompt",
         [{"role": "user", "content": "Hi"}],
         add_generation_prompt=True, enable_thinking=False),
    case("thinking_multi_turn_drops_earlier_reasoning",
         [SYSTEM,
          {"role": "user", "content": "hello"},
          {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hello! I am DeepSeek."},
          {"role": "user", "content": "1+1=?"},
          {"role": "assistant", "reasoning_content": "One plus one.", "content": "2"}]),
    case("thinking_multi_turn_generation_prompt",
         [{"role": "user", "content": "hello"},
          {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hello!"},
          {"role": "user", "content": "1+1=?"}],
         add_generation_prompt=True),
    case("thinking_keep_reasoning_drop_thinking_false",
         [{"role": "user", "content": "hello"},
          {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hello!"},
          {"role": "user", "content": "1+1=?"},
          {"role": "assistant", "reasoning_content": "Easy.", "content": "2"}],
         drop_thinking=False),
    case("chat_multi_turn_reasoning_ignored",
         [SYSTEM,
          {"role": "user", "content": "hello"},
          {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hello!"},
          {"role": "user", "content": "Bye"},
          {"role": "assistant", "reasoning_content": "Say bye.", "content": "Goodbye."}],
         enable_thinking=False),
    case("thinking_assistant_without_reasoning",
         [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}]),
    case("reasoning_effort_max_thinking",
         [SYSTEM, {"role": "user", "content": "Prove it."},
          {"role": "assistant", "reasoning_content": "Carefully.", "content": "Done."}],
         reasoning_effort="max"),
    case("reasoning_effort_max_chat_adds_nothing",
         [{"role": "user", "content": "Prove it."}, {"role": "assistant", "content": "Done."}],
         enable_thinking=False, reasoning_effort="max"),
    case("reasoning_effort_high",
         [{"role": "user", "content": "Prove it."}],
         add_generation_prompt=True, reasoning_effort="high"),
    case("tools_with_system_thinking_keeps_all_reasoning",
         [SYSTEM,
          {"role": "user", "content": "Weather in Zürich and Paris for 3 days?"},
          {"role": "assistant", "reasoning_content": "Call the tool twice.", "content": "",
           "tool_calls": [call("call_1", "get_weather", "{\"city\": \"Zürich\", \"days\": 3}"),
                          call("call_2", "get_weather", "{\"city\": \"Paris\", \"days\": 3, \"units\": \"celsius\"}")]},
          tool("call_2", "Paris: 18°C, cloudy"),
          tool("call_1", "Zürich: 15°C, rain"),
          {"role": "assistant", "reasoning_content": "Summarize.", "content": "Zürich 15°C with rain; Paris 18°C."},
          {"role": "user", "content": "Thanks!"},
          {"role": "assistant", "reasoning_content": "Close.", "content": "You're welcome."}],
         tools=WEATHER_TOOLS),
    case("tools_without_system_chat",
         [{"role": "user", "content": "Search for glint"},
          {"role": "assistant", "content": "Searching.",
           "tool_calls": [call("c1", "search", "{\"query\": \"glint\"}")]},
          tool("c1", "No results."),
          {"role": "assistant", "content": "Nothing found."}],
         tools=WEATHER_TOOLS, enable_thinking=False),
    case("tools_generation_prompt_after_tool_result",
         [{"role": "user", "content": "Search for glint"},
          {"role": "assistant", "reasoning_content": "Use search.",
           "tool_calls": [call("c1", "search", "{\"query\": \"glint\"}")]},
          tool("c1", "No results.")],
         tools=WEATHER_TOOLS, add_generation_prompt=True),
    case("tool_calls_without_tools_thinking_drops_earlier",
         [{"role": "user", "content": "Weather?"},
          {"role": "assistant", "reasoning_content": "Ask the tool.", "content": "Let me check.",
           "tool_calls": [call("a", "get_weather", "{\"city\": \"Oslo\"}")]},
          tool("a", "Oslo: -3°C"),
          {"role": "user", "content": "And tomorrow?"},
          {"role": "assistant", "reasoning_content": "Unknown.", "content": "I cannot tell."}]),
    case("argument_types",
         [{"role": "user", "content": "Do it"},
          {"role": "assistant", "content": "",
           "tool_calls": [call("x", "complex", json.dumps(
               {"text": "multi\nline \"quoted\" é", "n": 42, "neg": -7, "ok": True, "off": False,
                "nothing": None, "ratio": 0.25, "list": [1, "two", [3]],
                "obj": {"k": "v", "nested": {"z": [True, None]}}}, ensure_ascii=False))]}],
         enable_thinking=False),
    case("arguments_as_object",
         [{"role": "user", "content": "Weather in Rome"},
          {"role": "assistant", "reasoning_content": "Tool.",
           "tool_calls": [call("r", "get_weather", {"city": "Rome", "days": 2, "units": "celsius"})]}]),
    case("arguments_not_json_and_empty",
         [{"role": "user", "content": "Go"},
          {"role": "assistant", "content": "",
           "tool_calls": [call("p", "raw", "not json at all"), call("q", "noargs", "{}")]}],
         enable_thinking=False),
    case("tool_result_content_parts",
         [{"role": "user", "content": "Look"},
          {"role": "assistant", "content": "", "tool_calls": [call("v", "view", "{}")]},
          tool("v", [{"type": "text", "text": "first"}, {"type": "image_url", "image_url": {"url": "x"}},
                     {"type": "text", "text": "second"}]),
          {"role": "assistant", "content": "Seen."}],
         enable_thinking=False),
    case("tool_results_unknown_ids_keep_order",
         [{"role": "user", "content": "Go"},
          {"role": "assistant", "content": "",
           "tool_calls": [call("k1", "a", "{}"), call("k2", "b", "{}"), call("k3", "c", "{}")]},
          tool("k3", "third"), tool("zz", "unknown"), tool("k2", "second"), tool("k1", "first"),
          {"role": "user", "content": "and text after the results"},
          {"role": "assistant", "content": "ok"}],
         enable_thinking=False),
    case("consecutive_user_messages_merge",
         [{"role": "user", "content": "part one"}, {"role": "user", "content": "part two"},
          {"role": "assistant", "content": "Both read."}],
         enable_thinking=False),
    case("system_mid_conversation",
         [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
          {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Explain RoPE"},
          {"role": "assistant", "reasoning_content": "Short.", "content": "Rotary positions."}]),
    case("assistant_first_and_consecutive_assistants",
         [{"role": "assistant", "reasoning_content": "Open.", "content": "Welcome."},
          {"role": "assistant", "content": "Ask me anything."},
          {"role": "user", "content": "Ok"},
          {"role": "assistant", "content": "Sure."}]),
    case("developer_and_latest_reminder_thinking",
         [{"role": "developer", "content": "Dev rules."},
          {"role": "user", "content": "q1"},
          {"role": "assistant", "reasoning_content": "r1", "content": "a1"},
          {"role": "developer", "content": "More dev rules."},
          {"role": "latest_reminder", "content": "Remember: be kind."},
          {"role": "assistant", "reasoning_content": "r2", "content": "a2"}]),
    case("developer_chat",
         [{"role": "developer", "content": "Dev rules."},
          {"role": "user", "content": "q1"},
          {"role": "assistant", "content": "a1"}],
         enable_thinking=False),
    case("response_format_and_wo_eos",
         [{"role": "system", "content": "Reply in JSON.",
           "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}},
          {"role": "user", "content": "Give me an object"},
          {"role": "assistant", "content": "{\"a\": 1", "wo_eos": True}],
         enable_thinking=False),
    case("unicode_and_whitespace",
         [{"role": "system", "content": "  leading and trailing  \n"},
          {"role": "user", "content": "日本語で答えて 🙂\n\nOK?"},
          {"role": "assistant", "reasoning_content": "\n考える\n", "content": "はい。\n"}]),
]


def load_encoder(path):
    data = open(path, "rb").read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != RELEASE_SHA256:
        sys.exit(f"{path}: sha256 {digest}, expected the release's {RELEASE_SHA256}")
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def encoder_input(c):
    """The case's messages as the encoder takes them (see the module docstring)."""
    messages = copy.deepcopy(c["messages"])
    for m in messages:
        for tc in m.get("tool_calls") or []:
            if isinstance(tc["function"]["arguments"], dict):
                tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"], ensure_ascii=False)
    tools = c.get("tools")
    if tools:
        if messages and messages[0].get("role") in ("system", "developer"):
            messages[0]["tools"] = tools
        else:
            messages.insert(0, {"role": "system", "tools": tools})
    return messages


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: generate.py path/to/encoding_dsv4.py > cases.json")
    enc = load_encoder(sys.argv[1])
    out = []
    for c in CASES:
        v = c["variables"]
        prompt = enc.encode_messages(
            encoder_input(c),
            thinking_mode="chat" if v.get("enable_thinking") is False else "thinking",
            drop_thinking=v.get("drop_thinking", True),
            reasoning_effort=v.get("reasoning_effort"),
        )
        ends_with_request = c["messages"][-1]["role"] in ("user", "tool", "developer")
        if ends_with_request != c["add_generation_prompt"]:
            sys.exit(f"{c['name']}: add_generation_prompt must be set exactly when the last message is a request")
        out.append(dict(c, expected=prompt))
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
