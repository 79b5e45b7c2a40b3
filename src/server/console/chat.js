/* Chat tab: streams /v1/chat/completions (SSE), shows the thinking block (reasoning_content)
 * collapsible, the answer as sanitised markdown, and per answer the prompt / cached / output
 * token counts, time to first token and tokens/s. The conversation lives in localStorage; every
 * turn resends it, so the server's prefix cache serves the shared prefix (cached_tokens).
 * Stop aborts the fetch: the server sees the connection close and cancels the request. */
'use strict';
(function () {
  const C = window.cllmConsole, $ = C.$;
  const STORE = 'cllm.console.chat.v1';
  let conv = [];
  let ctrl = null;
  const els = []; /* message index -> {root, think, thinkBody, body, meta} */

  function load() {
    try {
      const v = JSON.parse(localStorage.getItem(STORE) || '[]');
      return Array.isArray(v) ? v.filter((m) => m && (m.role === 'user' || m.role === 'assistant')) : [];
    } catch (e) {
      return [];
    }
  }
  function save() {
    try {
      localStorage.setItem(STORE, JSON.stringify(conv));
    } catch (e) {
      /* full or disabled: the conversation still works in this page */
    }
  }

  function metaText(m) {
    const parts = [];
    const u = m.usage;
    if (u) {
      const cached = (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) || 0;
      parts.push(u.prompt_tokens + ' prompt tokens (' + cached + ' cached)');
      parts.push(u.completion_tokens + ' output tokens');
    } else if (m.chunks) {
      parts.push('~' + m.chunks + ' output tokens');
    }
    if (m.tps) parts.push(C.fmt(m.tps, 1) + ' tok/s');
    if (m.ttft_ms !== undefined) parts.push('TTFT ' + C.fmt(m.ttft_ms, 0) + ' ms');
    if (m.finish) parts.push(m.finish);
    return parts.join(' · ');
  }

  function build(i) {
    const m = conv[i];
    const root = document.createElement('div');
    root.className = 'msg ' + m.role;
    const who = document.createElement('div');
    who.className = 'who';
    who.textContent = m.role === 'user' ? 'You' : C.info ? C.info.model : 'model';
    root.appendChild(who);
    const e = { root };
    if (m.role === 'user') {
      const b = document.createElement('div');
      b.textContent = m.content; /* user text is shown verbatim, never parsed */
      root.appendChild(b);
    } else {
      e.think = document.createElement('details');
      e.think.className = 'think';
      const s = document.createElement('summary');
      s.textContent = 'Thinking';
      e.think.appendChild(s);
      e.thinkBody = document.createElement('div');
      e.thinkBody.className = 'think-body';
      e.think.appendChild(e.thinkBody);
      root.appendChild(e.think);
      e.body = document.createElement('div');
      e.body.className = 'md';
      root.appendChild(e.body);
      e.err = document.createElement('div');
      e.err.className = 'error';
      root.appendChild(e.err);
      e.meta = document.createElement('div');
      e.meta.className = 'meta';
      root.appendChild(e.meta);
    }
    els[i] = e;
    $('chat-log').appendChild(root);
    update(i);
  }

  function update(i) {
    const m = conv[i], e = els[i];
    if (!e || m.role !== 'assistant') return;
    e.think.hidden = !m.reasoning;
    e.thinkBody.textContent = m.reasoning || ''; /* thinking is plain text */
    if (m.pending && m.reasoning && !m.content) e.think.open = true;
    e.body.innerHTML = C.renderMarkdown(m.content || '');
    e.err.textContent = m.error || '';
    e.meta.textContent = metaText(m);
  }

  function renderAll() {
    $('chat-log').textContent = '';
    els.length = 0;
    conv.forEach((_, i) => build(i));
    scroll();
  }
  const scroll = () => {
    const l = $('chat-log');
    l.scrollTop = l.scrollHeight;
  };

  let raf = 0;
  function schedule(i) {
    if (raf) return;
    raf = requestAnimationFrame(() => {
      raf = 0;
      update(i);
      scroll();
    });
  }

  function num(id) {
    const v = $(id).value.trim();
    return v === '' ? undefined : Number(v);
  }

  function requestBody() {
    const msgs = [];
    const sys = $('set-system').value.trim();
    if (sys) msgs.push({ role: 'system', content: sys });
    for (const m of conv) {
      if (m.pending || (m.role === 'assistant' && m.error && !m.content)) continue;
      msgs.push({ role: m.role, content: m.content || '' });
    }
    const b = {
      model: C.info ? C.info.model : undefined,
      messages: msgs,
      stream: true,
      stream_options: { include_usage: true },
      chat_template_kwargs: { enable_thinking: $('set-thinking').checked },
    };
    const t = num('set-temp'), p = num('set-topp'), mx = num('set-max'), sd = num('set-seed');
    if (t !== undefined) b.temperature = t;
    if (p !== undefined) b.top_p = p;
    if (mx !== undefined) b.max_tokens = mx;
    if (sd !== undefined) b.seed = sd;
    return b;
  }

  async function stream(i) {
    const m = conv[i];
    ctrl = new AbortController();
    $('stop').disabled = false;
    $('send').disabled = true;
    const t0 = performance.now();
    let tFirst = 0;
    try {
      const r = await C.api('/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
        body: JSON.stringify(requestBody()),
        signal: ctrl.signal,
      });
      if (!r.ok) {
        const j = await r.json().catch(() => null);
        throw new Error('HTTP ' + r.status + (j && j.error ? ': ' + j.error.message : ''));
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let k;
        while ((k = buf.search(/\r?\n\r?\n/)) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k).replace(/^\r?\n\r?\n/, '');
          for (const line of ev.split(/\r?\n/)) {
            if (!line.startsWith('data:')) continue;
            const data = line.slice(5).trim();
            if (data === '[DONE]') continue;
            const j = JSON.parse(data);
            if (j.error) throw new Error(j.error.message || 'error');
            if (j.usage) m.usage = j.usage;
            const ch = j.choices && j.choices[0];
            if (!ch) continue;
            const d = ch.delta || {};
            const rs = d.reasoning_content || d.reasoning;
            if (rs || d.content) {
              if (!tFirst) {
                tFirst = performance.now();
                m.ttft_ms = tFirst - t0;
              }
              m.chunks = (m.chunks || 0) + 1;
            }
            if (rs) m.reasoning = (m.reasoning || '') + rs;
            if (d.content) {
              if (!m.content && m.reasoning && els[i]) els[i].think.open = false;
              m.content = (m.content || '') + d.content;
            }
            if (ch.finish_reason) m.finish = ch.finish_reason;
          }
          schedule(i);
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') m.finish = 'stopped';
      else if (e instanceof C.AuthError) m.error = 'API key needed: enter it above and resend.';
      else m.error = String(e.message || e);
    } finally {
      const tEnd = performance.now();
      const out = m.usage ? m.usage.completion_tokens : m.chunks || 0;
      /* decode rate after the first token; when the tokens came in one burst (a fast model, a
       * busy page) that window says nothing, so fall back to tokens over the whole request */
      if (tFirst && out > 1 && tEnd - tFirst >= 20) m.tps = (out - 1) / ((tEnd - tFirst) / 1000);
      else if (out > 0 && tEnd > t0) m.tps = out / ((tEnd - t0) / 1000);
      delete m.pending;
      ctrl = null;
      $('stop').disabled = true;
      $('send').disabled = false;
      save();
      update(i);
      scroll();
    }
  }

  function send() {
    const input = $('chat-input');
    const text = input.value.trim();
    if (!text || ctrl) return;
    input.value = '';
    conv.push({ role: 'user', content: text });
    build(conv.length - 1);
    conv.push({ role: 'assistant', content: '', pending: true });
    build(conv.length - 1);
    scroll();
    return stream(conv.length - 1);
  }

  C.chat = {
    send,
    stop: () => ctrl && ctrl.abort(),
    busy: () => !!ctrl,
    conv: () => conv,
    reload: () => {
      conv = load();
      renderAll();
    },
  };

  document.addEventListener('DOMContentLoaded', () => {
    conv = load().map((m) => {
      delete m.pending;
      return m;
    });
    $('chat-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      send();
    });
    $('chat-input').addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        send();
      }
    });
    $('stop').addEventListener('click', () => C.chat.stop());
    $('clear').addEventListener('click', () => {
      if (ctrl) ctrl.abort();
      conv = [];
      save();
      renderAll();
      $('chat-input').focus();
    });
    C.hooks.info.push(() => renderAll());
    renderAll();
  });
})();
