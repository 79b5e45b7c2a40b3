// Web console in a real browser (issue 17): headless Chromium driven by playwright-core against
// real `cllm serve` processes on the tiny model. Run by console_browser.sh, which checks that
// node, chromium and playwright-core exist (exit 77 otherwise) and passes:
//   CLLM_BIN, CLLM_SRC, MODEL, T (scratch dir), CHROMIUM, SHOTS (dir for screenshots or "")
// Prints "ok: ..." / "FAIL: ..." lines and exits 1 on any failure.
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.env.CLLM_SRC, 'package.json'));
const { chromium } = require('playwright-core');

const BIN = process.env.CLLM_BIN, MODEL = process.env.MODEL, T = process.env.T;
const SHOTS = process.env.SHOTS || '';
let failed = 0;
const ok = (m) => console.log('ok: ' + m);
const bad = (m) => {
  console.log('FAIL: ' + m);
  failed = 1;
};
const check = (cond, m) => (cond ? ok(m) : bad(m));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const procs = [];
function serve(name, args, model) {
  const log = fs.openSync(path.join(T, name + '.log'), 'w');
  const p = spawn(BIN, ['serve', model || MODEL, '--port', '0', '--stats-interval', '0', ...args], {
    stdio: ['ignore', log, log],
  });
  procs.push(p);
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const tick = async () => {
      const txt = fs.readFileSync(path.join(T, name + '.log'), 'utf8');
      const m = txt.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) {
        const url = 'http://127.0.0.1:' + m[1];
        try {
          const r = await fetch(url + '/health');
          if (r.status === 200) return resolve({ url, proc: p });
        } catch (e) {}
      }
      if (p.exitCode !== null) return reject(new Error(name + ' exited: ' + txt));
      if (Date.now() - t0 > 60000) return reject(new Error(name + ' not ready in 60 s'));
      setTimeout(tick, 100);
    };
    tick();
  });
}
function stopAll() {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM');
}
process.on('exit', stopAll);

async function metric(url, name, headers) {
  const t = await (await fetch(url + '/metrics', { headers })).text();
  const m = t.match(new RegExp('^' + name.replace(/[:]/g, '\\:') + '\\{[^}]*\\} (\\S+)$', 'm'));
  return m ? Number(m[1]) : NaN;
}
async function waitFor(page, fn, arg, ms, what) {
  try {
    await page.waitForFunction(fn, arg, { timeout: ms, polling: 100 });
    return true;
  } catch (e) {
    bad('timed out waiting for ' + what);
    return false;
  }
}

// the chat's settings live in a drawer: open it, set the fields, close it
async function settings(page, vals) {
  if (await page.isHidden('#settings')) await page.click('#settings-btn');
  for (const [id, v] of Object.entries(vals)) {
    if (typeof v === 'boolean') await (v ? page.check('#' + id) : page.uncheck('#' + id));
    else await page.fill('#' + id, String(v));
  }
  await page.click('#settings-close');
}

async function newPage(browser, url, opts) {
  const ctx = await browser.newContext(Object.assign({ viewport: { width: 1280, height: 900 } }, opts || {}));
  const page = await ctx.newPage();
  const errors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => {
    errors.push('dialog opened: ' + d.message());
    d.dismiss();
  });
  return { ctx, page, errors };
}

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  // CLLM_CONSOLE_ONLY=images,key runs those parts alone (while working on one of them)
  const only = (process.env.CLLM_CONSOLE_ONLY || '').split(',').filter(Boolean);
  const run = (n) => !only.length || only.includes(n);
  try {
    if (run('plain')) {
      const url = await plain(browser);
      await chatApp(browser, url);
      await dashboard(browser, url);
    }
    if (run('images')) await images(browser);
    if (run('gone')) await serverGone(browser);
    if (run('spec')) await specDash(browser);
    if (run('key')) await withKey(browser);
    if (run('off')) await noConsole();
  } finally {
    await browser.close();
    stopAll();
  }
}

