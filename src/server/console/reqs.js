/* Requests tab: the server's ring of the last N finished requests (/console/requests), polled
 * with ?after=<last seq> so each poll moves only new rows. Prompt text appears only when the
 * server was started with --console-log-prompts (the server never sends it otherwise). */
'use strict';
(function () {
  const C = window.cllmConsole, $ = C.$;
  let lastSeq = 0, cap = 1000, timer = 0, logPrompts = false;
  const rows = []; /* newest first */

  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }
  const n = (v) => (v === undefined || v === null || v < 0 ? '–' : String(v));
  const ms = (v) => (v === undefined || v === null ? '–' : C.fmt(v, v < 10 ? 1 : 0));

  function rowEl(r) {
    const tr = document.createElement('tr');
    const d = new Date(r.time * 1000);
    cell(tr, d.toLocaleTimeString([], { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0'));
    const rt = cell(tr, r.method + ' ' + r.route);
    if (r.id) rt.title = r.id;
    cell(tr, String(r.status), r.status >= 400 ? 'bad' : '');
    cell(tr, n(r.prompt_tokens));
    cell(tr, n(r.cached_tokens));
    cell(tr, n(r.output_tokens));
    cell(tr, ms(r.ttft_ms));
    cell(tr, ms(r.total_ms));
    cell(tr, r.finish || '', r.finish === 'error' || r.finish === 'cancelled' ? 'bad' : '');
    const p = cell(tr, r.prompt || '', 'prompt');
    p.hidden = !logPrompts;
    return tr;
  }

  function note() {
    $('reqs-note').textContent = 'Last ' + cap + ' requests kept by the server (--console-requests), newest first; ' +
      rows.length + ' shown. ' + (logPrompts ? 'Prompt text is logged (--console-log-prompts).' :
      'Prompt text is not kept (start the server with --console-log-prompts to keep it).');
  }

  async function poll() {
    try {
      const j = await C.getJSON('/console/requests?after=' + lastSeq + '&limit=' + cap);
      cap = j.capacity;
      logPrompts = j.log_prompts;
      document.querySelector('#reqs .prompt-col').hidden = !logPrompts;
      if (j.last_seq < lastSeq) {
        /* server restarted: start over */
        rows.length = 0;
        $('reqs').tBodies[0].textContent = '';
      }
      lastSeq = j.last_seq;
      const tb = $('reqs').tBodies[0];
      const fresh = j.requests; /* newest first */
      for (let i = fresh.length - 1; i >= 0; i--) {
        rows.unshift(fresh[i]);
        tb.insertBefore(rowEl(fresh[i]), tb.firstChild);
      }
      while (rows.length > cap) {
        rows.pop();
        tb.deleteRow(-1);
      }
      note();
    } catch (e) {
      /* the dashboard's poll reports connection problems */
    }
  }

  C.reqs = { rows: () => rows, poll };
  C.hooks.info.push(() => {
    if (timer) return;
    poll();
    timer = setInterval(() => C.authed() && poll(), C.pollMs);
  });
  C.hooks.tab.push((t) => {
    if (t === 'reqs') poll();
  });
})();
