// The peer side of `cllm bench-grammar`: xgrammar's WebAssembly build (npm @mlc-ai/web-xgrammar)
// on the same vocabulary, schema and token sequence as cllm.
//   node bench-grammar-xgrammar.mjs TOKENIZER_JSON SCHEMA_FILE TOKENS_FILE [any_whitespace]
// Prints one JSON line: tokenizer_ms (TokenizerInfo + GrammarCompiler), compile_ms, mask times
// per step (getNextTokenBitmask, ms), and how many of cllm's tokens xgrammar's matcher accepted.
// indent -1 = one line with the given separators (undefined would pretty-print with 2 spaces).
import fs from 'fs';
import { createRequire } from 'module';
const require = createRequire(import.meta.url);
const [tokPath, schemaPath, tokensPath, anyWs] = process.argv.slice(2);
// the emscripten loader inside expects CommonJS globals under node
globalThis.require = require;
globalThis.__filename = require.resolve('@mlc-ai/web-xgrammar');
globalThis.__dirname = globalThis.__filename.replace(/\/[^/]*$/, '');
const mod = await import('@mlc-ai/web-xgrammar');
const xg = globalThis.xgrammar || mod.default || mod;
const tj = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
const vocab = tj.model.vocab;
let n = 0;
for (const id of Object.values(vocab)) n = Math.max(n, id + 1);
for (const a of tj.added_tokens || []) n = Math.max(n, a.id + 1);
const enc = new Array(n).fill('');
for (const [s, id] of Object.entries(vocab)) enc[id] = s;
const stop = [];
for (const a of tj.added_tokens || []) { enc[a.id] = a.content; if (a.content === '<|im_end|>' || a.content === '<|endoftext|>') stop.push(a.id); }
const t0 = performance.now();
const info = await xg.TokenizerInfo.createTokenizerInfo(enc, 'byte_level', false, n, stop);
const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, false);
const t1 = performance.now();
const schema = fs.readFileSync(schemaPath, 'utf8');
const cg = await compiler.compileJSONSchema(schema, anyWs === '1', -1, [',', ':'], true);
const t2 = performance.now();
const m = await xg.GrammarMatcher.createGrammarMatcher(cg);
const toks = fs.readFileSync(tokensPath, 'utf8').trim().split(/\s+/).filter((x) => x).map(Number);
const times = [];
let accepted = 0;
for (const t of toks) {
  const a = performance.now();
  await m.getNextTokenBitmask();
  times.push(performance.now() - a);
  if (!m.acceptToken(t)) break;
  accepted++;
}
times.sort((x, y) => x - y);
const q = (p) => times.length ? times[Math.min(times.length - 1, Math.floor(p * times.length))] : 0;
console.log(JSON.stringify({ tokenizer_ms: t1 - t0, compile_ms: t2 - t1, steps: times.length, mask_median_ms: q(0.5), mask_p99_ms: q(0.99),
  mask_mean_ms: times.reduce((s, x) => s + x, 0) / Math.max(1, times.length), accepted, tokens: toks.length }));
process.exit(0);