// ---- the server without a key: page, chat, stop, thinking, escaping, dashboard, requests ----
async function plain(browser) {
  const { url } = await serve('plain', ['--console-requests', '50']);
  const { page, errors } = await newPage(browser, url);

  const t0 = Date.now();
  const resp = await page.goto(url + '/?poll=500', { waitUntil: 'load' });
  const loadMs = Date.now() - t0;
  check(resp.status() === 200, 'GET / is 200');
  check((resp.headers()['content-security-policy'] || '').includes("script-src 'self'"), 'page has a CSP');
  const paint = await page.evaluate(() => {
    const p = performance.getEntriesByName('first-contentful-paint')[0];
    return p ? p.startTime : null;
  });
  const bytes = await page.evaluate(() =>
    performance.getEntriesByType('resource').reduce((a, r) => a + (r.encodedBodySize || 0), 0) +
    (performance.getEntriesByType('navigation')[0].encodedBodySize || 0));
  console.log(`info: cold page load ${loadMs} ms, first contentful paint ${paint === null ? '?' : paint.toFixed(0)} ms, ${bytes} bytes`);
  // warm: the browser already has a connection and compiled code (what an operator sees on F5)
  await page.reload({ waitUntil: 'load' });
  const warm = await page.evaluate(() => {
    const p = performance.getEntriesByName('first-contentful-paint')[0];
    const n = performance.getEntriesByType('navigation')[0];
    return { fcp: p ? p.startTime : null, load: n ? n.loadEventEnd : null };
  });
  console.log(`info: warm reload first contentful paint ${warm.fcp === null ? '?' : warm.fcp.toFixed(0)} ms, load ${warm.load === null ? '?' : warm.load.toFixed(0)} ms`);
  await waitFor(page, () => document.getElementById('model-name').textContent.length > 0, null, 10000, 'model name');
  check(/ready/.test(await page.textContent('#conn')), 'status shows ready');
  check(await page.isHidden('#key-form'), 'no API key prompt when the server has no key');

  // chat round trip, streamed: watch the answer grow while it streams
  await settings(page, { 'set-max': 48, 'set-temp': 0 });
  await page.fill('#chat-input', 'Hello! Tell me about the sea.');
  await page.focus('#chat-input');
  await page.keyboard.press('Enter');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 2, null, 60000, 'first answer');
  const a1 = await page.evaluate(() => window.cllmConsole.chat.conv()[1]);
  check(a1 && ((a1.content || '').length + (a1.reasoning || '').length) > 0, 'chat answer arrived');
  check(a1.chunks >= 3, `answer came as a stream of SSE deltas (${a1.chunks})`);
  check(a1.usage && a1.usage.completion_tokens > 0, 'usage in the stream: ' + JSON.stringify(a1.usage));
  check(/tok\/s/.test(await page.textContent('.msg.assistant .meta')), 'tokens/s shown');

  // second turn reuses the prefix cache
  await page.fill('#chat-input', 'And the mountains?');
  await page.click('#send');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 4, null, 60000, 'second answer');
  const a2 = await page.evaluate(() => window.cllmConsole.chat.conv()[3]);
  const cached = a2.usage && a2.usage.prompt_tokens_details ? a2.usage.prompt_tokens_details.cached_tokens : 0;
  check(cached > 0, `second turn shows cached_tokens (${cached})`);
  check(/\(\d+ cached\)/.test(await page.textContent('.msg.assistant:last-child .meta')), 'cached tokens shown in the page');

  // conversation survives a reload (localStorage)
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => document.querySelectorAll('.msg').length >= 4, null, 10000, 'conversation after reload');
  ok('conversation restored from localStorage after reload');

  // thinking on / off: the request carries chat_template_kwargs.enable_thinking
  const bodies = [];
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData()));
  });
  await page.click('#clear');
  await settings(page, { 'set-thinking': false });
  await page.fill('#chat-input', 'Hi');
  await page.click('#send');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 2, null, 60000, 'no-thinking answer');
  await settings(page, { 'set-thinking': true });
  await page.fill('#chat-input', 'Hi again');
  await page.click('#send');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 4, null, 60000, 'thinking answer');
  check(bodies.length >= 2 && bodies[0].chat_template_kwargs.enable_thinking === false &&
    bodies[1].chat_template_kwargs.enable_thinking === true, 'thinking toggle sends enable_thinking false then true');
  const think = await page.evaluate(() => {
    const m = window.cllmConsole.chat.conv()[3];
    const d = document.querySelectorAll('.msg.assistant')[1].querySelector('details.think');
    return { reasoning: (m.reasoning || '').length, hidden: d.hidden };
  });
  console.log('info: thinking answer reasoning chars: ' + think.reasoning);
  check(think.reasoning === 0 ? think.hidden : !think.hidden, 'thinking block shown exactly when there is reasoning');
  if (think.reasoning > 0) {
    const before = await page.evaluate(() => document.querySelectorAll('details.think')[1].open);
    await page.click('.msg.assistant:last-child details.think summary');
    const after = await page.evaluate(() => document.querySelectorAll('details.think')[1].open);
    check(before !== after, 'thinking block collapses / expands');
  }

  // stop: abort mid-stream, the server cancels (cllm_requests_cancelled_on_disconnect_total)
  const c0 = await metric(url, 'cllm_requests_cancelled_on_disconnect_total');
  await page.click('#clear');
  await settings(page, { 'set-max': 3000, 'set-temp': 1 });
  // the page never sends ignore_eos; the test adds it so the tiny model cannot stop by itself
  await page.route('**/v1/chat/completions', (route) => {
    const b = JSON.parse(route.request().postData());
    b.ignore_eos = true;
    route.continue({ postData: JSON.stringify(b) });
  });
  await page.evaluate(() => {
    document.getElementById('chat-input').value = 'Write a very long story about a lighthouse.';
  });
  await page.click('#send');
  await waitFor(page, () => {
    const c = window.cllmConsole.chat.conv();
    return c.length >= 2 && (c[1].chunks || 0) >= 3;
  }, null, 30000, 'tokens before stop');
  const len = () => page.evaluate(() => document.querySelector('.msg.assistant').textContent.length);
  const l1 = await len();
  let l2 = l1;
  for (let i = 0; i < 60 && l2 <= l1; i++) {
    await sleep(50);
    l2 = await len();
  }
  check(l2 > l1, `tokens stream into the page while the answer runs (${l1} -> ${l2} characters)`);
  await page.click('#stop');
  await waitFor(page, () => !window.cllmConsole.chat.busy(), null, 10000, 'stop to end the fetch');
  await page.unroute('**/v1/chat/completions');
  const fin = await page.evaluate(() => window.cllmConsole.chat.conv()[1].finish);
  check(fin === 'stopped', 'answer marked stopped');
  let c1 = c0;
  for (let i = 0; i < 50 && c1 <= c0; i++) {
    await sleep(100);
    c1 = await metric(url, 'cllm_requests_cancelled_on_disconnect_total');
  }
  check(c1 === c0 + 1, `server cancelled the stopped request (cancelled_on_disconnect ${c0} -> ${c1})`);
  // the engine's abort event ends the request a moment after the cancel
  let inflight = await metric(url, 'cllm_requests_in_flight');
  for (let i = 0; i < 100 && inflight !== 0; i++) {
    await sleep(50);
    inflight = await metric(url, 'cllm_requests_in_flight');
  }
  check(inflight === 0, 'nothing left in flight after stop');

  // a faked SSE answer (the tiny model does not think): the thinking block collapses, and model
  // HTML in the streamed answer renders as text
  await page.click('#clear');
  const sse = (o) => 'data: ' + JSON.stringify(o) + '\n\n';
  const chunk = (d, fin) => sse({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta: d, finish_reason: fin || null }] });
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'content-type': 'text/event-stream' },
    body: chunk({ role: 'assistant', content: '' }) + chunk({ reasoning_content: 'Let me think <b>hard</b>. ' }) +
      chunk({ reasoning_content: 'Done thinking.' }) + chunk({ content: 'Answer: <script>window.__pwned=6</script>' }) +
      chunk({ content: ' <img src=x onerror="window.__pwned=7"> and `code`' }, 'stop') +
      sse({ id: 'x', choices: [], usage: { prompt_tokens: 5, completion_tokens: 9, total_tokens: 14, prompt_tokens_details: { cached_tokens: 2 } } }) +
      'data: [DONE]\n\n' }));
  await page.fill('#chat-input', 'fake');
  await page.click('#send');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 2, null, 10000, 'faked answer');
  await page.unroute('**/v1/chat/completions');
  const fk = await page.evaluate(() => {
    const m = document.querySelector('.msg.assistant');
    const d = m.querySelector('details.think');
    return { hidden: d.hidden, open: d.open, think: d.textContent, body: m.querySelector('.md').textContent,
      els: m.querySelectorAll('script,img,b').length, code: m.querySelectorAll('code').length, meta: m.querySelector('.meta').textContent };
  });
  check(!fk.hidden && fk.think.includes('Done thinking.') && fk.think.includes('<b>hard</b>'), 'thinking block shows the reasoning as text');
  check(!fk.open, 'thinking block collapsed once the answer started');
  await page.click('.msg.assistant details.think summary');
  check(await page.evaluate(() => document.querySelector('.msg.assistant details.think').open), 'thinking block expands on click');
  check(fk.els === 0 && fk.body.includes('<script>window.__pwned=6</script>') && fk.body.includes('onerror'),
    'streamed <script> and onerror image render as text');
  check(fk.code === 1, 'markdown still renders in the answer (code span)');
  check(/5 prompt tokens \(2 cached\) · 9 output tokens/.test(fk.meta), 'token counts from usage shown: ' + fk.meta);

  // escaping: a model answer holding <script> and an onerror image renders as text
  const evil = 'Hi <script>window.__pwned=1</script> <img src=x onerror="window.__pwned=2"> ' +
    '[x](javascript:window.__pwned=3) **bold**';
  const r = await page.evaluate((s) => {
    const div = document.createElement('div');
    div.innerHTML = window.cllmConsole.renderMarkdown(s);
    return { scripts: div.querySelectorAll('script,img,iframe').length, text: div.textContent,
      js: [...div.querySelectorAll('a')].filter((a) => /^javascript:/i.test(a.getAttribute('href') || '')).length,
      bold: div.querySelectorAll('strong').length };
  }, evil);
  check(r.scripts === 0 && r.js === 0, 'markdown output has no script/img elements or javascript: links');
  check(r.text.includes('<script>') && r.text.includes('onerror'), 'the HTML shows as text');
  check(r.bold === 1, 'markdown still renders (bold)');
  // and through the real chat path: a stored answer with that content, rendered after reload
  await page.evaluate((s) => {
    localStorage.setItem('cllm.console.chat.v1', JSON.stringify([
      { role: 'user', content: '<img src=x onerror="window.__pwned=4">' },
      { role: 'assistant', content: s, reasoning: '<script>window.__pwned=5</script>' }]));
  }, evil);
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => document.querySelectorAll('.msg').length === 2, null, 10000, 'stored evil conversation');
  await sleep(300);
  const pw = await page.evaluate(() => ({ p: window.__pwned, imgs: document.querySelectorAll('#chat-log img, #chat-log script').length,
    text: document.getElementById('chat-log').textContent }));
  check(pw.p === undefined && pw.imgs === 0, 'no script ran and no image element from model or user text');
  check(pw.text.includes('<script>window.__pwned=1</script>'), 'chat shows the answer\'s <script> as text');
  if (SHOTS) {
    await page.evaluate(() => localStorage.removeItem('cllm.console.convs.v2'));
  }

  // dashboard: numbers rise during bench-serve and fall back after
  await page.click('#tab-dash');
  await waitFor(page, () => window.cllmConsole.dash.last() && document.querySelectorAll('.uplot').length === 9, null, 10000, 'dashboard charts');
  const reqsBefore = await page.evaluate(() => window.cllmConsole.reqs.rows().length);
  // 256 tokens each, so the run outlasts several 2 s dashboard polls: with 48 tokens a quiet box
  // finished all 24 requests inside one poll and the dashboard never saw them running.
  const bench = spawn(BIN, ['bench-serve', '--url', url, '--backend', 'openai-chat', '-n', '24',
    '--max-concurrency', '8', '--random-input-len', '64', '--random-output-len', '256', '--ignore-eos', '-q'],
  { stdio: ['ignore', 'pipe', 'pipe'] });
  let benchOut = '';
  bench.stdout.on('data', (d) => (benchOut += d));
  bench.stderr.on('data', (d) => (benchOut += d));
  const benchDone = new Promise((res) => bench.on('exit', (code) => res(code)));
  let peak = { running: 0, gtps: 0 };
  let benchCode = null;
  benchDone.then((c) => (benchCode = c));
  while (benchCode === null) {
    const v = await page.evaluate(() => window.cllmConsole.dash.last().values);
    peak.running = Math.max(peak.running, v.running || 0);
    peak.gtps = Math.max(peak.gtps, v.gtps || 0);
    if (SHOTS && peak.running >= 4 && !peak.shot) {
      await sleep(1200);
      await page.screenshot({ path: path.join(SHOTS, 'console-dashboard.png'), fullPage: true });
      peak.shot = true;
    }
    await sleep(150);
  }
  check(benchCode === 0, 'bench-serve finished (rc ' + benchCode + ')' + (benchCode ? '\n' + benchOut : ''));
  check(peak.running >= 2, `running requests rose during the run (peak ${peak.running})`);
  check(peak.gtps > 0, `generation tokens/s rose during the run (peak ${peak.gtps.toFixed(1)})`);
  await waitFor(page, () => {
    const v = window.cllmConsole.dash.last().values;
    return v.running === 0 && v.waiting === 0 && v.gtps === 0;
  }, null, 15000, 'dashboard back to idle');
  ok('dashboard fell back to idle after the run');
  const st = await page.evaluate(() => window.cllmConsole.dash.last().stats);
  check(st.ttft_ms && st.ttft_ms.n >= 24 && st.ttft_ms.p50 > 0, 'TTFT percentiles over the window: ' + JSON.stringify(st.ttft_ms));
  check(st.e2e_ms && st.e2e_ms.p99 >= st.e2e_ms.p50, 'e2e percentiles ordered');
  check(await page.isHidden('#fig-spec'), 'no speculative-decoding chart without --speculative-config');
  const cardText = await page.textContent('#card');
  check(/ISA tier/.test(cardText) && /Parameters/.test(cardText) && /KV capacity/.test(cardText), 'model card shows tier, parameters, KV capacity');

  // requests table shows the run
  await page.click('#tab-reqs');
  await waitFor(page, (n) => window.cllmConsole.reqs.rows().length >= n + 24, reqsBefore, 10000, 'requests rows');
  const rows = await page.evaluate(() => window.cllmConsole.reqs.rows());
  const benchRows = rows.filter((x) => x.route === '/v1/chat/completions' && x.output_tokens === 256);
  check(benchRows.length >= 24, `requests table has the run's requests (${benchRows.length})`);
  check(benchRows.every((x) => x.ttft_ms > 0 && x.total_ms >= x.ttft_ms && x.prompt_tokens > 0 && x.finish === 'length'),
    'each row has TTFT, total, prompt tokens, finish');
  check(rows.some((x) => x.finish === 'cancelled'), 'the stopped chat shows as cancelled');
  check(rows.every((x) => x.prompt === undefined), 'no prompt text without --console-log-prompts');
  const domRows = await page.$$eval('#reqs tbody tr', (t) => t.length);
  check(domRows === Math.min(rows.length, 50) && rows.length <= 50, `ring keeps --console-requests 50 (${rows.length} rows, ${domRows} in the table)`);

  // request log (issue 35): server-side filters, sort, paging, detail, CSV, phone columns
  const reqs = () => page.evaluate(() => ({ rows: window.cllmConsole.reqs.rows(), total: window.cllmConsole.reqs.total(),
    info: document.getElementById('pg-info').textContent }));
  const settle = () => sleep(400);
  const before400 = (await reqs()).total;
  check((await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: '{"messages":[{"role":"user","content":"x"}],"temperature":-5}' })).status === 400, 'a bad request for the log');
  await waitFor(page, (n) => window.cllmConsole.reqs.total() > n, before400, 5000, 'the 400 in the log');
  const all = (await reqs()).total;
  await page.selectOption('#f-finish', 'cancelled');
  await settle();
  let q = await reqs();
  check(q.rows.length >= 1 && q.rows.every((x) => x.finish === 'cancelled') && q.total < all, `finish filter (${q.total} of ${all} cancelled)`);
  await page.selectOption('#f-finish', '');
  await page.fill('#f-route', 'chat/completions');
  await settle();
  q = await reqs();
  check(q.rows.length > 0 && q.rows.every((x) => x.route === '/v1/chat/completions'), 'route filter');
  await page.fill('#f-route', '');
  await page.selectOption('#f-status', 'err');
  await settle();
  q = await reqs();
  check(q.total === 1 && q.rows[0].status === 400, `status filter (${q.total} error)`);
  await page.selectOption('#f-status', '');
  await page.fill('#f-min', '100000000');
  await settle();
  check((await reqs()).total === 0, 'slower-than filter');
  await page.fill('#f-min', '');
  await page.click('#reqs th[data-sort=total] button');
  await settle();
  q = await reqs();
  check(q.rows.every((x, i) => i === 0 || q.rows[i - 1].total_ms >= x.total_ms) &&
    (await page.getAttribute('#reqs th[data-sort=total]', 'aria-sort')) === 'descending', 'sort by total time, slowest first');
  await page.click('#reqs th[data-sort=total] button');
  await settle();
  q = await reqs();
  check(q.rows.every((x, i) => i === 0 || q.rows[i - 1].total_ms <= x.total_ms), 'a second click sorts ascending');
  await page.click('#reqs th[data-sort=time] button');
  await page.selectOption('#pg-size', '25');
  await settle();
  const p1 = await reqs();
  await page.click('#pg-next');
  await settle();
  const p2 = await reqs();
  check(p1.rows.length === 25 && p2.rows.length === Math.min(25, all - 25) && p2.rows[0].seq < p1.rows[24].seq &&
    /^26–/.test(p2.info), `paging: ${p1.info}, then ${p2.info}`);
  await page.click('#pg-prev');
  await settle();
  const id = p1.rows.find((x) => x.id).id;
  await page.fill('#f-q', id);
  await settle();
  q = await reqs();
  check(q.total === 1 && q.rows[0].id === id, 'text search finds a request by id');
  await page.click('#reqs tbody tr');
  const det = await page.textContent('#req-detail');
  check(await page.isVisible('#req-detail') && det.includes(id) && /Time to first token/.test(det) && /Max tokens/.test(det),
    'a row opens its details (timings, tokens, parameters)');
  await page.fill('#f-q', '');
  await settle();
  const [csvDl] = await Promise.all([page.waitForEvent('download'), page.click('#f-csv')]);
  const csvLines = fs.readFileSync(await csvDl.path(), 'utf8').trim().split(/\r?\n/);
  check(csvLines[0].startsWith('seq,time,method,route,status') && csvLines.length === (await reqs()).total + 1,
    `CSV export has every matching row (${csvLines.length - 1})`);
  await page.setViewportSize({ width: 390, height: 844 });
  await settle();
  const cols = await page.evaluate(() => [...document.querySelectorAll('#reqs thead th')].filter((th) => th.offsetParent)
    .map((th) => ({ t: th.textContent.trim(), r: th.getBoundingClientRect().right })));
  const tt = cols.find((c) => /TTFT/.test(c.t)), tot = cols.find((c) => /Total/.test(c.t));
  check(tt && tot && tt.r <= 390 && tot.r <= 390, 'phone: TTFT and total time are on screen: ' + JSON.stringify(cols.slice(0, 5)));
  if (SHOTS) {
    await page.click('#reqs tbody tr');
    await page.screenshot({ path: path.join(SHOTS, 'console-requests-phone.png') });
  }
  await page.click('#req-close');
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.selectOption('#pg-size', '50');
  await settle();

  // keyboard: tabs move with the arrow keys
  await page.focus('#tab-reqs');
  await page.keyboard.press('ArrowLeft');
  check(await page.evaluate(() => document.activeElement.id === 'tab-dash' && !document.getElementById('panel-dash').hidden),
    'arrow keys move between tabs');

  // phone width: no horizontal scroll of the page
  await page.setViewportSize({ width: 390, height: 844 });
  for (const t of ['chat', 'dash', 'reqs']) {
    await page.click('#tab-' + t);
    await sleep(200);
    const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(over <= 1, `${t} tab fits a 390 px phone width (overflow ${over} px)`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });

  if (SHOTS) {
    // requests + chat screenshots (dashboard taken during the run)
    await page.click('#tab-reqs');
    await sleep(300);
    await page.screenshot({ path: path.join(SHOTS, 'console-requests.png') });
    await page.click('#tab-chat');
    await page.click('#clear');
    await settings(page, { 'set-max': 120, 'set-temp': 0 });
    await page.fill('#chat-input', 'What is the capital of France?');
    await page.click('#send');
    await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 2, null, 60000, 'screenshot answer');
    await page.fill('#chat-input', 'Tell me more.');
    await page.click('#send');
    await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 4, null, 60000, 'screenshot answer 2');
    await page.screenshot({ path: path.join(SHOTS, 'console-chat.png') });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.click('#tab-dash');
    await sleep(600);
    await page.screenshot({ path: path.join(SHOTS, 'console-dashboard-dark.png') });
    await page.emulateMedia({ colorScheme: 'light' });
  }

  // cost of /console/stats while 64 streams run
  const load = spawn(BIN, ['bench-serve', '--url', url, '--backend', 'openai-chat', '-n', '64',
    '--random-input-len', '32', '--random-output-len', '200', '--ignore-eos', '-q'], { stdio: 'ignore' });
  const loadDone = new Promise((res) => load.on('exit', res));
  let running = 0;
  for (let i = 0; i < 100 && running < 32; i++) {
    await sleep(100);
    running = (await (await fetch(url + '/console/stats')).json()).running;
  }
  const times = [];
  for (let i = 0; i < 200; i++) {
    const t = process.hrtime.bigint();
    const j = await (await fetch(url + '/console/stats')).json();
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
    if (i === 0) running = j.running;
  }
  times.sort((a, b) => a - b);
  // the server's own time for those calls (access log: arrival to response done)
  const srv = fs.readFileSync(path.join(T, 'plain.log'), 'utf8').split('\n')
    .filter((l) => l.includes('"GET /console/stats"')).slice(-200)
    .map((l) => Number((l.match(/ ([0-9.]+) ms/) || [])[1])).filter(isFinite).sort((a, b) => a - b);
  if (srv.length >= 100)
    console.log(`info: /console/stats server-side (access log) at ${running} running: p50 ${srv[srv.length >> 1]} ms, ` +
      `p90 ${srv[Math.floor(srv.length * 0.9)]} ms, max ${srv[srv.length - 1]} ms`);
  console.log(`info: /console/stats round trip with ${running} running streams: p50 ${times[100].toFixed(3)} ms, ` +
    `p90 ${times[180].toFixed(3)} ms, max ${times[199].toFixed(3)} ms (200 calls, client-side incl. HTTP)`);
  await loadDone;

  check(errors.length === 0, 'no console errors on the page' + (errors.length ? ': ' + errors.join(' | ') : ''));
  return url;
}

