#!/usr/bin/env node
// Encode throughput of the HF Rust tokenizer (npm @anush008/tokenizers) on FILE, line by line,
// to compare with `cllm tokenize MODEL --bench FILE`. Run single-threaded:
//   RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node tools/tokref/bench_encode.js FILE
// Lines are sent in batches of 1000 (encodeBatch) so the JS<->Rust call cost is amortised.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');
const { QWEN3_JSON } = require('./common.js');

async function main() {
  const file = process.argv[2];
  const buf = fs.readFileSync(file);
  const lines = buf.toString('utf8').split(/(?<=\n)/);
  const tok = Tokenizer.fromFile(QWEN3_JSON);
  const batches = [];
  for (let i = 0; i < lines.length; i += 1000) batches.push(lines.slice(i, i + 1000));
  let bytes = 0, toks = 0, passes = 0;
  const t0 = process.hrtime.bigint();
  let t;
  do {
    for (const b of batches) {
      const enc = await tok.encodeBatch(b, { addSpecialTokens: false });
      for (const e of enc) toks += e.getIds().length;
    }
    bytes += buf.length;
    passes++;
    t = Number(process.hrtime.bigint() - t0) / 1e9;
  } while (t < 2);
  console.log(`HF tokenizers, per line: ${passes} passes, ${(bytes / 1e6).toFixed(1)} MB in ${t.toFixed(3)} s = ${(bytes / 1e6 / t).toFixed(2)} MB/s, ${(toks / t).toFixed(0)} tokens/s`);
  // Same text in ~64 KB chunks (cut at line ends): few calls, so the binding's per-call cost
  // (napi objects, getIds) stops dominating and the Rust encoder itself is measured.
  const chunks = [];
  for (let i = 0, cur = ''; i <= lines.length; i++) {
    if (i === lines.length || cur.length + lines[i].length > 65536) { if (cur) chunks.push(cur); cur = ''; }
    if (i < lines.length) cur += lines[i];
  }
  bytes = 0; toks = 0; passes = 0;
  const t1 = process.hrtime.bigint();
  do {
    for (const c of chunks) toks += (await tok.encode(c, null, { addSpecialTokens: false })).getIds().length;
    bytes += buf.length;
    passes++;
    t = Number(process.hrtime.bigint() - t1) / 1e9;
  } while (t < 2);
  console.log(`HF tokenizers, 64 KB chunks: ${passes} passes, ${(bytes / 1e6).toFixed(1)} MB in ${t.toFixed(3)} s = ${(bytes / 1e6 / t).toFixed(2)} MB/s, ${(toks / t).toFixed(0)} tokens/s`);
}
main();
