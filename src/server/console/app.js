/* cllm console core: API calls (with the API key as a Bearer token when the server wants one),
 * tabs, the alert banner, safe markdown. chat.js, dash.js and reqs.js build on window.cllmConsole.
 * Everything the model writes goes through renderMarkdown: raw HTML in it is shown as text, the
 * result is sanitised by DOMPurify, and the page's CSP forbids inline scripts anyway. */
'use strict';
(function () {
  const C = (window.cllmConsole = { info: null, hooks: { tab: [], info: [], auth: [], down: [] } });
  const $ = (id) => document.getElementById(id);
  C.$ = $;
  const params = new URLSearchParams(location.search);
  C.pollMs = Math.max(250, Number(params.get('poll')) || 2000);

  /* ---- API ---- */
  C.key = sessionStorage.getItem('cllm.console.key') || '';
  class AuthError extends Error {}
  C.AuthError = AuthError;
  C.headers = function (extra) {
    const h = Object.assign({}, extra || {});
    if (C.key) h.Authorization = 'Bearer ' + C.key;
    return h;
  };
  C.api = async function (path, opts) {
    opts = opts || {};
    const r = await fetch(path, Object.assign({}, opts, { headers: C.headers(opts.headers) }));
    if (r.status === 401) {
      C.needKey();
      throw new AuthError('API key required');
    }
    return r;
  };
  C.getJSON = async function (path) {
    const r = await C.api(path, { cache: 'no-store' });
    if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
    return r.json();
  };

  let keyShown = false;
  C.needKey = function () {
    C.setConn(false, 'API key needed');
    if (keyShown) return;
    keyShown = true;
    $('key-form').hidden = false;
    $('key-msg').textContent = C.key ? 'That key was refused.' : '';
    $('key-input').focus();
  };
  C.authed = () => !keyShown;

  function initKeyForm() {
    $('key-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      C.key = $('key-input').value.trim();
      keyShown = false;
      try {
        await loadInfo();
        sessionStorage.setItem('cllm.console.key', C.key);
        $('key-form').hidden = true;
        $('key-input').value = '';
        C.hooks.auth.forEach((f) => f());
      } catch (e) {
        if (!(e instanceof AuthError)) $('key-msg').textContent = String(e.message || e);
      }
    });
  }

  /* ---- status line and alert banner ---- */
  C.setConn = function (ok, text) {
    const el = $('conn');
    el.textContent = text;
    el.className = 'conn ' + (ok ? 'ok' : 'bad');
  };
  /* The banner shows the dashboard's alerts (about cllm: dash.js) on the dashboard only, and
   * "server unreachable" on every tab while the server does not answer; the latter replaces any
   * alert (figures from a server that is gone mean nothing) and offers a retry. */
  const alertState = { level: '', text: '', down: false, since: 0 };
  function renderAlert() {
    const el = $('alert'), a = alertState;
    let level = '', text = '';
    if (a.down) {
      level = 'crit down';
      text = 'Server unreachable since ' + new Date(a.since).toLocaleTimeString([], { hour12: false }) +
        ' — retrying every ' + C.fmt(C.pollMs / 1000, C.pollMs % 1000 ? 1 : 0) + ' s.';
    } else if (a.level && C.tab === 'dash') {
      level = a.level;
      text = a.text;
    }
    if (!level) {
      if (!el.hidden) el.hidden = true;
      return;
    }
    el.className = 'alert ' + level;
    const msg = $('alert-text');
    if (msg.textContent !== text) msg.textContent = text;
    $('alert-retry').hidden = !a.down;
    el.hidden = false;
  }
  C.setAlert = function (level, text) {
    alertState.level = level;
    alertState.text = text;
    renderAlert();
  };
  C.alertState = alertState;
  /* reachability: dash.js's poll reports every answer or failure here */
  C.setDown = function (down) {
    if (down === alertState.down) return;
    alertState.down = down;
    alertState.since = Date.now();
    if (down) C.setConn(false, 'server unreachable');
    renderAlert();
    C.hooks.down.forEach((f) => f(down));
  };

  /* ---- tabs (WAI-ARIA tabs pattern: arrows, Home, End move and activate) ---- */
  const tabs = ['chat', 'dash', 'reqs'];
  C.tab = 'chat';
  C.showTab = function (name, focus) {
    if (!tabs.includes(name)) name = 'chat';
    C.tab = name;
    for (const t of tabs) {
      const b = $('tab-' + t), on = t === name;
      b.setAttribute('aria-selected', on ? 'true' : 'false');
      b.tabIndex = on ? 0 : -1;
      $('panel-' + t).hidden = !on;
      if (on && focus) b.focus();
    }
    if (location.hash !== '#' + name) history.replaceState(null, '', '#' + name);
    renderAlert();
    C.hooks.tab.forEach((f) => f(name));
  };
  function initTabs() {
    for (const t of tabs) {
      const b = $('tab-' + t);
      b.addEventListener('click', () => C.showTab(t, false));
      b.addEventListener('keydown', (ev) => {
        const i = tabs.indexOf(t);
        let j = -1;
        if (ev.key === 'ArrowRight') j = (i + 1) % tabs.length;
        else if (ev.key === 'ArrowLeft') j = (i + tabs.length - 1) % tabs.length;
        else if (ev.key === 'Home') j = 0;
        else if (ev.key === 'End') j = tabs.length - 1;
        if (j >= 0) {
          ev.preventDefault();
          C.showTab(tabs[j], true);
        }
      });
    }
    C.showTab(location.hash.slice(1) || 'chat', false);
  }

  /* ---- markdown, safely ---- */
  const esc = (s) =>
    String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  C.esc = esc;
  let mdReady = false;
  function initMarkdown() {
    if (!window.marked || !window.DOMPurify) return;
    /* HTML the model writes is text to show, not markup: <script> appears as "<script>" */
    window.marked.use({
      gfm: true,
      breaks: true,
      renderer: {
        html(tok) {
          return esc(typeof tok === 'string' ? tok : tok.text || tok.raw || '');
        },
      },
    });
    mdReady = true;
  }
  C.renderMarkdown = function (text) {
    if (!mdReady) return esc(text).replace(/\n/g, '<br>');
    const html = window.marked.parse(String(text), { async: false });
    return window.DOMPurify.sanitize(html, {
      USE_PROFILE: { html: true },
      FORBID_TAGS: ['img', 'style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'video', 'audio'],
      FORBID_ATTR: ['style'],
    });
  };

  /* ---- code blocks: a small highlighter (comments, strings, numbers, keywords) and a copy
   * button. It works on the sanitised DOM and builds spans with textContent, so nothing the
   * model wrote is ever parsed as HTML here. ---- */
  const KW = new Set(('if else for while do return function const let var class new this import from export ' +
    'def lambda pass elif in is not and or None True False true false null undefined nil try catch except finally ' +
    'raise throw with as yield async await struct enum union typedef static extern void int char float double long ' +
    'short unsigned signed bool auto break continue switch case default goto sizeof fn pub mut impl trait use mod ' +
    'match loop where type interface package func go defer chan map range select public private protected ' +
    'echo then fi done esac local export SELECT FROM WHERE INSERT UPDATE DELETE JOIN ORDER BY GROUP').split(' '));
  const HASH_COMMENT = /^(py|python|sh|bash|shell|zsh|yaml|yml|toml|ruby|rb|perl|r|make|makefile|dockerfile|conf|ini)$/;
  const TOKEN = /(\/\*[\s\S]*?\*\/|\/\/[^\n]*|#[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`(?:[^`\\]|\\.)*`|\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b|\b0x[0-9a-f]+\b|\b[A-Za-z_]\w*\b)/gi;
  C.highlight = function (code) {
    const lang = ((code.className || '').match(/language-(\S+)/) || [])[1] || '';
    const text = code.textContent;
    if (text.length > 100000) return;
    const frag = document.createDocumentFragment();
    let at = 0, m;
    const put = (t, cls) => {
      if (!t) return;
      if (!cls) return frag.appendChild(document.createTextNode(t));
      const sp = document.createElement('span');
      sp.className = 'tk-' + cls;
      sp.textContent = t;
      frag.appendChild(sp);
    };
    TOKEN.lastIndex = 0;
    while ((m = TOKEN.exec(text))) {
      const t = m[0], c0 = t[0];
      let cls = '';
      if (c0 === '#') {
        if (!HASH_COMMENT.test(lang) && !/^#!/.test(t) && lang !== '') {
          TOKEN.lastIndex = m.index + 1; /* C's #include, CSS colours: not comments */
          put(text.slice(at, m.index + 1), '');
          at = m.index + 1;
          continue;
        }
        cls = 'com';
      } else if (t.startsWith('//') || t.startsWith('/*')) cls = HASH_COMMENT.test(lang) ? '' : 'com';
      else if (c0 === '"' || c0 === "'" || c0 === '`') cls = 'str';
      else if (/^\d|^0x/i.test(t)) cls = 'num';
      else if (KW.has(t)) cls = 'kw';
      if (!cls && t.startsWith('/')) {
        /* a path or division in a hash-comment language: only the first character is plain */
        TOKEN.lastIndex = m.index + 1;
        put(text.slice(at, m.index + 1), '');
        at = m.index + 1;
        continue;
      }
      put(text.slice(at, m.index), '');
      put(t, cls);
      at = m.index + t.length;
    }
    put(text.slice(at), '');
    code.textContent = '';
    code.appendChild(frag);
  };
  C.copy = async function (text, btn) {
    let done = false;
    try {
      await navigator.clipboard.writeText(text);
      done = true;
    } catch (e) {
      const ta = document.createElement('textarea');
      ta.value = text;
      ta.setAttribute('readonly', '');
      ta.className = 'sr-only';
      document.body.appendChild(ta);
      ta.select();
      try {
        done = document.execCommand('copy');
      } catch (e2) {
        done = false;
      }
      ta.remove();
    }
    C.lastCopied = done ? text : null;
    if (btn) {
      const was = btn.dataset.label || btn.textContent;
      btn.dataset.label = was;
      btn.textContent = done ? 'Copied' : 'Copy failed';
      setTimeout(() => (btn.textContent = was), 1500);
    }
    return done;
  };
  C.decorateCode = function (root) {
    for (const pre of root.querySelectorAll('pre')) {
      const code = pre.querySelector('code');
      if (!code) continue;
      C.highlight(code);
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'copy-code';
      b.textContent = 'Copy';
      b.setAttribute('aria-label', 'Copy code');
      b.addEventListener('click', () => C.copy(code.textContent, b));
      pre.appendChild(b);
    }
  };

  /* ---- formatting ---- */
  C.fmt = function (v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    const d = digits === undefined ? (Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2) : digits;
    return Number(v).toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
  };
  C.bytes = function (b) {
    if (!isFinite(b)) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) (b /= 1024), i++;
    return C.fmt(b, i ? 1 : 0) + ' ' + u[i];
  };

  async function loadInfo() {
    const info = await C.getJSON('/console/info');
    C.info = info;
    $('model-name').textContent = info.model;
    $('version').textContent = 'cllm ' + info.version;
    document.title = info.model + ' · cllm console';
    C.setConn(info.ready && !info.draining, info.draining ? 'draining' : info.ready ? 'ready' : 'loading model');
    C.hooks.info.forEach((f) => f(info));
    return info;
  }
  C.loadInfo = loadInfo;

  document.addEventListener('DOMContentLoaded', () => {
    initMarkdown();
    initKeyForm();
    initTabs();
    $('alert-retry').addEventListener('click', () => (C.info && C.dash ? C.dash.poll() : loadInfo().catch(() => {})));
    loadInfo().catch((e) => {
      if (!(e instanceof AuthError)) C.setConn(false, 'server unreachable');
    });
  });
})();
