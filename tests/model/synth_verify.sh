#!/usr/bin/env bash
# synth -> verify round trips for several configs, both expert layouts, sharded with Qwen-style
# names; then corrupted directories must fail verify with one line naming the problem; CLI usage
# errors exit 2.
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/synth_verify
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"

for cfg in tiny tiny-gqa tiny-moe tiny-qwen3 tiny-qwen3-moe tiny-qwen2; do
  for layout in fused per-expert; do
    d="$T/$cfg-$layout"
    expect_rc 0 "synth $cfg $layout" "$BIN" synth -q --config "$SRC/configs/$cfg.json" --experts $layout --seed 7 "$d"
    expect_rc 0 "verify $cfg $layout" "$BIN" verify --full "$d"
    grep -q "^OK" "$T/out" || bad "verify $cfg $layout did not print OK"
  done
done

# Determinism: same seed, same bytes; independent of sharding.
"$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 7 "$T/again"
cmp -s "$T/tiny-fused/model.safetensors" "$T/again/model.safetensors" && ok "same seed same bytes" || bad "synth not deterministic"
"$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 8 "$T/seed8"
cmp -s "$T/tiny-fused/model.safetensors" "$T/seed8/model.safetensors" && bad "different seeds gave same bytes" || ok "seed changes weights"

# One seed, both expert layouts: the same expert values, so the same logits bit for bit.
for cfg in tiny-moe tiny-qwen3-moe; do
  for layout in fused per-expert; do
    "$BIN" eval "$T/$cfg-$layout" --tokens 1,5,9,200,3,7 --logits-hash 2>&1 | grep '^logits-hash' >"$T/h-$layout"
  done
  [ -s "$T/h-fused" ] && cmp -s "$T/h-fused" "$T/h-per-expert" && ok "$cfg: fused and per-expert same logits ($(cat "$T/h-fused"))" ||
    { bad "$cfg: fused vs per-expert logits differ"; cat "$T/h-fused" "$T/h-per-expert"; }
done

# Sharded, Qwen shard names, f16 and f32.
d="$T/sharded"
expect_rc 0 "synth sharded" "$BIN" synth -q --config "$SRC/configs/small.json" --shard-size 20MB --qwen-shard-names --dtype f16 "$d"
n=$(ls "$d"/model.safetensors-000*-of-000*.safetensors | wc -l)
[ "$n" -gt 1 ] && ok "$n qwen-named shards" || bad "expected several shards, got $n"
[ -f "$d/model.safetensors.index.json" ] && ok "index written" || bad "no index"
# the index is written before the shards, so a run killed at any point lacks a shard it names
# (verify accepts shards without an index); each shard is renamed into place after the index
late=$(for s in "$d"/model.safetensors-000*.safetensors; do
  [ "$(stat -c %.9Y "$s")" \< "$(stat -c %.9Y "$d/model.safetensors.index.json")" ] && echo "$s"
done)
[ -z "$late" ] && ok "index written before every shard" || bad "shards older than the index: $late"
expect_rc 0 "verify sharded" "$BIN" verify "$d"
expect_rc 0 "synth f32" "$BIN" synth -q --config "$SRC/configs/tiny.json" --dtype f32 "$T/f32"
expect_rc 0 "verify f32" "$BIN" verify --json "$T/f32"
grep -q '"problems":0' "$T/out" && ok "json summary" || bad "json summary lacks problems:0"

# Corruptions: each must fail verify with a line naming the problem.
c="$T/corrupt"
cp -r "$d" "$c.missing" && rm "$c.missing"/model.safetensors-00002-of-*.safetensors
expect_rc 1 "missing shard" "$BIN" verify "$c.missing"
grep -q "problem: .*00002-of.*cannot open" "$T/out" && ok "missing shard named" || bad "missing shard not named"

cp -r "$T/tiny-fused" "$c.trunc" && truncate -s -100 "$c.trunc/model.safetensors"
expect_rc 1 "truncated file" "$BIN" verify "$c.trunc"
grep -q "truncated" "$T/out" && ok "truncation named" || bad "truncation not named"

cp -r "$T/tiny-fused" "$c.shape"
sed -i 's/"hidden_size": 64/"hidden_size": 32/' "$c.shape/config.json"
expect_rc 1 "shape mismatch" "$BIN" verify "$c.shape"
grep -q "has shape \[512, 64\], config implies \[512, 32\]" "$T/out" && ok "shape mismatch named" || bad "shape mismatch not named"

cp -r "$T/tiny-fused" "$c.type"
sed -i 's/"qwen3_5_moe"/"gpt2"/' "$c.type/config.json"
expect_rc 1 "unknown model_type" "$BIN" verify "$c.type"
grep -q "model_type 'gpt2' is not supported" "$T/out" && ok "model_type named" || bad "model_type not named"

