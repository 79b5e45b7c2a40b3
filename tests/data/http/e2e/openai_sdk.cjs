// End-to-end check of `cllm serve` with the official OpenAI Node SDK (npm "openai").
// Run by tests/server_e2e.sh: node openai_sdk.cjs PORT API_KEY MODEL_NAME. Exit 0 = all passed.
const OpenAI = require('openai');
const [port, key, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
let failures = 0, checks = 0;
function check(cond, msg) { checks++; if (!cond) { failures++; console.error('FAIL:', msg); } }

async function streamText(params) {
  const s = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
  }
  return { text, finish, usage };
}

async function chatStream(params) {
  const s = await client.chat.completions.create({ ...params, stream: true });
  let content = '', reasoning = '', role = null, finish = null;
  for await (const ch of s) {
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.delta.reasoning_content) reasoning += c.delta.reasoning_content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, reasoning, role, finish };
}

(async () => {
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === model, 'models.list: ' + JSON.stringify(models.data));

  const base = { model, prompt: 'The quick brown fox', max_tokens: 24, temperature: 0 };
  const ns = await client.completions.create(base);
  check(ns.choices[0].text.length > 0, 'completion text empty');
  check(ns.usage.completion_tokens === 24 || ns.choices[0].finish_reason === 'stop', 'usage ' + JSON.stringify(ns.usage));
  const st = await streamText(base);
  check(st.text === ns.choices[0].text, `stream text != non-stream text:\n${JSON.stringify(st.text)}\n${JSON.stringify(ns.choices[0].text)}`);
  check(st.usage && st.usage.completion_tokens === ns.usage.completion_tokens, 'stream usage ' + JSON.stringify(st.usage));
  check(st.finish === ns.choices[0].finish_reason, 'finish ' + st.finish);

  for (const thinking of [true, false]) {
    const p = { model, messages: [{ role: 'user', content: 'Hi there' }], max_tokens: 16, temperature: 0,
                chat_template_kwargs: { enable_thinking: thinking } };
    const c = await client.chat.completions.create(p);
    const m = c.choices[0].message;
    check(m.role === 'assistant', 'chat role');
    const s = await chatStream(p);
    check(s.role === 'assistant', 'stream role chunk missing');
    check(s.content === (m.content || ''), `thinking=${thinking}: stream content != non-stream: ${JSON.stringify(s.content)} vs ${JSON.stringify(m.content)}`);
    check(s.reasoning === (m.reasoning_content || ''), `thinking=${thinking}: stream reasoning != non-stream`);
    // the tiny template opens <think> when thinking is on, so the output starts as reasoning
    if (thinking) check((m.reasoning_content || '').length > 0 || c.choices[0].finish_reason === 'stop', 'thinking on: no reasoning_content');
    else check(m.reasoning_content === null, 'thinking off: reasoning_content ' + JSON.stringify(m.reasoning_content));
  }

  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather',
                   parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const tc = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }],
                                                    tools, tool_choice: 'auto', max_tokens: 8, temperature: 0 });
  check(['stop', 'length', 'tool_calls'].includes(tc.choices[0].finish_reason), 'tools finish ' + tc.choices[0].finish_reason);
  check(Array.isArray(tc.choices[0].message.tool_calls), 'tool_calls not an array');

  // 32 concurrent greedy streams equal the same requests run one by one
  const prompts = Array.from({ length: 32 }, (_, i) => ({ model, prompt: `Story number ${i}:`, max_tokens: 12 + (i % 5), temperature: 0 }));
  const par = await Promise.all(prompts.map(streamText));
  for (let i = 0; i < prompts.length; i++) {
    const seq = await streamText(prompts[i]);
    check(seq.text === par[i].text, `stream ${i}: concurrent ${JSON.stringify(par[i].text)} != sequential ${JSON.stringify(seq.text)}`);
  }

  // errors map to the SDK's typed exceptions
  const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
  try { await bad.models.list(); check(false, 'bad key accepted'); } catch (e) { check(e.status === 401, 'bad key status ' + e.status); }
  try { await client.completions.create({ model: 'nope', prompt: 'x' }); check(false, 'unknown model accepted'); }
  catch (e) { check(e.status === 404, 'unknown model status ' + e.status); }
  try { await client.completions.create({ model, prompt: 'x', max_tokens: 100000 }); check(false, 'over-length accepted'); }
  catch (e) { check(e.status === 400 && /maximum context length/.test(e.message), 'over-length: ' + e.status + ' ' + e.message); }
  try { await client.chat.completions.create({ model, messages: 'nope' }); check(false, 'bad messages accepted'); }
  catch (e) { check(e.status === 400, 'bad messages status ' + e.status); }

  console.log(`openai_sdk: ${checks} checks, ${failures} failures`);
  process.exit(failures || !checks ? 1 : 0);
})().catch((e) => { console.error('FAIL: exception', e); process.exit(1); });
