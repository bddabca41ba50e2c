// Renders chat templates with @huggingface/jinja, the reference glint's Jinja
// interpreter is compared against (tests/reference/chat_template_reference_test.cc).
//
// Usage: node render_reference.mjs REFERENCE_DIR < cases.jsonl > results.jsonl
// REFERENCE_DIR holds node_modules (tests/reference/setup.sh). Each input line is
//   {"config": "<path of a tokenizer_config.json>", "messages": [...], "tools": [...]?,
//    "add_generation_prompt": bool, "extra": {...}, "now": seconds?}
// or {"template": "<Jinja source>", "context": {...}, "now": seconds?} (rendered as it
// is), and gives one output line {"ok": true, "text": "..."} or {"ok": false, "error": "..."}.
// "now" fixes the clock that strftime_now() reads (seconds since the epoch): the render
// runs with a Date whose no-argument form is that instant, so @huggingface/jinja's own
// strftime formats it.
// The context is built the way transformers' apply_chat_template builds it: messages,
// tools (only when given), add_generation_prompt, the special tokens bos/eos/pad/unk
// (a string or {"content": ...}; null ones left out), then the extra variables. With a
// list of named templates, "tool_use" is used when tools are given and it exists, else
// "default". A config without "chat_template" uses chat_template.jinja next to it.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";

const refDir = process.argv[2];
if (!refDir) {
  console.error("usage: node render_reference.mjs REFERENCE_DIR < cases.jsonl");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(refDir), "package.json"));
const { Template } = require("@huggingface/jinja");

const configs = new Map();
function loadConfig(file) {
  if (!configs.has(file)) {
    const config = JSON.parse(fs.readFileSync(file, "utf8"));
    const special = {};
    for (const key of ["bos_token", "eos_token", "pad_token", "unk_token"]) {
      const v = config[key];
      if (typeof v === "string") special[key] = v;
      else if (v && typeof v === "object" && typeof v.content === "string") special[key] = v.content;
    }
    const templates = new Map();
    if (config.chat_template === undefined || config.chat_template === null)
      templates.set("default", fs.readFileSync(path.join(path.dirname(file), "chat_template.jinja"), "utf8"));
    else if (typeof config.chat_template === "string") templates.set("default", config.chat_template);
    else for (const t of config.chat_template) templates.set(t.name, t.template);
    configs.set(file, { special, templates, compiled: new Map() });
  }
  return configs.get(file);
}

const bySource = new Map();
function render(c) {
  if (c.template !== undefined) {
    if (!bySource.has(c.template)) bySource.set(c.template, new Template(c.template));
    return bySource.get(c.template).render(c.context);
  }
  const cfg = loadConfig(c.config);
  let name = "default";
  if (cfg.templates.size === 1) name = cfg.templates.keys().next().value;
  else if (c.tools !== undefined && cfg.templates.has("tool_use")) name = "tool_use";
  if (!cfg.compiled.has(name)) cfg.compiled.set(name, new Template(cfg.templates.get(name)));
  const context = { messages: c.messages };
  if (c.tools !== undefined) context.tools = c.tools;
  context.add_generation_prompt = !!c.add_generation_prompt;
  Object.assign(context, cfg.special, c.extra || {});
  return cfg.compiled.get(name).render(context);
}

// Runs fn with `new Date()` and Date.now() fixed at `seconds` (when given).
const RealDate = Date;
function atTime(seconds, fn) {
  if (seconds === undefined || seconds === null) return fn();
  const ms = seconds * 1000;
  class FixedDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(ms);
      else super(...args);
    }
    static now() {
      return ms;
    }
  }
  globalThis.Date = FixedDate;
  try {
    return fn();
  } finally {
    globalThis.Date = RealDate;
  }
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
for await (const line of rl) {
  if (!line.trim()) continue;
  let result;
  try {
    const c = JSON.parse(line);
    result = { ok: true, text: atTime(c.now, () => render(c)) };
  } catch (e) {
    result = { ok: false, error: String(e && e.message ? e.message : e) };
  }
  out.push(JSON.stringify(result));
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