const idle = (page) => waitFor(page, () => !window.cllmConsole.chat.busy(), null, 60000, 'the answer to end');

// ---- the chat as an app (issue 35): failed turns, settings, conversations, per-message actions ----
async function chatApp(browser, url) {
  const { ctx, page, errors } = await newPage(browser, url);
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
  const bodies = [];
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData()));
  });
  await page.goto(url + '/?poll=500', { waitUntil: 'load' });
  await waitFor(page, () => window.cllmConsole.info, null, 10000, 'info');
  await settings(page, { 'set-max': 16, 'set-temp': 0 });

  // a refused turn (63k characters: over max_model_len) is marked and left out of the next one
  await page.evaluate(() => (document.getElementById('chat-input').value = 'word '.repeat(12600)));
  await page.click('#send');
  await idle(page);
  const f = await page.evaluate(() => window.cllmConsole.chat.conv().map((m) => ({ failed: !!m.failed, error: m.error || '' })));
  check(f.length === 2 && f[0].failed && f[1].failed && /HTTP 400/.test(f[1].error), 'the 63k-character turn failed with 400 and is marked: ' + JSON.stringify(f));
  check(await page.locator('.msg.failed').count() === 2, 'both halves of the failed turn are shown as failed');
  for (const q of ['Hello after the failure', 'And once more']) {
    await page.fill('#chat-input', q);
    await page.click('#send');
    await idle(page);
  }
  const after = await page.evaluate(() => window.cllmConsole.chat.conv().slice(2));
  check(after.length === 4 && after.every((m) => !m.error) && after[1].usage && after[3].usage, 'every later turn works after the failed one');
  const lastBody = bodies[bodies.length - 1];
  check(lastBody.messages.length === 3 && !JSON.stringify(lastBody).includes('word word'),
    `the failed turn is not resent (${lastBody.messages.length} messages in the last request)`);

  // settings are checked against /console/info's limits before anything is sent
  const nReq = bodies.length;
  await settings(page, { 'set-temp': 5 });
  await page.fill('#chat-input', 'should not be sent');
  await page.click('#send');
  await sleep(300);
  check(bodies.length === nReq, 'temperature 5 is not sent');
  check(await page.isVisible('#settings') && (await page.getAttribute('#set-temp', 'aria-invalid')) === 'true' &&
    /Temperature must be between 0 and 2/.test(await page.textContent('#set-msg')), 'the drawer opens and says why: ' + await page.textContent('#set-msg'));
  await settings(page, { 'set-temp': 0, 'set-max': 0 });
  await page.click('#send');
  await sleep(200);
  check(bodies.length === nReq && /Max tokens must be between 1 and \d+/.test(await page.textContent('#set-msg')), 'max tokens 0 is not sent');
  const lim = await page.evaluate(() => window.cllmConsole.info.limits);
  await settings(page, { 'set-max': lim.max_tokens_max + 1 });
  check(/Max tokens/.test(await page.textContent('#set-msg')), `max tokens above the server's limit (${lim.max_tokens_max}) is refused`);
  await settings(page, { 'set-max': 12, 'set-temp': 0.3, 'set-system': 'You are a terse assistant.' });
  await page.click('#send');
  await idle(page);
  const sb = bodies[bodies.length - 1];
  check(sb.temperature === 0.3 && sb.max_tokens === 12 && sb.messages[0].role === 'system' && sb.messages[0].content === 'You are a terse assistant.',
    'the fixed settings and the system prompt are sent');
  check(/terse assistant/.test(await page.textContent('#chat-log .msg.system')), 'the system prompt is shown at the top of the conversation');

  // settings and the conversation survive a reload; the follow-up keeps its system prompt
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => document.querySelectorAll('#chat-log .msg.assistant').length === 4, null, 10000, 'conversation after reload');
  await page.click('#settings-btn');
  const kept = await page.evaluate(() => ({ t: document.getElementById('set-temp').value, m: document.getElementById('set-max').value,
    s: document.getElementById('set-system').value }));
  await page.click('#settings-close');
  check(kept.t === '0.3' && kept.m === '12' && kept.s === 'You are a terse assistant.', 'settings restored after reload: ' + JSON.stringify(kept));
  await page.fill('#chat-input', 'A follow-up after the reload');
  await page.click('#send');
  await idle(page);
  const fb = bodies[bodies.length - 1];
  check(fb.messages[0].role === 'system' && fb.temperature === 0.3, 'the follow-up after a reload still carries the system prompt');

  // regenerate the last answer: same length, one more request with the history before it
  const n0 = await page.evaluate(() => window.cllmConsole.chat.conv().length);
  const nb = bodies.length;
  await page.locator('.msg.assistant .act-regen').last().click();
  await idle(page);
  const rg = await page.evaluate(() => window.cllmConsole.chat.conv());
  check(rg.length === n0 && bodies.length === nb + 1 && rg[rg.length - 1].usage && !rg[rg.length - 1].error, 'regenerate replaces the last answer');
  check(bodies[bodies.length - 1].messages.at(-1).content === 'A follow-up after the reload', 'regenerate resends the question before it');

  // edit-and-resend the question of the first good turn: everything after it goes
  await page.locator('.msg.user .act-edit').nth(1).click();
  await page.fill('.edit-box', 'An edited question');
  await page.click('.act-save');
  await idle(page);
  const ed = await page.evaluate(() => window.cllmConsole.chat.conv().map((m) => m.role + ':' + (m.content || '').slice(0, 30)));
  check(ed.length === 4 && ed[2] === 'user:An edited question', 'edit-and-resend keeps what was before and answers the edited question: ' + JSON.stringify(ed));
  check(bodies[bodies.length - 1].messages.filter((m) => m.role === 'user').length === 1, 'the edited turn is sent without the failed one');

  // delete a message
  await page.locator('.msg .act-del').first().click();
  check((await page.evaluate(() => window.cllmConsole.chat.conv().length)) === 3 && (await page.locator('.msg.failed').count()) === 1,
    'delete removes one message');

  // copy a message and a code block; code is highlighted
  await page.locator('.msg.assistant .act-copy').last().click();
  await sleep(100);
  const copied = await page.evaluate(() => window.cllmConsole.lastCopied === window.cllmConsole.chat.conv().at(-1).content);
  check(copied, 'Copy puts the answer on the clipboard');
  const sse = (o) => 'data: ' + JSON.stringify(o) + '\n\n';
  const code = '```python\ndef f(x):\n    return "hi" + 42  # note\n```\nAnd `inline`.';
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'content-type': 'text/event-stream' },
    body: sse({ choices: [{ index: 0, delta: { content: code }, finish_reason: 'stop' }] }) + 'data: [DONE]\n\n' }));
  await page.fill('#chat-input', 'code please');
  await page.click('#send');
  await idle(page);
  await page.unroute('**/v1/chat/completions');
  const hl = await page.evaluate(() => {
    const pre = [...document.querySelectorAll('.msg.assistant pre')].at(-1);
    return { kw: [...pre.querySelectorAll('.tk-kw')].map((e) => e.textContent), str: pre.querySelectorAll('.tk-str').length,
      num: pre.querySelectorAll('.tk-num').length, com: [...pre.querySelectorAll('.tk-com')].map((e) => e.textContent), btn: !!pre.querySelector('.copy-code') };
  });
  check(hl.kw.includes('def') && hl.kw.includes('return') && hl.str === 1 && hl.num === 1 && hl.com[0] === '# note', 'code block highlighted: ' + JSON.stringify(hl));
  await page.locator('.msg.assistant pre .copy-code').last().click();
  await sleep(100);
  check(await page.evaluate(() => window.cllmConsole.lastCopied === 'def f(x):\n    return "hi" + 42  # note\n'), 'the code block\'s Copy copies the code only');

  // conversations: a second one, the list survives a reload, rename, switch, export, delete
  await page.click('#clear');
  check((await page.evaluate(() => window.cllmConsole.chat.conv().length)) === 0, 'New chat starts empty');
  await page.fill('#chat-input', 'Second conversation');
  await page.click('#send');
  await idle(page);
  check((await page.locator('#conv-list li.conv').count()) === 2, 'two conversations listed');
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => document.querySelectorAll('#conv-list li.conv').length === 2, null, 5000, 'list after reload');
  check((await page.textContent('#conv-list li.active')).includes('Second conversation'), 'the list and the open conversation survive a reload');
  await page.click('#conv-list li.active .conv-ren');
  await page.fill('#conv-list .conv-name', 'Renamed chat');
  await page.press('#conv-list .conv-name', 'Enter');
  check((await page.textContent('#conv-list li.active')).includes('Renamed chat') && (await page.textContent('#chat-title')) === 'Renamed chat', 'rename');
  await page.locator('#conv-list li:not(.active) .conv-open').click();
  check((await page.evaluate(() => window.cllmConsole.chat.conv().length)) === 5, 'switching opens the other conversation');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#export')]);
  const exp = JSON.parse(fs.readFileSync(await dl.path(), 'utf8'));
  check(exp.format === 'cllm-console-conversation' && exp.messages.length === 5 && exp.settings.system === 'You are a terse assistant.',
    `export as JSON (${dl.suggestedFilename()}, ${exp.messages.length} messages)`);
  await page.click('#conv-list li.active .conv-del');
  check((await page.locator('#conv-list li.conv').count()) === 2, 'delete asks once more before it deletes');
  await page.click('#conv-list li.active .conv-del');
  check((await page.locator('#conv-list li.conv').count()) === 1 && (await page.textContent('#chat-title')) === 'Renamed chat', 'delete');
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'console-chat-app.png') });

  // autoscroll: scrolled up during a long answer, the view stays put
  await page.click('#clear');
  await settings(page, { 'set-max': 3000, 'set-temp': 1 });
  await page.route('**/v1/chat/completions', (route) => {
    const b = JSON.parse(route.request().postData());
    b.ignore_eos = true;
    route.continue({ postData: JSON.stringify(b) });
  });
  await page.fill('#chat-input', 'A very long story, please.');
  await page.click('#send');
  await waitFor(page, () => {
    const l = document.getElementById('chat-log');
    return l.scrollHeight > l.clientHeight + 400;
  }, null, 60000, 'the answer to overflow the log');
  const stuck = await page.evaluate(() => {
    const l = document.getElementById('chat-log');
    return l.scrollHeight - l.scrollTop - l.clientHeight;
  });
  check(stuck < 40, `the log follows the answer while the reader is at the bottom (${stuck} px from it)`);
  await page.evaluate(() => (document.getElementById('chat-log').scrollTop = 100));
  const len0 = await page.evaluate(() => window.cllmConsole.chat.conv()[1].content.length);
  await sleep(800);
  const held = await page.evaluate(() => ({ top: document.getElementById('chat-log').scrollTop, len: window.cllmConsole.chat.conv()[1].content.length,
    jump: !document.getElementById('jump').hidden }));
  check(held.len > len0 && Math.abs(held.top - 100) < 2, `scrolled up during the stream, the view stays put (scrollTop ${held.top}, ${len0} -> ${held.len} chars)`);
  check(held.jump, 'a "Latest" button offers the way back');
  await page.click('#jump');
  await sleep(400);
  const back = await page.evaluate(() => {
    const l = document.getElementById('chat-log');
    return l.scrollHeight - l.scrollTop - l.clientHeight;
  });
  check(back < 40, 'Latest follows the answer again');
  if (await page.evaluate(() => window.cllmConsole.chat.busy())) await page.click('#stop', { timeout: 2000 }).catch(() => {});
  await idle(page);
  await page.unroute('**/v1/chat/completions');
  await settings(page, { 'set-max': 16 });

  // phone width: settings drawer and conversation list overlay the chat
  await page.setViewportSize({ width: 390, height: 844 });
  await sleep(200);
  const ph = await page.evaluate(() => {
    const f = document.getElementById('chat-form').getBoundingClientRect();
    const ta = document.getElementById('chat-input').getBoundingClientRect();
    const send = document.getElementById('send').getBoundingClientRect();
    return { bottom: window.innerHeight - f.bottom, sendTop: send.top - ta.top, over: document.documentElement.scrollWidth - window.innerWidth };
  });
  check(ph.bottom < 2 && ph.sendTop >= -1 && ph.over <= 1, 'phone: the input is pinned to the bottom and Send lines up with the box: ' + JSON.stringify(ph));
  await page.click('#convs-toggle');
  check(await page.isVisible('#conv-list'), 'phone: the conversation list opens');
  await page.click('#clear');
  if (SHOTS) {
    await page.click('#settings-btn');
    await page.screenshot({ path: path.join(SHOTS, 'console-chat-phone-settings.png') });
    await page.click('#settings-close');
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  const other = errors.filter((e) => !/status of 400/.test(e)); /* the refused 63k turn */
  check(other.length === 0, 'no console errors in the chat app besides the expected 400' + (other.length ? ': ' + other.join(' | ') : ''));
  await ctx.close();
}

