// vLLM-parity checks of `cllm serve` through the official OpenAI Node SDK (npm "openai"):
// batched prompts in /v1/completions (strings and token lists, `index` per choice), stop_reason
// (the matched stop string, the stop token id), and the Responses API (client.responses.create:
// text and message input, instructions, streaming events, previous_response_id, function tools).
// Run by tests/server/server_e2e.sh: node openai_sdk_vllm.cjs PORT API_KEY MODEL_NAME.
const OpenAI = require('openai');
const [port, key, model] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
let failures = 0, checks = 0;
function check(cond, msg) { checks++; if (!cond) { failures++; console.error('FAIL:', msg); } }

async function tokenize(text) {
  const r = await fetch(`${base}/tokenize`, {
    method: 'POST', headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: text, add_special_tokens: false }) });
  return (await r.json()).tokens;
}

async function batches() {
  const prompts = ['Once upon a time', 'The quick brown fox', 'Hello'];
  const one = [];
  for (const p of prompts)
    one.push((await client.completions.create({ model, prompt: p, max_tokens: 8, temperature: 0 })).choices[0].text);
  const b = await client.completions.create({ model, prompt: prompts, max_tokens: 8, temperature: 0 });
  check(b.choices.length === 3, 'batch of 3: ' + b.choices.length + ' choices');
  for (let i = 0; i < 3; i++) {
    const c = b.choices.find((x) => x.index === i);
    check(c && c.text === one[i], `batch choice ${i}: ${JSON.stringify(c)} vs ${JSON.stringify(one[i])}`);
  }
  const ids = await Promise.all(prompts.map(tokenize));
  check(b.usage.prompt_tokens >= ids.reduce((a, x) => a + x.length, 0), 'batch usage ' + JSON.stringify(b.usage));
  // token lists, two samples each: index = prompt * n + sample
  const t = await client.completions.create({ model, prompt: ids.slice(0, 2), max_tokens: 4, temperature: 0, n: 2 });
  check(t.choices.length === 4 && [0, 1, 2, 3].every((i) => t.choices.some((c) => c.index === i)),
        'token-list batch with n=2: ' + JSON.stringify(t.choices.map((c) => c.index)));
  const byIndex = Object.fromEntries(t.choices.map((c) => [c.index, c.text]));
  check(byIndex[0] === byIndex[1] && byIndex[2] === byIndex[3], 'greedy samples of one prompt differ');
  // streaming batch: every choice finishes
  const s = await client.completions.create({ model, prompt: prompts, max_tokens: 5, temperature: 0, stream: true });
  const text = {}, fin = {};
  for await (const ch of s)
    for (const c of ch.choices) { text[c.index] = (text[c.index] || '') + c.text; if (c.finish_reason) fin[c.index] = c.finish_reason; }
  check(Object.keys(fin).length === 3, 'stream batch finishes: ' + JSON.stringify(fin));
  check(text[1] && one[1].startsWith(text[1]), 'stream batch text 1: ' + JSON.stringify(text[1]));
}

async function stopReasons() {
  const p = { model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0 };
  const full = (await client.completions.create(p)).choices[0];
  check(full.stop_reason === null || full.stop_reason === undefined, 'no stop: stop_reason ' + full.stop_reason);
  if (full.text.length < 4) { check(false, 'greedy text too short to pick a stop string: ' + JSON.stringify(full.text)); return; }
  const stop = full.text.slice(2, 4);
  const c = (await client.completions.create({ ...p, stop: [stop] })).choices[0];
  check(c.finish_reason === 'stop' && c.stop_reason === stop, `stop string ${JSON.stringify(stop)}: ${c.finish_reason} ${JSON.stringify(c.stop_reason)}`);
  const ids = await tokenize(full.text);
  const t = (await client.completions.create({ ...p, stop_token_ids: [ids[0]] })).choices[0];
  check(t.finish_reason === 'stop' && t.stop_reason === ids[0], `stop token ${ids[0]}: ${t.finish_reason} ${t.stop_reason}`);
  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0 });
  check('stop_reason' in chat.choices[0], 'chat choice has stop_reason');
}

