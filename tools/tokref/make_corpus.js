#!/usr/bin/env node
// Builds the tokenizer exactness corpus in tests/data/tokenizer/corpus/ from Debian packages
// (bible-kjv, fortunes-zh), this repository's own sources, and seeded synthetic text covering
// the hard cases (emoji/ZWJ, combining marks, Indic/Thai/Arabic, whitespace runs, CRLF, digits,
// added tokens inside text, invalid UTF-8, NFC-sensitive sequences).
// Usage: node tools/tokref/make_corpus.js   (run from the repo root; output is committed)
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const OUT = 'tests/data/tokenizer/corpus';
fs.mkdirSync(OUT, { recursive: true });

// KJV: the first ~1.5 MB (Genesis onwards) of the `bible` program's output, as formatted text.
const bible = execFileSync('bible', ['Gen1:1-Rev22:21'], { maxBuffer: 64 << 20 });
let cut = bible.indexOf('\n', 1500000);
fs.writeFileSync(path.join(OUT, 'kjv.txt'), bible.subarray(0, cut + 1));

// Chinese classical poems, plus a slice of the general Chinese fortunes (with ANSI escapes).
const F = '/usr/share/games/fortunes';
const zh = Buffer.concat([fs.readFileSync(`${F}/tang300`), fs.readFileSync(`${F}/song100`),
                          fs.readFileSync(`${F}/chinese`).subarray(0, 400000)]);
cut = zh.lastIndexOf('\n');
fs.writeFileSync(path.join(OUT, 'fortunes_zh.txt'), zh.subarray(0, cut + 1));

// Source code: C and CMake from this repository (stable snapshot taken when this ran).
const code = [];
for (const dir of ['src/tokenizer', 'src/base']) {
  for (const f of fs.readdirSync(dir).sort()) {
    if (/\.[ch]$/.test(f)) code.push(fs.readFileSync(path.join(dir, f), 'utf8'));
  }
}
code.push(fs.readFileSync('CMakeLists.txt', 'utf8'));
fs.writeFileSync(path.join(OUT, 'code.txt'), code.join('\n').slice(0, 300000));

// Synthetic: fixed hand-written cases, then seeded random strings from many scripts.
let seed = 12345;
function rnd(n) { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; }
const pick = (a) => a[rnd(a.length)];
const fixed = [
  "Hello world! It's a test. HE'S HERE, we'LL see, you'RE right, I'M ok, they'VE, he'D",
  'emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵🇺🇸 ❤️ 🧑🏿‍💻 😀😃😄 ✈︎ ☺️ #️⃣ 1️⃣',
  'combining: e\u0301 a\u0300\u0301\u0302 o\u0308\u0304 n\u0303 Z\u0335\u0327\u0310a\u0336\u0322l\u0337go',
  'Devanagari: नमस्ते दुनिया, क्षत्रिय, हिन्दी में लिखा गया। १२३४',
  'Thai: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ ๑๒๓',
  'Arabic: مرحبا بالعالم، هذا اختبار. ٠١٢٣٤٥٦٧٨٩ وَالْقُرْآنِ',
  'Hebrew: שָׁלוֹם עוֹלָם; Korean: 안녕하세요 세계 ᄒᆞᆫ글; Japanese: こんにちは世界、カタカナとｶﾀｶﾅ、が か\u3099',
  'spaces:     four    , tabs:\t\t\tthree, mixed: \t \t , nbsp:\u00a0\u00a0x, ideo:\u3000\u3000y, nel:\u0085z',
  'trailing spaces    ',
  '    leading spaces',
  'CRLF line one\r\nline two\r\n\r\nline four\r\r\n\n\n',
  'digits: 0 12 345 6789 3.14159 1,000,000 1e10 ０１２ ٣٤٥ ⅧⅫ ½ ²³',
  'special in text: <|im_start|>user\nhi<|im_end|>\n<think>\nhmm\n</think>\n\nok<|endoftext|>',
  'partial specials: <|im_st <|im_start <im_start|> <|<|im_end|>|> <think><think></think>',
  'adjacent: a<|im_start|>b <|im_end|> c<tool_call>{"x":1}</tool_call>',
  'NFC: \uF900\uF901 \u2000x \u212B \u1100\u1161\u11A8 \u0041\u030A \u00C5 \u1E9B\u0323 \uFB01 \u2126',
  'punct runs: !!!??? ... --- *** ((( ))) :::: ;;;\n\n\n!!!\n',
  "code: for (int i = 0; i < n; i++) { x += a[i] * b[i]; } // ok\n\tif (x) return;\n",
  'json: {"a": [1, 2, 3], "b": {"c": null, "d": "e\\nf"}}',
  "contractions: don't won't can't shouldn't y'all 's 't 're",
  'mixed: 汉字English混合123文本！？「引号」《书名》',
  'control: \u0001\u0002\u001b[31mred\u001b[0m\u007f\u0000end',
];
const scripts = [
  [0x20, 0x7e], [0xa0, 0x17f], [0x300, 0x36f], [0x391, 0x3c9], [0x400, 0x44f], [0x5d0, 0x5ea],
  [0x620, 0x64a], [0x900, 0x97f], [0xe01, 0xe5b], [0x3040, 0x30ff], [0x4e00, 0x9fa5],
  [0xac00, 0xd7a3], [0x1f300, 0x1f64f], [0x2000, 0x206f], [0xff01, 0xff5e], [0x1100, 0x11ff],
  [0x1d400, 0x1d4ff],
];
const ws = [' ', '  ', '\t', '\n', '\r\n', '\u00a0', '\u3000', '\u2009', '\u200b', '\u0085', '   \n  '];
const lines = [...fixed];
for (let i = 0; i < 3000; i++) {
  let s = '';
  const n = 1 + rnd(40);
  for (let j = 0; j < n; j++) {
    const r = rnd(10);
    if (r < 6) {
      const [a, b] = pick(scripts);
      s += String.fromCodePoint(a + rnd(b - a + 1));
    } else if (r < 8) {
      s += pick(ws);
    } else if (r < 9) {
      s += pick(["'s", "'LL", '123', '4', '<|im_end|>', '<think>', '\u200d', '\ufe0f', '\u0301']);
    } else {
      s += pick(['.', ',', '!', '?', '-', '_', '"', "'", '(', ')', '#', '@', '\\', '/']);
    }
  }
  // Lines are separated by \n in the file, so a \n inside s just makes more lines.
  lines.push(s);
}
const parts = [Buffer.from(lines.join('\n') + '\n', 'utf8')];
// Invalid UTF-8: lone continuation, truncated sequences, overlongs, surrogates, F5+, and mixes.
const bad = [
  [0x80], [0xbf, 0x41], [0xc3], [0xe4, 0xb8], [0xf0, 0x9f, 0x98], [0xc0, 0xaf], [0xe0, 0x80, 0xaf],
  [0xed, 0xa0, 0x80], [0xf5, 0x80], [0xff, 0xfe], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x28, 0xa1],
];
for (let i = 0; i < 200; i++) {
  const b = [];
  const n = 1 + rnd(12);
  for (let j = 0; j < n; j++) {
    if (rnd(3) === 0) b.push(...pick(bad));
    else b.push(...Buffer.from(pick(['a', ' b', 'é', '中', '👍', '<|im_end|>', ' ', '1'])));
  }
  parts.push(Buffer.from(b), Buffer.from('\n'));
}
fs.writeFileSync(path.join(OUT, 'synth.txt'), Buffer.concat(parts));
for (const f of fs.readdirSync(OUT)) console.log(f, fs.statSync(path.join(OUT, f)).size);
