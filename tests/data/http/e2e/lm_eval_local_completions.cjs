// lm-evaluation-harness's `local-completions` backend as it talks to a server, without the
// harness (a pip package this machine cannot install): the requests its loglikelihood and
// loglikelihood_rolling tasks send, parsed as it parses them, checked against `cllm eval
// --logprobs` on the same model and token ids (equal to 1e-5).
//
// Mirrored from lm_eval/models/openai_completions.py (LocalCompletionsAPI._create_payload with
// generate=False, parse_logprobs) and lm_eval/models/api_models.py (TemplateAPI: tokenized
// requests, max_length - 1, batch_loglikelihood_requests' left truncation and ctxlen,
// loglikelihood_rolling over utils.get_rolling_token_windows + make_disjoint_window, the
// prefix token = the tokenizer's BOS or else EOS), lm_eval/api/model.py (_encode_pair: trailing
// spaces of the context move to the continuation). The tokenizer is the server's /tokenize
// (cllm's tokenizer is token-for-token HF's, tests/tokenizer).
//
// Run by tests/server/lm_eval.sh:
//   node lm_eval_local_completions.cjs PORT API_KEY MODEL_NAME CLLM_BIN MODEL_DIR TEXT_FILE N
// N = HTTP requests to send (the done-when of issue 36 is 100).
const { execFileSync } = require('child_process');
const fs = require('fs');
const [port, key, model, cllm, modelDir, textFile, nArg] = process.argv.slice(2);
const N = parseInt(nArg || '100', 10);
const url = `http://127.0.0.1:${port}/v1/completions`;
const headers = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
let failures = 0, checks = 0;
function check(cond, msg) { checks++; if (!cond) { failures++; console.error('FAIL:', msg); } }

// lm-eval's defaults, except max_length: 2048 would make every rolling window one request on a
// short text; 40 gives several windows and the left truncation of long pairs.
const MAX_LENGTH = 40 - 1; // TemplateAPI: self.max_length = max_length - 1
const SEED = 1234, BATCH = 4;

async function post(path, body) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}
const tokCache = new Map();
async function tokEncode(s) { // HF tok_encode with add_special_tokens=False (lm-eval's default)
  if (!tokCache.has(s)) tokCache.set(s, (await post('/tokenize', { prompt: s, add_special_tokens: false })).tokens);
  return tokCache.get(s);
}

async function encodePair(context, continuation, prefixToken) { // TemplateLM._encode_pair
  if (context === '') return [[prefixToken], await tokEncode(continuation)];
  const nSpaces = context.length - context.trimEnd().length;
  if (nSpaces > 0) {
    continuation = context.slice(-nSpaces) + continuation;
    context = context.slice(0, -nSpaces);
  }
  const whole = await tokEncode(context + continuation);
  const ctx = await tokEncode(context);
  return [ctx, whole.slice(ctx.length)];
}

function* rollingWindows(tokens, prefixToken, maxSeqLen, contextLen) { // utils.get_rolling_token_windows
  if (!tokens.length) return;
  const predLen = maxSeqLen - contextLen + 1;
  let predicted = 0;
  const first = Math.min(maxSeqLen, tokens.length);
  yield [[prefixToken, ...tokens.slice(0, first - 1)], tokens.slice(0, first)];
  predicted += first;
  while (predicted < tokens.length) {
    const wp = Math.min(tokens.length - predicted, predLen), end = predicted + wp;
    yield [tokens.slice(Math.max(0, end - maxSeqLen - 1), end - 1), tokens.slice(end - wp, end)];
    predicted += wp;
  }
}
const disjoint = ([a, b]) => [a.slice(0, a.length - (b.length - 1)), b]; // utils.make_disjoint_window

function batchInputs(items) { // TemplateAPI.batch_loglikelihood_requests
  return items.map(([ctx, cont]) => {
    const all = [...ctx, ...cont];
    return { inp: all.slice(-MAX_LENGTH), ctxlen: ctx.length - Math.max(0, all.length - MAX_LENGTH) };
  });
}

function payload(inputs) { // LocalCompletionsAPI._create_payload(generate=False)
  return { model, prompt: inputs, temperature: 0, max_tokens: 1, logprobs: 1, seed: SEED, echo: true };
}