async function responses() {
  // the tiny template opens <think> by default: thinking off for the plain-text checks
  const plain = { chat_template_kwargs: { enable_thinking: false } };
  const r = await client.responses.create({ model, input: 'Tell me a story', max_output_tokens: 8, temperature: 0, ...plain });
  check(r.object === 'response' && r.status === 'completed' || r.status === 'incomplete', 'response status ' + r.status);
  check(typeof r.output_text === 'string' && r.output_text.length > 0, 'output_text: ' + JSON.stringify(r.output_text));
  check(r.usage && r.usage.output_tokens > 0 && r.usage.input_tokens > 0, 'usage ' + JSON.stringify(r.usage));
  const msgs = r.output.filter((o) => o.type === 'message');
  check(msgs.length === 1 && msgs[0].role === 'assistant' && msgs[0].content[0].type === 'output_text', 'message item ' + JSON.stringify(r.output));
  // message input + instructions, greedy: the same as chat with a system message
  const m = await client.responses.create({ model, instructions: 'Be brief.', input: [{ role: 'user', content: 'Hi there' }],
                                            max_output_tokens: 8, temperature: 0 });
  const c = await client.chat.completions.create({ model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }],
                                                   max_tokens: 8, temperature: 0 });
  check(m.output_text === (c.choices[0].message.content || ''), `responses vs chat: ${JSON.stringify(m.output_text)} vs ${JSON.stringify(c.choices[0].message.content)}`);
  const reasoning = m.output.filter((o) => o.type === 'reasoning');
  if (c.choices[0].message.reasoning_content)
    check(reasoning.length === 1 && reasoning[0].content[0].text === c.choices[0].message.reasoning_content, 'reasoning item ' + JSON.stringify(reasoning));
  // streaming: typed events, deltas add up to the final text
  const s = await client.responses.create({ model, input: 'Tell me a story', max_output_tokens: 8, temperature: 0, stream: true, ...plain });
  let deltas = '', types = [], done = null;
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') done = ev.response;
  }
  check(types[0] === 'response.created' && types.includes('response.output_item.added') && types.includes('response.output_text.done'),
        'stream event types ' + types.join(','));
  check(done && done.id && done.output.length > 0, 'stream final response ' + JSON.stringify(done));
  check(deltas === r.output_text, `stream text ${JSON.stringify(deltas)} vs ${JSON.stringify(r.output_text)}`);
  // previous_response_id: the earlier turn is part of the prompt
  const r2 = await client.responses.create({ model, input: 'And then?', previous_response_id: r.id, max_output_tokens: 4, temperature: 0, ...plain });
  check(r2.previous_response_id === r.id && r2.usage.input_tokens > r.usage.input_tokens, 'previous_response_id usage ' + JSON.stringify(r2.usage));
  try { await client.responses.create({ model, input: 'x', previous_response_id: 'resp_nope' }); check(false, 'unknown previous_response_id accepted'); }
  catch (e) { check(e.status === 404 || e.status === 400, 'unknown previous id status ' + e.status); }
  const got = await client.responses.retrieve(r.id);
  check(got.id === r.id && got.output_text === r.output_text, 'retrieve');
  // cancel (vLLM/OpenAI: only background responses; cllm refuses background): a finished
  // synchronous response -> 400 with vLLM's message, an unknown id -> 404, and the stored one stays
  try { await client.responses.cancel(r.id); check(false, 'cancel of a finished response accepted'); }
  catch (e) { check(e.status === 400 && /Cannot cancel a synchronous response/.test(e.message), 'cancel finished: ' + e.status + ' ' + e.message); }
  try { await client.responses.cancel('resp_nope'); check(false, 'cancel of an unknown id accepted'); }
  catch (e) { check(e.status === 404, 'cancel unknown: ' + e.status); }
  try { await client.responses.create({ model, input: 'x', background: true }); check(false, 'background accepted'); }
  catch (e) { check(e.status === 400 && /background/.test(e.message), 'background refused: ' + e.status + ' ' + e.message); }
  check((await client.responses.retrieve(r.id)).status === r.status, 'retrieve after cancel');
  // function tools are accepted; any call comes back as a function_call item
  const tools = [{ type: 'function', name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }];
  const f = await client.responses.create({ model, input: 'Weather in Paris?', tools, max_output_tokens: 8, temperature: 0 });
  check(f.output.every((o) => ['message', 'reasoning', 'function_call'].includes(o.type)), 'tools output ' + JSON.stringify(f.output));
}

(async () => {
  await batches();
  await stopReasons();
  await responses();
  console.log(`openai_sdk_vllm: ${checks} checks, ${failures} failures`);
  process.exit(failures || !checks ? 1 : 0);
})().catch((e) => { console.error('FAIL: exception', e); process.exit(1); });
