#!/usr/bin/python3
"""Random-weight models in HF layout for qwen3_5_moe, qwen3 and qwen3_moe (test fixtures for
tools/ref; also usable by hand:  random_model.py OUT_DIR --arch qwen3_5_moe [--layout per_expert]).

Weights are scaled so activations stay O(1): Linear W ~ N(0, 1/in), embeddings N(0, 0.09)
(small, so a tied lm_head does not just echo the input token),
zero-centred norm weights w ~ N(0, 0.1) (applied as 1+w), plain norm weights 1 + N(0, 0.1),
A_log = log U(1, 16), dt_bias ~ N(0, 0.5), conv1d ~ N(0, 1/K).
"""
import argparse
import json
import os

import numpy as np

from safetensors_np import write_safetensors

PRESETS = {
    # small: a few layers; head and group counts chosen to exercise GQA and the GDN head mapping
    "qwen3_5_moe": dict(
        model_type="qwen3_5_moe", hidden_size=64, num_hidden_layers=4, vocab_size=256,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=8, linear_conv_kernel_dim=4, full_attention_interval=4,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24,
        shared_expert_intermediate_size=32, rope_theta=10000.0, partial_rotary_factor=0.25,
        rms_norm_eps=1e-6, max_position_embeddings=4096),
    "qwen3": dict(
        model_type="qwen3", hidden_size=64, num_hidden_layers=3, vocab_size=256,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        max_position_embeddings=4096),
    "qwen3_moe": dict(
        model_type="qwen3_moe", hidden_size=64, num_hidden_layers=3, vocab_size=256,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=96,
        num_experts=8, num_experts_per_tok=3, moe_intermediate_size=24, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[1], rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False, max_position_embeddings=4096),
}


def qwen35_config_json(t):
    """Wrap a flat text config the way the real checkpoint does (docs/model.md §1): nested text_config,
    rope_parameters, explicit layer_types."""
    t = dict(t)
    n = t.pop("full_attention_interval", 4)
    theta = t.pop("rope_theta")
    prf = t.pop("partial_rotary_factor")
    t["model_type"] = "qwen3_5_moe_text"
    t.setdefault("layer_types", ["full_attention" if (i + 1) % n == 0 else "linear_attention"
                                 for i in range(t["num_hidden_layers"])])
    t["rope_parameters"] = {"rope_type": "default", "rope_theta": theta,
                            "partial_rotary_factor": prf}
    t.setdefault("attn_output_gate", True)
    t.setdefault("hidden_act", "silu")
    t.setdefault("mlp_only_layers", [])
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "text_config": t, "tie_word_embeddings": False}


