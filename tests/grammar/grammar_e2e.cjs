// Structured outputs end to end against `cllm serve` (run by tests/grammar/grammar_e2e.sh):
//   node grammar_e2e.cjs PORT MODEL
// - JSON Schema corpus: the draft-4 schemas of npm json-schema-test-suite plus
//   tests/data/grammar/api_schemas.json, each generated with random sampling (temperature 1.3,
//   two seeds, n=2) through guided_json / response_format / structured_outputs; every finished
//   output is validated by ajv (draft-04 or 2020-12); every refusal must name its reason
//   (the keyword and JSON pointer for unsupported keywords).
// - regex (checked by JS RegExp), choice, GBNF; streaming == non-streaming for a seeded request.
// - tools via the official OpenAI SDK: tool_choice required / named / none, parallel_tool_calls.
// - bad input: 400 and the server keeps serving.
const OpenAI = require('openai');
const Ajv04 = require('ajv-draft-04');
const Ajv2020 = require('ajv/dist/2020');
const addFormats = require('ajv-formats');
const fs = require('fs');
const path = require('path');

const [port, model] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0 });
let failures = 0, checks = 0;
function check(cond, msg) { checks++; if (!cond) { failures++; console.error('FAIL:', msg); } }

async function post(route, body) {
  const r = await fetch(base + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

function ajvFor(draft4) {
  const a = draft4 ? new Ajv04({ strict: false, allErrors: false }) : new Ajv2020({ strict: false });
  addFormats(a);
  return a;
}

function corpus() {
  const out = [];
  const dir = path.join(path.dirname(require.resolve('json-schema-test-suite/package.json')), 'tests', 'draft4');
  const seen = new Set();
  for (const f of fs.readdirSync(dir).sort()) {
    if (!f.endsWith('.json')) continue;
    for (const g of JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'))) {
      const key = JSON.stringify(g.schema);
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ name: `draft4/${f}: ${g.description}`, schema: g.schema, draft4: true });
    }
  }
  const api = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'data', 'grammar', 'api_schemas.json'), 'utf8'));
  api.forEach((s, i) => out.push({ name: `api_schemas[${i}]`, schema: s, draft4: false }));
  // each API schema also as an array element, nullable, and nested in an envelope
  api.forEach((s, i) => {
    const defs = {};
    for (const k of ['$defs', 'definitions']) if (s[k]) defs[k] = s[k]; // keep local $refs resolvable
    out.push({ name: `api_schemas[${i}] in array`, schema: { ...defs, type: 'array', items: s, maxItems: 2 }, draft4: false });
    out.push({ name: `api_schemas[${i}] or null`, schema: { ...defs, anyOf: [s, { type: 'null' }] }, draft4: false });
    out.push({ name: `api_schemas[${i}] in envelope`, schema: { ...defs, type: 'object', properties: { data: s, ok: { type: 'boolean' } }, required: ['data', 'ok'] }, draft4: false });
  });
  return out;
}