function parseLogprobs(out, ctxlens) { // LocalCompletionsAPI.parse_logprobs
  const res = [];
  const choices = [...out.choices].sort((a, b) => a.index - b.index);
  choices.forEach((choice, i) => {
    const ctxlen = ctxlens[i];
    if (!(ctxlen > 0)) throw new Error('Context length must be greater than 0');
    const tl = choice.logprobs.token_logprobs.slice(ctxlen, -1);
    const tops = choice.logprobs.top_logprobs.slice(ctxlen, -1);
    let isGreedy = true;
    for (let k = 0; k < tl.length; k++)
      if (tl[k] !== Math.max(...Object.values(tops[k]))) { isGreedy = false; break; }
    res.push([tl.reduce((a, x) => a + x, 0), isGreedy]);
  });
  return res;
}

const refCache = new Map();
function reference(ids) { // `cllm eval --logprobs`: logprob of ids[p] given ids[0..p)
  const k = ids.join(',');
  if (!refCache.has(k)) {
    const out = execFileSync(cllm, ['eval', modelDir, '--tokens', k, '--logprobs', '-t', '1'], { encoding: 'utf8' });
    const lp = new Array(ids.length).fill(null);
    for (const line of out.trim().split('\n')) {
      const [pos, tok, v] = line.split(' ');
      if (+tok !== ids[+pos]) throw new Error(`cllm eval: token ${tok} at ${pos}, want ${ids[+pos]}`);
      lp[+pos] = parseFloat(v);
    }
    refCache.set(k, lp);
  }
  return refCache.get(k);
}

