#!/bin/bash
# Image parts over HTTP (server/srv_image.c, src/image/, the engine's image path) on a synthetic
# vision model (configs/tiny-vision.json with models/tiny's tokenizer plus the three vision tokens):
#  - chat with a data: URL PNG answers 200; usage counts the image's tokens (smart-resize grid
#    worked out here from the HF rule); mm_processor_kwargs changes the grid;
#  - both template kinds: one that renders image parts itself (tests/data/tokenizer/templates/
#    qwen35.jinja) and a string-content one (models/tiny's: the server writes the placeholder);
#  - the same image twice hits the prefix cache past the image; another image behind the same text
#    does not reach past the text before it, and its logprobs differ;
#  - JPEG and WebP load; a 4x4 image answers, a 1x1 one is refused;
#  - refused with 400 and a message, the server staying healthy: truncated PNG, garbage bytes, a
#    PNG declaring 100000 x 100000 pixels, an http URL, a file:// URL without
#    --allowed-local-media-path, more images than --limit-mm-per-prompt, a video part, bad
#    mm_processor_kwargs; a file:// URL under the allowed folder answers, one outside it does not;
#  - /v1/responses with an input_image part; the OpenAI Node SDK with an image part (when there).
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC PY=/usr/bin/python3
T=${CLLM_TMP:-/tmp}/serve_images
rm -rf "$T" && mkdir -p "$T/media"
command -v curl >/dev/null || exit 77
$PY -c 'import PIL, numpy' 2>/dev/null || { echo "SKIP: no /usr/bin/python3 with PIL and numpy"; exit 77; }
. "$SRC/tests/lib/serve.sh"

# the model: tiny-vision's text shape with models/tiny's vocabulary, image pad = 4009
$PY - "$SRC" "$T" <<'PYEOF'
import json, sys
src, t = sys.argv[1], sys.argv[2]
c = json.load(open(f"{src}/configs/tiny-vision.json"))
c["text_config"]["vocab_size"] = 4096
c["text_config"]["eos_token_id"] = 4002
c.update(image_token_id=4009, video_token_id=4010, vision_start_token_id=4007, vision_end_token_id=4008)
json.dump(c, open(f"{t}/cfg.json", "w"), indent=1)
import os
os.makedirs(f"{t}/tok", exist_ok=True)
tk = json.load(open(f"{src}/models/tiny/tokenizer.json"))
have = {a["content"] for a in tk["added_tokens"]}  # models/tiny has 4007-4009 since its tower
for i, s in [(4007, "<|vision_start|>"), (4008, "<|vision_end|>"), (4009, "<|image_pad|>"), (4010, "<|video_pad|>")]:
    if s not in have: tk["added_tokens"].append({"id": i, "content": s, "single_word": False, "lstrip": False,
                               "rstrip": False, "normalized": False, "special": True})
json.dump(tk, open(f"{t}/tok/tokenizer.json", "w"))
tc = json.load(open(f"{src}/models/tiny/tokenizer_config.json"))
json.dump(tc, open(f"{t}/tok/tokenizer_config.json", "w"))
PYEOF
expect_rc 0 "synth" "$BIN" synth --config "$T/cfg.json" "$T/model" --dtype f32 --tokenizer "$T/tok" -q

# images
$PY - "$T" <<'PYEOF'
import sys, io, struct, zlib, numpy as np
from PIL import Image
t = sys.argv[1]
rng = np.random.default_rng(7)
def save(a, name, fmt, **kw):
    Image.fromarray(a).save(f"{t}/{name}", fmt, **kw)
save(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), "a.png", "PNG")
save(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), "b.png", "PNG")
save(rng.integers(0, 256, (40, 40), dtype=np.uint8), "g.jpg", "JPEG")
save(rng.integers(0, 256, (30, 50, 4), dtype=np.uint8), "r.webp", "WEBP")
save(np.zeros((1, 1, 3), dtype=np.uint8), "one.png", "PNG")
save(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), "four.png", "PNG")
save(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), "media/m.png", "PNG")
b = open(f"{t}/a.png", "rb").read()
open(f"{t}/trunc.png", "wb").write(b[: len(b) // 2])
open(f"{t}/junk.png", "wb").write(b"this is not an image at all" * 10)
def chunk(ty, data):
    return struct.pack(">I", len(data)) + ty + data + struct.pack(">I", zlib.crc32(ty + data) & 0xffffffff)
bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)) + \
    chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")
