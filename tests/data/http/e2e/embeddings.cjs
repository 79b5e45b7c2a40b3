// /v1/embeddings against `cllm serve` on a real checkpoint: the vector with `normalize: false`
// is the last token's hidden state after the final norm, checked by multiplying it with the
// checkpoint's lm_head (read from model.safetensors here) and comparing with the last row of
// `cllm eval --dump-logits` on the same ids; the default is that vector L2-normalised (vLLM's
// pooling runner for a causal LM: LAST pooling, normalize); a batch equals its inputs alone, a
// repeat (prefix-cache hit) equals the first run, ids equal their text; the OpenAI SDK (which
// asks for base64 and decodes it) gets the same floats.
// Run by tests/server/embeddings.sh: node embeddings.cjs PORT API_KEY MODEL_NAME CLLM_BIN MODEL_DIR TMP
const { execFileSync } = require('child_process');
const fs = require('fs');
const [port, key, model, cllm, modelDir, tmp] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
let failures = 0, checks = 0;
function check(cond, msg) { checks++; if (!cond) { failures++; console.error('FAIL:', msg); } }

async function post(path, body) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}
const embed = async (input, extra = {}) => (await post('/v1/embeddings', { model, input, ...extra })).data.map((d) => d.embedding);

function lmHead() { // lm_head.weight [V][H] as float rows, from the safetensors file
  const buf = fs.readFileSync(`${modelDir}/model.safetensors`);
  const n = Number(buf.readBigUInt64LE(0));
  const hdr = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const t = hdr['lm_head.weight'];
  const [V, H] = t.shape, base = 8 + n + t.data_offsets[0];
  const W = new Float64Array(V * H), dv = new DataView(new ArrayBuffer(4));
  for (let i = 0; i < V * H; i++) {
    if (t.dtype === 'BF16') { dv.setUint32(0, buf.readUInt16LE(base + 2 * i) << 16); W[i] = dv.getFloat32(0); }
    else if (t.dtype === 'F32') W[i] = buf.readFloatLE(base + 4 * i);
    else throw new Error('lm_head dtype ' + t.dtype);
  }
  return { W, V, H };
}

async function main() {
  const text = 'The quick brown fox jumps over the lazy dog';
  const ids = (await post('/tokenize', { prompt: text })).tokens;
  const [raw] = await embed(text, { normalize: false });
  const { W, V, H } = lmHead();
  check(raw.length === H, `vector of ${raw.length} floats, hidden_size ${H}`);
  execFileSync(cllm, ['eval', modelDir, '--tokens', ids.join(','), '--dump-logits', `${tmp}/logits.bin`, '-t', '1']);
  const lb = fs.readFileSync(`${tmp}/logits.bin`);
  let maxd = 0, maxv = 0;
  for (let v = 0; v < V; v++) {
    let y = 0;
    for (let h = 0; h < H; h++) y += W[v * H + h] * raw[h];
    const want = lb.readFloatLE(4 * ((ids.length - 1) * V + v));
    maxd = Math.max(maxd, Math.abs(y - want));
    maxv = Math.max(maxv, Math.abs(want));
  }
  check(maxd <= 1e-4 * Math.max(1, maxv), `lm_head . embedding vs cllm eval's last logits row: max difference ${maxd} (|logit| up to ${maxv})`);

  const [unit] = await embed(text);
  const norm = Math.sqrt(raw.reduce((a, x) => a + x * x, 0));
  check(unit.every((x, i) => Math.abs(x - raw[i] / norm) <= 1e-6) &&
        Math.abs(Math.sqrt(unit.reduce((a, x) => a + x * x, 0)) - 1) <= 1e-6, 'default is the L2-normalised vector');
  const [again] = await embed(text);
  check(JSON.stringify(again) === JSON.stringify(unit), 'a repeat (prefix-cache hit) gives the same vector');
  const [byIds] = await embed(ids);
  check(JSON.stringify(byIds) === JSON.stringify(unit), 'token ids give the same vector as their text');
  const inputs = ['hello', text, 'a b c d e f g h i j k l m n o p q r s t u v w x y z'];
  const batch = await embed(inputs);
  for (let i = 0; i < inputs.length; i++)
    check(JSON.stringify(batch[i]) === JSON.stringify((await embed(inputs[i]))[0]), `batch input ${i} equals it alone`);
  const [b64] = (await post('/v1/embeddings', { model, input: text, encoding_format: 'base64' })).data;
  const fb = Buffer.from(b64.embedding, 'base64');
  check(fb.length === 4 * H && unit.every((x, i) => fb.readFloatLE(4 * i) === Math.fround(x)), 'base64 = the floats, little-endian float32');

  let OpenAI = null;
  try { OpenAI = require('openai'); } catch (e) { console.log('openai SDK not installed: SDK check skipped'); }
  if (OpenAI) {
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
    const r = await client.embeddings.create({ model, input: [text, 'hello'] });
    check(r.object === 'list' && r.data.length === 2 && r.data[0].object === 'embedding' && r.usage.prompt_tokens > 0 &&
          r.data[0].embedding.every((x, i) => x === Math.fround(unit[i])), 'SDK embeddings.create: ' + JSON.stringify(r).slice(0, 200));
  }
  console.log(`embeddings: hidden ${H}, lm_head check max difference ${maxd.toExponential(2)}; ${checks - failures}/${checks} checks passed`);
  process.exit(failures ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(2); });
