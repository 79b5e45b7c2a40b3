/* Requests tab: the server's ring of the last N finished requests (/console/requests), filtered,
 * sorted and paged by the server (status, finish reason, route, slower than, time range, text;
 * any column), refreshed every poll. A row opens its details: timings, tokens, the sampling it
 * ran with, and the prompt text only when the server was started with --console-log-prompts (the
 * server never sends it otherwise), cut to a screenful with "Show all". Export CSV takes every
 * row that matches the filter. */
'use strict';
(function () {
  const C = window.cllmConsole, $ = C.$;
  const PROMPT_CUT = 600;
  let cap = 1000, timer = 0, logPrompts = false, total = 0, lastSeq = 0;
  let rows = []; /* the page shown */
  const view = { sort: 'time', order: 'desc', offset: 0, size: 50 };
  let detailSeq = 0, detailAll = false;

  function query(extra) {
    const p = new URLSearchParams();
    const f = { status: $('f-status').value, finish: $('f-finish').value, route: $('f-route').value.trim(),
      min_ms: $('f-min').value.trim(), q: $('f-q').value.trim() };
    for (const k in f) if (f[k]) p.set(k, f[k]);
    const range = Number($('f-range').value);
    if (range) p.set('since', String(Date.now() / 1000 - range));
    if (view.sort !== 'time') p.set('sort', view.sort);
    if (view.order === 'asc') p.set('order', 'asc');
    p.set('offset', String(view.offset));
    p.set('limit', String(view.size));
    for (const k in extra || {}) p.set(k, extra[k]);
    return '/console/requests?' + p.toString();
  }

  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }
  const n = (v) => (v === undefined || v === null || v < 0 ? '–' : String(v));
  const ms = (v) => (v === undefined || v === null ? '–' : C.fmt(v, v < 10 ? 1 : 0));
  const when = (t) => {
    const d = new Date(t * 1000);
    return d.toLocaleTimeString([], { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  };

  function rowEl(r) {
    const tr = document.createElement('tr');
    tr.dataset.seq = r.seq;
    tr.tabIndex = 0;
    tr.className = r.seq === detailSeq ? 'sel' : '';
    cell(tr, when(r.time));
    cell(tr, String(r.status), r.status >= 400 ? 'bad' : '');
    cell(tr, ms(r.ttft_ms));
    cell(tr, ms(r.total_ms));
    cell(tr, n(r.output_tokens));
    cell(tr, n(r.prompt_tokens), 'wide');
    cell(tr, n(r.cached_tokens), 'wide');
    cell(tr, r.finish || '', r.finish === 'error' || r.finish === 'cancelled' ? 'bad' : '');
    const rt = cell(tr, r.method + ' ' + r.route, 'wide route');
    if (r.id) rt.title = r.id;
    const p = cell(tr, r.prompt ? r.prompt.slice(0, 200) : '', 'prompt wide');
    p.hidden = !logPrompts;
    tr.addEventListener('click', () => showDetail(r));
    tr.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        showDetail(r);
      }
    });
    return tr;
  }

  function showDetail(r) {
    if (detailSeq !== r.seq) detailAll = false;
    detailSeq = r.seq;
    const tps = r.output_tokens > 1 && r.total_ms > r.ttft_ms ? ((r.output_tokens - r.n) * 1000) / (r.total_ms - r.ttft_ms) : null;
    const list = [
      ['Finished', new Date(r.time * 1000).toLocaleString([], { hour12: false })],
      ['Request', r.method + ' ' + r.route], ['Status', r.status], ['Response id', r.id || '–'],
      ['Finish', r.finish || '–'], ['Stream', r.gen ? (r.stream ? 'yes' : 'no') : '–'],
      ['Time to first token', r.ttft_ms != null ? C.fmt(r.ttft_ms, 1) + ' ms' : '–'],
      ['Total', C.fmt(r.total_ms, 1) + ' ms'],
      ['Decode', tps ? C.fmt(tps, 1) + ' tok/s (' + C.fmt((r.total_ms - r.ttft_ms) / Math.max(1, r.output_tokens / Math.max(1, r.n) - 1), 1) + ' ms between tokens)' : '–'],
      ['Prompt tokens', n(r.prompt_tokens) + (r.cached_tokens > 0 ? ' (' + r.cached_tokens + ' from the prefix cache)' : '')],
      ['Output tokens', n(r.output_tokens) + (r.n > 1 ? ' over ' + r.n + ' samples' : '')],
      ['Max tokens', n(r.max_tokens)], ['Temperature', r.temperature != null ? C.fmt(r.temperature, 2) : '–'],
      ['Top-p', r.top_p != null ? C.fmt(r.top_p, 2) : '–'], ['Seed', r.seed != null ? String(r.seed) : '–'],
    ];
    const tb = $('req-detail').querySelector('tbody');
    tb.textContent = '';
    for (const [k, v] of list) {
      const tr = tb.insertRow();
      const th = document.createElement('th');
      th.scope = 'row';
      th.textContent = k;
      tr.appendChild(th);
      tr.insertCell().textContent = String(v);
    }
    const pr = $('req-prompt');
    pr.hidden = !r.prompt;
    if (r.prompt) {
      const cut = !detailAll && r.prompt.length > PROMPT_CUT;
      pr.querySelector('pre').textContent = cut ? r.prompt.slice(0, PROMPT_CUT) + '…' : r.prompt;
      $('req-more').hidden = !cut;
      $('req-more').onclick = () => {
        detailAll = true;
        showDetail(r);
      };
    }
    $('req-detail').hidden = false;
    for (const tr of $('reqs').tBodies[0].rows) tr.classList.toggle('sel', Number(tr.dataset.seq) === detailSeq);
  }

  function note() {
    const from = total ? view.offset + 1 : 0, to = Math.min(total, view.offset + rows.length);
    $('pg-info').textContent = from + '–' + to + ' of ' + total;
    $('pg-prev').disabled = view.offset === 0;
    $('pg-next').disabled = view.offset + view.size >= total;
    $('reqs-note').textContent = 'The server keeps the last ' + cap + ' requests (--console-requests); ' + total +
      ' match. ' + (logPrompts ? 'Prompt text is logged (--console-log-prompts).' :
      'Prompt text is not kept (start the server with --console-log-prompts to keep it).');
  }

  let inFlight = false, again = false;
  async function poll() {
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    try {
      const j = await C.getJSON(query());
      cap = j.capacity;
      logPrompts = j.log_prompts;
      lastSeq = j.last_seq;
      total = j.total === undefined ? j.requests.length : j.total;
      document.querySelector('#reqs .prompt-col').hidden = !logPrompts;
      if (view.offset > 0 && view.offset >= total) {
        view.offset = Math.max(0, Math.floor((total - 1) / view.size) * view.size);
        inFlight = false;
        return poll();
      }
      rows = j.requests;
      const tb = $('reqs').tBodies[0];
      const frag = document.createDocumentFragment();
      rows.forEach((r) => frag.appendChild(rowEl(r)));
      tb.textContent = '';
      tb.appendChild(frag);
      const sel = rows.find((r) => r.seq === detailSeq);
      if (sel && !$('req-detail').hidden) showDetail(sel);
      note();
    } catch (e) {
      /* the dashboard's poll reports connection problems */
    } finally {
      inFlight = false;
      if (again) {
        again = false;
        poll();
      }
    }
  }
  const refilter = () => {
    view.offset = 0;
    poll();
  };

  function sortBy(key) {
    if (view.sort === key) view.order = view.order === 'desc' ? 'asc' : 'desc';
    else (view.sort = key), (view.order = 'desc');
    for (const th of document.querySelectorAll('#reqs th[data-sort]'))
      if (th.dataset.sort === view.sort) th.setAttribute('aria-sort', view.order === 'asc' ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    refilter();
  }

  async function csv() {
    const j = await C.getJSON(query({ offset: 0, limit: cap }));
    const cols = ['seq', 'time', 'method', 'route', 'status', 'id', 'finish', 'ttft_ms', 'total_ms', 'prompt_tokens',
      'cached_tokens', 'output_tokens', 'n', 'stream', 'max_tokens', 'temperature', 'top_p', 'seed'].concat(logPrompts ? ['prompt'] : []);
    const q = (c, v) => {
      if (v === undefined || v === null) return '';
      const s = c === 'time' ? new Date(v * 1000).toISOString() : String(v);
      return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    };
    const lines = [cols.join(',')];
    for (const r of j.requests) lines.push(cols.map((c) => q(c, r[c])).join(','));
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([lines.join('\r\n') + '\r\n'], { type: 'text/csv' }));
    a.download = 'cllm-requests-' + new Date().toISOString().slice(0, 19).replace(/:/g, '') + '.csv';
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 5000);
  }

  C.reqs = { rows: () => rows, total: () => total, lastSeq: () => lastSeq, poll, view };
  document.addEventListener('DOMContentLoaded', () => {
    for (const id of ['f-status', 'f-finish', 'f-range']) $(id).addEventListener('change', refilter);
    for (const id of ['f-route', 'f-min', 'f-q']) $(id).addEventListener('input', refilter);
    $('reqs-filter').addEventListener('submit', (ev) => ev.preventDefault());
    for (const th of document.querySelectorAll('#reqs th[data-sort]'))
      th.querySelector('button').addEventListener('click', () => sortBy(th.dataset.sort));
    $('pg-prev').addEventListener('click', () => {
      view.offset = Math.max(0, view.offset - view.size);
      poll();
    });
    $('pg-next').addEventListener('click', () => {
      view.offset += view.size;
      poll();
    });
    $('pg-size').addEventListener('change', () => {
      view.size = Number($('pg-size').value);
      refilter();
    });
    $('req-close').addEventListener('click', () => {
      $('req-detail').hidden = true;
      detailSeq = 0;
      for (const tr of $('reqs').tBodies[0].rows) tr.classList.remove('sel');
    });
    $('f-csv').addEventListener('click', () => csv().catch(() => {}));
  });
  C.hooks.info.push(() => {
    if (timer) return;
    poll();
    timer = setInterval(() => C.authed() && poll(), C.pollMs);
  });
  C.hooks.tab.push((t) => {
    if (t === 'reqs') poll();
  });
})();