// ---- dashboard (issue 35): history on a fresh page, short bursts, alerts about cllm only ----
async function dashboard(browser, url) {
  // a fresh page shows the load run plain() made (the server's ring, not the page's memory)
  const { ctx, page, errors } = await newPage(browser, url);
  await page.goto(url + '/?poll=500#dash', { waitUntil: 'load' });
  await waitFor(page, () => window.cllmConsole.dash.last() && window.cllmConsole.dash.history.t.length > 5, null, 10000, 'history on a fresh page');
  const h = await page.evaluate(() => {
    const H = window.cllmConsole.dash.history, mx = (a) => Math.max(0, ...a.filter((x) => x !== null));
    const u = window.cllmConsole.dash.charts();
    return { n: H.t.length, gtps: mx(H.gtps), running: mx(H.running), itl: mx(H.itl50), e2e: mx(H.e2e50),
      itlChart: u[5].data[1].filter((x) => x > 0).length, e2eChart: u[6].data[1].filter((x) => x > 0).length };
  });
  check(h.n >= 10 && h.gtps > 0 && h.running >= 2, 'a freshly opened dashboard shows the earlier load run: ' + JSON.stringify(h));
  check(h.itl > 0 && h.itlChart > 0 && h.itl < h.e2e, 'ITL is non-zero on its own chart (ms), below end-to-end');
  // hover: the legend shows the value under the cursor, with its unit
  await page.locator('#ch-itl').scrollIntoViewIfNeeded();
  const idx = await page.evaluate(() => window.cllmConsole.dash.history.itl50.findIndex((x) => x > 0));
  const pos = await page.evaluate((i) => {
    const u = window.cllmConsole.dash.charts()[5], r = u.over.getBoundingClientRect();
    return { x: r.left + u.valToPos(u.data[0][i], 'x'), y: r.top + r.height / 2 };
  }, idx);
  await page.mouse.move(pos.x, pos.y);
  await sleep(200);
  const leg = await page.textContent('#ch-itl .u-legend');
  check(/p50:?\s*[\d.,]+ ms/.test(leg), 'hovering the ITL chart shows values with units: ' + leg.replace(/\s+/g, ' '));
  const ticks = await page.evaluate(() => window.cllmConsole.dash.charts().map((u) => u.axes[1].values(u, [5], 1, 1, 1)[0]));
  check(ticks.every((t) => / (tok\/s|req|%|ms|\/s)$/.test(t)), 'every y axis has its unit: ' + ticks.join(', '));
  const colours = await page.evaluate(() => [...document.querySelectorAll('#ch-ttft .u-legend .u-marker')].map((e) => getComputedStyle(e).borderColor));
  check(colours.length === 4 && new Set(colours.slice(1)).size === 3, 'p50 / p95 / p99 have distinct colours: ' + colours.join(' '));

  // a burst shorter than the poll leaves a trace in the server's samples
  const t0 = (await (await fetch(url + '/console/stats?since=0')).json()).history.t.at(-1);
  const r = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'burst' }], max_tokens: 40, ignore_eos: true }) });
  await r.json();
  await sleep(2300);
  const burst = (await (await fetch(url + '/console/stats?since=' + t0)).json()).history;
  check(Math.max(...burst.inflight) >= 1 && Math.max(...burst.gtps) > 0,
    `a one-request burst (well under a second) shows in the next samples (in flight peak ${Math.max(...burst.inflight)}, generation ${Math.max(...burst.gtps)} tok/s)`);

  const th = await page.evaluate(() => window.cllmConsole.info.thresholds);
  check(th && th.source === 'cllm doctor' && th.warn_pct === 92 && th.crit_pct === 95 && th.sustain_s === 30,
    'the alert thresholds come from the server, cllm doctor\'s: ' + JSON.stringify(th));
  // alerts: a busy host with an idle cllm raises none; a full KV cache does, on the dashboard only
  let fake = { busy: 0, kv: 0 };
  await page.route('**/console/stats*', async (route) => {
    const resp = await route.fetch();
    const j = await resp.json();
    fake.busy += 1000;
    j.host_cpu_busy = fake.busy;
    j.host_cpu_total = fake.busy; /* 100% busy */
    j.proc_cpu_s = 1;
    if (fake.kv) j.kv_blocks_used = j.kv_blocks_total;
    route.fulfill({ response: resp, json: j });
  });
  await waitFor(page, () => (window.cllmConsole.dash.last().values.hcpu || 0) > 99, null, 5000, 'a busy host');
  await sleep(600);
  const busy = await page.evaluate(() => ({ cls: document.getElementById('alert').className, hidden: document.getElementById('alert').hidden,
    text: document.getElementById('alert').textContent }));
  check(!/warn|crit/.test(busy.cls) && /Host busy/.test(busy.text), 'a busy host with an idle cllm raises no warning, only a note: ' + busy.text);
  fake.kv = 1;
  await waitFor(page, () => /KV cache 100%/.test(document.getElementById('alert').textContent), null, 5000, 'KV alert');
  check(/warn/.test(await page.getAttribute('#alert', 'class')), 'a full KV cache warns');
  if (SHOTS) {
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(SHOTS, 'console-dashboard-alert.png') });
  }
  await page.click('#tab-chat');
  check(await page.isHidden('#alert'), 'the alert shows on the dashboard only');
  await page.click('#tab-dash');
  await page.unroute('**/console/stats*');
  await waitFor(page, () => document.getElementById('alert').hidden || !/KV/.test(document.getElementById('alert').textContent), null, 5000, 'KV alert to clear');
  check(errors.length === 0, 'no console errors on the dashboard' + (errors.length ? ': ' + errors.join(' | ') : ''));
  await ctx.close();
}