cp -r "$T/tiny-fused" "$c.heads"
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' "$c.heads/config.json"
expect_rc 1 "inconsistent heads" "$BIN" verify "$c.heads"

cp -r "$T/tiny-fused" "$c.extra"
rm "$c.extra/model.safetensors"; cp "$T/tiny-gqa-fused/model.safetensors" "$c.extra/"
expect_rc 1 "wrong weights for config" "$BIN" verify "$c.extra"

# NaN injection: overwrite bytes in the middle of the data region with 0xff (NaN in bf16).
cp -r "$T/tiny-fused" "$c.nan"
size=$(stat -c %s "$c.nan/model.safetensors")
printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$c.nan/model.safetensors" bs=1 seek=$((size - 64)) conv=notrunc 2>/dev/null
expect_rc 1 "NaN detected" "$BIN" verify --full "$c.nan"
grep -q "NaN/Inf" "$T/out" && ok "NaN named" || bad "NaN not named"

# The 35B config without weights: 35.95B parameters.
mkdir -p "$T/real" && cp "$SRC/configs/qwen3.5-35b-a3b.json" "$T/real/config.json"
expect_rc 0 "35B config-only" "$BIN" verify --config-only "$T/real"
grep -q "total params: 35.95B" "$T/out" && ok "35.95B" || { bad "35B count"; cat "$T/out"; }

# CLI: unknown flag, bad value, missing positional, --help on every subcommand.
expect_rc 2 "unknown flag" "$BIN" verify --nope "$T/f32"
expect_rc 2 "bad choice" "$BIN" synth --config x --dtype f8 "$T/x"
expect_rc 2 "bad size" "$BIN" synth --config x --shard-size lots "$T/x"
expect_rc 2 "missing arg" "$BIN" verify
expect_rc 2 "unknown command" "$BIN" frobnicate
expect_rc 2 "no command" "$BIN"
for cmd in $("$BIN" --help | awk '/^commands:/{f=1;next} f&&/^  [a-z]/{print $1}'); do
  expect_rc 0 "$cmd --help" "$BIN" "$cmd" --help
done
# configs/tiny-mtp.json (tiny with mtp_num_hidden_layers 1): synth writes the MTP head (mtp.fc,
# its three norms and one full-attention MoE layer with a shared expert, experts per expert as in
# the official checkpoints: 41 tensors at this size), verify accepts it, the loader binds all 41;
# --no-mtp leaves the head out and the checkpoint still verifies (the head is optional).
for layout in fused per-expert; do
  d="$T/tiny-mtp-$layout"
  expect_rc 0 "synth tiny-mtp $layout" "$BIN" synth -q --config "$SRC/configs/tiny-mtp.json" --experts $layout --seed 7 "$d"
  expect_rc 0 "verify tiny-mtp $layout" "$BIN" verify --full "$d"
  grep -q "^OK" "$T/out" || bad "verify tiny-mtp $layout did not print OK"
  grep -q "+ MTP" "$T/out" || bad "verify tiny-mtp $layout does not mention the MTP head"
  n=$(grep -ao '"mtp\.[A-Za-z0-9_.]*"' "$d/model.safetensors" | sort -u | wc -l)
  expect_eq "tiny-mtp $layout: mtp.* tensors written" "$n" 41
  n=$(grep -ao '"mtp\.layers\.0\.mlp\.experts\.[0-9]*\.down_proj\.weight"' "$d/model.safetensors" | sort -u | wc -l)
  expect_eq "tiny-mtp $layout: MTP experts per expert" "$n" 8
  expect_rc 0 "load tiny-mtp $layout" "$BIN" eval "$d" --tokens 1,2,3 --logits-hash
  grep -q "MTP head present (41 tensors bound)" "$T/out" || bad "tiny-mtp $layout: MTP head not bound"
done
d="$T/tiny-mtp-none"
expect_rc 0 "synth tiny-mtp --no-mtp" "$BIN" synth -q --config "$SRC/configs/tiny-mtp.json" --no-mtp --seed 7 "$d"
n=$(grep -ao '"mtp\.[A-Za-z0-9_.]*"' "$d/model.safetensors" | sort -u | wc -l)
expect_eq "tiny-mtp --no-mtp: no mtp.* tensors" "$n" 0
expect_rc 0 "verify tiny-mtp --no-mtp" "$BIN" verify "$d"

expect_rc 0 "--version" "$BIN" --version
grep -q "cpu features:" "$T/out" && ok "version shows features" || bad "version lacks features"

check_exit
