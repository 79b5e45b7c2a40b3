#!/usr/bin/python3
"""Unit checks for tools/train/model.py.

  /usr/bin/python3 tools/train/check_model.py [MODEL_DIR]

1. chunked gated delta rule (chunk 64) == token-by-token recurrence (outputs, final state,
   gradients), for T not a multiple of 64 and with a carried initial state;
2. whole model: chunked == recurrent logits;
3. safetensors writer/reader round trip, BF16 rounding, A_log stored F32;
4. exported tensor names/shapes are exactly the HF Qwen3.5-MoE layout (docs/model.md §3);
5. with MODEL_DIR: logits equal tools/ref/ref_forward.py (independent float64 numpy forward).
"""
import json, os, subprocess, sys, tempfile
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import (Qwen35MoeText, gdn_chunked, gdn_recurrent, hf_state_dict, l2norm,
                   load_safetensors, save_safetensors, load_hf)

ok = True


def check(name, cond, info=""):
    global ok
    print(("PASS " if cond else "FAIL ") + name + (f"  ({info})" if info else ""))
    ok &= bool(cond)


def gdn_checks():
    torch.manual_seed(0)
    for T in (1, 63, 64, 150):
        B, H, dk, dv = 2, 3, 16, 24
        q = (l2norm(torch.randn(B, H, T, dk)) * dk ** -0.5).double().requires_grad_()
        k = l2norm(torch.randn(B, H, T, dk)).double().requires_grad_()
        v = torch.randn(B, H, T, dv, dtype=torch.float64, requires_grad=True)
        g = (-torch.rand(B, H, T, dtype=torch.float64) * 3).requires_grad_()
        beta = torch.rand(B, H, T, dtype=torch.float64, requires_grad=True)
        S0 = torch.randn(B, H, dk, dv, dtype=torch.float64) * 0.1
        o1, s1 = gdn_recurrent(q, k, v, g, beta, S0.clone())
        o2, s2 = gdn_chunked(q, k, v, g, beta, 64, S0.clone())
        gr1 = torch.autograd.grad((o1 * torch.cos(o1)).sum() + s1.sum(), (q, k, v, g, beta))
        gr2 = torch.autograd.grad((o2 * torch.cos(o2)).sum() + s2.sum(), (q, k, v, g, beta))
        d = max((o1 - o2).abs().max().item(), (s1 - s2).abs().max().item())
        dg = max((a - b).abs().max().item() for a, b in zip(gr1, gr2))
        check(f"gdn chunked==recurrent T={T}", d < 1e-10 and dg < 1e-9, f"out {d:.2e} grad {dg:.2e}")


def tiny_cfg():
    return {"hidden_size": 32, "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
            "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4, "num_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 16,
            "rms_norm_eps": 1e-6, "vocab_size": 64,
            "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}}


def model_checks():
    torch.manual_seed(1)
    c = tiny_cfg()
    m = Qwen35MoeText(c).double()
    with torch.no_grad():  # non-trivial norms
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.3)
    m.eval()
    x = torch.randint(0, 64, (2, 100))
    with torch.no_grad():
        m.set_recurrent(False)
        a = m(x)
        m.set_recurrent(True)
        b = m(x)
    # the GDN mixer computes in float32 even in a double model, hence the fp32-level tolerance
    check("model chunked==recurrent logits", (a - b).abs().max() < 1e-5, f"{(a-b).abs().max():.2e}")
    sd = hf_state_dict(m)
    names = set(sd)
    want = {"model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight"}
    for L, t in enumerate(c["layer_types"]):
        p = f"model.language_model.layers.{L}."
        want |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight",
                 p + "mlp.gate.weight", p + "mlp.experts.gate_up_proj", p + "mlp.experts.down_proj",
                 p + "mlp.shared_expert.gate_proj.weight", p + "mlp.shared_expert.up_proj.weight",
                 p + "mlp.shared_expert.down_proj.weight", p + "mlp.shared_expert_gate.weight"}
        if t == "linear_attention":
            want |= {p + f"linear_attn.{n}" for n in (
                "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
                "out_proj.weight", "conv1d.weight", "dt_bias", "A_log", "norm.weight")}
        else:
            want |= {p + f"self_attn.{n}.weight" for n in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")}
    check("HF tensor names", names == want, str(names ^ want))
    H, E, I = 32, 4, 8
    shp = {k: list(v.shape) for k, v in sd.items()}
    p = "model.language_model.layers."
    exp = {p + "0.linear_attn.in_proj_qkv.weight": [2 * 16 + 32, H], p + "0.linear_attn.conv1d.weight": [64, 1, 4],
           p + "0.linear_attn.in_proj_z.weight": [32, H], p + "0.linear_attn.in_proj_b.weight": [4, H],
           p + "0.linear_attn.norm.weight": [8], p + "0.linear_attn.out_proj.weight": [H, 32],
           p + "3.self_attn.q_proj.weight": [4 * 16 * 2, H], p + "3.self_attn.k_proj.weight": [2 * 16, H],
           p + "3.self_attn.o_proj.weight": [H, 64], p + "3.self_attn.q_norm.weight": [16],
           p + "0.mlp.experts.gate_up_proj": [E, 2 * I, H], p + "0.mlp.experts.down_proj": [E, H, I],
           p + "0.mlp.shared_expert_gate.weight": [1, H], p + "0.mlp.gate.weight": [E, H]}
    bad = {k: (shp[k], v) for k, v in exp.items() if shp[k] != v}
    check("HF tensor shapes", not bad, str(bad))
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "m.safetensors")
        save_safetensors(f, sd, f32_names=("A_log",))
        back = load_safetensors(f)
        hdr = json.loads(open(f, "rb").read()[8:8 + int.from_bytes(open(f, "rb").read(8), "little")])
        dts = {k: v["dtype"] for k, v in hdr.items() if k != "__metadata__"}
        check("A_log F32, rest BF16", all((v == "F32") == k.endswith("A_log") for k, v in dts.items()))
        err = max(((back[k] - sd[k].float()).abs() / (sd[k].float().abs() + 1e-30)).max().item() for k in sd)
        check("bf16 round trip rel err <= 2^-8", err <= 2 ** -8, f"{err:.2e}")
        t = torch.tensor([1.0, 1.00390625, 1.01171875, -3.0e38, 1e-40])
        save_safetensors(f, {"x": t})
        check("bf16 round-to-nearest-even", load_safetensors(f)["x"][:3].tolist() == [1.0, 1.0, 1.015625])


def ref_check(mdir):
    m, cfg = load_hf(mdir)
    m.eval()
    m.set_recurrent(True)
    ids = [int(i) for i in np.random.default_rng(0).integers(0, cfg["vocab_size"] - 96, 80)]
    with torch.no_grad():
        a = m(torch.tensor([ids]))[0].numpy()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l.f32")
        subprocess.run([sys.executable, os.path.join(HERE, "..", "ref", "ref_forward.py"), mdir,
                        "--tokens", ",".join(map(str, ids)), "--out", out], check=True,
                       capture_output=True)
        b = np.fromfile(out, dtype="<f4").reshape(a.shape)
    d = np.abs(a - b).max()
    check("torch fp32 == tools/ref float64 on " + mdir, d < 1e-3 * max(1, np.abs(b).max()),
          f"max diff {d:.2e}, max |logit| {np.abs(b).max():.2f}, argmax agree {(a.argmax(-1)==b.argmax(-1)).mean():.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    gdn_checks()
    model_checks()
    if len(sys.argv) > 1:
        ref_check(sys.argv[1])
    print("ALL PASS" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)