// ---- speculative decoding: its acceptance chart appears only when the server drafts ----
async function specDash(browser) {
  const spec = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "fixed_k": true}';
  const { url } = await serve('spec', ['--speculative-config', spec]);
  await sleep(1200); /* the history's first sample (its base) is taken 0.25 s after start */
  for (let i = 0; i < 3; i++)
    await (await fetch(url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'the cat sat on the mat, the cat sat on the mat, the cat sat on the', max_tokens: 60, temperature: 0 }) })).json();
  await sleep(2200);
  const { ctx, page, errors } = await newPage(browser, url);
  await page.goto(url + '/?poll=500#dash', { waitUntil: 'load' });
  await waitFor(page, () => window.cllmConsole.dash.last() && !document.getElementById('fig-spec').hidden, null, 10000, 'the speculative chart');
  const sp = await page.evaluate(() => {
    const H = window.cllmConsole.dash.history;
    return { draft: Math.max(0, ...H.sdraft.filter((x) => x !== null)), acc: H.sacc.filter((x) => x !== null) };
  });
  check(sp.draft > 0 && sp.acc.length > 0 && sp.acc.every((x) => x >= 0 && x <= 100),
    `with --speculative-config the dashboard charts draft acceptance per second (${sp.acc.map((x) => x.toFixed(0)).join(', ')} %)`);
  check(errors.length === 0, 'no console errors on the speculative dashboard' + (errors.length ? ': ' + errors.join(' | ') : ''));
  await ctx.close();
}