const REFUSAL = /unsupported JSON Schema keyword '[^']+' at #|unsupported keyword value: format '[^']*' at #|invalid schema: '[^']+' at #|matches nothing|not valid JSON|too large|deeper than|over 10000|over 1000 at|regex: /;

async function runSchemas() {
  const list = corpus();
  const stats = { schemas: list.length, compiledSchemas: new Set(), compiled: 0, refused: 0, outputs: 0, valid: 0, invalid: 0, length: 0 };
  const refusedKw = {};
  let i = 0;
  async function one(c, k) {
    const seed = 1000 + k;
    // spread the three API spellings over the corpus
    const way = k % 3;
    let r;
    if (way === 0) {
      r = await post('/v1/completions', { model, prompt: 'JSON:', max_tokens: 250, temperature: 1.3, seed, n: 2, guided_json: c.schema });
    } else if (way === 1) {
      r = await post('/v1/completions', { model, prompt: 'Output:', max_tokens: 200, temperature: 1.3, seed, n: 2, structured_outputs: { json: c.schema } });
    } else {
      r = await post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Give JSON' }], max_tokens: 200, temperature: 1.3, seed, n: 2,
        chat_template_kwargs: { enable_thinking: false }, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: c.schema, strict: true } } });
    }
    if (r.status === 400) {
      const msg = r.body.error && r.body.error.message || '';
      check(REFUSAL.test(msg), `${c.name}: refusal without a reason: ${msg}`);
      const m = msg.match(/keyword '([^']+)'/);
      refusedKw[m ? m[1] : msg.replace(/.*: /, '').slice(0, 30)] = (refusedKw[m ? m[1] : msg.replace(/.*: /, '').slice(0, 30)] || 0) + 1;
      stats.refused++;
      return;
    }
    check(r.status === 200, `${c.name}: status ${r.status} ${JSON.stringify(r.body)}`);
    if (r.status !== 200) return;
    stats.compiled++;
    stats.compiledSchemas.add(c.name);
    let validate;
    // oneOf is generated as anyOf (documented): validate against that reading
    const asAny = JSON.parse(JSON.stringify(c.schema).replace(/"oneOf":/g, '"anyOf":'));
    try { validate = ajvFor(c.draft4).compile(asAny); } catch (e) { check(false, `${c.name}: ajv cannot compile: ${e.message}`); return; }
    for (const ch of r.body.choices) {
      const text = ch.text !== undefined ? ch.text : ch.message.content;
      stats.outputs++;
      if (ch.finish_reason === 'length') { stats.length++; continue; }
      let v, ok = false;
      try { v = JSON.parse(text); ok = validate(v); } catch (e) { ok = false; }
      if (ok) stats.valid++; else stats.invalid++;
      check(ok, `${c.name}: invalid output ${JSON.stringify(text)} for ${JSON.stringify(c.schema)}: ${JSON.stringify(validate.errors)}`);
    }
  }
  const workers = [];
  for (let w = 0; w < 6; w++) workers.push((async () => { for (;;) { const k = i++; if (k >= list.length * 2) return; await one(list[k % list.length], k); } })());
  await Promise.all(workers);
  const nCompiled = stats.compiledSchemas.size;
  delete stats.compiledSchemas;
  stats.compiled_schemas = nCompiled;
  console.log('schemas:', JSON.stringify(stats));
  console.log('refused by keyword:', JSON.stringify(refusedKw));
  check(nCompiled >= 200, `fewer than 200 distinct schemas compiled (${nCompiled} of ${stats.schemas})`);
  // random tokens from a tiny model rarely close an unbounded string: some outputs hit max_tokens
  check(stats.valid >= stats.outputs * 0.5, `too many cut by max_tokens: ${JSON.stringify(stats)}`);
}