def random_weights(cfg, seed=0, layout="fused"):
    """cfg: flat dict as in PRESETS. Returns {name: float32 array} in HF naming."""
    rng = np.random.default_rng(seed)
    mt = cfg["model_type"]
    is35 = mt.startswith("qwen3_5")
    P = "model.language_model." if is35 else "model."
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def lin(o, i):
        return rng.normal(0.0, 1.0 / np.sqrt(i), (o, i))

    def normw(n):  # stored weight of a norm
        return rng.normal(0.0, 0.1, n) if is35 else 1.0 + rng.normal(0.0, 0.1, n)

    w = {P + "embed_tokens.weight": rng.normal(0.0, 0.3, (V, H)), P + "norm.weight": normw(H)}
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = lin(V, H)
    L_types = cfg.get("layer_types")
    if L_types is None:
        n = cfg.get("full_attention_interval", 4) if is35 else 1
        L_types = ["full_attention" if (not is35 or (i + 1) % n == 0) else "linear_attention"
                   for i in range(cfg["num_hidden_layers"])]
    E = cfg.get("num_experts", 0) if mt != "qwen3" else 0
    step = cfg.get("decoder_sparse_step", 1)
    only = set(cfg.get("mlp_only_layers", []))
    for L, lt in enumerate(L_types):
        p = f"{P}layers.{L}."
        w[p + "input_layernorm.weight"] = normw(H)
        w[p + "post_attention_layernorm.weight"] = normw(H)
        if lt == "full_attention":
            a = p + "self_attn."
            gate = is35 and cfg.get("attn_output_gate", True)
            w[a + "q_proj.weight"] = lin(nh * hd * (2 if gate else 1), H)
            w[a + "k_proj.weight"] = lin(nkv * hd, H)
            w[a + "v_proj.weight"] = lin(nkv * hd, H)
            w[a + "o_proj.weight"] = lin(H, nh * hd)
            w[a + "q_norm.weight"] = normw(hd)
            w[a + "k_norm.weight"] = normw(hd)
        else:
            g = p + "linear_attn."
            Hk, Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
            dk, dv, K = (cfg["linear_key_head_dim"], cfg["linear_value_head_dim"],
                         cfg["linear_conv_kernel_dim"])
            C = 2 * Hk * dk + Hv * dv
            w[g + "in_proj_qkv.weight"] = lin(C, H)
            w[g + "in_proj_z.weight"] = lin(Hv * dv, H)
            w[g + "in_proj_b.weight"] = lin(Hv, H)
            w[g + "in_proj_a.weight"] = lin(Hv, H)
            w[g + "conv1d.weight"] = rng.normal(0.0, 1.0 / np.sqrt(K), (C, 1, K))
            w[g + "dt_bias"] = rng.normal(0.0, 0.5, Hv)
            w[g + "A_log"] = np.log(rng.uniform(1.0, 16.0, Hv))
            w[g + "norm.weight"] = 1.0 + rng.normal(0.0, 0.1, dv)
            w[g + "out_proj.weight"] = lin(H, Hv * dv)
        m = p + "mlp."
        if E > 0 and L not in only and (L + 1) % step == 0:
            I = cfg["moe_intermediate_size"]
            w[m + "gate.weight"] = lin(E, H)
            G = np.stack([lin(I, H) for _ in range(E)])
            U = np.stack([lin(I, H) for _ in range(E)])
            D = np.stack([lin(H, I) for _ in range(E)])
            if layout == "fused":
                w[m + "experts.gate_up_proj"] = np.concatenate([G, U], axis=1)  # gate rows first
                w[m + "experts.down_proj"] = D
            else:
                for e in range(E):
                    w[f"{m}experts.{e}.gate_proj.weight"] = G[e]
                    w[f"{m}experts.{e}.up_proj.weight"] = U[e]
                    w[f"{m}experts.{e}.down_proj.weight"] = D[e]
            S = cfg.get("shared_expert_intermediate_size", 0) if is35 else 0
            if S:
                w[m + "shared_expert.gate_proj.weight"] = lin(S, H)
                w[m + "shared_expert.up_proj.weight"] = lin(S, H)
                w[m + "shared_expert.down_proj.weight"] = lin(H, S)
                w[m + "shared_expert_gate.weight"] = lin(1, H)
        else:
            I = cfg["intermediate_size"]
            w[m + "gate_proj.weight"] = lin(I, H)
            w[m + "up_proj.weight"] = lin(I, H)
            w[m + "down_proj.weight"] = lin(H, I)
    return {k: v.astype(np.float32) for k, v in w.items()}


def to_per_expert(w):
    """Rewrite fused experts.{gate_up_proj,down_proj} as per-expert 2-D tensors (same values)."""
    out = {}
    for name, a in w.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            I = a.shape[1] // 2
            for e in range(a.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = a[e, :I]
                out[f"{base}{e}.up_proj.weight"] = a[e, I:]
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(a.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = a[e]
        else:
            out[name] = a
    return out


def config_json(cfg):
    return qwen35_config_json(cfg) if cfg["model_type"].startswith("qwen3_5") else dict(cfg)


def write_model(out_dir, cfg, weights, dtype="F32", shards=1, shard_fmt=None):
    """Write config.json + safetensors (one file, or `shards` files with an index)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config_json(cfg), f, indent=1)
    dtypes = {n: "F32" for n in weights if n.endswith("A_log")}  # docs/model.md §3: A_log stored F32
    if shards <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), weights, dtype, dtypes)
        return
    shard_fmt = shard_fmt or "model.safetensors-{i:05d}-of-{n:05d}.safetensors"
    names = sorted(weights)
    wm = {}
    for i in range(shards):
        part = {n: weights[n] for n in names[i::shards]}
        fn = shard_fmt.format(i=i + 1, n=shards)
        write_safetensors(os.path.join(out_dir, fn), part, dtype, dtypes)
        for n in part:
            wm[n] = fn
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--arch", choices=sorted(PRESETS), default="qwen3_5_moe")
    ap.add_argument("--layout", choices=("fused", "per_expert"), default="fused")
    ap.add_argument("--dtype", choices=("F32", "BF16", "F16"), default="F32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a config field, e.g. --set num_hidden_layers=8")
    a = ap.parse_args()
    cfg = dict(PRESETS[a.arch])
    for kv in a.set:
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v)
    w = random_weights(cfg, a.seed, a.layout)
    write_model(a.out_dir, cfg, w, a.dtype, a.shards)
    print(f"wrote {a.out_dir}: {sum(x.size for x in w.values())} parameters")


if __name__ == "__main__":
    main()