// ---- the server goes away: one clear banner on every tab, no stale alerts; back when it returns ----
async function serverGone(browser) {
  const { url, proc } = await serve('gone', []);
  const { ctx, page, errors } = await newPage(browser, url);
  await page.goto(url + '/?poll=300#chat', { waitUntil: 'load' });
  await waitFor(page, () => window.cllmConsole.dash.last(), null, 10000, 'first poll');
  proc.kill('SIGKILL');
  await waitFor(page, () => !document.getElementById('alert').hidden, null, 5000, 'the unreachable banner');
  const a = await page.evaluate(() => ({ text: document.getElementById('alert').textContent, cls: document.getElementById('alert').className,
    conn: document.getElementById('conn').textContent, retry: !document.getElementById('alert-retry').hidden }));
  check(/Server unreachable/.test(a.text) && /crit/.test(a.cls) && a.retry && /unreachable/.test(a.conn), 'server gone: "Server unreachable" banner with Retry on the chat tab: ' + a.text);
  await page.click('#tab-dash');
  check(/Server unreachable/.test(await page.textContent('#alert')) && !/KV|CPU/.test(await page.textContent('#alert')), 'and on the dashboard, replacing any other alert');
  check(await page.evaluate(() => document.getElementById('cards').classList.contains('stale')), 'the last figures are greyed out as stale');
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'console-unreachable.png') });
  await page.click('#alert-retry');
  await sleep(300);
  check(!(await page.isHidden('#alert')), 'Retry while still down keeps the banner');
  const other = errors.filter((e) => !/Failed to load resource|ERR_CONNECTION_REFUSED|Failed to fetch/.test(e));
  check(other.length === 0, 'no console errors besides the refused connections' + (other.length ? ': ' + other.join(' | ') : ''));
  await ctx.close();
}

// ---- --api-key: the page loads, data endpoints are 401 until the key is entered ----
async function withKey(browser) {
  const key = 'sekret-' + Math.random().toString(36).slice(2);
  const { url } = await serve('key', ['--api-key', key, '--console-log-prompts']);
  for (const p of ['/console/stats', '/console/info', '/console/requests'])
    check((await fetch(url + p)).status === 401, `${p} is 401 without the key`);
  check((await fetch(url + '/console/stats', { headers: { Authorization: 'Bearer ' + key } })).status === 200, 'stats 200 with the key');
  check((await fetch(url + '/')).status === 200 && (await fetch(url + '/console/app.js')).status === 200, 'page and assets load without the key');
  const { page, errors } = await newPage(browser, url);
  const statuses = [];
  page.on('response', (r) => {
    if (r.url().includes('/console/info') || r.url().includes('/console/stats')) statuses.push(r.status());
  });
  await page.goto(url + '/?poll=500', { waitUntil: 'load' });
  await waitFor(page, () => !document.getElementById('key-form').hidden, null, 10000, 'key prompt');
  check(statuses.includes(401), 'the page got 401 before the key');
  await page.fill('#key-input', 'wrong');
  await page.press('#key-input', 'Enter');
  await waitFor(page, () => !document.getElementById('key-form').hidden && /refused/.test(document.getElementById('key-msg').textContent), null, 5000, 'wrong key refused');
  await page.fill('#key-input', key);
  await page.press('#key-input', 'Enter');
  await waitFor(page, () => document.getElementById('key-form').hidden && /ready/.test(document.getElementById('conn').textContent), null, 10000, 'key accepted');
  ok('page works after entering the key');
  await settings(page, { 'set-max': 8 });
  await page.fill('#chat-input', 'secret prompt words');
  await page.click('#send');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 2, null, 60000, 'chat with key');
  const a = await page.evaluate(() => window.cllmConsole.chat.conv()[1]);
  check(a.usage && !a.error, 'chat works with the key');
  await page.click('#tab-reqs');
  await waitFor(page, () => window.cllmConsole.reqs.rows().some((r) => r.prompt === 'secret prompt words'), null, 10000, 'logged prompt');
  ok('--console-log-prompts shows the prompt text');
  // the detail pane cuts a long prompt, "Show all" shows the rest
  const long = 'marker-' + 'x'.repeat(900) + '-end';
  await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json', Authorization: 'Bearer ' + key },
    body: JSON.stringify({ messages: [{ role: 'user', content: long }], max_tokens: 1 }) }).then((r) => r.json());
  await page.fill('#f-q', 'marker-');
  await waitFor(page, () => window.cllmConsole.reqs.rows().length === 1, null, 10000, 'the long prompt row');
  await page.click('#reqs tbody tr');
  const cut = await page.textContent('#req-prompt pre');
  check(cut.length < 700 && cut.endsWith('…') && await page.isVisible('#req-more'), `a long prompt is cut (${cut.length} chars shown)`);
  await page.click('#req-more');
  check((await page.textContent('#req-prompt pre')) === long, 'Show all shows the whole prompt');
  // errors expected here: the 401s the page was built to get; anything else is a failure
  const other = errors.filter((e) => !/401|Unauthorized/.test(e));
  check(other.length === 0, 'no console errors besides the expected 401s' + (other.length ? ': ' + other.join(' | ') : ''));
}

