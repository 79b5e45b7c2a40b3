/* Dashboard tab: polls /console/stats (every 2 s; ?poll=MS changes it) for the cards and the
 * alert banner, and draws the charts from the server's own history: one sample a second for the
 * last hour (console_stats.c), fetched whole when the page opens (?since=0) and then only what is
 * new (?since=<newest t>), so a freshly opened dashboard shows the last hour and a burst between
 * two polls still shows (gauges are the highest value of each second). Polling runs on every
 * tab so reachability is always current; alerts show on the dashboard only (app.js). */
'use strict';
(function () {
  const C = window.cllmConsole, $ = C.$;
  const KEEP = 3600;
  const H = {}; /* series name -> array, aligned with H.t: the server's history columns */
  const names = ['t', 'ptps', 'gtps', 'running', 'inflight', 'waiting', 'kv', 'slots', 'hcpu', 'hmem', 'pcpu',
    'pq', 'ph', 'req', 'e5xx', 'r429', 'preempt', 'ttft50', 'ttft95', 'ttft99', 'itl50', 'itl95', 'itl99',
    'e2e50', 'e2e95', 'e2e99', 'sdraft', 'sacc', 'hit'];
  names.forEach((n) => (H[n] = []));
  const raw = []; /* recent stats objects, for windowed rates */
  const high = {}; /* usage name -> unix seconds it went above crit_pct */
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

  /* Alerts about cllm, with `cllm doctor`'s thresholds (src/doctor/doctor.c, dr_opts_default):
   * KV cache and state slots above 92% warn, above 95% for 30 s straight are critical; 5xx error
   * rate over the last minute above 1% warns, above 5% is critical; any preemption or 429 in
   * the last minute warns, as does a waiting queue at 92% of --max-num-queued-reqs; host memory
   * available below 10% warns, below 5% is critical. Host CPU is never a warning: a busy host is
   * reported as a note, saying whether cllm or other processes use it. */
  const usageNames = { kv: 'KV cache', slots: 'state slots' };
  /* /console/info's thresholds (cllm serve copies cllm doctor's); these built-in ones are the
   * same numbers, for a server that does not send them */
  const TH = { warn_pct: 92, crit_pct: 95, sustain_s: 30, err_warn_pct: 1, err_crit_pct: 5, mem_warn_pct: 10, mem_crit_pct: 5 };
  C.thresholds = TH;
  function levels(v, s) {
    const out = {};
    for (const k of Object.keys(usageNames)) {
      const x = v[k];
      if (x !== null && x > TH.crit_pct) {
        if (!high[k]) high[k] = v.t;
        out[k] = v.t - high[k] >= TH.sustain_s ? 'crit' : 'warn';
      } else {
        delete high[k];
        out[k] = x !== null && x > TH.warn_pct ? 'warn' : '';
      }
    }
    const a = ago(60);
    const http = (o) => (o.http_200 || 0) + (o.http_4xx || 0) + (o.http_5xx || 0);
    const dReq = http(s) - http(a), dErr = s.http_5xx - a.http_5xx;
    v.err = dReq > 0 ? (100 * dErr) / dReq : null;
    out.err = v.err === null || dErr <= 0 ? '' : v.err > TH.err_crit_pct ? 'crit' : v.err > TH.err_warn_pct ? 'warn' : '';
    v.preempt60 = s.preemptions - a.preemptions;
    out.preempt = v.preempt60 > 0 ? 'warn' : '';
    v.r429 = s.http_429 - a.http_429;
    out.r429 = v.r429 > 0 ? 'warn' : '';
    const qmax = C.info && C.info.max_num_queued_reqs;
    out.waiting = qmax > 0 && s.waiting >= (qmax * TH.warn_pct) / 100 ? 'warn' : '';
    const memAvail = s.mem_total_bytes > 0 ? (100 * s.mem_available_bytes) / s.mem_total_bytes : null;
    out.hmem = memAvail === null ? '' : memAvail < TH.mem_crit_pct ? 'crit' : memAvail < TH.mem_warn_pct ? 'warn' : '';
    out.hcpu = v.hcpu !== null && v.hcpu > TH.warn_pct ? 'info' : '';
    return out;
  }

  function banner(v, lv, s) {
    const say = {
      kv: () => 'KV cache ' + C.fmt(v.kv, 0) + '%' + (lv.kv === 'crit' ? ' for ' + C.fmt(v.t - high.kv, 0) + ' s' : ''),
      slots: () => 'state slots ' + C.fmt(v.slots, 0) + '%' + (lv.slots === 'crit' ? ' for ' + C.fmt(v.t - high.slots, 0) + ' s' : ''),
      err: () => 'error rate ' + C.fmt(v.err, 1) + '% (5xx, last 60 s)',
      preempt: () => v.preempt60 + ' preemption' + (v.preempt60 === 1 ? '' : 's') + ' in the last 60 s',
      r429: () => v.r429 + ' request' + (v.r429 === 1 ? '' : 's') + ' refused with 429 in the last 60 s',
      waiting: () => s.waiting + ' waiting (queue limit ' + C.info.max_num_queued_reqs + ')',
      hmem: () => 'host memory ' + C.fmt(v.hmem, 0) + '% used',
    };
    const pick = (lvl) => Object.keys(say).filter((k) => lv[k] === lvl).map((k) => say[k]());
    const crit = pick('crit'), warn = pick('warn');
    if (crit.length) C.setAlert('crit', 'Critical: ' + crit.concat(warn).join(', '));
    else if (warn.length) C.setAlert('warn', 'Warning: ' + warn.join(', '));
    else if (lv.hcpu === 'info') {
      const mine = v.pcpu !== null && v.pcpu >= v.hcpu / 2;
      C.setAlert('info', mine
        ? 'Note: host CPU ' + C.fmt(v.hcpu, 0) + '%, mostly cllm (' + C.fmt(v.pcpu, 0) + '%)'
        : 'Host busy: CPU ' + C.fmt(v.hcpu, 0) + '%, cllm only ' + C.fmt(v.pcpu, 0) + '% (other processes)');
    } else C.setAlert('', '');
  }

  const pc = (x, d) => (x === null || x === undefined || !isFinite(x) ? '–' : C.fmt(x, d) + '%');
  function cards(s, v, lv) {
    const list = [
      ['Prompt tok/s', C.fmt(v.ptps, 1), '', 'ptps'],
      ['Generation tok/s', C.fmt(v.gtps, 1), '', 'gtps'],
      ['Running', String(s.running), '', 'running'],
      ['Waiting', String(s.waiting), '', 'waiting'],
      ['KV blocks', pc(v.kv, 1), lv.kv, 'kv', s.kv_blocks_used + ' / ' + s.kv_blocks_total],
      ['State slots', pc(v.slots, 1), lv.slots, 'slots', s.state_slots_used + ' / ' + s.state_slots_total],
      ['Prefix hit (60 s)', v.hit === null ? '–' : C.fmt(v.hit, 1) + '%', '', 'hit'],
      ['TTFT p95', s.ttft_ms ? C.fmt(s.ttft_ms.p95, 0) + ' ms' : '–', '', 'ttft95'],
      ['Preemptions', String(s.preemptions), '', 'preemptions'],
      // speculative decoding (only with --speculative-config): since start-up
      ...(s.spec_k > 0 ? [['Spec decode accepted', s.spec_draft_tokens ? C.fmt(100 * s.spec_accepted_tokens / s.spec_draft_tokens, 1) + '%' : '–', '', 'spec',
        (s.spec_drafts ? C.fmt(1 + s.spec_accepted_tokens / s.spec_drafts, 2) + ' tokens per verify, ' : '') +
        s.spec_drafts + ' verifies, at most ' + s.spec_k + ' drafts each']] : []),
      ['429 responses', String(s.http_429), '', 'http429'],
      ['Cancelled (client gone)', String(s.cancelled_disconnect), '', 'cancelled'],
      ['Process CPU', pc(v.pcpu, 0), '', 'pcpu'],
      ['Process RSS', C.bytes(s.proc_rss_bytes), '', 'rss'],
      ['Host CPU', pc(v.hcpu, 0), '', 'hcpu', s.ncpu + ' CPUs'],
      ['Host memory', pc(v.hmem, 0), lv.hmem, 'hmem', C.bytes(s.mem_total_bytes - s.mem_available_bytes) + ' / ' + C.bytes(s.mem_total_bytes)],
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
  const unitFmt = (unit) => (v) => (v === null || v === undefined ? '–' : C.fmt(v) + (unit ? ' ' + unit : ''));
  /* axis ticks short enough for the axis: 1.5k, 12k, 2M */
  const tick = (v) => (Math.abs(v) >= 1e6 ? C.fmt(v / 1e6, v % 1e6 ? 1 : 0) + 'M' : Math.abs(v) >= 1e3 ? C.fmt(v / 1e3, v % 1e3 ? 1 : 0) + 'k' : C.fmt(v, Number.isInteger(v) ? 0 : 1));
  function makeCharts() {
    if (!window.uPlot) return null;
    const fg = getComputedStyle(document.body).color;
    const grid = getComputedStyle(document.documentElement).getPropertyValue('--line').trim();
    const mk = (id, unit, series, yrange) => {
      const el = $(id), f = unitFmt(unit);
      const opts = {
        width: Math.max(280, el.clientWidth || 400),
        height: 200,
        axes: [
          { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, space: 70,
            incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600],
            values: (u, splits) => splits.map((v) => new Date(v * 1000).toLocaleTimeString([], { hour12: false })) },
          { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, size: 72,
            values: (u, splits) => splits.map((v) => tick(v) + ' ' + unit),
            /* whole requests and events: no 2.5 req ticks */
            incrs: unit === 'req' || unit === '/s' ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] : undefined },
        ],
        scales: { x: { time: true }, y: yrange ? { range: yrange } : { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
        series: [{ value: (u, v) => (v ? new Date(v * 1000).toLocaleTimeString([], { hour12: false }) : '–') }].concat(series.map((s) => ({
          label: s[1], stroke: s[2], width: s[3] || 1.5, dash: s[4], spanGaps: false,
          points: { show: false }, value: (u, v) => f(v),
        }))),
        legend: { live: true },
        cursor: { drag: { x: false, y: false } },
      };
      const u = new window.uPlot(opts, [[]].concat(series.map(() => [])), el);
      u._keys = series.map((s) => s[0]);
      u._el = el;
      return u;
    };
    const warnC = getComputedStyle(document.documentElement).getPropertyValue('--warn').trim();
    const critC = color(5);
    /* p50 / p95 / p99 always blue / orange / purple */
    const pc = (k, what) => [[k + '50', what + 'p50', color(1)], [k + '95', what + 'p95', color(2)], [k + '99', what + 'p99', color(4)]];
    const list = [
      mk('ch-tput', 'tok/s', [['ptps', 'prompt', color(1)], ['gtps', 'generation', color(2)]]),
      mk('ch-reqs', 'req', [['running', 'running', color(3)], ['waiting', 'waiting', color(2)],
        ['inflight', 'in flight (exact peak)', color(6), 1, [4, 3]]]),
      mk('ch-use', '%', [['kv', 'KV blocks', color(1)], ['slots', 'state slots', color(4)],
        ['hcpu', 'host CPU', color(2)], ['hmem', 'host mem', color(6)], ['pcpu', 'cllm CPU', color(3)],
        ['_warn', 'warn ' + TH.warn_pct, warnC, 1, [6, 4]], ['_crit', 'critical ' + TH.crit_pct, critC, 1, [6, 4]]], [0, 100]),
      mk('ch-hit', '%', [['hit', 'hit rate', color(3)], ['_target', 'target 85', color(4), 1, [6, 4]]], [0, 100]),
      mk('ch-ttft', 'ms', pc('ttft', '')),
      mk('ch-itl', 'ms', pc('itl', '')),
      mk('ch-e2e', 'ms', pc('e2e', '')),
      mk('ch-evt', '/s', [['e5xx', '5xx', color(5)], ['r429', '429', color(2)], ['preempt', 'preemptions', color(4)]]),
      mk('ch-spec', '%', [['sacc', 'draft tokens accepted', color(3)]], [0, 100]),
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
  const constant = { _warn: () => TH.warn_pct, _crit: () => TH.crit_pct, _target: () => 85 };
  function draw() {
    if (C.tab !== 'dash') return;
    if (!charts) charts = makeCharts();
    if (!charts) return;
    for (const u of charts)
      u.setData([H.t].concat(u._keys.map((k) => (k in constant ? H.t.map(constant[k]) : H[k]))));
  }

  /* appends the server's history columns; hit rate is over the 60 samples up to each one */
  function addHistory(h) {
    if (!h || !h.t || !h.t.length) return;
    const lastT = H.t.length ? H.t[H.t.length - 1] : 0;
    for (let i = 0; i < h.t.length; i++) {
      if (h.t[i] <= lastT) continue;
      for (const n of names) if (n !== 'hit') H[n].push(h[n] === undefined ? null : h[n][i]);
      const j = H.t.length - 1;
      let q = 0, hh = 0;
      for (let k = Math.max(0, j - 59); k <= j; k++) {
        q += H.pq[k] || 0;
        hh += H.ph[k] || 0;
      }
      H.hit.push(q > 0 ? (100 * hh) / q : null);
    }
    const over = H.t.length - KEEP;
    if (over > 0) for (const n of names) H[n].splice(0, over);
  }

  async function poll() {
    try {
      const since = H.t.length ? H.t[H.t.length - 1] : 0;
      const s = await C.getJSON('/console/stats?since=' + since);
      raw.push(s);
      while (raw.length > 2 && s.t - raw[0].t > 120) raw.shift();
      if (raw.length > 1 && s.uptime_s < raw[raw.length - 2].uptime_s) {
        /* the server restarted: its counters and history start over */
        raw.splice(0, raw.length - 1);
      }
      addHistory(s.history);
      const v = derive(s);
      const lv = levels(v, s);
      banner(v, lv, s);
      C.setDown(false);
      cards(s, v, lv);
      $('fig-spec').hidden = !(s.spec_k > 0); /* only with --speculative-config */
      last = { stats: s, values: v, levels: lv };
      C.setConn(s.ready && !s.draining, s.draining ? 'draining' : s.ready ? 'ready' : 'loading model');
      /* the page came up while the model loaded: what the model can do (images, context) is known now */
      if (s.ready && C.info && !C.info.ready) C.loadInfo().catch(() => {});
      draw();
    } catch (e) {
      if (!(e instanceof C.AuthError)) C.setDown(true);
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

  C.dash = { last: () => last, history: H, poll, charts: () => charts };
  C.hooks.info.push((info) => {
    if (info.thresholds) Object.assign(TH, info.thresholds);
    $('cap-use').textContent = 'Usage (KV / slots: warn above ' + TH.warn_pct + ', critical above ' + TH.crit_pct + ' for ' +
      TH.sustain_s + ' s' + (info.thresholds ? ', as cllm doctor' : '') + ')';
    cardTable(info);
    start();
  });
  C.hooks.tab.push((t) => {
    if (t === 'dash') requestAnimationFrame(draw);
  });
  /* figures from a server that no longer answers are greyed out, not passed off as current */
  C.hooks.down.push((down) => $('cards').classList.toggle('stale', down));
})();
