#!/usr/bin/env python3
"""Writes chats.jsonl: 50 deterministic OpenAI-format chats (single and multi-turn, tool
calls and tool results, short and long turns) for the everyday-trainer benchmark
(bench/everyday/run.sh). Usage: make_chats.py > chats.jsonl"""
import json
import random

WORDS = ("the a model expert token layer router gradient batch memory vocabulary sequence "
         "adapter rank learning rate step loss chat template user assistant tool weather "
         "city temperature forecast rain sun wind report summary table value number list "
         "python function returns string error file line config option flag default run").split()


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def text(rng, lo, hi):
    return " ".join(sentence(rng, rng.randint(6, 14)) for _ in range(rng.randint(lo, hi)))


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def chat(rng, i):
    kind = i % 5
    if kind == 0:  # a tool call and its result
        city = rng.choice(["Paris", "Lima", "Oslo", "Kyoto", "Cairo"])
        return {"tools": TOOLS, "messages": [
            {"role": "user", "content": f"What is the weather in {city}? " + text(rng, 0, 2)},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}]},
            {"role": "tool", "content": json.dumps({"city": city, "temp_c": rng.randint(-5, 35)})},
            {"role": "assistant", "content": text(rng, 1, 4)}]}
    if kind == 1:  # several turns
        msgs = [{"role": "system", "content": text(rng, 1, 2)}]
        for _ in range(rng.randint(2, 4)):
            msgs.append({"role": "user", "content": text(rng, 1, 3)})
            msgs.append({"role": "assistant", "content": text(rng, 1, 5)})
        return {"messages": msgs}
    if kind == 2:  # a long answer
        return {"messages": [{"role": "user", "content": text(rng, 1, 2)},
                             {"role": "assistant", "content": text(rng, 15, 40)}]}
    if kind == 3:  # a long prompt, a short answer
        return {"messages": [{"role": "user", "content": text(rng, 10, 30)},
                             {"role": "assistant", "content": text(rng, 1, 1)}]}
    return {"messages": [{"role": "user", "content": text(rng, 1, 2)},
                         {"role": "assistant", "content": text(rng, 1, 3)}]}


rng = random.Random(0)
for i in range(50):
    print(json.dumps(chat(rng, i)))