// ---- images (issue 34): attach / paste / drop, chips, image_url parts, the 400 without a tower ----
// a vision model like serve_images.sh's: configs/tiny-vision.json's shapes with models/tiny's
// vocabulary and tokenizer plus the three vision tokens, synthetic weights
function visionModel() {
  const src = process.env.CLLM_SRC, dir = path.join(T, 'vis');
  const c = JSON.parse(fs.readFileSync(path.join(src, 'configs/tiny-vision.json'), 'utf8'));
  c.text_config.vocab_size = 4096;
  c.text_config.eos_token_id = 4002;
  Object.assign(c, { image_token_id: 4009, video_token_id: 4010, vision_start_token_id: 4007, vision_end_token_id: 4008 });
  fs.mkdirSync(path.join(dir, 'tok'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'cfg.json'), JSON.stringify(c));
  const tk = JSON.parse(fs.readFileSync(path.join(MODEL, 'tokenizer.json'), 'utf8'));
  // (models/tiny's own tokenizer has the first three since it gained its tower)
  for (const [id, content] of [[4007, '<|vision_start|>'], [4008, '<|vision_end|>'], [4009, '<|image_pad|>'], [4010, '<|video_pad|>']])
    if (!tk.added_tokens.some((a) => a.id === id))
      tk.added_tokens.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  fs.writeFileSync(path.join(dir, 'tok/tokenizer.json'), JSON.stringify(tk));
  fs.copyFileSync(path.join(MODEL, 'tokenizer_config.json'), path.join(dir, 'tok/tokenizer_config.json'));
  const r = spawnSync(BIN, ['synth', '--config', path.join(dir, 'cfg.json'), path.join(dir, 'model'), '--dtype', 'f32',
    '--tokenizer', path.join(dir, 'tok'), '-q'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error('cllm synth: ' + r.stdout + r.stderr);
  return path.join(dir, 'model');
}

// a text-only model (models/tiny has a tower now): configs/tiny.json with models/tiny's vocabulary
function textModel() {
  const src = process.env.CLLM_SRC, dir = path.join(T, 'text');
  fs.mkdirSync(dir, { recursive: true });
  const c = JSON.parse(fs.readFileSync(path.join(src, 'configs/tiny.json'), 'utf8'));
  c.text_config.vocab_size = 4096;
  fs.writeFileSync(path.join(dir, 'cfg.json'), JSON.stringify(c));
  const r = spawnSync(BIN, ['synth', '--config', path.join(dir, 'cfg.json'), path.join(dir, 'model'), '--dtype', 'f32',
    '--tokenizer', MODEL, '-q'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error('cllm synth: ' + r.stdout + r.stderr);
  return path.join(dir, 'model');
}

// a PNG drawn by the page's canvas (w x h, a red square on blue): the bytes, for setInputFiles
async function makePng(page, w, h) {
  const b64 = await page.evaluate(([w, h]) => {
    const c = document.createElement('canvas');
    c.width = w;
    c.height = h;
    const g = c.getContext('2d');
    g.fillStyle = '#1040c0';
    g.fillRect(0, 0, w, h);
    g.fillStyle = '#e02020';
    g.fillRect(w / 4, h / 4, w / 2, h / 2);
    return c.toDataURL('image/png').split(',')[1];
  }, [w, h]);
  return Buffer.from(b64, 'base64');
}

// paste (a ClipboardEvent on the message box) or drop (a DragEvent on the chat, or on the element
// `where` names) of one file; -> whether the page took the event (preventDefault)
async function fileEvent(page, kind, name, type, b64, where) {
  return page.evaluate(([kind, name, type, b64, where]) => {
    const bytes = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], name, { type }));
    const target = document.getElementById(where || (kind === 'paste' ? 'chat-input' : 'chat-log'));
    const ev = kind === 'paste' ? new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true })
      : new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true });
    if (kind === 'drop') target.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
    return !target.dispatchEvent(ev);
  }, [kind, name, type, b64, where]);
}

// /console/info as the server answers it, changed by fn(json); unrouteAll({behavior: 'wait'})
// ends it without racing a request in flight (the page asks often while it thinks it is loading)
function fakeInfo(page, fn) {
  return page.route('**/console/info', async (route) => {
    const resp = await route.fetch();
    await route.fulfill({ response: resp, json: fn(await resp.json()) });
  });
}

const chips = (page) => page.$$eval('#attach-list .chip', (l) => l.map((li) => ({
  name: li.querySelector('.chip-name').textContent, w: li.querySelector('img').naturalWidth })));

