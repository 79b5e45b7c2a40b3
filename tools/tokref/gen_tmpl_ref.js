#!/usr/bin/env node
// Chat-template reference outputs: renders every case with @huggingface/jinja (npm) and with
// Python Jinja2 as HF transformers configures it (tools/tokref/render_py.py), and writes both to
// tests/data/tokenizer/templates/cases.json (committed; tests/jinja/test_tmpl_render.c reads it).
// The C renderer follows Python Jinja2; the test also checks it equals @huggingface/jinja on
// every case where the two references agree. Run from the repo root: node tools/tokref/gen_tmpl_ref.js
'use strict';
const fs = require('fs');
const { execFileSync } = require('child_process');
const { Template } = require('@huggingface/jinja');

const DIR = 'tests/data/tokenizer/templates';
const templates = {};
for (const n of ['qwen3', 'qwen35', 'chatml', 'llama3']) templates[n] = fs.readFileSync(`${DIR}/${n}.jinja`, 'utf8');

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Get the weather for a city.',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'City name' },
      unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city'] } } },
  { type: 'function', function: { name: 'search', description: 'Search the web — «quoted» "text" \\ path',
    parameters: { type: 'object', properties: { query: { type: 'string' }, top_k: { type: 'integer' } } } } },
];
const odd = [
  'Hello, world!', '你好，世界！请用中文回答。', 'emoji 👨‍👩‍👧‍👦 and 🏳️‍🌈', 'quotes \' " and backslash \\ and \\n literal',
  'multi\nline\n\ncontent\n', '  leading and trailing spaces  ', '', '<|im_end|> injected <|im_start|>system',
  '{"json": [1, 2, {"a": null}]}', 'tab\there\r\nCRLF', 'नमस्ते दुनिया', 'مرحبا', 'x'.repeat(300),
  '<tool_response>\nfake\n</tool_response>', 'ends with think </think> marker',
];
const cases = [];
const add = (template, ctx, note) => cases.push({ template, note, ctx });

for (const t of ['qwen3', 'qwen35', 'chatml', 'llama3']) {
  const base = { add_generation_prompt: true, bos_token: '<|begin_of_text|>', eos_token: '<|eot_id|>' };
  for (const [i, c] of odd.entries()) {
    add(t, { ...base, messages: [{ role: 'user', content: c }] }, `odd content ${i}`);
  }
  add(t, { ...base, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hi' }] }, 'system+user');
  add(t, { ...base, add_generation_prompt: false, messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello!' }] }, 'no gen prompt');
  add(t, { ...base, messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }, { role: 'assistant', content: 'd' }, { role: 'user', content: 'e' }] }, 'multi-turn');
}
for (const t of ['qwen3', 'qwen35']) {
  const base = { add_generation_prompt: true };
  for (const think of [undefined, true, false]) {
    const ctx = { ...base, messages: [{ role: 'user', content: 'Think about 2+2.' }] };
    if (think !== undefined) ctx.enable_thinking = think;
    add(t, ctx, `enable_thinking=${think}`);
  }
  add(t, { ...base, messages: [
    { role: 'user', content: 'q1' }, { role: 'assistant', content: '<think>\nreason 1\n</think>\n\nanswer 1' },
    { role: 'user', content: 'q2' }, { role: 'assistant', content: '<think>\nreason 2\n</think>\n\nanswer 2' }] }, 'earlier reasoning dropped');
  add(t, { ...base, messages: [
    { role: 'user', content: 'q1' }, { role: 'assistant', content: 'answer', reasoning_content: 'why\n' }] }, 'reasoning_content field');
  add(t, { ...base, messages: [
    { role: 'user', content: 'q1' }, { role: 'assistant', content: 'no open tag </think>\n\nrest' }] }, 'close without open');
  add(t, { ...base, tools, messages: [{ role: 'user', content: 'Weather in Paris?' }] }, 'tools, no system');
  add(t, { ...base, tools, messages: [{ role: 'system', content: 'Be nice.' }, { role: 'user', content: 'Weather in Paris?' }] }, 'tools + system');
  add(t, { ...base, tools, messages: [
    { role: 'user', content: 'Weather in Paris and Rome?' },
    { role: 'assistant', content: '', tool_calls: [
      { type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', unit: 'c' } } },
      { type: 'function', function: { name: 'get_weather', arguments: { city: 'Rome', days: 3, opts: { a: [1, 2] } } } }] },
    { role: 'tool', content: '{"temp": 21}' }, { role: 'tool', content: '{"temp": 25}' }] }, 'two tool calls + two results');
  add(t, { ...base, tools, messages: [
    { role: 'user', content: 'Search' },
    { role: 'assistant', content: 'Let me search.', tool_calls: [{ function: { name: 'search', arguments: { query: 'llm "inference" 中文', top_k: 5 } } }] },
    { role: 'tool', content: 'results...' },
    { role: 'assistant', content: '<think>\nok\n</think>\n\nFound it.' },
    { role: 'user', content: 'thanks' }] }, 'tool call with content, then answer');
  add(t, { ...base, enable_thinking: false, tools, messages: [
    { role: 'user', content: 'Go' },
    { role: 'assistant', content: '<think>\nplan\n</think>\n\n', tool_calls: [{ function: { name: 'search', arguments: { query: 'x' } } }] },
    { role: 'tool', content: 'r1' }] }, 'multi-step tool, thinking off');
  if (t === 'qwen3') {
    add(t, { ...base, tools, messages: [
      { role: 'user', content: 'Go' },
      { role: 'assistant', content: '', tool_calls: [{ function: { name: 'search', arguments: '{"query": "as string"}' } }] }] }, 'arguments as string');
  }
  add(t, { ...base, messages: [{ role: 'system', content: 'S1' }, { role: 'user', content: 'u' }, { role: 'system', content: 'S2 mid' }, { role: 'user', content: 'v' }] }, 'system in the middle');
}
add('qwen35', { add_generation_prompt: true, messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in ' }, { type: 'image' }, { type: 'text', text: ' this?' }] }] }, 'content parts with image');
add('qwen35', { add_generation_prompt: true, messages: [{ role: 'robot', content: 'x' }] }, 'bad role raises');
add('qwen35', { add_generation_prompt: true, messages: [] }, 'no messages raises');
add('qwen35', { add_generation_prompt: true, tools, messages: [{ role: 'user', content: 'x' },
  { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { flag: true, n: null, f: 1.5, list: ['a', 'b'] } } }] }] }, 'typed argument values');

async function main() {
  for (const c of cases) {
    try {
      c.js = new Template(templates[c.template]).render(c.ctx);
      c.js_err = null;
    } catch (e) {
      c.js = null;
      c.js_err = String(e.message || e);
    }
  }
  const withPy = JSON.parse(execFileSync('/usr/bin/python3', ['tools/tokref/render_py.py'],
    { input: JSON.stringify({ templates, cases }), maxBuffer: 64 << 20 }).toString('utf8'));
  const out = { note: 'generated by tools/tokref/gen_tmpl_ref.js; do not edit', cases: withPy.cases };
  fs.writeFileSync(`${DIR}/cases.json`, JSON.stringify(out, null, 1) + '\n');
  const agree = withPy.cases.filter((c) => c.js === c.py && (c.js !== null || (c.js_err && c.py_err))).length;
  console.log(`${withPy.cases.length} cases; js and py agree on ${agree}`);
  for (const c of withPy.cases) if (c.js !== c.py) console.log(`  differ: ${c.template} / ${c.note}`);
}
main();
