#!/usr/bin/env node
// Reference tokenization with Hugging Face's `tokenizers` (the node binding of the Rust
// library), for glint's tokenizer tests and benchmark.
//
// Usage:
//   node tokenize_reference.js encode TOKENIZER_JSON IN.jsonl OUT.jsonl
//       IN: one JSON string per line. OUT: one line per input,
//       {"ids": [...], "decoded": "<decode(ids), special tokens kept>"}.
//   node tokenize_reference.js bench TOKENIZER_JSON IN.jsonl [PASSES]
//       Prints one JSON object: encode throughput in MB/s (UTF-8 bytes of the inputs),
//       one call per string awaited in turn, and encodeBatch over the whole corpus.
// Module resolution: run with NODE_PATH pointing at the node_modules that setup.sh made.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

function readLines(path) {
  return fs.readFileSync(path, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

async function encodeAll(tok, texts) {
  const out = [];
  const chunk = 512;
  for (let i = 0; i < texts.length; i += chunk) {
    const encs = await tok.encodeBatch(texts.slice(i, i + chunk));
    for (const e of encs) out.push(e.getIds());
  }
  return out;
}

async function main() {
  const [mode, tokPath, inPath, arg4] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const texts = readLines(inPath);
  if (mode === 'encode') {
    const ids = await encodeAll(tok, texts);
    const lines = [];
    const chunk = 512;
    for (let i = 0; i < ids.length; i += chunk) {
      const decoded = await tok.decodeBatch(ids.slice(i, i + chunk), false);
      for (let k = 0; k < decoded.length; ++k)
        lines.push(JSON.stringify({ ids: Array.from(ids[i + k]), decoded: decoded[k] }));
    }
    fs.writeFileSync(arg4, lines.join('\n') + '\n');
  } else if (mode === 'bench') {
    const passes = arg4 ? parseInt(arg4, 10) : 3;
    const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0);
    let tokens = 0;
    let bestSingle = Infinity, bestBatch = Infinity;
    for (let p = 0; p < passes; ++p) {
      let t0 = process.hrtime.bigint();
      tokens = 0;
      for (const t of texts) tokens += (await tok.encode(t)).getIds().length;
      bestSingle = Math.min(bestSingle, Number(process.hrtime.bigint() - t0) / 1e9);
      t0 = process.hrtime.bigint();
      await encodeAll(tok, texts);
      bestBatch = Math.min(bestBatch, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    console.log(JSON.stringify({
      bench: 'tokenize-reference', implementation: 'tokenizers (node binding)', tokenizer: tokPath,
      texts: texts.length, bytes, tokens, passes,
      encode_mb_s: bytes / bestSingle / 1e6, encode_batch_mb_s: bytes / bestBatch / 1e6,
    }));
  } else {
    throw new Error('usage: tokenize_reference.js encode|bench TOKENIZER_JSON IN.jsonl [OUT.jsonl|PASSES]');
  }
}

main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