open(f"{t}/bomb.png", "wb").write(bomb)
PYEOF

cat > "$T/ask.py" <<'PYEOF'
# ask.py URL KEY OUT BODY_JSON_FILE: POST to /v1/chat/completions (or the path in the body's
# "_path"), images given as "@FILE" urls are inlined as data: URLs; writes status and body
import sys, json, base64, urllib.request, urllib.error, mimetypes
u, key, out, bf = sys.argv[1:5]
body = json.load(open(bf))
path = body.pop("_path", "/v1/chat/completions")
def inline(x):
    if isinstance(x, dict):
        return {k: inline(v) for k, v in x.items()}
    if isinstance(x, list):
        return [inline(v) for v in x]
    if isinstance(x, str) and x.startswith("@"):
        f = x[1:]
        mt = mimetypes.guess_type(f)[0] or "application/octet-stream"
        return f"data:{mt};base64," + base64.b64encode(open(f, "rb").read()).decode()
    return x
req = urllib.request.Request(u + path, json.dumps(inline(body)).encode(),
                             {"Content-Type": "application/json", "Authorization": "Bearer " + key})
try:
    r = urllib.request.urlopen(req, timeout=120)
    st, txt = r.status, r.read().decode()
except urllib.error.HTTPError as e:
    st, txt = e.code, e.read().decode()
open(out, "w").write(f"{st}\n{txt}")
PYEOF