async function images(browser) {
  const { url } = await serve('vision', [], visionModel());
  const { ctx, page, errors } = await newPage(browser, url);
  const bodies = [], choosers = [];
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData()));
  });
  // listening before the page loads: playwright turns on its file-chooser interception
  // asynchronously when the first listener comes, and a chooser opened before that is lost
  page.on('filechooser', (c) => choosers.push(c));
  // a page opened while the model loads does not know yet (vision null); it asks again at ready
  await fakeInfo(page, (j) => Object.assign(j, { ready: false, vision: null, vision_why_not: null }));
  await page.goto(url + '/?poll=500', { waitUntil: 'load' });
  await waitFor(page, () => window.cllmConsole.info && window.cllmConsole.info.vision === null, null, 10000, 'info while loading');
  await page.unrouteAll({ behavior: 'wait' });
  await waitFor(page, () => window.cllmConsole.info && window.cllmConsole.info.ready, null, 10000, 'info at ready');
  check((await page.evaluate(() => window.cllmConsole.info.vision)) === true, '/console/info, asked again once the stats say ready, says the vision model takes images');
  check((await page.getAttribute('#attach', 'aria-disabled')) === 'false' && /PNG, JPEG or WebP/.test(await page.getAttribute('#attach', 'title')),
    'the attach button is on, its tooltip says what it takes');
  await settings(page, { 'set-max': 8, 'set-temp': 0 });

  // keyboard: Tab reaches the button, Enter opens the file chooser; a PNG made here becomes a chip
  const png = await makePng(page, 64, 48);
  await page.focus('#chat-input');
  await page.keyboard.press('Shift+Tab');
  check(await page.evaluate(() => document.activeElement.id === 'attach'), 'Shift+Tab from the message box reaches the attach button');
  await page.keyboard.press('Enter');
  for (let i = 0; i < 50 && !choosers.length; i++) await sleep(100);
  const chooser = choosers[0];
  check(chooser && chooser.isMultiple(), 'Enter on it opens a file chooser (several files at once)');
  if (chooser) await chooser.setFiles({ name: 'square.png', mimeType: 'image/png', buffer: png });
  await waitFor(page, () => document.querySelectorAll('#attach-list .chip').length === 1, null, 5000, 'the chip');
  let ch = await chips(page);
  check(ch.length === 1 && ch[0].name === 'square.png' && ch[0].w === 64, 'the attached PNG shows as a thumbnail chip: ' + JSON.stringify(ch));
  check(await page.isVisible('#attach-list'), 'the chip row is shown above the message box');

  // refused: not an image type the server reads (a GIF, whatever its name says), over 10 MiB
  await page.setInputFiles('#attach-file', { name: 'anim.png', mimeType: 'image/png', buffer: Buffer.from('GIF89a\x01\x00\x01\x00\x00\x00\x00;', 'latin1') });
  await waitFor(page, () => /not a PNG, JPEG or WebP/.test(document.getElementById('attach-msg').textContent), null, 5000, 'the type refusal');
  check(await page.isVisible('#attach-msg') && (await chips(page)).length === 1, 'a GIF named .png is refused with a visible message, no chip');
  const huge = Buffer.alloc(10 * 1024 * 1024 + 1);
  png.copy(huge);
  await page.setInputFiles('#attach-file', { name: 'huge.png', mimeType: 'image/png', buffer: huge });
  await waitFor(page, () => /over 10 MiB/.test(document.getElementById('attach-msg').textContent), null, 10000, 'the size refusal');
  check((await chips(page)).length === 1, 'a file over 10 MiB is refused with a visible message: ' + await page.textContent('#attach-msg'));

  // paste and drop add chips; their ✕ removes them
  await fileEvent(page, 'paste', 'pasted.png', 'image/png', png.toString('base64'));
  await fileEvent(page, 'drop', 'dropped.png', 'image/png', png.toString('base64'));
  await waitFor(page, () => document.querySelectorAll('#attach-list .chip').length === 3, null, 5000, 'pasted and dropped chips');
  ch = await chips(page);
  check(ch.map((c) => c.name).join() === 'square.png,pasted.png,dropped.png', 'Ctrl+V of an image and a drop on the chat each add a chip: ' + ch.map((c) => c.name));
  check(await page.textContent('#attach-msg') === '', 'the earlier refusal message is gone once images are accepted');
  const taken = await fileEvent(page, 'drop', 'beside.png', 'image/png', png.toString('base64'), 'convs');
  await sleep(200);
  check(taken && (await chips(page)).length === 3 && page.url().startsWith(url),
    'a file dropped beside the chat (the conversation list) neither attaches nor replaces the page');
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'console-chat-attach.png') });
  await page.click('#attach-list .chip:nth-child(3) .chip-rm');
  await page.click('[aria-label="Remove image pasted.png"]');
  ch = await chips(page);
  check(ch.length === 1 && ch[0].name === 'square.png', 'the chips\' ✕ buttons remove them');

  // send: the request carries the image as an image_url part before the text
  await page.fill('#chat-input', 'What is in this picture?');
  await page.click('#send');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 2, null, 60000, 'the image answer');
  const b1 = bodies[bodies.length - 1], u1 = b1.messages[b1.messages.length - 1];
  check(Array.isArray(u1.content) && u1.content.length === 2 && u1.content[0].type === 'image_url' &&
    u1.content[0].image_url.url === 'data:image/png;base64,' + png.toString('base64') &&
    u1.content[1].type === 'text' && u1.content[1].text === 'What is in this picture?',
  'the request has the PNG as an image_url data: part, then the text part');
  const a1 = await page.evaluate(() => window.cllmConsole.chat.conv()[1]);
  check(a1.usage && !a1.error, 'the vision model answered the image turn: ' + JSON.stringify(a1.usage || a1.error));
  check((await chips(page)).length === 0 && await page.isHidden('#attach-list'), 'the chips leave the box when sent');
  const th = await page.$$eval('#chat-log .msg.user .thumb img', (l) => l.map((i) => ({ w: i.naturalWidth, alt: i.alt })));
  check(th.length === 1 && th[0].w === 64 && th[0].alt === 'square.png', 'the sent message shows the image as a thumbnail: ' + JSON.stringify(th));
  await page.click('#chat-log .msg.user .thumb');
  check((await page.getAttribute('#chat-log .msg.user .thumb', 'aria-pressed')) === 'true', 'clicking the thumbnail enlarges it');

  // the next turn resends the image (the API is stateless); the same image hits the prefix cache
  await page.fill('#chat-input', 'And the colours?');
  await page.click('#send');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 4, null, 60000, 'the follow-up');
  const b2 = bodies[bodies.length - 1];
  const a2 = await page.evaluate(() => window.cllmConsole.chat.conv()[3]);
  check(b2.messages.length === 3 && Array.isArray(b2.messages[0].content) && b2.messages[0].content[0].image_url.url === u1.content[0].image_url.url &&
    b2.messages[2].content === 'And the colours?', 'the follow-up resends the image in the history, a plain-text question last');
  const cached = a2.usage && a2.usage.prompt_tokens_details ? a2.usage.prompt_tokens_details.cached_tokens : 0;
  check(!a2.error && cached > 0 && cached > a1.usage.prompt_tokens / 2, `the follow-up reuses the cached prefix past the image (${cached} of ${a2.usage && a2.usage.prompt_tokens})`);

  // an image alone (no text) is a turn too; and it survives a reload from localStorage
  await page.setInputFiles('#attach-file', { name: 'again.png', mimeType: 'image/png', buffer: await makePng(page, 40, 40) });
  await waitFor(page, () => document.querySelectorAll('#attach-list .chip').length === 1, null, 5000, 'the chip');
  await page.focus('#chat-input');
  await page.keyboard.press('Enter');
  await waitFor(page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 6, null, 60000, 'the image-only turn');
  const b3 = bodies[bodies.length - 1].messages.at(-1);
  check(b3.content.length === 1 && b3.content[0].type === 'image_url', 'an image with no text is sent as one image_url part');
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => document.querySelectorAll('#chat-log .msg').length >= 6, null, 10000, 'the conversation after reload');
  const kept = await page.$$eval('#chat-log .msg.user .thumb img', (l) => l.map((i) => i.naturalWidth));
  check(kept.join() === '64,40', 'the images are back after a reload (localStorage): ' + kept.join());
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'console-chat-image.png') });

  // a conversation whose images outgrow the server's body limit is stopped in the page, saying so
  await fakeInfo(page, (j) => {
    j.limits.max_body_size = 1000;
    return j;
  });
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => window.cllmConsole.info && window.cllmConsole.info.limits.max_body_size === 1000, null, 10000, 'the small limit');
  const sent = bodies.length;
  await page.fill('#chat-input', 'One more');
  await page.click('#send');
  await idle(page);
  const lim = await page.textContent('#chat-log .msg.assistant:last-child .error');
  check(bodies.length === sent && /over the server's 1,000 B limit \(--max-body-size\)/.test(lim),
    'over the body limit nothing is sent and the chat says why: ' + lim);
  await page.unrouteAll({ behavior: 'wait' });

  // storage full: the images leave the stored copy, the text stays; after a reload the image
  // shows as not kept and is not sent again
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => window.cllmConsole.info && window.cllmConsole.info.ready, null, 10000, 'info');
  await page.click('#clear');
  const free = await page.evaluate(() => {
    const big = 'x'.repeat(1 << 20), small = 'x'.repeat(1 << 16);
    let i = 0;
    for (const s of [big, small])
      try {
        for (;;) localStorage.setItem('fill' + i++, s);
      } catch (e) {}
    localStorage.removeItem('fill' + (i - 2)); /* 64 K characters free: the text fits, the image does not */
    return i;
  });
  const noise = Buffer.from(await page.evaluate(() => {
    const c = document.createElement('canvas');
    c.width = c.height = 256;
    const g = c.getContext('2d'), d = g.createImageData(256, 256);
    for (let k = 0; k < d.data.length; k++) d.data[k] = k % 4 === 3 ? 255 : (Math.random() * 256) | 0;
    g.putImageData(d, 0, 0);
    return c.toDataURL('image/png').split(',')[1];
  }), 'base64');
  await page.setInputFiles('#attach-file', { name: 'noise.png', mimeType: 'image/png', buffer: noise });
  await waitFor(page, () => document.querySelectorAll('#attach-list .chip').length === 1, null, 5000, 'the noise chip');
  await page.fill('#chat-input', 'Noise?');
  await page.click('#send');
  await idle(page);
  const full = await page.textContent('#attach-msg');
  check(/storage is full/.test(full), `with storage full (${free} fillers, image ${noise.length} bytes) the page says images are not kept: ` + full);
  await page.reload({ waitUntil: 'load' });
  await waitFor(page, () => document.querySelectorAll('#chat-log .msg').length >= 2, null, 10000, 'the conversation after reload');
  const gone = await page.evaluate(() => ({ note: (document.querySelector('#chat-log .thumb-gone') || {}).textContent,
    text: document.querySelector('#chat-log .msg.user .text').textContent, thumbs: document.querySelectorAll('#chat-log .thumb').length }));
  check(/noise\.png: not kept/.test(gone.note) && gone.text === 'Noise?' && gone.thumbs === 0,
    'after a reload the text is there and the image shows as not kept: ' + JSON.stringify(gone));
  await page.fill('#chat-input', 'Still there?');
  await page.click('#send');
  await idle(page);
  check(JSON.stringify(bodies.at(-1).messages).indexOf('image_url') < 0 && bodies.at(-1).messages[0].content === 'Noise?',
    'an image that was not kept is not sent again (its text is)');
  await page.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith('fill')).forEach((k) => localStorage.removeItem(k)));
  check(errors.length === 0, 'no console errors with images' + (errors.length ? ': ' + errors.join(' | ') : ''));
  await ctx.close();

  // a model without a tower: the button is off with the reason; a stale page that still sends an
  // image gets the server's 400 shown in the chat like any other error
  const nv = await serve('novision', [], textModel());
  const p2 = await newPage(browser, nv.url);
  let chooserOpened = false;
  p2.page.on('filechooser', () => (chooserOpened = true));
  await p2.page.goto(nv.url + '/?poll=500', { waitUntil: 'load' });
  await waitFor(p2.page, () => window.cllmConsole.info && window.cllmConsole.info.ready, null, 10000, 'info');
  const off = await p2.page.evaluate(() => ({ v: window.cllmConsole.info.vision, d: document.getElementById('attach').getAttribute('aria-disabled'),
    t: document.getElementById('attach').title }));
  check(off.v === false && off.d === 'true' && /no vision tower/.test(off.t), 'without a tower the attach button is off and says why: ' + JSON.stringify(off));
  await p2.page.focus('#attach'); /* still focusable, so a keyboard user learns why too */
  await p2.page.keyboard.press('Enter');
  await fileEvent(p2.page, 'paste', 'pasted.png', 'image/png', png.toString('base64'));
  await sleep(300);
  check(!chooserOpened && (await chips(p2.page)).length === 0 && /no vision tower/.test(await p2.page.textContent('#attach-msg')),
    'pressing it or pasting an image attaches nothing and shows the reason');
  await fakeInfo(p2.page, (j) => Object.assign(j, { vision: true, vision_why_not: null }));
  await p2.page.reload({ waitUntil: 'load' });
  await waitFor(p2.page, () => window.cllmConsole.info && window.cllmConsole.info.vision === true, null, 10000, 'the faked info');
  await settings(p2.page, { 'set-max': 8 });
  await p2.page.setInputFiles('#attach-file', { name: 'square.png', mimeType: 'image/png', buffer: png });
  await waitFor(p2.page, () => document.querySelectorAll('#attach-list .chip').length === 1, null, 5000, 'the chip');
  await p2.page.fill('#chat-input', 'Look at this');
  await p2.page.click('#send');
  await waitFor(p2.page, () => !window.cllmConsole.chat.busy() && window.cllmConsole.chat.conv().length >= 2, null, 30000, 'the refusal');
  const err = await p2.page.evaluate(() => ({ e: document.querySelector('.msg.assistant .error').textContent,
    failed: document.querySelectorAll('.msg.failed').length }));
  check(/HTTP 400: .*this model takes no images \(it has no vision tower\)/.test(err.e) && err.failed === 2,
    'the server\'s 400 is shown in the chat and the turn marked failed: ' + err.e);
  const other = p2.errors.filter((e) => !/status of 400/.test(e));
  check(other.length === 0, 'no console errors besides the expected 400' + (other.length ? ': ' + other.join(' | ') : ''));
  await p2.page.unrouteAll({ behavior: 'ignoreErrors' });
  await p2.ctx.close();
}

// ---- --no-console ----
async function noConsole() {
  const { url } = await serve('off', ['--no-console']);
  check((await fetch(url + '/')).status === 404, '--no-console: / is 404');
  check((await fetch(url + '/console/stats')).status === 404, '--no-console: /console/stats is 404');
  check((await fetch(url + '/health')).status === 200, '--no-console: the API still serves');
}

main().then(() => process.exit(failed), (e) => {
  console.log('FAIL: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
