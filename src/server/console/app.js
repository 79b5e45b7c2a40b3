/* cllm console core: API calls (with the API key as a Bearer token when the server wants one),
 * tabs, the alert banner, safe markdown. chat.js, dash.js and reqs.js build on window.cllmConsole.
 * Everything the model writes goes through renderMarkdown: raw HTML in it is shown as text, the
 * result is sanitised by DOMPurify, and the page's CSP forbids inline scripts anyway. */
'use strict';
(function () {
  const C = (window.cllmConsole = { info: null, hooks: { tab: [], info: [], auth: [] } });
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
  C.setAlert = function (level, text) {
    const el = $('alert');
    if (!level) {
      if (!el.hidden) el.hidden = true;
      return;
    }
    el.className = 'alert ' + level;
    if (el.textContent !== text) el.textContent = text;
    el.hidden = false;
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
    loadInfo().catch((e) => {
      if (!(e instanceof AuthError)) C.setConn(false, 'server unreachable');
    });
  });
})();
