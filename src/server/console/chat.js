/* Chat tab: streams /v1/chat/completions (SSE), shows the thinking block (reasoning_content)
 * collapsible, the answer as sanitised markdown with highlighted code, and per answer the prompt
 * / cached / output token counts, time to first token and tokens/s.
 *
 * Conversations live in localStorage (cllm.console.convs.v2): a list in the side panel, each with
 * its messages and its own settings (system prompt, sampling), so a follow-up after a reload is
 * sent exactly as the first turn was. Every turn resends the conversation, so the server's prefix
 * cache serves the shared prefix (cached_tokens). A turn that failed (HTTP error, network) is
 * marked and left out of what is sent next, with its question: one refused 63k-character message
 * must not make every later turn fail. Stop aborts the fetch: the server sees the connection
 * close and cancels the request. Settings are checked against /console/info's limits before
 * anything is sent.
 *
 * Images (attach.js) ride on user messages as m.images [{url: data URL, name, bytes}] and go out
 * as image_url parts before the text, every turn. They are stored with the conversation while
 * localStorage has room; when it is full, images leave the stored copies (oldest conversation
 * first) before whole conversations do, and such an image shows as "not kept" after a reload. */
'use strict';
(function () {
  const C = window.cllmConsole, $ = C.$;
  const STORE = 'cllm.console.convs.v2', OLD = 'cllm.console.chat.v1', DEFAULTS = 'cllm.console.settings.v2';
  const BASE = { thinking: true, temperature: 0.7, top_p: 0.95, max_tokens: 512, seed: '', system: '' };
  let db = { cur: '', list: [] }; /* list newest-updated first */
  let cur = null; /* the open conversation */
  let ctrl = null, streaming = -1, stick = true;
  const els = []; /* message index -> {root, think, thinkBody, body, err, meta} */

  /* ---- storage ---- */
  const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 7);
  function defaults() {
    try {
      return Object.assign({}, BASE, JSON.parse(localStorage.getItem(DEFAULTS) || '{}'));
    } catch (e) {
      return Object.assign({}, BASE);
    }
  }
  function fresh() {
    return { id: newId(), title: '', created: Date.now(), updated: Date.now(), settings: defaults(), msgs: [] };
  }
  /* what attach.js makes; anything else in storage (a hand-edited or foreign entry) is not drawn
   * or sent as an image */
  const IMG_URL = /^data:image\/(png|jpeg|webp);base64,[A-Za-z0-9+/]+=*$/;
  function cleanImages(v) {
    if (!Array.isArray(v)) return undefined;
    const out = v.filter((x) => x && typeof x === 'object').slice(0, 64).map((x) => {
      const im = { name: String(x.name || 'image').slice(0, 200), bytes: Number(x.bytes) || 0 };
      if (typeof x.url === 'string' && IMG_URL.test(x.url)) im.url = x.url;
      return im;
    });
    return out.length ? out : undefined;
  }
  const cleanMsgs = (v) =>
    (Array.isArray(v) ? v : [])
      .filter((m) => m && (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string')
      .map((m) => {
        const im = m.role === 'user' ? cleanImages(m.images) : undefined;
        if (im) m.images = im;
        else delete m.images;
        return m;
      });
  const hasImages = (c) => c.msgs.some((m) => m.images && m.images.some((x) => x.url));
  /* a copy of conversation c whose messages keep their images' names but not their data */
  const withoutImages = (c) => Object.assign({}, c, {
    msgs: c.msgs.map((m) => (m.images ? Object.assign({}, m, { images: m.images.map((x) => ({ name: x.name, bytes: x.bytes })) }) : m)),
  });
  function load() {
    try {
      const v = JSON.parse(localStorage.getItem(STORE) || 'null');
      if (v && Array.isArray(v.list)) {
        db.list = v.list.filter((c) => c && c.id && Array.isArray(c.msgs));
        db.list.forEach((c) => {
          c.msgs = cleanMsgs(c.msgs);
          c.msgs.forEach((m) => delete m.pending);
          c.settings = Object.assign({}, BASE, c.settings || {});
        });
        db.cur = v.cur;
      }
    } catch (e) {
      db = { cur: '', list: [] };
    }
    /* the first console's single conversation (or one a test stored there) becomes a list entry */
    try {
      const old = localStorage.getItem(OLD);
      if (old !== null) {
        localStorage.removeItem(OLD);
        const msgs = cleanMsgs(JSON.parse(old));
        if (msgs.length) {
          const c = fresh();
          c.msgs = msgs;
          db.list.unshift(c);
          db.cur = c.id;
        }
      }
    } catch (e) {
      /* unreadable: dropped */
    }
    cur = db.list.find((c) => c.id === db.cur) || null;
    if (!cur) open(null);
  }
  function save() {
    const persist = db.list.filter((c) => c.msgs.length || c.title);
    /* when full, images leave the stored copies first, oldest conversation first (the list is
     * newest first); this page keeps them until it is closed */
    const heavy = persist.filter(hasImages).reverse(), light = new Set();
    for (;;) {
      try {
        localStorage.setItem(STORE, JSON.stringify({ cur: db.cur, list: persist.map((c) => (light.has(c) ? withoutImages(c) : c)) }));
        if (cur && light.has(cur) && C.attach) C.attach.say('This browser\'s storage is full: this chat\'s images are not kept after a reload.');
        return;
      } catch (e) {
        /* full: then the oldest conversations go; disabled storage: this page still works */
        if (!e || e.name !== 'QuotaExceededError') return;
        const next = heavy.find((c) => !light.has(c));
        if (next) light.add(next);
        else if (persist.length <= 1) return;
        else persist.splice(persist.length - 1, 1);
      }
    }
  }
  function touch() {
    cur.updated = Date.now();
    const i = db.list.indexOf(cur);
    if (i > 0) db.list.unshift(db.list.splice(i, 1)[0]);
    save();
    renderList();
  }
  const title = (c) => {
    const q = c.msgs.find((m) => m.role === 'user');
    return c.title || (q && (q.content || (q.images ? 'Image' : ''))) || 'New chat';
  };

  /* ---- the conversation list ---- */
  function renderList() {
    const ul = $('conv-list');
    ul.textContent = '';
    for (const c of db.list) {
      if (!c.msgs.length && !c.title && c !== cur) continue;
      const li = document.createElement('li');
      li.className = 'conv' + (c === cur ? ' active' : '');
      li.dataset.id = c.id;
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'conv-open';
      b.textContent = title(c).slice(0, 80);
      b.title = new Date(c.updated).toLocaleString();
      if (c === cur) b.setAttribute('aria-current', 'true');
      b.addEventListener('click', () => {
        open(c.id);
        document.body.classList.remove('convs-open');
      });
      li.appendChild(b);
      const ren = button('✎', 'Rename', 'conv-ren', () => rename(c, li));
      const del = button('✕', 'Delete', 'conv-del', () => {
        if (del.dataset.armed) return remove(c);
        del.dataset.armed = '1';
        del.textContent = 'Delete?';
        setTimeout(() => {
          delete del.dataset.armed;
          del.textContent = '✕';
        }, 3000);
      });
      li.append(ren, del);
      ul.appendChild(li);
    }
    $('chat-title').textContent = title(cur);
  }
  function button(text, label, cls, fn) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = cls;
    b.textContent = text;
    b.title = label;
    b.setAttribute('aria-label', label);
    b.addEventListener('click', fn);
    return b;
  }
  function rename(c, li) {
    const inp = document.createElement('input');
    inp.type = 'text';
    inp.className = 'conv-name';
    inp.value = title(c);
    inp.setAttribute('aria-label', 'Conversation name');
    li.textContent = '';
    li.appendChild(inp);
    inp.focus();
    inp.select();
    let done = false;
    const finish = (keep) => {
      if (done) return;
      done = true;
      if (keep && inp.value.trim()) c.title = inp.value.trim().slice(0, 200);
      save();
      renderList();
    };
    inp.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') finish(true);
      else if (ev.key === 'Escape') finish(false);
    });
    inp.addEventListener('blur', () => finish(true));
  }
  function remove(c) {
    if (c === cur && ctrl) ctrl.abort();
    db.list = db.list.filter((x) => x !== c);
    if (c === cur) open(db.list.length ? db.list[0].id : null);
    else {
      save();
      renderList();
    }
  }
  function open(id) {
    if (ctrl) ctrl.abort();
    cur = id ? db.list.find((c) => c.id === id) : null;
    if (!cur) {
      /* reuse an empty one rather than piling up blanks */
      cur = db.list.find((c) => !c.msgs.length && !c.title) || fresh();
      if (!db.list.includes(cur)) db.list.unshift(cur);
      cur.settings = defaults();
    }
    db.cur = cur.id;
    save();
    settingsToForm();
    renderList();
    renderAll();
  }
  function exportConv() {
    const data = { format: 'cllm-console-conversation', version: 1, exported: new Date().toISOString(),
      model: C.info ? C.info.model : undefined, title: title(cur), settings: cur.settings,
      messages: cur.msgs.map((m) => Object.assign({}, m)) };
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' }));
    a.download = 'chat-' + title(cur).replace(/[^\w-]+/g, '-').slice(0, 40).replace(/^-|-$/g, '') + '.json';
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 5000);
  }

  /* ---- settings: the drawer's fields <-> cur.settings, checked against the server's limits ---- */
  const fields = { temperature: 'set-temp', top_p: 'set-topp', max_tokens: 'set-max', seed: 'set-seed', system: 'set-system' };
  function settingsToForm() {
    const st = cur.settings;
    $('set-thinking').checked = !!st.thinking;
    for (const k in fields) $(fields[k]).value = st[k] === undefined || st[k] === null ? '' : String(st[k]);
    validate();
  }
  function limits() {
    const l = (C.info && C.info.limits) || {};
    return {
      tmin: l.temperature_min ?? 0, tmax: l.temperature_max ?? 2, pmin: l.top_p_min ?? 0.01, pmax: l.top_p_max ?? 1,
      mmin: l.max_tokens_min ?? 1, mmax: l.max_tokens_max || (C.info && C.info.max_model_len) || 1e6,
    };
  }
  /* -> list of problems (empty when fine); marks the fields */
  function validate() {
    const L = limits(), bad = [];
    const num = (id, name, lo, hi, int, optional) => {
      const el = $(id), t = el.value.trim();
      let why = '';
      if (t === '') why = optional ? '' : name + ' is required';
      else if (!/^-?\d*\.?\d+(e[-+]?\d+)?$/i.test(t)) why = name + ' must be a number';
      else {
        const v = Number(t);
        if (int && !Number.isInteger(v)) why = name + ' must be a whole number';
        else if (v < lo || v > hi) why = name + ' must be between ' + lo + ' and ' + hi;
      }
      el.setAttribute('aria-invalid', why ? 'true' : 'false');
      el.title = why;
      if (why) bad.push(why);
    };
    $('set-temp').max = L.tmax;
    $('set-max').max = L.mmax;
    num('set-temp', 'Temperature', L.tmin, L.tmax, false, false);
    num('set-topp', 'Top-p', L.pmin, L.pmax, false, false);
    num('set-max', 'Max tokens', L.mmin, L.mmax, true, false);
    num('set-seed', 'Seed', 0, Number.MAX_SAFE_INTEGER, true, true);
    $('set-msg').textContent = bad.join('; ');
    $('set-limits').textContent = 'Server limits: temperature ' + L.tmin + '–' + L.tmax + ', max tokens ' + L.mmin + '–' +
      L.mmax + (C.info && C.info.max_model_len ? ' (context ' + C.info.max_model_len + ' tokens, prompt included)' : '');
    return bad;
  }
  function formToSettings() {
    const st = cur.settings;
    st.thinking = $('set-thinking').checked;
    for (const k in fields) {
      const t = $(fields[k]).value;
      st[k] = k === 'system' ? t : t.trim() === '' ? '' : Number(t);
    }
    if (!validate().length) {
      try {
        localStorage.setItem(DEFAULTS, JSON.stringify(st));
      } catch (e) {
        /* storage off */
      }
    }
    save();
    renderSystem();
  }
  function drawer(show) {
    $('settings').hidden = !show;
    $('settings-btn').setAttribute('aria-expanded', show ? 'true' : 'false');
    if (show) $('set-temp').focus();
  }

  /* ---- messages ---- */
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

  function renderSystem() {
    const log = $('chat-log');
    let el = log.querySelector('.msg.system');
    const sys = (cur.settings.system || '').trim();
    if (!sys) {
      if (el) el.remove();
      return;
    }
    if (!el) {
      el = document.createElement('div');
      el.className = 'msg system';
      el.innerHTML = '<div class="who">System prompt <button type="button" class="act">Edit</button></div><div class="sys-text"></div>';
      el.querySelector('button').addEventListener('click', () => drawer(true));
      log.insertBefore(el, log.firstChild);
    }
    el.querySelector('.sys-text').textContent = sys;
  }

  function actions(i, root) {
    const m = cur.msgs[i];
    const bar = document.createElement('div');
    bar.className = 'actions';
    bar.appendChild(button('Copy', 'Copy this message', 'act act-copy', (ev) => C.copy(cur.msgs[i].content || '', ev.target)));
    if (m.role === 'user') bar.appendChild(button('Edit', 'Edit and resend', 'act act-edit', () => edit(i)));
    else bar.appendChild(button('Regenerate', 'Regenerate this answer', 'act act-regen', () => regenerate(i)));
    bar.appendChild(button('Delete', 'Delete this message', 'act act-del', () => del(i)));
    root.appendChild(bar);
  }

  function build(i) {
    const m = cur.msgs[i];
    const root = document.createElement('div');
    root.className = 'msg ' + m.role;
    const who = document.createElement('div');
    who.className = 'who';
    who.textContent = m.role === 'user' ? 'You' : C.info ? C.info.model : 'model';
    root.appendChild(who);
    const e = { root };
    if (m.role === 'user') {
      e.imgs = document.createElement('div');
      e.imgs.className = 'imgs';
      e.imgs.hidden = true;
      root.appendChild(e.imgs);
      e.body = document.createElement('div');
      e.body.className = 'text';
      root.appendChild(e.body);
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
      e.meta = document.createElement('div');
      e.meta.className = 'meta';
      root.appendChild(e.meta);
    }
    e.err = document.createElement('div');
    e.err.className = 'error';
    root.appendChild(e.err);
    actions(i, root);
    els[i] = e;
    $('chat-log').appendChild(root);
    update(i);
  }

  function update(i) {
    const m = cur.msgs[i], e = els[i];
    if (!e || !m) return;
    e.root.classList.toggle('failed', !!m.failed);
    e.root.classList.toggle('pending', !!m.pending);
    if (m.role === 'user') {
      e.body.textContent = m.content; /* user text is shown verbatim, never parsed */
      if (e.imgs.childElementCount !== (m.images ? m.images.length : 0)) C.attach.thumbs(e.imgs, m.images);
      e.err.textContent = m.failed ? 'Not answered: left out of what is sent next. Edit it, or send again.' : '';
      return;
    }
    e.think.hidden = !m.reasoning;
    e.thinkBody.textContent = m.reasoning || ''; /* thinking is plain text */
    if (m.pending && m.reasoning && !m.content) e.think.open = true;
    e.body.innerHTML = C.renderMarkdown(m.content || '');
    C.decorateCode(e.body);
    e.err.textContent = m.error ? m.error + (m.failed ? ' — this turn is left out of what is sent next.' : '') : '';
    e.meta.textContent = metaText(m);
  }

  function renderAll() {
    $('chat-log').textContent = '';
    els.length = 0;
    renderSystem();
    cur.msgs.forEach((_, i) => build(i));
    stick = true;
    scroll();
  }

  /* autoscroll only while the reader is at the bottom: scrolling up stops it, scrolling back
   * down (or "Latest") starts it again */
  const atBottom = (l) => l.scrollHeight - l.scrollTop - l.clientHeight < 40;
  function scroll() {
    const l = $('chat-log');
    if (stick) l.scrollTop = l.scrollHeight;
    $('jump').hidden = stick || atBottom(l);
  }

  let raf = 0;
  function schedule(i) {
    if (raf) return;
    raf = requestAnimationFrame(() => {
      raf = 0;
      update(i);
      scroll();
    });
  }

  /* the messages before `upto`, without failed turns and unfinished answers */
  function requestBody(upto) {
    const st = cur.settings, msgs = [];
    const sys = (st.system || '').trim();
    if (sys) msgs.push({ role: 'system', content: sys });
    for (const m of cur.msgs.slice(0, upto)) {
      if (m.pending || m.failed || (m.role === 'assistant' && m.error && !m.content)) continue;
      const imgs = m.role === 'user' && m.images ? m.images.filter((x) => x.url) : [];
      if (!imgs.length) msgs.push({ role: m.role, content: m.content || '' });
      else {
        /* images first, then the question: the order the OpenAI examples and Qwen's use */
        const parts = imgs.map((x) => ({ type: 'image_url', image_url: { url: x.url } }));
        if (m.content) parts.push({ type: 'text', text: m.content });
        msgs.push({ role: m.role, content: parts });
      }
    }
    const b = {
      model: C.info ? C.info.model : undefined,
      messages: msgs,
      stream: true,
      stream_options: { include_usage: true },
      chat_template_kwargs: { enable_thinking: !!st.thinking },
      temperature: Number(st.temperature),
      top_p: Number(st.top_p),
      max_tokens: Number(st.max_tokens),
    };
    if (st.seed !== '' && st.seed !== undefined && st.seed !== null) b.seed = Number(st.seed);
    return b;
  }

  function busy(on) {
    $('stop').disabled = !on;
    $('send').disabled = on;
    document.getElementById('chat-log').setAttribute('aria-busy', on ? 'true' : 'false');
  }

  async function stream(i) {
    const conv = cur, m = conv.msgs[i];
    ctrl = new AbortController();
    streaming = i;
    busy(true);
    const t0 = performance.now();
    let tFirst = 0;
    try {
      const body = JSON.stringify(requestBody(i));
      /* images make bodies big: say so here rather than as the server's bare 413 */
      const lim = C.info && C.info.limits && C.info.limits.max_body_size;
      const size = lim && body.length > lim / 3 ? new TextEncoder().encode(body).length : body.length;
      if (lim && size > lim)
        throw new Error('this request is ' + C.bytes(size) + ' with the conversation\'s images, over the server\'s ' +
          C.bytes(lim) + ' limit (--max-body-size): delete earlier images or start a new chat');
      const r = await C.api('/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
        body,
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
              if (!m.content && m.reasoning && els[i] && conv === cur) els[i].think.open = false;
              m.content = (m.content || '') + d.content;
            }
            if (ch.finish_reason) m.finish = ch.finish_reason;
          }
          if (conv === cur) schedule(i);
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') m.finish = 'stopped';
      else {
        m.error = e instanceof C.AuthError ? 'API key needed: enter it above and resend.' : String(e.message || e);
        /* the question and this answer stay visible but are not sent with later turns */
        if (!m.content) {
          m.failed = true;
          const q = conv.msgs[i - 1];
          if (q && q.role === 'user') q.failed = true;
        }
      }
    } finally {
      const tEnd = performance.now();
      const out = m.usage ? m.usage.completion_tokens : m.chunks || 0;
      /* decode rate after the first token; when the tokens came in one burst (a fast model, a
       * busy page) that window says nothing, so fall back to tokens over the whole request */
      if (tFirst && out > 1 && tEnd - tFirst >= 20) m.tps = (out - 1) / ((tEnd - tFirst) / 1000);
      else if (out > 0 && tEnd > t0) m.tps = out / ((tEnd - t0) / 1000);
      delete m.pending;
      ctrl = null;
      streaming = -1;
      busy(false);
      save();
      if (conv === cur) {
        update(i);
        if (i > 0) update(i - 1);
        scroll();
      }
    }
  }

  function ready() {
    if (ctrl) return false;
    formToSettings();
    if (validate().length) {
      drawer(true);
      $('set-msg').focus();
      return false;
    }
    return true;
  }

  /* appends an answer to the conversation as it stands and streams it */
  function answer() {
    cur.msgs.push({ role: 'assistant', content: '', pending: true });
    build(cur.msgs.length - 1);
    stick = true;
    scroll();
    touch();
    return stream(cur.msgs.length - 1);
  }

  function send() {
    const input = $('chat-input');
    const text = input.value.trim();
    if (C.attach.busy()) return C.attach.say('Still reading the image: send again in a moment.');
    if ((!text && !C.attach.count()) || !ready()) return;
    input.value = '';
    const images = C.attach.take();
    cur.msgs.push(images.length ? { role: 'user', content: text, images } : { role: 'user', content: text });
    build(cur.msgs.length - 1);
    return answer();
  }

  /* drop message i and everything after it from the page (not from cur.msgs) */
  function cut(i) {
    cur.msgs.length = i;
    for (let k = els.length - 1; k >= i; k--) if (els[k]) els[k].root.remove();
    els.length = i;
  }

  function regenerate(i) {
    if (!ready()) return;
    cut(i);
    const q = cur.msgs[i - 1];
    if (q && q.failed) {
      delete q.failed;
      update(i - 1);
    }
    return answer();
  }

  function edit(i) {
    if (ctrl) return;
    const e = els[i];
    const ta = document.createElement('textarea');
    ta.className = 'edit-box';
    ta.value = cur.msgs[i].content;
    ta.rows = Math.min(12, ta.value.split('\n').length + 1);
    ta.setAttribute('aria-label', 'Edit message');
    const bar = document.createElement('div');
    bar.className = 'actions';
    const done = () => {
      ta.remove();
      bar.remove();
      e.body.hidden = false;
    };
    bar.append(
      button('Save & send', 'Save and resend from here', 'act act-save', () => {
        const t = ta.value.trim();
        if ((!t && !cur.msgs[i].images) || !ready()) return;
        done();
        cut(i + 1);
        cur.msgs[i].content = t;
        delete cur.msgs[i].failed;
        update(i);
        answer();
      }),
      button('Cancel', 'Cancel the edit', 'act', done),
    );
    e.body.hidden = true;
    e.body.after(ta, bar);
    ta.focus();
  }

  function del(i) {
    if (ctrl && streaming >= i) ctrl.abort();
    cur.msgs.splice(i, 1);
    save();
    renderList();
    renderAll();
  }

  C.chat = {
    send,
    stop: () => ctrl && ctrl.abort(),
    busy: () => !!ctrl,
    conv: () => cur.msgs,
    current: () => cur,
    list: () => db.list,
    body: () => requestBody(cur.msgs.length),
    reload: () => {
      load();
      settingsToForm();
      renderList();
      renderAll();
    },
  };

  document.addEventListener('DOMContentLoaded', () => {
    load();
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
      open(null);
      document.body.classList.remove('convs-open');
      $('chat-input').focus();
    });
    $('export').addEventListener('click', exportConv);
    $('settings-btn').addEventListener('click', () => drawer($('settings').hidden));
    $('settings-close').addEventListener('click', () => drawer(false));
    $('convs-toggle').addEventListener('click', () => document.body.classList.toggle('convs-open'));
    $('settings').addEventListener('input', formToSettings);
    $('settings').addEventListener('change', formToSettings);
    const log = $('chat-log');
    log.addEventListener('scroll', () => {
      stick = atBottom(log);
      $('jump').hidden = stick;
    }, { passive: true });
    $('jump').addEventListener('click', () => {
      stick = true;
      scroll();
    });
    C.hooks.info.push(() => {
      validate();
      renderAll();
    });
    settingsToForm();
    renderList();
    renderAll();
  });
})();