async function runOthers() {
  // regex, choice, grammar (completions and chat), streaming == non-streaming
  const res = ['[a-z]{3,8}@[a-z]{2,6}\\.(com|org)', '\\d{3}-\\d{4}', '(yes|no)', '[A-Z][a-z]{0,6}( [A-Z][a-z]{0,6}){0,2}'];
  for (const re of res) {
    for (let seed = 0; seed < 3; seed++) {
      const r = await post('/v1/completions', { model, prompt: 'x', max_tokens: 40, temperature: 1.2, seed, guided_regex: re });
      check(r.status === 200, `regex ${re}: ${JSON.stringify(r.body)}`);
      const c = r.body.choices[0];
      if (c.finish_reason === 'stop') check(new RegExp(`^(?:${re})$`, 'u').test(c.text), `regex ${re}: ${JSON.stringify(c.text)}`);
    }
  }
  const choices = ['alpha', 'beta', 'gamma delta'];
  for (let seed = 0; seed < 4; seed++) {
    const r = await post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'pick' }], max_tokens: 10, temperature: 1.5, seed,
      chat_template_kwargs: { enable_thinking: false }, structured_outputs: { choice: choices } });
    check(r.status === 200 && choices.includes(r.body.choices[0].message.content), `choice: ${JSON.stringify(r.body)}`);
  }
  const gbnf = 'root ::= "(" num (" + " num)* ")"\nnum ::= [1-9] [0-9]?\n';
  for (let seed = 0; seed < 3; seed++) {
    const r = await post('/v1/completions', { model, prompt: 'x', max_tokens: 30, temperature: 1.2, seed, guided_grammar: gbnf });
    const c = r.body.choices[0];
    check(r.status === 200 && (c.finish_reason === 'length' || /^\([1-9][0-9]?( \+ [1-9][0-9]?)*\)$/.test(c.text)), `gbnf: ${JSON.stringify(r.body)}`);
  }
  const schema = { type: 'object', properties: { a: { type: 'string', maxLength: 12 }, b: { type: 'array', items: { type: 'integer' }, maxItems: 4 } }, required: ['a', 'b'] };
  const p = { model, prompt: 'JSON:', max_tokens: 80, temperature: 1.0, seed: 7, guided_json: schema };
  const ns = await client.completions.create(p);
  const s = await client.completions.create({ ...p, stream: true });
  let text = '';
  for await (const ch of s) for (const c of ch.choices) text += c.text;
  check(text === ns.choices[0].text, `stream != non-stream: ${JSON.stringify(text)} vs ${JSON.stringify(ns.choices[0].text)}`);
  const cp = { model, messages: [{ role: 'user', content: 'JSON please' }], max_tokens: 80, temperature: 1.0, seed: 9,
    chat_template_kwargs: { enable_thinking: false }, response_format: { type: 'json_object' } };
  const cn = await client.chat.completions.create(cp);
  const cs = await client.chat.completions.create({ ...cp, stream: true });
  let ct = '';
  for await (const ch of cs) for (const c of ch.choices) if (c.delta.content) ct += c.delta.content;
  check(ct === cn.choices[0].message.content, `chat stream != non-stream: ${JSON.stringify(ct)} vs ${JSON.stringify(cn.choices[0].message.content)}`);
  if (cn.choices[0].finish_reason === 'stop') {
    let ok = false;
    try { const v = JSON.parse(cn.choices[0].message.content); ok = v !== null && typeof v === 'object' && !Array.isArray(v); } catch (e) { }
    check(ok, `json_object output ${JSON.stringify(cn.choices[0].message.content)}`);
  }
}

