#!/usr/bin/python3
"""Streaming writer of a random-weight `qwen35moe` GGUF of any Qwen3.5-MoE config, up to the full
Qwen3.5-35B-A3B shape (~20 GB as Q4_K_M), holding at most one chunk (<= ~16 MB of blocks) in memory.

Tensor names, shapes, F32 tensors and metadata are gguf_np's (qwen35moe_tensor_specs and
qwen35moe_metadata: what gguf_np.hf_to_gguf, and llama.cpp's converter, write for that config);
the quantized matrices are generated directly as random blocks of their type (random bytes, the
scale fields set), so a matmul of a unit-RMS input gives outputs of RMS about --gain:
  per-element std = gain / sqrt(K) (K = row length), per type:
  Q4_0  d = s/4.61 (std of nibble-8);  Q8_0 d = s/73.9 (std of a uniform int8);
  Q4_1/Q5_1 d as Q4_0/Q5_0, m = -7.5 d / -15.5 d (centred); Q5_0 d = s/9.23;
  Q4_K  sub-scales sc ~ U{32..63}, m = round(15 sc/16), dmin = 8 d (so d sc q - dmin m ~ d sc (q-7.5)),
        d = s/(4.61 * 48.3);  Q5_K likewise with dmin = 16 d, m = round(31 sc/32), d = s/(9.23*48.3);
  Q6_K  random int8 sub-scales, d = s/(18.5 * 73.9);  F16: N(0, s);
  every fp16 scale times U(0.75, 1.25) per block (s = gain/sqrt(K)).
F32 tensors: norms 1 + 0.01 N(0,1) (ssm_norm too), ssm_a = -U(1, 16), ssm_dt.bias 0.1 N(0,1),
ssm_conv1d / ffn_gate_inp / ffn_gate_inp_shexp 0.02 N(0,1).

Mixes (general.file_type as llama-quantize writes it):
  q4_0, q8_0  every quantizable matrix of that type (llama-quantize --pure; a row length that the
              block does not divide falls back to F16)
  q4_k_m      llama-quantize's Q4_K_M rule (src/llama-quant.cpp llama_tensor_get_type_impl), for
              tensors in this file's (layer) order: Q4_K by default; output.weight (token_embd when
              tied) Q6_K; attn_v and attn_qkv (one "attn_v-like" tensor per layer, counted in file
              order: i_attention_wv, n = layers incl. MTP) Q6_K where use_more_bits(i, n); every
              ffn_down* (ffn_down_exps, ffn_down_shexp) Q6_K where use_more_bits(layer, block_count);
              use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2; with exactly 8
              experts, as llama.cpp does: attn_v/attn_qkv/attn_k Q8_0, attn_output Q5_K; a row
              length not a multiple of 256: Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0, then F16 if the
              32-block does not divide it either (tensor_type_fallback).
  Quantizable = what llama-quantize touches: 2-D/3-D '*.weight' except *_norm, ffn_gate_inp,
  ssm_conv1d (ffn_gate_inp_shexp is {n_embd, 1}, i.e. 1-D to ggml, and stays F32).

  /usr/bin/python3 tools/ref/make_gguf_random.py --config configs/qwen3.5-35b-a3b.json \\
      --out q35.gguf --mix q4_k_m --vocab-gguf .../ggml-vocab-qwen35.gguf [--layers N] [--seed S]
      [--no-mtp] [--gain 0.5]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np as G  # noqa: E402

CHUNK = 16 << 20            # bytes of blocks generated at a time
TOKEN_UNUSED = 5            # llama.cpp TokenType.UNUSED
MIX_FTYPE = {"q4_0": 2, "q8_0": 7, "q4_k_m": 15}   # llama_ftype MOSTLY_Q4_0 / Q8_0 / Q4_K_M
# std of the code (minus its centre) of a uniform random block value, per type
_STD_INT8, _STD_NIB, _STD_5, _STD_6 = 73.9, 4.61, 9.23, 18.47
_SC_K = 48.3                # RMS of a K-quant sub-scale drawn from U{32..63}


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def quantizable(name, ne, kind):
    nd = len(ne)
    while nd > 1 and ne[nd - 1] == 1:       # ggml_n_dims
        nd -= 1
    return kind == "matrix" and nd >= 2


def _fallback(t, K):
    if K % G.BLOCK[t][0]:
        t = {G.Q4_K: G.Q5_0, G.Q5_K: G.Q5_1, G.Q6_K: G.Q8_0}.get(t, G.F16)
        if K % G.BLOCK[t][0]:
            t = G.F16
    return t


def assign_types(specs, mix, n_expert, n_block):
    """[(name, ne, kind)] -> [(name, ne, kind, type)] for the mix (see the module doc)."""
    base = {"q4_0": G.Q4_0, "q8_0": G.Q8_0, "q4_k_m": G.Q4_K}[mix]
    tied = not any(n == "output.weight" for n, _, _ in specs)
    n_wv = sum(1 for n, _, _ in specs if n.endswith(("attn_v.weight", "attn_qkv.weight")))
    i_wv = 0
    out = []
    for name, ne, kind in specs:
        if not quantizable(name, ne, kind):
            out.append((name, ne, kind, G.F32))
            continue
        t = base
        if mix == "q4_k_m":
            if name == "output.weight" or (tied and name == "token_embd.weight"):
                t = G.Q8_0 if ne[0] % 256 else G.Q6_K
            elif name.endswith(("attn_v.weight", "attn_qkv.weight")):
                if n_expert == 8:
                    t = G.Q8_0
                elif use_more_bits(i_wv, n_wv):
                    t = G.Q6_K
                i_wv += 1
            elif name.endswith("attn_k.weight") and n_expert == 8:
                t = G.Q8_0
            elif name.endswith("attn_output.weight") and n_expert == 8:
                t = G.Q5_K
            elif "ffn_down" in name:
                if use_more_bits(int(name.split(".")[1]), n_block):
                    t = G.Q6_K
        out.append((name, ne, kind, _fallback(t, ne[0])))
    return out


def _put_f16(blk, off, v):
    blk[:, off:off + 2] = v.astype("<f2").view(np.uint8).reshape(-1, 2)


def random_rows(t, rows, K, rng, gain):
    """Random blocks of type t for `rows` rows of length K -> uint8 array (see the module doc)."""
    s = gain / np.sqrt(K)
    if t == G.F16:
        return (rng.standard_normal((rows, K), np.float32) * np.float32(s)).astype("<f2").view(np.uint8)
    bs, bb = G.BLOCK[t]
    nb = rows * (K // bs)
    blk = np.frombuffer(bytearray(rng.bytes(nb * bb)), np.uint8).reshape(nb, bb)
    u = rng.uniform(0.75, 1.25, nb)
    if t == G.Q4_0:
        _put_f16(blk, 0, s / _STD_NIB * u)
    elif t == G.Q8_0:
        _put_f16(blk, 0, s / _STD_INT8 * u)
    elif t == G.Q5_0:
        _put_f16(blk, 0, s / _STD_5 * u)
    elif t in (G.Q4_1, G.Q5_1):
        d = (s / (_STD_NIB if t == G.Q4_1 else _STD_5) * u).astype(np.float16)
        _put_f16(blk, 0, d)
        _put_f16(blk, 2, -(7.5 if t == G.Q4_1 else 15.5) * d.astype(np.float32))
    elif t in (G.Q4_K, G.Q5_K):
        q4 = t == G.Q4_K
        d = (s / ((_STD_NIB if q4 else _STD_5) * _SC_K) * u).astype(np.float16)
        _put_f16(blk, 0, d)
        _put_f16(blk, 2, d.astype(np.float32) * (8 if q4 else 16))   # exact: power of two
        sc = rng.integers(32, 64, (nb, 8), dtype=np.uint8)
        m = ((sc.astype(np.uint16) * (15 if q4 else 31) + (8 if q4 else 16)) // (16 if q4 else 32))
        blk[:, 4:16] = G._pack_scale_min_k4(sc, m.astype(np.uint8))
    elif t == G.Q6_K:
        _put_f16(blk, 208, s / (_STD_6 * _STD_INT8) * u)
    else:
        return np.frombuffer(G.random_blocks(t, rows, K, rng, scale=s), np.uint8)
    return blk.reshape(-1)


def f32_values(kind, n, rng):
    if kind in ("norm", "ssm_norm"):
        return 1.0 + 0.01 * rng.standard_normal(n)
    if kind == "a":
        return -rng.uniform(1, 16, n)
    if kind == "dt":
        return 0.1 * rng.standard_normal(n)
    return 0.02 * rng.standard_normal(n)            # conv, router, shexp_gate (and F32 matrices)


def vocab_keys(path, n_vocab):
    """tokenizer.* keys of a vocab GGUF, tokens padded to n_vocab with [PAD<i>] UNUSED."""
    v = G.GGUFFile(path)
    kv = {k: val for k, val in v.kv.items() if k.startswith("tokenizer.")}
    toks = kv["tokenizer.ggml.tokens"].value
    if len(toks) > n_vocab:
        raise ValueError(f"{path}: {len(toks)} tokens, more than vocab_size {n_vocab}")
    n0 = len(toks)
    kv["tokenizer.ggml.tokens"] = G.array(G.T_STR, list(toks) + [f"[PAD{i}]" for i in range(n0, n_vocab)])
    if "tokenizer.ggml.token_type" in kv:
        tt = kv["tokenizer.ggml.token_type"]
        kv["tokenizer.ggml.token_type"] = G.KV(G.T_ARR, list(tt.value) + [TOKEN_UNUSED] * (n_vocab - n0),
                                               tt.elem)
    if "tokenizer.ggml.scores" in kv:
        sc = kv["tokenizer.ggml.scores"]
        kv["tokenizer.ggml.scores"] = G.KV(G.T_ARR, list(sc.value) + [-1000.0] * (n_vocab - n0), sc.elem)
    return kv, n0


def load_config(path, layers=None):
    with open(path) as f:
        cfg = json.load(f)
    if layers is not None:
        t = cfg.get("text_config", cfg)
        t["num_hidden_layers"] = layers
        if t.get("layer_types"):
            iv = t.get("full_attention_interval", 4)
            t["layer_types"] = ["full_attention" if (i + 1) % iv == 0 else "linear_attention"
                                for i in range(layers)]
    return cfg


def write_random_gguf(cfg, out, mix="q4_k_m", vocab_gguf=None, seed=0, no_mtp=False, gain=0.5,
                      name="cllm-random", progress=True):
    hp = G._text_hparams(cfg)
    n_mtp = 0 if no_mtp else (hp.get("mtp_num_hidden_layers", 0) or 0)
    specs = G.qwen35moe_tensor_specs(cfg, n_mtp)
    n_block = hp["num_hidden_layers"] + n_mtp
    typed = assign_types(specs, mix, hp["num_experts"], n_block)
    kv = G.qwen35moe_metadata(cfg, MIX_FTYPE[mix], n_mtp, name)
    if vocab_gguf:
        vk, n0 = vocab_keys(vocab_gguf, hp["vocab_size"])
        kv.update(vk)
    infos = [(n, t, ne, G.tensor_nbytes(t, ne)) for n, ne, _, t in typed]
    head, align = G.gguf_header(kv, infos)
    total = len(head) + sum(nb + G._pad(nb, align) for *_, nb in infos)
    if progress:
        counts = {}
        for *_, t in typed:
            counts[G.TYPE_NAMES[t]] = counts.get(G.TYPE_NAMES[t], 0) + 1
        print(f"{out}: {len(typed)} tensors {counts}, {total / 1e9:.3f} GB", flush=True)
    rng = np.random.default_rng(seed)
    t0 = last = time.time()
    done = 0
    with open(out, "wb", buffering=CHUNK) as f:
        f.write(head)
        done += len(head)
        for (tname, ne, kind, t), (_, _, _, nbytes) in zip(typed, infos):
            K = ne[0]
            rows = int(np.prod(ne[1:], dtype=np.int64))
            if t == G.F32:
                assert rows * K * 4 == nbytes
                f.write(f32_values(kind, rows * K, rng).astype("<f4").tobytes())
            else:
                rb = G.row_bytes(t, K)
                step = max(1, CHUNK // rb)
                for r0 in range(0, rows, step):
                    f.write(random_rows(t, min(step, rows - r0), K, rng, gain).data)
            f.write(b"\0" * G._pad(nbytes, align))
            done += nbytes + G._pad(nbytes, align)
            now = time.time()
            if progress and (now - last > 5 or done == total):
                last = now
                print(f"  {tname:34s} {done / 1e9:7.2f} / {total / 1e9:.2f} GB  "
                      f"{now - t0:6.1f} s  {done / 1e6 / max(now - t0, 1e-9):6.0f} MB/s", flush=True)
    size = os.path.getsize(out)
    if size != total:
        raise RuntimeError(f"{out}: wrote {size} bytes, expected {total}")
    if progress:
        print(f"wrote {out}: {size} bytes ({size / 1e9:.3f} GB) in {time.time() - t0:.1f} s", flush=True)
    return size


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="config.json of a Qwen3.5-MoE model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mix", choices=sorted(MIX_FTYPE), default="q4_k_m")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers")
    ap.add_argument("--vocab-gguf", help="copy tokenizer.* keys (tokens padded to vocab_size)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-mtp", action="store_true")
    ap.add_argument("--gain", type=float, default=0.5, help="RMS of a matmul of a unit-RMS input")
    ap.add_argument("--name", default="cllm-random")
    a = ap.parse_args(argv)
    try:
        cfg = load_config(a.config, a.layers)
        write_random_gguf(cfg, a.out, a.mix, a.vocab_gguf, a.seed, a.no_mtp, a.gain, a.name)
    except (ValueError, KeyError, OSError) as e:
        print(f"make_gguf_random: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