# tokens an image becomes (HF smart_resize, factor 32, then / 32^2 per merged token)
ntok() { $PY - "$@" <<'PYEOF'
import sys, math
h, w, mn, mx = (int(x) for x in sys.argv[1:5])
f = 32
def rnd(x): return round(x)  # Python's round half to even, as transformers
hb, wb = max(f, rnd(h / f) * f), max(f, rnd(w / f) * f)
if hb * wb > mx:
    b = math.sqrt(h * w / mx); hb = max(f, math.floor(h / b / f) * f); wb = max(f, math.floor(w / b / f) * f)
elif hb * wb < mn:
    b = math.sqrt(mn / (h * w)); hb = math.ceil(h * b / f) * f; wb = math.ceil(w * b / f) * f
print(hb // f * wb // f)
PYEOF
}

ask() { # ask NAME JSON: $T/NAME.out (status line, body)
  printf '%s' "$2" >"$T/$1.json"
  $PY "$T/ask.py" "$U" "$KEY" "$T/$1.out" "$T/$1.json"
}
status() { head -1 "$T/$1.out"; }
jget() { tail -n +2 "$T/$1.out" | $PY -c "import sys, json; d = json.load(sys.stdin); print($2)"; }
img_msg() { # img_msg TEXT URL...: a user message with images then text
  local text=$1; shift
  local parts=""
  for u in "$@"; do parts="$parts{\"type\": \"image_url\", \"image_url\": {\"url\": \"$u\"}},"; done
  printf '{"role": "user", "content": [%s {"type": "text", "text": "%s"}]}' "$parts" "$text"
}
expect_status() { # expect_status NAME CODE [TEXT]
  local s; s=$(status "$1")
  if [ "$s" = "$2" ] && { [ -z "${3:-}" ] || grep -q -- "$3" "$T/$1.out"; }; then ok "$1: $s${3:+ ($3)}"
  else bad "$1: status $s, want $2${3:+ with '$3'}"; head -c 400 "$T/$1.out"; echo; fi
}

for tmpl in lists string; do
  flags=(--limit-mm-per-prompt '{"image": 2}' --allowed-local-media-path "$T/media")
  [ $tmpl = lists ] && flags+=(--chat-template "$SRC/tests/data/tokenizer/templates/qwen35.jinja")
  start_serve "$T/model" "${flags[@]}" || exit 1
  KW='"max_tokens": 4, "temperature": 0, "logprobs": true, "top_logprobs": 3'
  ask a1 "{\"messages\": [$(img_msg 'What is this?' @$T/a.png)], $KW}"
  expect_status a1 200
  ask a2 "{\"messages\": [$(img_msg 'What is this?' @$T/a.png)], $KW}"
  ask b1 "{\"messages\": [$(img_msg 'What is this?' @$T/b.png)], $KW}"
  ask t0 "{\"messages\": [{\"role\": \"user\", \"content\": \"What is this?\"}], $KW}"
  n_img=$(ntok 48 64 65536 16777216)
  pa=$(jget a1 'd["usage"]["prompt_tokens"]'); pt=$(jget t0 'd["usage"]["prompt_tokens"]')
  # the image adds its tokens plus start/end and (string templates) a newline
  extra=$((pa - pt - n_img))
  if [ "$extra" -ge 2 ] && [ "$extra" -le 3 ]; then ok "$tmpl: usage counts the image's $n_img tokens ($pa vs $pt without)"
  else bad "$tmpl: prompt_tokens $pa with the image, $pt without, image tokens $n_img"; fi
  ca=$(jget a2 'd["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)')
  cb=$(jget b1 'd["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)')
  [ "$ca" -ge $((pa - 16)) ] && ok "$tmpl: the same image again: $ca of $pa prompt tokens cached" \
    || bad "$tmpl: the same image again: only $ca of $pa cached"
  [ "$cb" -le $((pa - n_img - 2)) ] && ok "$tmpl: another image: $cb cached (not past the text before it)" \
    || bad "$tmpl: another image took $cb cached tokens"
  la=$(jget a1 'd["choices"][0]["logprobs"]["content"][0]["logprob"]')
  la2=$(jget a2 'd["choices"][0]["logprobs"]["content"][0]["logprob"]')
  lb=$(jget b1 'd["choices"][0]["logprobs"]["content"][0]["logprob"]')
  [ "$la" = "$la2" ] && ok "$tmpl: same image, same logprob ($la)" || bad "$tmpl: same image: $la vs $la2"
  [ "$la" != "$lb" ] && ok "$tmpl: another image, another logprob ($lb)" || bad "$tmpl: two images gave the same logprob $la"
  ask small "{\"messages\": [$(img_msg 'x' @$T/a.png)], \"max_tokens\": 1, \"mm_processor_kwargs\": {\"min_pixels\": 1024, \"max_pixels\": 4096}}"
  ps=$(jget small 'd["usage"]["prompt_tokens"]'); pt1=$(jget t0 'd["usage"]["prompt_tokens"]')
  ask small0 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 1}"
  p0=$(jget small0 'd["usage"]["prompt_tokens"]')
  ns=$(ntok 48 64 1024 4096)
  d=$((ps - p0 - ns))
  [ "$d" -ge 2 ] && [ "$d" -le 3 ] && ok "$tmpl: mm_processor_kwargs max_pixels 4096: $ns image tokens" \
    || bad "$tmpl: mm_processor_kwargs: $ps prompt tokens, $p0 without image, want $ns image tokens"
  ask jpg "{\"messages\": [$(img_msg 'x' @$T/g.jpg)], \"max_tokens\": 1}"; expect_status jpg 200
  ask webp "{\"messages\": [$(img_msg 'x' @$T/r.webp)], \"max_tokens\": 1}"; expect_status webp 200
  ask one "{\"messages\": [$(img_msg 'x' @$T/one.png)], \"max_tokens\": 1}"; expect_status one 400 "1x1 pixels"
  ask four "{\"messages\": [$(img_msg 'x' @$T/four.png)], \"max_tokens\": 1}"; expect_status four 200
  ask two "{\"messages\": [$(img_msg 'x' @$T/a.png @$T/g.jpg)], \"max_tokens\": 1}"; expect_status two 200
  ask three "{\"messages\": [$(img_msg 'x' @$T/a.png @$T/g.jpg @$T/four.png)], \"max_tokens\": 1}"
  expect_status three 400 "At most 2 image"
  ask trunc "{\"messages\": [$(img_msg 'x' @$T/trunc.png)], \"max_tokens\": 1}"; expect_status trunc 400 "image"
  ask junk "{\"messages\": [$(img_msg 'x' @$T/junk.png)], \"max_tokens\": 1}"; expect_status junk 400 "image"
  ask bomb "{\"messages\": [$(img_msg 'x' @$T/bomb.png)], \"max_tokens\": 1}"; expect_status bomb 400 "pixels"
  ask http "{\"messages\": [$(img_msg 'x' http://example.com/a.png)], \"max_tokens\": 1}"; expect_status http 400 "data: URL"
  ask local "{\"messages\": [$(img_msg 'x' file://$T/media/m.png)], \"max_tokens\": 1}"; expect_status local 200
  ask outside "{\"messages\": [$(img_msg 'x' file://$T/a.png)], \"max_tokens\": 1}"; expect_status outside 400 "outside"
  ask video "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video_url\", \"video_url\": {\"url\": \"x\"}}]}], \"max_tokens\": 1}"
  expect_status video 400 "video_url"
  ask kw "{\"messages\": [$(img_msg 'x' @$T/a.png)], \"max_tokens\": 1, \"mm_processor_kwargs\": {\"fps\": 2}}"
  expect_status kw 400 "fps"
  ask resp "{\"_path\": \"/v1/responses\", \"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", \"image_url\": \"@$T/a.png\"}, {\"type\": \"input_text\", \"text\": \"What is this?\"}]}], \"max_output_tokens\": 3}"
  expect_status resp 200
  pr=$(jget resp 'd["usage"]["input_tokens"]')
  [ "$pr" = "$pa" ] && ok "$tmpl: responses input_image: $pr input tokens, as chat" || bad "$tmpl: responses: $pr input tokens, chat $pa"
  [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && ok "$tmpl: healthy after the bad images" || bad "$tmpl: /health"
  curl -s $U/metrics >"$T/metrics"
  ne=$(awk '/^cllm_images_encoded_total/ {print int($2)}' "$T/metrics")
  nt=$(awk '/^cllm_image_tokens_total/ {print int($2)}' "$T/metrics")
  # 11 images answered; the cache spares some encodes (a2 at least: all its blocks are a1's)
  if [ "${ne:-0}" -ge 6 ] && [ "$ne" -le 10 ] && [ "${nt:-0}" -ge "$ne" ]; then ok "$tmpl: /metrics: $ne images encoded, $nt image tokens"
  else bad "$tmpl: /metrics: images encoded '$ne', image tokens '$nt'"; fi
  kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
done

# without the folder flag file:// is refused; the SDK
# --mm-processor-kwargs: refused out of range at start; in range, every request's default
expect_rc 1 "--mm-processor-kwargs max_pixels over 2^28 refused" "$BIN" serve "$T/model" --port 1 \
  --mm-processor-kwargs '{"max_pixels": 268435457}'
grep -q "mm-processor-kwargs" "$T/out" && ok "the refusal names the flag" || bad "the refusal does not name the flag"
start_serve "$T/model" --mm-processor-kwargs '{"min_pixels": 1024, "max_pixels": 4096}' || exit 1
ask srvkw "{\"messages\": [$(img_msg 'x' @$T/a.png)], \"max_tokens\": 1}"
ask srvkw0 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 1}"
d=$(( $(jget srvkw 'd["usage"]["prompt_tokens"]') - $(jget srvkw0 'd["usage"]["prompt_tokens"]') - $(ntok 48 64 1024 4096) ))
[ "$d" -ge 2 ] && [ "$d" -le 3 ] && ok "--mm-processor-kwargs: the image gets $(ntok 48 64 1024 4096) tokens" \
  || bad "--mm-processor-kwargs not applied ($d extra tokens)"
