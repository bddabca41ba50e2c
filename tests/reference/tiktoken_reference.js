#!/usr/bin/env node
// Reference tokenization of a Kimi-style tiktoken directory (tiktoken.model +
// tokenizer_config.json) with `js-tiktoken` (a JavaScript port of tiktoken, pinned in
// package.json), for glint's tokenizer tests. Shares no code with glint.
//
// Usage:
//   node tiktoken_reference.js encode DIR IN.jsonl OUT.jsonl
//       IN: one JSON string per line. OUT: one line per input,
//       {"ids": [...], "decoded": "<decode(ids)>"}.
// Module resolution: run with NODE_PATH pointing at the node_modules that setup.sh made.
//
// What is Kimi's (tokenization_kimi.py, moonshotai/Kimi-K2-Instruct):
//   - pat_str: below, written for V8's `v` flag from Kimi's Rust-regex pattern:
//     [\p{Lu}...\p{M}&&[^\p{Han}]] is [[\p{Lu}...\p{M}]&&[^\p{Script=Han}]] (V8 wants
//     both sides of && as nested classes), \p{Han} is \p{Script=Han} (Rust's bare script
//     name is the Script property), (?i:'s|...) (no inline flags in Node 20) is spelled
//     out with the Unicode simple case folds of its letters ('s' also folds from U+017F
//     LATIN SMALL LETTER LONG S; the other letters fold only to their capitals), and \s
//     is \p{White_Space}.
//   - special tokens: ids N.. (N = number of BPE ranks) named by tokenizer_config.json's
//     added_tokens_decoder, the rest of the 256 reserved ids "<|reserved_token_ID|>";
//     encoded with allowed_special="all".
//   - the text is cut every 400,000 code points, and before the 25,001st code point of
//     a run of whitespace (Python's str.isspace) or non-whitespace; each cut is encoded
//     on its own.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tiktoken } = require('js-tiktoken/lite');

const L = '[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]';
const l = '[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]';
const notHan = '[^\\p{Script=Han}]';
const upper = `[${L}&&${notHan}]`;
const lower = `[${l}&&${notHan}]`;
const contraction = "(?:'[sS\\u017F]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
// \s is written \p{White_Space}, as the regex crate has it (V8's \s adds U+FEFF and
// lacks U+0085).
const KIMI_PATTERN_V = [
  '[\\p{Script=Han}]+',
  `[^\\r\\n\\p{L}\\p{N}]?${upper}*${lower}+${contraction}?`,
  `[^\\r\\n\\p{L}\\p{N}]?${upper}+${lower}*${contraction}?`,
  '\\p{N}{1,3}',
  ' ?[^\\p{White_Space}\\p{L}\\p{N}]+[\\r\\n]*',
  '\\p{White_Space}*[\\r\\n]+',
  '\\p{White_Space}+(?!\\P{White_Space})',
  '\\p{White_Space}+',
].join('|');

// js-tiktoken compiles pat_str with the flags "ug"; Kimi's pattern needs "vg".
const NativeRegExp = RegExp;
function withVFlag(source, flags) {
  if (source === KIMI_PATTERN_V && flags === 'ug') return new NativeRegExp(source, 'vg');
  return new NativeRegExp(source, flags);
}
withVFlag.prototype = NativeRegExp.prototype;
globalThis.RegExp = withVFlag;

function pythonIsSpace(cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp === 0x85 || cp === 0xa0 ||
    cp === 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp === 0x2028 || cp === 0x2029 || cp === 0x202f ||
    cp === 0x205f || cp === 0x3000;
}

// tokenization_kimi.py's cuts, over code points as Python indexes strings.
function kimiCuts(text) {
  const cps = Array.from(text);
  const out = [];
  for (let i = 0; i < cps.length; i += 400000) {
    const s = cps.slice(i, i + 400000);
    let len = 0;
    let isSpace = s.length > 0 ? pythonIsSpace(s[0].codePointAt(0)) : false;
    let start = 0;
    for (let k = 0; k < s.length; ++k) {
      const now = pythonIsSpace(s[k].codePointAt(0));
      if (isSpace !== now) {
        len = 1;
        isSpace = now;
      } else {
        len += 1;
        if (len > 25000) {
          out.push(s.slice(start, k).join(''));
          start = k;
          len = 1;
        }
      }
    }
    out.push(s.slice(start).join(''));
  }
  return out;
}

function load(dir) {
  const lines = fs.readFileSync(path.join(dir, 'tiktoken.model'), 'utf8').split('\n').filter((x) => x.length > 0);
  const byRank = [];
  for (const line of lines) {
    const [b64, rank] = line.split(' ');
    byRank[Number(rank)] = b64;
  }
  const n = byRank.length;
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const named = config.added_tokens_decoder || {};
  const special = {};
  for (let id = n; id < n + 256; ++id)
    special[named[id] ? named[id].content : `<|reserved_token_${id}|>`] = id;
  for (const [id, t] of Object.entries(named)) special[t.content] = Number(id);
  // js-tiktoken's compact rank format: "! OFFSET TOKEN TOKEN ..." (base64 tokens in rank order).
  const enc = new Tiktoken({ pat_str: KIMI_PATTERN_V, special_tokens: special, bpe_ranks: `! 0 ${byRank.join(' ')}` });
  return enc;
}

function main() {
  const [mode, dir, inPath, outPath] = process.argv.slice(2);
  if (mode !== 'encode') throw new Error('usage: tiktoken_reference.js encode DIR IN.jsonl OUT.jsonl');
  const enc = load(dir);
  const texts = fs.readFileSync(inPath, 'utf8').split('\n').filter((x) => x.length > 0).map((x) => JSON.parse(x));
  const out = [];
  for (const text of texts) {
    const ids = [];
    for (const cut of kimiCuts(text)) ids.push(...enc.encode(cut, 'all'));
    out.push(JSON.stringify({ ids, decoded: enc.decode(ids) }));
  }
  fs.writeFileSync(outPath, out.join('\n') + '\n');
}

main();