async function runTools() {
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, days: { type: 'integer', minimum: 1, maximum: 7 }, metric: { type: 'boolean' } }, required: ['city', 'days'] } } },
    { type: 'function', function: { name: 'search', parameters: { type: 'object', properties: { query: { type: 'string', maxLength: 20 }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 } }, required: ['query'] } } },
  ];
  const validators = {};
  for (const t of tools) validators[t.function.name] = ajvFor(false).compile(t.function.parameters);
  let calls = 0;
  for (const [choice, par] of [['required', true], ['required', false], [{ type: 'function', function: { name: 'search' } }, true]]) {
    for (let seed = 0; seed < 4; seed++) {
      const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: choice,
        parallel_tool_calls: par, max_tokens: 150, temperature: 1.0, seed, chat_template_kwargs: { enable_thinking: false } });
      const ch = c.choices[0];
      if (ch.finish_reason === 'length') continue;
      check(ch.finish_reason === 'tool_calls', `tool_choice ${JSON.stringify(choice)}: finish ${ch.finish_reason} ${JSON.stringify(ch.message)}`);
      const tc = ch.message.tool_calls || [];
      check(tc.length >= 1 && (par || tc.length === 1), `tool_calls count ${tc.length} (parallel ${par})`);
      for (const t of tc) {
        calls++;
        if (typeof choice === 'object') check(t.function.name === 'search', `named tool_choice called ${t.function.name}`);
        let args = null;
        try { args = JSON.parse(t.function.arguments); } catch (e) { }
        check(args && validators[t.function.name] && validators[t.function.name](args), `arguments ${t.function.arguments} of ${t.function.name}`);
      }
    }
  }
  console.log(`tool calls parsed: ${calls}`);
  check(calls >= 2, `only ${calls} tool calls parsed`);
  for (let seed = 0; seed < 3; seed++) {
    const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], tools, tool_choice: 'none', max_tokens: 30, temperature: 1.0, seed });
    check(!(c.choices[0].message.tool_calls || []).length && c.choices[0].finish_reason !== 'tool_calls', `tool_choice none: ${JSON.stringify(c.choices[0])}`);
  }
  // "none" is a constraint, not a bias: with the <tool_call> token pushed up by +100 (greedy), auto
  // starts a call at once, none never writes "<tool_call>" (the spelled-out forms are excluded by
  // the same grammar; test_grammar checks them byte by byte)
  const tk = await post('/tokenize', { model, prompt: '<tool_call>', add_special_tokens: false });
  const tc = tk.body.tokens;
  check(tc && tc.length === 1, `<tool_call> is one token: ${JSON.stringify(tk.body)}`);
  if (tc && tc.length === 1) {
    const req = (choice) => client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], tools, tool_choice: choice, max_tokens: 24, temperature: 0, chat_template_kwargs: { enable_thinking: false }, logit_bias: { [tc[0]]: 100 } });
    const auto = await req('auto');
    const a0 = auto.choices[0].message;
    check((a0.tool_calls || []).length > 0 || (a0.content || '').includes('<tool_call>'), `biased auto did not start a call: ${JSON.stringify(a0)}`);
    const none = await req('none');
    const n0 = none.choices[0].message;
    check(!(n0.tool_calls || []).length && !(n0.content || '').includes('<tool_call>') && none.choices[0].finish_reason !== 'tool_calls', `biased none wrote a call: ${JSON.stringify(none.choices[0])}`);
  }
}

async function runBad() {
  const deep = {};
  let cur = deep;
  for (let i = 0; i < 100; i++) { cur.type = 'array'; cur.items = {}; cur = cur.items; }
  const cases = [
    ['malformed schema', { guided_json: '{"type": "object",' }, /not valid JSON/],
    ['unsupported keyword', { guided_json: { type: 'object', properties: { a: { type: 'string', contentSchema: {} } } } }, /'contentSchema' at #\/properties\/a/],
    ['bad regex', { guided_regex: 'a(b' }, /missing \)/],
    ['bad lookaround', { guided_regex: '(?=a)a' }, /lookaround/],
    ['grammar syntax', { guided_grammar: 'root ::= "a" ]' }, /grammar: /],
    ['too deep', { guided_json: deep }, /deeper than/],
    ['too large', { guided_json: { type: 'string', pattern: '^(a{1000}){1000}$' } }, /too large/],
    ['bad choice', { guided_choice: [] }, /non-empty array/],
  ];
  for (const [name, extra, re] of cases) {
    const r = await post('/v1/completions', { model, prompt: 'x', max_tokens: 5, ...extra });
    check(r.status === 400 && re.test(r.body.error.message), `${name}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  try {
    await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { not: {} } } } });
    check(false, 'SDK: unsupported schema accepted');
  } catch (e) { check(e.status === 400 && /'not' at #/.test(e.message), `SDK error: ${e.status} ${e.message}`); }
  const h = await fetch(base + '/health');
  check(h.status === 200, 'health after bad input');
  const ok = await post('/v1/completions', { model, prompt: 'x', max_tokens: 4 });
  check(ok.status === 200, 'plain request after bad input');
}

(async () => {
  await runBad();
  await runOthers();
  await runTools();
  await runSchemas();
  console.log(`grammar_e2e: ${checks} checks, ${failures} failures`);
  process.exit(failures ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