ask nolocal "{\"messages\": [$(img_msg 'x' file://$T/media/m.png)], \"max_tokens\": 1}"
expect_status nolocal 400 "allowed-local-media-path"
if command -v node >/dev/null && [ -d "$SRC/node_modules/openai" ]; then
  cat >"$T/sdk.cjs" <<'JSEOF'
const OpenAI = require("openai");
const fs = require("fs");
const [port, key, img] = process.argv.slice(2);
const c = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key });
(async () => {
  const url = "data:image/png;base64," + fs.readFileSync(img).toString("base64");
  const r = await c.chat.completions.create({ model: "tiny", max_tokens: 3, temperature: 0,
    messages: [{ role: "user", content: [{ type: "text", text: "What is this?" },
                                         { type: "image_url", image_url: { url } }] }] });
  if (!r.choices[0].message || r.usage.prompt_tokens < 10) throw new Error(JSON.stringify(r));
  try {
    await c.chat.completions.create({ model: "tiny", max_tokens: 1,
      messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] });
    throw new Error("a bad image was answered");
  } catch (e) { if (!(e instanceof OpenAI.BadRequestError)) throw e; }
  console.log("sdk ok: " + r.usage.prompt_tokens + " prompt tokens");
})().catch((e) => { console.error(e); process.exit(1); });
JSEOF
  expect_rc 0 "OpenAI Node SDK with an image part" env NODE_PATH="$SRC/node_modules" timeout 60 node "$T/sdk.cjs" $PORT $KEY "$T/a.png"
  tail -n 1 "$T/out"
fi
check_exit
