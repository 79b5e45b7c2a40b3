/* Dashboard tab: polls /console/stats (every 2 s; ?poll=MS changes it), turns its cumulative
 * counters into rates between samples, keeps 10 minutes of history for the uPlot charts, and
 * raises the alert banner with cllm doctor's thresholds: usage at or above 92% warns, at or above
 * 95% for 30 s straight is critical. Polling runs on every tab so the banner is always current. */
'use strict';
(function () {
  const C = window.cllmConsole, $ = C.$;
  const WARN = 92, CRIT = 95, SUSTAIN_S = 30, KEEP = 300;
  const H = {}; /* series name -> array, aligned with H.t */
  const names = ['t', 'ptps', 'gtps', 'running', 'waiting', 'kv', 'slots', 'hcpu', 'hmem', 'pcpu',
    'hit', 'ttft50', 'ttft95', 'ttft99', 'itl50', 'itl95', 'e2e50', 'e2e95'];
  names.forEach((n) => (H[n] = []));
  const raw = []; /* recent stats objects, for windowed rates */
  const high = {}; /* usage name -> unix seconds it went >= CRIT */
  let charts = null, timer = 0, last = null;

  function pct(a, b) {
    return b > 0 ? (100 * a) / b : null;
  }
  /* the sample about `s` seconds before the newest (or the oldest we have) */
  function ago(s) {
    const now = raw[raw.length - 1];
    for (let i = raw.length - 2; i >= 0; i--) if (now.t - raw[i].t >= s) return raw[i];
    return raw[0];
  }

  function derive(s) {
    const p = raw.length > 1 ? raw[raw.length - 2] : null;
    const v = { t: Date.now() / 1000 };
    const dt = p ? s.t - p.t : 0;
    v.ptps = dt > 0 ? (s.engine_prompt_tokens - p.engine_prompt_tokens) / dt : null;
    v.gtps = dt > 0 ? (s.engine_generation_tokens - p.engine_generation_tokens) / dt : null;
    v.running = s.running;
    v.waiting = s.waiting;
    v.kv = pct(s.kv_blocks_used, s.kv_blocks_total);
    v.slots = pct(s.state_slots_used, s.state_slots_total);
    v.hcpu = p ? pct(s.host_cpu_busy - p.host_cpu_busy, s.host_cpu_total - p.host_cpu_total) : null;
    v.hmem = s.mem_total_bytes > 0 ? 100 * (1 - s.mem_available_bytes / s.mem_total_bytes) : null;
    v.pcpu = dt > 0 ? (100 * (s.proc_cpu_s - p.proc_cpu_s)) / dt / (s.ncpu || 1) : null;
    const a = ago(60);
    const dq = s.prefix_queries_tokens - a.prefix_queries_tokens;
    v.hit = dq > 0 ? pct(s.prefix_hits_tokens - a.prefix_hits_tokens, dq) : null;
    const q = (o, k) => (o ? o[k] : null);
    v.ttft50 = q(s.ttft_ms, 'p50');
    v.ttft95 = q(s.ttft_ms, 'p95');
    v.ttft99 = q(s.ttft_ms, 'p99');
    v.itl50 = q(s.itl_ms, 'p50');
    v.itl95 = q(s.itl_ms, 'p95');
    v.e2e50 = q(s.e2e_ms, 'p50');
    v.e2e95 = q(s.e2e_ms, 'p95');
    return v;
  }

  const usageNames = { kv: 'KV cache', slots: 'state slots', hcpu: 'host CPU', hmem: 'host memory' };
  /* level per usage gauge: '', 'warn' (>= 92) or 'crit' (>= 95 for 30 s) */
  function levels(v) {
    const out = {};
    for (const k of Object.keys(usageNames)) {
      const x = v[k];
      if (x !== null && x >= CRIT) {
        if (!high[k]) high[k] = v.t;
        out[k] = v.t - high[k] >= SUSTAIN_S ? 'crit' : 'warn';
      } else {
        delete high[k];
        out[k] = x !== null && x >= WARN ? 'warn' : '';
      }
    }
    return out;
  }

  function banner(v, lv) {
    const crit = Object.keys(lv).filter((k) => lv[k] === 'crit');
    const warn = Object.keys(lv).filter((k) => lv[k] === 'warn');
    if (crit.length)
      C.setAlert('crit', 'Critical: ' + crit.map((k) => usageNames[k] + ' ' + C.fmt(v[k], 0) + '% for ' +
        C.fmt(v.t - high[k], 0) + ' s').join(', ') + ' (≥ ' + CRIT + '% sustained ' + SUSTAIN_S + ' s)');
    else if (warn.length)
      C.setAlert('warn', 'Warning: ' + warn.map((k) => usageNames[k] + ' ' + C.fmt(v[k], 0) + '%').join(', ') +
        ' (≥ ' + WARN + '%)');
    else C.setAlert('', '');
  }

  function cards(s, v, lv) {
    const list = [
      ['Prompt tok/s', C.fmt(v.ptps, 1), '', 'ptps'],
      ['Generation tok/s', C.fmt(v.gtps, 1), '', 'gtps'],
      ['Running', String(s.running), '', 'running'],
      ['Waiting', String(s.waiting), '', 'waiting'],
      ['KV blocks', C.fmt(v.kv, 1) + '%', lv.kv, 'kv', s.kv_blocks_used + ' / ' + s.kv_blocks_total],
      ['State slots', C.fmt(v.slots, 1) + '%', lv.slots, 'slots', s.state_slots_used + ' / ' + s.state_slots_total],
      ['Prefix hit (60 s)', v.hit === null ? '–' : C.fmt(v.hit, 1) + '%', '', 'hit'],
      ['TTFT p95', s.ttft_ms ? C.fmt(s.ttft_ms.p95, 0) + ' ms' : '–', '', 'ttft95'],
      ['Preemptions', String(s.preemptions), '', 'preemptions'],
      // speculative decoding (only with --speculative-config): since start-up
      ...(s.spec_k > 0 ? [['Spec decode accepted', s.spec_draft_tokens ? C.fmt(100 * s.spec_accepted_tokens / s.spec_draft_tokens, 1) + '%' : '–', '', 'spec',
        (s.spec_drafts ? C.fmt(1 + s.spec_accepted_tokens / s.spec_drafts, 2) + ' tokens per verify, ' : '') +
        s.spec_drafts + ' verifies, at most ' + s.spec_k + ' drafts each']] : []),
      ['429 responses', String(s.http_429), '', 'http429'],
      ['Cancelled (client gone)', String(s.cancelled_disconnect), '', 'cancelled'],
      ['Process CPU', C.fmt(v.pcpu, 0) + '%', '', 'pcpu'],
      ['Process RSS', C.bytes(s.proc_rss_bytes), '', 'rss'],
      ['Host CPU', C.fmt(v.hcpu, 0) + '%', lv.hcpu, 'hcpu', s.ncpu + ' CPUs'],
      ['Host memory', C.fmt(v.hmem, 0) + '%', lv.hmem, 'hmem', C.bytes(s.mem_total_bytes - s.mem_available_bytes) + ' / ' + C.bytes(s.mem_total_bytes)],
    ];
    const box = $('cards');
    if (box.children.length !== list.length) {
      box.textContent = '';
      for (const c of list) {
        const d = document.createElement('div');
        d.className = 'card';
        d.dataset.key = c[3];
        d.innerHTML = '<div class="k"></div><div class="v"></div>';
        d.firstChild.textContent = c[0];
        box.appendChild(d);
      }
    }
    list.forEach((c, i) => {
      const d = box.children[i];
      d.className = 'card' + (c[2] ? ' ' + c[2] : '');
      d.lastChild.textContent = c[1];
      d.title = c[4] || '';
    });
  }

  function color(n) {
    return getComputedStyle(document.documentElement).getPropertyValue('--c' + n).trim() || '#888';
  }
  function makeCharts() {
    if (!window.uPlot) return null;
    const fg = getComputedStyle(document.body).color;
    const grid = getComputedStyle(document.documentElement).getPropertyValue('--line').trim();
    const axes = [
      { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } },
      { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, size: 50 },
    ];
    const mk = (id, series, yrange) => {
      const el = $(id);
      const opts = {
        width: Math.max(280, el.clientWidth || 400),
        height: 200,
        axes,
        scales: { x: { time: true }, y: yrange ? { range: yrange } : { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
        series: [{}].concat(series.map((s) => ({
          label: s[1], stroke: s[2], width: s[3] || 1.5, dash: s[4], spanGaps: false,
          points: { show: false },
        }))),
        legend: { live: false },
      };
      const u = new window.uPlot(opts, [[]].concat(series.map(() => [])), el);
      u._keys = series.map((s) => s[0]);
      u._el = el;
      return u;
    };
    const warnC = getComputedStyle(document.documentElement).getPropertyValue('--warn').trim();
    const critC = color(5);
    const list = [
      mk('ch-tput', [['ptps', 'prompt', color(1)], ['gtps', 'generation', color(2)]]),
      mk('ch-reqs', [['running', 'running', color(3)], ['waiting', 'waiting', color(2)]]),
      mk('ch-use', [['kv', 'KV blocks', color(1)], ['slots', 'state slots', color(4)],
        ['hcpu', 'host CPU', color(2)], ['hmem', 'host mem', color(6)], ['pcpu', 'process CPU', color(3)],
        ['_warn', 'warn 92', warnC, 1, [6, 4]], ['_crit', 'critical 95', critC, 1, [6, 4]]], [0, 100]),
      mk('ch-hit', [['hit', 'hit rate', color(3)], ['_target', 'target 85', color(4), 1, [6, 4]]], [0, 100]),
      mk('ch-ttft', [['ttft50', 'p50', color(1)], ['ttft95', 'p95', color(2)], ['ttft99', 'p99', color(5)]]),
      mk('ch-lat', [['itl50', 'ITL p50', color(1)], ['itl95', 'ITL p95', color(4)],
        ['e2e50', 'e2e p50', color(3)], ['e2e95', 'e2e p95', color(2)]]),
    ];
    if (window.ResizeObserver) {
      const ro = new ResizeObserver(() => {
        for (const u of list) {
          const w = u._el.clientWidth;
          if (w && Math.abs(w - u.width) > 4) u.setSize({ width: w, height: 200 });
        }
      });
      list.forEach((u) => ro.observe(u._el));
      list._ro = ro;
    }
    return list;
  }
  const constant = { _warn: WARN, _crit: CRIT, _target: 85 };
  function draw() {
    if (C.tab !== 'dash') return;
    if (!charts) charts = makeCharts();
    if (!charts) return;
    for (const u of charts)
      u.setData([H.t].concat(u._keys.map((k) => (k in constant ? H.t.map(() => constant[k]) : H[k]))));
  }

  async function poll() {
    try {
      const s = await C.getJSON('/console/stats');
      raw.push(s);
      while (raw.length > 2 && s.t - raw[0].t > 120) raw.shift();
      const v = derive(s);
      for (const n of names) {
        H[n].push(v[n]);
        if (H[n].length > KEEP) H[n].shift();
      }
      const lv = levels(v);
      banner(v, lv);
      cards(s, v, lv);
      last = { stats: s, values: v, levels: lv };
      C.setConn(s.ready && !s.draining, s.draining ? 'draining' : s.ready ? 'ready' : 'loading model');
      draw();
    } catch (e) {
      if (!(e instanceof C.AuthError)) C.setConn(false, 'server unreachable');
    }
  }
  function start() {
    if (timer) return;
    poll();
    timer = setInterval(() => C.authed() && poll(), C.pollMs);
  }

  function cardTable(info) {
    const c = info.card || {};
    const rows = [
      ['Name', info.model], ['Architecture', [c.architecture, c.model_type].filter(Boolean).join(' / ')],
      ['Parameters', c.parameters ? (c.parameters >= 1e9 ? C.fmt(c.parameters / 1e9, 2) + ' B' : C.fmt(c.parameters / 1e6, 2) + ' M') : ''],
      ['Layers / hidden', c.num_hidden_layers ? c.num_hidden_layers + ' / ' + c.hidden_size : ''],
      ['Experts (active)', c.num_experts ? c.num_experts + ' (' + c.num_experts_per_tok + ')' : ''],
      ['Quantization', c.quantization], ['Weights dtype', c.dtype], ['KV cache dtype', c.kv_cache_dtype],
      ['Context (served / model)', info.max_model_len + (c.max_position_embeddings ? ' / ' + c.max_position_embeddings : '')],
      ['KV capacity', C.fmt(info.kv_tokens_total, 0) + ' tokens (' + C.fmt(info.kv_blocks_total, 0) + ' blocks of ' + info.block_size + ')'],
      ['State slots', String(info.state_slots_total)], ['Prefix caching', info.prefix_caching ? 'on' : 'off'],
      ['Threads', c.threads], ['ISA tier', c.isa_tier + (c.cpu_features ? ' (' + c.cpu_features + ')' : '')],
      ['Version', 'cllm ' + info.version + (c.build ? ' (' + c.build + ')' : '')], ['Path', c.path],
    ];
    const tb = $('card').tBodies[0];
    tb.textContent = '';
    for (const [k, val] of rows) {
      if (val === undefined || val === '' || val === null) continue;
      const tr = tb.insertRow();
      const th = document.createElement('th');
      th.scope = 'row';
      th.textContent = k;
      tr.appendChild(th);
      tr.insertCell().textContent = String(val);
    }
  }

  /* chart colours come from the CSS variables: rebuild when the system switches light/dark */
  if (window.matchMedia)
    window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
      if (charts) {
        if (charts._ro) charts._ro.disconnect();
        charts.forEach((u) => u.destroy());
      }
      charts = null;
      draw();
    });

  C.dash = { last: () => last, history: H, poll };
  C.hooks.info.push((info) => {
    cardTable(info);
    start();
  });
  C.hooks.tab.push((t) => {
    if (t === 'dash') requestAnimationFrame(draw);
  });
})();