async function main() {
  const text = fs.readFileSync(textFile, 'utf8').replace(/\s+/g, ' ');
  const cfg = JSON.parse(fs.readFileSync(`${modelDir}/tokenizer_config.json`, 'utf8'));
  const special = (t) => (typeof t === 'string' ? t : t && t.content);
  const bos = special(cfg.bos_token), eos = special(cfg.eos_token);
  const prefixToken = (await tokEncode(bos || eos))[0]; // TemplateAPI.prefix_token_id
  const words = text.split(' ').filter((w) => w);

  // loglikelihood: multiple-choice style (one context, four continuations: the true next words
  // and three from elsewhere), plus empty contexts (the prefix token is the context)
  const ll = [];
  for (let i = 0; ll.length < 4 * 60; i += 7) {
    const at = 3 + (i % (words.length - 20));
    const context = words.slice(Math.max(0, at - 3 - (i % 11)), at).join(' ') + ' ';
    for (let c = 0; c < 4; c++) {
      const from = c === 0 ? at : (at * (c + 3) + 17 * c) % (words.length - 5);
      const cont = words.slice(from, from + 1 + ((i + c) % 3)).join(' ');
      ll.push(await encodePair(i % 29 === 0 && c === 0 ? '' : context, cont, prefixToken));
    }
  }
  // loglikelihood_rolling: a few paragraphs' worth of text in windows of MAX_LENGTH - 1
  const rolling = [];
  for (let d = 0; d < 3; d++) {
    const doc = words.slice(40 * d, 40 * d + 60).join(' ');
    const windows = [...rollingWindows(await tokEncode(doc), prefixToken, MAX_LENGTH - 1, 1)].map(disjoint);
    rolling.push(windows);
  }

  // the HTTP requests: each rolling window alone (as loglikelihood_rolling sends them), then
  // loglikelihood pairs, some in batches of BATCH prompts (batch_size=4), until N requests
  const reqs = [];
  for (const doc of rolling) for (const w of doc) reqs.push({ items: [w], rolling: true });
  let li = 0;
  while (reqs.length < N && li < ll.length) {
    const size = reqs.length % 5 === 0 ? BATCH : 1;
    reqs.push({ items: ll.slice(li, li + size), rolling: false });
    li += size;
  }
  check(reqs.length === N, `built ${reqs.length} requests, want ${N}`);

  // num_concurrent=4, as an lm-eval user sets it for a server
  let next = 0, maxDiff = 0, nScored = 0, nTokens = 0;
  const results = new Array(reqs.length);
  async function worker() {
    while (next < reqs.length) {
      const r = reqs[next++];
      const b = batchInputs(r.items);
      const out = await post('/v1/completions', payload(b.map((x) => x.inp)));
      results[reqs.indexOf(r)] = { b, out, got: parseLogprobs(out, b.map((x) => x.ctxlen)) };
    }
  }
  await Promise.all([worker(), worker(), worker(), worker()]);

  let rollingTotal = 0, rollingRef = 0;
  results.forEach(({ b, out, got }, ri) => {
    check(out.choices.length === b.length, `request ${ri}: ${out.choices.length} choices`);
    b.forEach(({ inp, ctxlen }, k) => {
      const ch = out.choices.find((c) => c.index === k);
      const lp = ch.logprobs;
      check(lp.tokens.length === inp.length + 1 && lp.token_logprobs[0] === null && lp.top_logprobs[0] === null,
            `request ${ri}.${k}: echo logprobs shape (${lp.tokens.length} entries for ${inp.length} + 1 tokens)`);
      const ref = reference(inp);
      let want = 0;
      for (let p = ctxlen; p < inp.length; p++) {
        want += ref[p];
        const d = Math.abs(lp.token_logprobs[p] - ref[p]);
        if (d > maxDiff) maxDiff = d;
        nTokens++;
      }
      const d = Math.abs(got[k][0] - want);
      if (d > maxDiff) maxDiff = d;
      check(d <= 1e-5, `request ${ri}.${k}: loglikelihood ${got[k][0]} vs cllm eval ${want}`);
      if (reqs[ri].rolling) { rollingTotal += got[k][0]; rollingRef += want; }
      nScored++;
    });
  });
  check(Math.abs(rollingTotal - rollingRef) <= 1e-5, `rolling total ${rollingTotal} vs ${rollingRef}`);

  // the same requests again: every prefix is in the cache now, the numbers must not change
  for (let ri = 0; ri < 10; ri++) {
    const { b, got } = results[ri];
    const out = await post('/v1/completions', payload(b.map((x) => x.inp)));
    const again = parseLogprobs(out, b.map((x) => x.ctxlen));
    check(JSON.stringify(again) === JSON.stringify(got), `request ${ri} repeated: ${JSON.stringify(again)} vs ${JSON.stringify(got)}`);
    check(out.usage.prompt_tokens_details.cached_tokens === 0, `request ${ri} repeated: scoring read the prefix cache`);
  }

  // max_tokens 0 (older lm-eval, vLLM's echo without generation): the prompt only
  const { b } = results[reqs.length - 1];
  const z = await post('/v1/completions', { ...payload(b.map((x) => x.inp)), max_tokens: 0 });
  z.choices.forEach((c) => {
    const inp = b[c.index].inp, ref = reference(inp);
    check(c.logprobs.token_logprobs.length === inp.length && c.finish_reason === 'length',
          `max_tokens 0: ${c.logprobs.token_logprobs.length} entries for ${inp.length} tokens`);
    check(c.logprobs.token_logprobs.every((x, p) => p === 0 || Math.abs(x - ref[p]) <= 1e-5), 'max_tokens 0 logprobs');
  });
  check(z.usage.completion_tokens === 0, 'max_tokens 0 usage: ' + JSON.stringify(z.usage));

  // the OpenAI SDK's typed shapes: Completion.choices[].logprobs with echo (null first), and
  // vLLM's prompt_logprobs passed through as an extra body field on chat
  let OpenAI = null;
  try { OpenAI = require('openai'); } catch (e) { console.log('openai SDK not installed: SDK shapes skipped'); }
  if (OpenAI) {
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
    const c = await client.completions.create({ model, prompt: 'The cat sat', echo: true, logprobs: 2, max_tokens: 0 });
    const lp = c.choices[0].logprobs;
    check(c.choices[0].text === 'The cat sat' && lp.token_logprobs[0] === null && lp.tokens.length === lp.text_offset.length &&
          lp.token_logprobs.slice(1).every((x) => typeof x === 'number') && lp.top_logprobs.slice(1).every((t) => Object.keys(t).length >= 1),
          'SDK completions echo: ' + JSON.stringify(c.choices[0]));
    const ch = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, prompt_logprobs: 1 });
    const pl = ch.prompt_logprobs;
    check(Array.isArray(pl) && pl[0] === null && pl.length > 1 &&
          pl.slice(1).every((pos) => Object.values(pos).every((e) => typeof e.logprob === 'number' && e.rank >= 1 && typeof e.decoded_token === 'string')),
          'SDK chat prompt_logprobs: ' + JSON.stringify(pl).slice(0, 300));
    let err = null;
    try { await client.completions.create({ model, prompt: 'hi', prompt_logprobs: 21 }); } catch (e) { err = e; }
    check(err && err.status === 400 && err.param === 'prompt_logprobs' && /max allowed: 20/.test(err.message),
          'SDK: prompt_logprobs 21 refused: ' + (err && err.message));
  }

  console.log(`lm-eval local-completions: ${reqs.length} requests, ${nScored} loglikelihoods ` +
              `(${rolling.reduce((a, d) => a + d.length, 0)} rolling windows), ${nTokens} tokens scored; ` +
              `max |server - cllm eval| = ${maxDiff.toExponential(2)}; rolling loglikelihood ${rollingTotal.toFixed(6)}; ` +
              `${checks - failures}/${checks} checks passed`);
  process.exit(failures ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(2); });
