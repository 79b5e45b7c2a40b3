// Encode each JSON-string line of INPUT with the HF reference tokenizer (Rust `tokenizers`
// via npm @anush008/tokenizers) and print one JSON id array per line.
// Usage: NODE_PATH=/tmp/tokcheck/node_modules node check_tokenizer.js tokenizer.json lines.jsonl
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');
(async () => {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const lines = fs.readFileSync(process.argv[3], 'utf8').split('\n').filter(l => l.length);
  const out = [];
  for (const l of lines) {
    const text = JSON.parse(l);
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(enc.getIds());
    const dec = await tok.decode(ids, false);
    out.push(JSON.stringify({ ids, dec }));
  }
  process.stdout.write(out.join('\n') + '\n');
})();
