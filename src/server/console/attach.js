/* Chat images (issue 34): the attach button, paste (Ctrl+V in the message box) and drag-and-drop
 * onto the chat put PNG / JPEG / WebP files of at most 10 MiB as removable thumbnail chips above
 * the message box. chat.js takes them on send (C.attach.take) as data: URLs, sends them as
 * image_url parts before the message's text and keeps them in the conversation, so every later
 * turn resends them as the OpenAI API expects; C.attach.thumbs draws them in the transcript.
 *
 * The type is read from the file's first bytes, not its name or the browser's guess, because the
 * server decodes only those three. When /console/info says the model has no vision tower the
 * button stays focusable but is marked disabled with the server's reason as its tooltip, and a
 * paste or drop says that reason instead of attaching. */
'use strict';
(function () {
  const C = window.cllmConsole, $ = C.$;
  const MAX_BYTES = 10 * 1024 * 1024;
  const pending = []; /* {url, name, bytes} in the order they came */
  let reading = 0;

  /* -> '' when images may be attached, else why not (unknown before the server is ready: the
   * server has the last word then) */
  function refusal() {
    if (!C.info || C.info.vision !== false) return '';
    return C.info.vision_why_not || 'this model takes no images';
  }
  function refresh() {
    const why = refusal(), b = $('attach');
    b.setAttribute('aria-disabled', why ? 'true' : 'false');
    b.title = why
      ? 'Images are off: ' + why
      : 'Attach images (PNG, JPEG or WebP, up to 10 MiB each). You can also paste or drop them here.';
  }
  function say(text) {
    $('attach-msg').textContent = text;
  }

  function sniff(b) {
    const at = (i, s) => [...s].every((ch, k) => b[i + k] === ch.charCodeAt(0));
    if (b.length >= 8 && b[0] === 0x89 && at(1, 'PNG\r\n\x1a\n')) return 'image/png';
    if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'image/jpeg';
    if (b.length >= 12 && at(0, 'RIFF') && at(8, 'WEBP')) return 'image/webp';
    return '';
  }
  function dataURL(blob) {
    return new Promise((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => resolve(r.result);
      r.onerror = () => reject(r.error);
      r.readAsDataURL(blob);
    });
  }

  /* checks and reads files one by one; what is refused is said, the rest become chips */
  async function add(files) {
    files = [...files];
    if (!files.length) return;
    const why = refusal();
    if (why) {
      say('Images cannot be sent: ' + why + '.');
      return;
    }
    const problems = [];
    reading++;
    try {
      for (const f of files) {
        const name = f.name || 'image';
        if (f.size > MAX_BYTES) {
          problems.push(name + ' is too large (' + C.bytes(f.size) + '): images over 10 MiB are not sent');
          continue;
        }
        const mime = sniff(new Uint8Array(await f.slice(0, 12).arrayBuffer()));
        if (!mime) {
          problems.push(name + ' is not a PNG, JPEG or WebP image');
          continue;
        }
        pending.push({ url: await dataURL(f.slice(0, f.size, mime)), name, bytes: f.size });
      }
    } catch (e) {
      problems.push('could not read the file: ' + (e && e.message ? e.message : e));
    } finally {
      reading--;
    }
    say(problems.join('; '));
    render();
  }

  function render() {
    const ul = $('attach-list');
    ul.textContent = '';
    pending.forEach((im, k) => {
      const li = document.createElement('li');
      li.className = 'chip';
      const img = document.createElement('img');
      img.src = im.url;
      img.alt = ''; /* the name beside it says what it is */
      const nm = document.createElement('span');
      nm.className = 'chip-name';
      nm.textContent = im.name;
      nm.title = im.name + ' · ' + C.bytes(im.bytes);
      const rm = document.createElement('button');
      rm.type = 'button';
      rm.className = 'chip-rm';
      rm.textContent = '✕';
      rm.title = 'Remove ' + im.name;
      rm.setAttribute('aria-label', 'Remove image ' + im.name);
      rm.addEventListener('click', () => {
        pending.splice(k, 1);
        render();
        $('chat-input').focus();
      });
      li.append(img, nm, rm);
      ul.appendChild(li);
    });
    ul.hidden = !pending.length;
  }

  /* the images of a message in the transcript: a thumbnail each (a button that enlarges it), or
   * a note where the browser's storage could not keep the image */
  function thumbs(box, images) {
    box.textContent = '';
    box.hidden = !(images && images.length);
    (images || []).forEach((im, k) => {
      const label = im.name || 'image ' + (k + 1);
      if (!im.url) {
        const s = document.createElement('span');
        s.className = 'thumb-gone';
        s.textContent = label + ': not kept (too large for this browser\'s storage), not sent again';
        box.appendChild(s);
        return;
      }
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'thumb';
      b.setAttribute('aria-pressed', 'false');
      b.title = label + (im.bytes ? ' · ' + C.bytes(im.bytes) : '') + ' (click to enlarge)';
      const img = document.createElement('img');
      img.src = im.url;
      img.alt = label;
      b.appendChild(img);
      b.addEventListener('click', () => {
        const big = b.classList.toggle('big');
        b.setAttribute('aria-pressed', big ? 'true' : 'false');
      });
      box.appendChild(b);
    });
  }

  C.attach = {
    add,
    thumbs,
    refresh,
    say,
    busy: () => reading > 0,
    count: () => pending.length,
    /* the chips' images, which leave the box */
    take() {
      const out = pending.splice(0, pending.length);
      render();
      say('');
      return out;
    },
  };

  document.addEventListener('DOMContentLoaded', () => {
    const file = $('attach-file');
    $('attach').addEventListener('click', () => {
      const why = refusal();
      if (why) say('Images cannot be sent: ' + why + '.');
      else file.click();
    });
    file.addEventListener('change', () => {
      add(file.files).finally(() => {
        file.value = ''; /* the same file again is a new change */
        $('chat-input').focus();
      });
    });
    $('chat-input').addEventListener('paste', (ev) => {
      const files = [...((ev.clipboardData && ev.clipboardData.items) || [])]
        .filter((it) => it.kind === 'file')
        .map((it) => it.getAsFile())
        .filter(Boolean);
      if (!files.length) return; /* text pastes as usual */
      ev.preventDefault();
      add(files);
    });
    const zone = document.querySelector('.chat-main');
    const hasFiles = (ev) => ev.dataTransfer && [...ev.dataTransfer.types].includes('Files');
    zone.addEventListener('dragover', (ev) => {
      if (!hasFiles(ev)) return;
      ev.preventDefault();
      ev.dataTransfer.dropEffect = refusal() ? 'none' : 'copy';
      zone.classList.add('dropping');
    });
    zone.addEventListener('dragleave', (ev) => {
      if (!zone.contains(ev.relatedTarget)) zone.classList.remove('dropping');
    });
    zone.addEventListener('drop', (ev) => {
      zone.classList.remove('dropping');
      if (!hasFiles(ev)) return;
      ev.preventDefault();
      add(ev.dataTransfer.files);
    });
    /* a file dropped beside the chat would replace the console with the file: swallow it */
    for (const t of ['dragover', 'drop'])
      document.addEventListener(t, (ev) => {
        if (!hasFiles(ev) || ev.defaultPrevented) return;
        ev.preventDefault();
        if (t === 'dragover') ev.dataTransfer.dropEffect = 'none';
      });
    C.hooks.info.push(refresh);
    refresh();
  });
})();
