#!/usr/bin/python3
"""Self-test of the numpy reference (tools/ref). Independent of the C code: it writes its own
random models. Run:  /usr/bin/python3 tools/ref/test_ref.py [--keep]   (exit 0 = all passed;
--keep leaves the fixture models in the printed temporary directory)."""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import math  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ref_forward as R  # noqa: E402
import random_model as RM  # noqa: E402
from safetensors_np import (SafetensorsFile, bf16_to_f32, f32_to_bf16_bits,  # noqa: E402
                            write_safetensors)

TMP = tempfile.mkdtemp(prefix="cllm_ref_test_")
RESULTS = []


def check(name, value, limit, what="max abs diff"):
    ok = bool(np.isfinite(value)) and value <= limit
    RESULTS.append((name, ok))
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {what} {value:.3e} (limit {limit:.0e})")
    return ok


def check_true(name, cond, detail=""):
    RESULTS.append((name, bool(cond)))
    print(f"{'PASS' if cond else 'FAIL'}  {name}{': ' + detail if detail else ''}")


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(1e-300, float(np.max(np.abs(b)))))


def make(name, cfg, seed=0, layout="fused", dtype="F32", shards=1, weights=None, shard_fmt=None):
    d = os.path.join(TMP, name)
    w = weights if weights is not None else RM.random_weights(cfg, seed, "fused")
    if layout == "per_expert":
        w = RM.to_per_expert(w)
    RM.write_model(d, cfg, w, dtype, shards, shard_fmt)
    return d, w


def preset(arch, **over):
    c = dict(RM.PRESETS[arch])
    c.update(over)
    return c


# ------------------------------------------------------------------ (1) chunked == recurrent

def random_gdn_inputs(rng, T, H, dk, dv, state_scale=1.0):
    q = R.l2norm(rng.normal(size=(T, H, dk))) * dk ** -0.5
    k = R.l2norm(rng.normal(size=(T, H, dk)))
    v = rng.normal(size=(T, H, dv))
    g = -np.exp(rng.normal(-1.0, 1.0, (T, H))) * R.softplus(rng.normal(size=(T, H)))
    beta = R.sigmoid(rng.normal(size=(T, H)))
    S = rng.normal(size=(H, dk, dv)) * state_scale
    return q, k, v, g, beta, S


def test_chunked_vs_recurrent():
    rng = np.random.default_rng(1)
    worst = 0.0
    for T in (1, 5, 63, 64, 65, 130, 200):
        for chunk in (64, 16):
            for S0 in (0.0, 1.0):
                q, k, v, g, beta, S = random_gdn_inputs(rng, T, 3, 16, 8, S0)
                o1, s1 = R.gdn_recurrent(q, k, v, g, beta, S)
                o2, s2 = R.gdn_chunked(q, k, v, g, beta, S, chunk)
                worst = max(worst, float(np.max(np.abs(o1 - o2))), float(np.max(np.abs(s1 - s2))))
    check("(1) chunked GDN == recurrence (T up to 200, chunk 64/16, zero and random S0)",
          worst, 1e-10)
    # strong decay (g very negative) and beta near 1: the numerically hard corner
    q, k, v, g, beta, S = random_gdn_inputs(rng, 150, 2, 32, 32)
    g = g * 20.0
    beta = np.clip(beta + 0.45, 0, 1)
    o1, s1 = R.gdn_recurrent(q, k, v, g, beta, S)
    o2, s2 = R.gdn_chunked(q, k, v, g, beta, S, 64)
    check("(1b) chunked == recurrence, strong decay / beta~1, dk=dv=32",
          max(float(np.max(np.abs(o1 - o2))), float(np.max(np.abs(s1 - s2)))), 1e-10)


def test_gdn_chunked_model():
    d, _ = make("q35_gdnmode", preset("qwen3_5_moe"), seed=3)
    m = R.Model(d)
    toks = list(np.random.default_rng(3).integers(0, 256, 150))
    a, _ = R.forward(m, toks, gdn_mode="recurrent")
    b, _ = R.forward(m, toks, gdn_mode="chunked")
    check("(1c) qwen3_5_moe 150 tokens: --gdn chunked vs recurrent logits", rel(b, a), 1e-11,
          "max rel diff")


# ------------------------------------------------------------------ (2) prefill == one by one

def test_prefill_vs_incremental():
    rng = np.random.default_rng(5)
    for arch in ("qwen3_5_moe", "qwen3", "qwen3_moe"):
        d, _ = make("inc_" + arch, preset(arch), seed=11)
        m = R.Model(d)
        toks = list(rng.integers(0, m.cfg.vocab, 70))
        full, st_full = R.forward(m, toks)
        state, rows = None, []
        for t in toks:
            lg, state = R.forward(m, [t], state)
            rows.append(lg[0])
        inc = np.stack(rows)
        pieces = R.forward_split(m, toks, 17, gdn_mode="chunked")
        check(f"(2) {arch}: prefill 70 vs token-by-token with carried state", rel(inc, full),
              1e-12, "max rel diff")
        check(f"(2) {arch}: prefill vs pieces of 17 (chunked GDN)", rel(pieces, full), 1e-11,
              "max rel diff")
        # the state after both routes must agree too
        dS = max([float(np.max(np.abs(st_full.S[L] - state.S[L]))) for L in state.S] + [0.0])
        dK = max(float(np.max(np.abs(st_full.k[L] - state.k[L]))) for L in state.k)
        check(f"(2) {arch}: final state (S, K) prefill vs token-by-token", max(dS, dK), 1e-12)


# ------------------------------------------------------------------ (3) fused == per-expert

def test_expert_layouts():
    for arch in ("qwen3_5_moe", "qwen3_moe"):
        cfg = preset(arch)
        w = RM.random_weights(cfg, 21, "fused")
        d1, _ = make(f"fused_{arch}", cfg, weights=w)
        d2, _ = make(f"perexp_{arch}", cfg, weights=w, layout="per_expert")
        m1, m2 = R.Model(d1), R.Model(d2)
        check_true(f"(3) {arch}: layouts detected", all(m1.fused_experts.values()) and
                   not any(m2.fused_experts.values()),
                   f"fused={m1.fused_experts} per_expert={m2.fused_experts}")
        toks = list(np.random.default_rng(2).integers(0, cfg["vocab_size"], 40))
        a, _ = R.forward(m1, toks)
        b, _ = R.forward(m2, toks)
        check(f"(3) {arch}: fused vs per-expert logits", float(np.max(np.abs(a - b))), 0.0)


# ------------------------------------------------------------------ (4) hand-computed cases

def test_primitives_by_hand():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    w = np.array([0.0, 0.5, -0.5, 1.0])
    # mean(x^2) = 7.5; r = (7.5 + 1e-6)^-1/2 = 0.3651483473268884
    want_1p = np.array([0.3651483473268884, 1.0954450419806652, 0.5477225209903326,
                        2.921186778615107])                      # r * x * (1 + w)
    want_plain = np.array([0.0, 0.3651483473268884, -0.5477225209903326,
                           1.4605933893075536])                  # r * x * w
    check("(4) RMSNorm (1+w), x=[1,2,3,4] w=[0,.5,-.5,1]",
          float(np.max(np.abs(R.rmsnorm(x, w, 1e-6, True) - want_1p))), 1e-15)
    check("(4) RMSNorm plain w (Qwen3)",
          float(np.max(np.abs(R.rmsnorm(x, w, 1e-6, False) - want_plain))), 1e-15)
    # RoPE head_dim 8, rotary_dim 4 (partial 0.5), theta 1e4, pos 1: inv_freq = [1, 0.01],
    # pairs (0,2) angle 1 and (1,3) angle 0.01; dims 4..7 untouched.
    xr = np.arange(1.0, 9.0).reshape(1, 1, 8)
    want_r = np.array([1 * math.cos(1) - 3 * math.sin(1), 2 * math.cos(.01) - 4 * math.sin(.01),
                       3 * math.cos(1) + 1 * math.sin(1), 4 * math.cos(.01) + 2 * math.sin(.01),
                       5, 6, 7, 8])
    lit = np.array([-1.9841106485555495, 1.959900667496664, 2.4623779024123156,
                    4.019799668334994, 5, 6, 7, 8])
    got = R.rope_neox(xr, np.array([1]), 4, 10000.0)[0, 0]
    check("(4) partial NeoX RoPE pairs (i, i+rot/2), literal values",
          max(float(np.max(np.abs(got - want_r))), float(np.max(np.abs(got - lit)))), 1e-15)
    interleaved = np.array([1 * math.cos(1) - 2 * math.sin(1), 2 * math.cos(1) + 1 * math.sin(1)])
    check_true("(4) RoPE is not the interleaved (GPT-J) pairing",
               abs(got[0] - interleaved[0]) > 0.1)
    check("(4) RoPE at pos 0 is identity",
          float(np.max(np.abs(R.rope_neox(xr, np.array([0]), 4, 1e4) - xr))), 0.0)
    # gated norm: x=[3,4] w=[1,2] z=[0,1]: r=(12.5+1e-6)^-1/2; silu(0)=0, silu(1)=1/(1+e^-1)
    gn = R.gated_rmsnorm(np.array([3.0, 4.0]), np.array([1.0, 2.0]), np.array([0.0, 1.0]), 1e-6)
    check("(4) gated RMSNorm (plain w, * silu(z))",
          float(np.max(np.abs(gn - np.array([0.0, 1.6541966646925357])))), 1e-15)
    check("(4) l2norm([3,4]) = [0.6,0.8] (eps 1e-6 inside the sqrt)",
          float(np.max(np.abs(R.l2norm(np.array([3.0, 4.0])) -
                              np.array([3, 4]) / math.sqrt(25 + 1e-6)))), 1e-16)
    check("(4) softplus threshold (x>20 -> x) and log1p(e^x)",
          abs(R.softplus(np.array(25.0)) - 25.0) + abs(R.softplus(np.array(0.0)) - math.log(2)),
          1e-15)
    # delta rule by hand, 1 head, dk = dv = 2, S0 = 0:
    #  t1: k=[1,0] v=[2,3] beta=.5 g=ln .5 -> d=[1,1.5], S=[[1,1.5],[0,0]], q=[1,1] -> o=[1,1.5]
    #  t2: k=[0,1] v=[4,-2] beta=1 g=ln .5 -> S=[[.5,.75],[0,0]], u=[0,0], d=[4,-2],
    #      S=[[.5,.75],[4,-2]], q=[1,0] -> o=[.5,.75]
    #  t3: k=[.6,.8] v=[1,1] beta=1 g=0 -> u=[3.5,-1.15], d=[-2.5,2.15],
    #      S=[[-1,2.04],[2,-.28]], q=[0,1] -> o=[2,-.28]   (and S^T k = v exactly: full write)
    q = np.array([[1, 1], [1, 0], [0, 1]], float)[:, None, :]
    k = np.array([[1, 0], [0, 1], [.6, .8]], float)[:, None, :]
    v = np.array([[2, 3], [4, -2], [1, 1]], float)[:, None, :]
    g = np.log(np.array([[.5], [.5], [1.0]]))
    beta = np.array([[.5], [1.0], [1.0]])
    o, S = R.gdn_recurrent(q, k, v, g, beta, np.zeros((1, 2, 2)))
    want_o = np.array([[1, 1.5], [.5, .75], [2, -.28]])
    want_S = np.array([[-1, 2.04], [2, -.28]])
    check("(4) delta rule by hand (3 tokens)",
          max(float(np.max(np.abs(o[:, 0] - want_o))), float(np.max(np.abs(S[0] - want_S)))),
          1e-14)
    oc, Sc = R.gdn_chunked(q, k, v, g, beta, np.zeros((1, 2, 2)), 2)
    check("(4) delta rule by hand, chunked form (chunk 2)",
          max(float(np.max(np.abs(oc[:, 0] - want_o))), float(np.max(np.abs(Sc[0] - want_S)))),
          1e-14)


def scalar_model(w, cfg, tokens):
    """A second, scalar (pure Python lists + math) implementation for the tiny models of
    test_tiny_scalar_models, written loop by loop from docs/model.md §2 (qwen3_5_moe) and the Qwen3 /
    Qwen3-MoE rules, so that reshapes, interleaves and flags in ref_forward are checked."""
    is35 = cfg["model_type"] == "qwen3_5_moe"
    P = "model.language_model." if is35 else "model."
    H, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
    W = {n: a.astype(np.float64).tolist() for n, a in w.items()}

    def mv(M, x):
        return [sum(M[i][j] * x[j] for j in range(len(x))) for i in range(len(M))]

    def norm1p(x, wt):  # (1+w) for Qwen3.5, plain w for Qwen3 / Qwen3-MoE
        r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
        return [x[i] * r * ((1.0 + wt[i]) if is35 else wt[i]) for i in range(len(x))]

    def silu(v):
        return v / (1.0 + math.exp(-v))

    def sig(v):
        return 1.0 / (1.0 + math.exp(-v))

    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    rot = int(hd * cfg.get("partial_rotary_factor", 1.0))
    theta = cfg["rope_theta"]
    layer_types = cfg["layer_types"] if is35 else ["full_attention"] * cfg["num_hidden_layers"]
    if is35:
        Hk, Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        dk, dv, K = (cfg["linear_key_head_dim"], cfg["linear_value_head_dim"],
                     cfg["linear_conv_kernel_dim"])
    else:
        Hk = Hv = dk = dv = K = 1
    C = 2 * Hk * dk + Hv * dv
    E = cfg.get("num_experts", 0) if cfg["model_type"] != "qwen3" else 0
    topk, I = cfg.get("num_experts_per_tok"), cfg.get("moe_intermediate_size")
    renorm = is35 or cfg.get("norm_topk_prob", False)
    conv_hist = [[0.0] * (K - 1) for _ in range(C)]       # oldest first
    S = [[[0.0] * dv for _ in range(dk)] for _ in range(Hv)]
    Ks = {L: [] for L in range(len(layer_types))}
    Vs = {L: [] for L in range(len(layer_types))}
    out = []
    for pos, tok in enumerate(tokens):
        h = list(W[P + "embed_tokens.weight"][tok])
        for L, lt in enumerate(layer_types):
            p = f"{P}layers.{L}."
            x = norm1p(h, W[p + "input_layernorm.weight"])
            if lt == "linear_attention":
                g_ = p + "linear_attn."
                qkv = mv(W[g_ + "in_proj_qkv.weight"], x)
                z = mv(W[g_ + "in_proj_z.weight"], x)
                bb = mv(W[g_ + "in_proj_b.weight"], x)
                aa = mv(W[g_ + "in_proj_a.weight"], x)
                y = []
                for c in range(C):
                    wc = W[g_ + "conv1d.weight"][c][0]
                    win = conv_hist[c] + [qkv[c]]
                    y.append(silu(sum(wc[j] * win[j] for j in range(K))))
                    conv_hist[c] = win[1:]
                o_all = []
                for hv in range(Hv):
                    j = hv // (Hv // Hk)
                    qv = y[j * dk:(j + 1) * dk]
                    kv = y[Hk * dk + j * dk:Hk * dk + (j + 1) * dk]
                    vv = y[2 * Hk * dk + hv * dv:2 * Hk * dk + (hv + 1) * dv]
                    qn = math.sqrt(sum(t * t for t in qv) + 1e-6)
                    kn = math.sqrt(sum(t * t for t in kv) + 1e-6)
                    qv = [t / qn / math.sqrt(dk) for t in qv]
                    kv = [t / kn for t in kv]
                    beta = sig(bb[hv])
                    sp = aa[hv] + W[g_ + "dt_bias"][hv]
                    sp = sp if sp > 20 else math.log1p(math.exp(sp))
                    decay = math.exp(-math.exp(W[g_ + "A_log"][hv]) * sp)
                    Sh = S[hv]
                    for m_ in range(dk):
                        for n_ in range(dv):
                            Sh[m_][n_] *= decay
                    u = [sum(Sh[m_][n_] * kv[m_] for m_ in range(dk)) for n_ in range(dv)]
                    dlt = [(vv[n_] - u[n_]) * beta for n_ in range(dv)]
                    for m_ in range(dk):
                        for n_ in range(dv):
                            Sh[m_][n_] += kv[m_] * dlt[n_]
                    oh = [sum(Sh[m_][n_] * qv[m_] for m_ in range(dk)) for n_ in range(dv)]
                    r = 1.0 / math.sqrt(sum(t * t for t in oh) / dv + eps)
                    zh = z[hv * dv:(hv + 1) * dv]
                    o_all += [oh[n_] * r * W[g_ + "norm.weight"][n_] * silu(zh[n_])
                              for n_ in range(dv)]
                mix = mv(W[g_ + "out_proj.weight"], o_all)
            else:
                a_ = p + "self_attn."
                qg = mv(W[a_ + "q_proj.weight"], x)
                kk = mv(W[a_ + "k_proj.weight"], x)
                vv = mv(W[a_ + "v_proj.weight"], x)

                def rope(vec):
                    vec = list(vec)
                    for i in range(rot // 2):
                        ang = pos * theta ** (-2.0 * i / rot)
                        a0, b0 = vec[i], vec[i + rot // 2]
                        vec[i] = a0 * math.cos(ang) - b0 * math.sin(ang)
                        vec[i + rot // 2] = b0 * math.cos(ang) + a0 * math.sin(ang)
                    return vec
                kh = [rope(norm1p(kk[j * hd:(j + 1) * hd], W[a_ + "k_norm.weight"]))
                      for j in range(nkv)]
                Ks[L].append(kh)
                Vs[L].append([vv[j * hd:(j + 1) * hd] for j in range(nkv)])
                o_all = []
                for hh in range(nh):
                    if is35:   # per head [query hd | gate hd]
                        qh = qg[hh * 2 * hd:hh * 2 * hd + hd]
                        gate = qg[hh * 2 * hd + hd:(hh + 1) * 2 * hd]
                    else:
                        qh, gate = qg[hh * hd:(hh + 1) * hd], None
                    qh = rope(norm1p(qh, W[a_ + "q_norm.weight"]))
                    j = hh // (nh // nkv)
                    n_ctx = len(Ks[L])
                    sc = [sum(qh[d] * Ks[L][t][j][d] for d in range(hd)) / math.sqrt(hd)
                          for t in range(n_ctx)]
                    mx = max(sc)
                    ex = [math.exp(s - mx) for s in sc]
                    tot = sum(ex)
                    oh = [sum(ex[t] / tot * Vs[L][t][j][d] for t in range(n_ctx)) for d in range(hd)]
                    o_all += [oh[d] * (sig(gate[d]) if gate else 1.0) for d in range(hd)]
                mix = mv(W[a_ + "o_proj.weight"], o_all)
            h = [h[i] + mix[i] for i in range(H)]
            x = norm1p(h, W[p + "post_attention_layernorm.weight"])
            m = p + "mlp."
            if E == 0 or L in cfg.get("mlp_only_layers", []):
                act = [silu(a) * b for a, b in zip(mv(W[m + "gate_proj.weight"], x),
                                                   mv(W[m + "up_proj.weight"], x))]
                y = mv(W[m + "down_proj.weight"], act)
                h = [h[i] + y[i] for i in range(H)]
                continue
            lg = mv(W[m + "gate.weight"], x)
            mx = max(lg)
            pr = [math.exp(t - mx) for t in lg]
            pr = [t / sum(pr) for t in pr]
            top = sorted(range(E), key=lambda e: (-pr[e], e))[:topk]
            tot = sum(pr[e] for e in top) if renorm else 1.0
            y = [0.0] * H
            for e in top:
                gu = W[m + "experts.gate_up_proj"][e]
                G, U, D = gu[:I], gu[I:], W[m + "experts.down_proj"][e]
                act = [silu(a) * b for a, b in zip(mv(G, x), mv(U, x))]
                y = [y[i] + pr[e] / tot * v for i, v in enumerate(mv(D, act))]
            if is35:
                sg = sig(sum(W[m + "shared_expert_gate.weight"][0][i] * x[i] for i in range(H)))
                act = [silu(a) * b for a, b in zip(mv(W[m + "shared_expert.gate_proj.weight"], x),
                                                   mv(W[m + "shared_expert.up_proj.weight"], x))]
                y = [y[i] + sg * v
                     for i, v in enumerate(mv(W[m + "shared_expert.down_proj.weight"], act))]
            h = [h[i] + y[i] for i in range(H)]
        hn = norm1p(h, W[P + "norm.weight"])
        head = W[P + "embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
        out.append(mv(head, hn))
    return np.array(out)


def test_tiny_scalar_models():
    cfg = dict(model_type="qwen3_5_moe", hidden_size=4, num_hidden_layers=2, vocab_size=7,
               num_attention_heads=2, num_key_value_heads=1, head_dim=8,
               linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=2,
               linear_value_head_dim=3, linear_conv_kernel_dim=3,
               layer_types=["linear_attention", "full_attention"],
               num_experts=3, num_experts_per_tok=2, moe_intermediate_size=2,
               shared_expert_intermediate_size=2, rope_theta=100.0, partial_rotary_factor=0.5,
               rms_norm_eps=1e-6, max_position_embeddings=64)
    w = RM.random_weights(cfg, 7, "fused")
    # make the 1+w norms and the positions matter more than the random defaults would
    for n in w:
        if n.endswith("layernorm.weight") or n.endswith("q_norm.weight") or n.endswith("k_norm.weight"):
            w[n] = (np.random.default_rng(len(n)).normal(0, 0.5, w[n].shape)).astype(np.float32)
    d, _ = make("tiny_scalar", cfg, weights=w)
    m = R.Model(d)
    toks = [3, 1, 6, 0, 3, 5]
    got, _ = R.forward(m, toks)
    want = scalar_model(w, dict(cfg), toks)
    check("(4) tiny qwen3_5_moe (hidden 4, GDN + gated attn, rot 4 of 8) vs scalar loops",
          rel(got, want), 1e-12, "max rel diff")
    others = {
        "qwen3": dict(model_type="qwen3", hidden_size=4, num_hidden_layers=2, vocab_size=7,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                      intermediate_size=3, rope_theta=100.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=True),
        "qwen3_moe": dict(model_type="qwen3_moe", hidden_size=4, num_hidden_layers=2,
                          vocab_size=7, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                          intermediate_size=3, num_experts=3, num_experts_per_tok=2,
                          moe_intermediate_size=2, norm_topk_prob=False, mlp_only_layers=[1],
                          rope_theta=100.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    }
    for arch, c2 in others.items():
        w2 = RM.random_weights(c2, 8, "fused")
        for n in w2:
            if n.endswith("norm.weight"):
                w2[n] = (1.0 + np.random.default_rng(len(n)).normal(0, 0.5, w2[n].shape)
                         ).astype(np.float32)
        d2, _ = make("tiny_scalar_" + arch, c2, weights=w2)
        got2, _ = R.forward(R.Model(d2), toks)
        want2 = scalar_model(w2, dict(c2), toks)
        check(f"(4) tiny {arch} (hidden 4, plain-w norms, full RoPE) vs scalar loops",
              rel(got2, want2), 1e-12, "max rel diff")


# ------------------------------------------------------------------ GQA / GDN head mapping

def test_head_mapping_equivalence():
    """A model with grouped heads must equal the same model with the groups expanded
    (kv head j copied to query heads j*rep..j*rep+rep-1, i.e. h uses h // rep — docs/model.md §7.4)."""
    cfg = preset("qwen3_5_moe", layer_types=["linear_attention", "full_attention"],
                 num_hidden_layers=2)
    w = RM.random_weights(cfg, 9, "fused")
    P = "model.language_model.layers."
    w2 = dict(w)
    # attention: 4 heads over 2 kv heads -> 4 kv heads
    hd, nkv, rep = cfg["head_dim"], cfg["num_key_value_heads"], 2
    for t in ("k_proj", "v_proj"):
        W = w[f"{P}1.self_attn.{t}.weight"].reshape(nkv, hd, -1)
        w2[f"{P}1.self_attn.{t}.weight"] = np.repeat(W, rep, axis=0).reshape(nkv * rep * hd, -1)
    # GDN: 4 value heads over 2 key heads -> 4 key heads (q and k rows, and their conv taps)
    Hk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
    rep = cfg["linear_num_value_heads"] // Hk
    for t in ("in_proj_qkv.weight", "conv1d.weight"):
        W = w[f"{P}0.linear_attn.{t}"]
        q = W[:Hk * dk].reshape(Hk, dk, *W.shape[1:])
        k = W[Hk * dk:2 * Hk * dk].reshape(Hk, dk, *W.shape[1:])
        q2 = np.repeat(q, rep, axis=0).reshape(Hk * rep * dk, *W.shape[1:])
        k2 = np.repeat(k, rep, axis=0).reshape(Hk * rep * dk, *W.shape[1:])
        w2[f"{P}0.linear_attn.{t}"] = np.concatenate([q2, k2, W[2 * Hk * dk:]], axis=0)
    cfg2 = dict(cfg, num_key_value_heads=cfg["num_attention_heads"],
                linear_num_key_heads=cfg["linear_num_value_heads"])
    d1, _ = make("map_grouped", cfg, weights=w)
    d2, _ = make("map_expanded", cfg2, weights=w2)
    toks = list(np.random.default_rng(4).integers(0, 256, 30))
    a, _ = R.forward(R.Model(d1), toks)
    b, _ = R.forward(R.Model(d2), toks)
    check("GQA and GDN head mapping h -> h // rep (grouped == expanded)", rel(a, b), 1e-13,
          "max rel diff")


# ------------------------------------------------------------------ I/O: bf16, shards, errors

def test_io():
    vals = np.array([1.0, -2.0, 0.5, 3.140625, 1e-3, -65504.0, 0.0], np.float32)
    bits = f32_to_bf16_bits(vals)
    check_true("bf16 bits of 1.0, -2.0, 0.5", list(bits[:3]) == [0x3F80, 0xC000, 0x3F00],
               " ".join(f"{b:04x}" for b in bits))
    back = bf16_to_f32(bits)
    check("bf16 round trip of bf16-representable values", float(np.max(np.abs(back[:4] - vals[:4]))), 0.0)
    check_true("bf16 rounding is to nearest even", f32_to_bf16_bits(np.array([1.00390625], np.float32))[0] == 0x3F80
               and f32_to_bf16_bits(np.array([1.01171875], np.float32))[0] == 0x3F82)
    # a BF16-stored model equals the F32 model whose weights were rounded to bf16 first
    cfg = preset("qwen3_5_moe")
    w = RM.random_weights(cfg, 13, "fused")
    wr = {n: (a if n.endswith("A_log") else bf16_to_f32(f32_to_bf16_bits(a))) for n, a in w.items()}
    d_bf, _ = make("bf16", cfg, weights=w, dtype="BF16")
    d_f32, _ = make("bf16_rounded_f32", cfg, weights=wr, dtype="F32")
    sf = SafetensorsFile(os.path.join(d_bf, "model.safetensors"))
    check_true("BF16 file: bulk BF16, A_log F32",
               sf.dtype("model.language_model.embed_tokens.weight") == "BF16" and
               sf.dtype("model.language_model.layers.0.linear_attn.A_log") == "F32")
    toks = [5, 9, 200, 31, 7]
    a, _ = R.forward(R.Model(d_bf), toks)
    b, _ = R.forward(R.Model(d_f32), toks)
    check("BF16-stored model == F32 model of bf16-rounded weights", float(np.max(np.abs(a - b))), 0.0)
    w16 = {n: (a if n.endswith("A_log") else a.astype(np.float16).astype(np.float32))
           for n, a in w.items()}
    d_f16, _ = make("f16", cfg, weights=w, dtype="F16")
    d_f16r, _ = make("f16_rounded_f32", cfg, weights=w16, dtype="F32")
    a, _ = R.forward(R.Model(d_f16), toks)
    b, _ = R.forward(R.Model(d_f16r), toks)
    check("F16-stored model == F32 model of f16-rounded weights", float(np.max(np.abs(a - b))), 0.0)
    # shards with a non-standard name pattern + index
    d_sh, _ = make("sharded", cfg, weights=w, shards=3,
                   shard_fmt="model.safetensors-{i:05d}-of-{n:05d}.safetensors")
    d_1, _ = make("single", cfg, weights=w)
    a, _ = R.forward(R.Model(d_sh), toks)
    b, _ = R.forward(R.Model(d_1), toks)
    check("3 shards + index == single file", float(np.max(np.abs(a - b))), 0.0)
    # integer dtypes round-trip
    p = os.path.join(TMP, "ints.safetensors")
    write_safetensors(p, {"i": np.arange(6, dtype=np.int32).reshape(2, 3), "f": np.ones(2)})
    sf = SafetensorsFile(p)
    check_true("I32 tensor read back", sf.get("i").tolist() == [[0, 1, 2], [3, 4, 5]] and
               sf.dtype("i") == "I32")


def expect_error(name, fn, needle):
    try:
        fn()
    except (ValueError, KeyError) as e:
        check_true(name, needle in str(e), str(e))
        return
    check_true(name, False, "no error raised")


def test_bad_input():
    cfg = preset("qwen3_moe")
    w = RM.random_weights(cfg, 1, "fused")
    d, _ = make("bad_base", cfg, weights=w)
    bad = os.path.join(TMP, "bad_type")
    RM.write_model(bad, dict(cfg, model_type="llama"), w)
    expect_error("bad input: unsupported model_type", lambda: R.Model(bad), "unsupported model_type")
    w2 = dict(w)
    del w2["model.layers.0.self_attn.k_norm.weight"]
    d2, _ = make("bad_missing", cfg, weights=w2)
    expect_error("bad input: missing tensor named", lambda: R.Model(d2),
                 "model.layers.0.self_attn.k_norm.weight")
    w3 = dict(w)
    w3["model.layers.2.mlp.experts.down_proj"] = np.zeros((8, 24, 64), np.float32)
    d3, _ = make("bad_shape", cfg, weights=w3)
    expect_error("bad input: mis-shaped tensor with expected/actual", lambda: R.Model(d3),
                 "expected shape [8, 64, 24], got [8, 24, 64]")
    m = R.Model(d)
    expect_error("bad input: empty prompt", lambda: R.forward(m, []), "non-empty")
    expect_error("bad input: token out of range", lambda: R.forward(m, [256]), "out of range")
    expect_error("bad input: beyond max_position_embeddings",
                 lambda: R.forward(m, [1] * 4097), "max_position_embeddings")


# ------------------------------------------------------------------ (5) finite, CLI, speed

def test_cli_and_speed():
    # ~1M-parameter qwen3_5_moe, 100 tokens: must run in a few seconds
    cfg = preset("qwen3_5_moe", hidden_size=128, num_hidden_layers=8, vocab_size=1024,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
                 linear_value_head_dim=32, num_experts=16, num_experts_per_tok=4,
                 moe_intermediate_size=32, shared_expert_intermediate_size=64)
    d, w = make("speed_1m", cfg, seed=17)
    nparam = sum(a.size for a in w.values())
    toks = list(np.random.default_rng(0).integers(0, 1024, 100))
    out = os.path.join(TMP, "cli.f32")
    t0 = time.time()
    r = subprocess.run([sys.executable, os.path.join(HERE, "ref_forward.py"), d, "--tokens",
                        ",".join(map(str, toks)), "--out", out, "--print-top", "3"],
                       capture_output=True, text=True)
    dt = time.time() - t0
    check_true("CLI exit 0", r.returncode == 0, r.stderr.strip().splitlines()[0])
    check(f"CLI speed: {nparam / 1e6:.2f}M params, 100 tokens, wall seconds", dt, 10.0, "took")
    with open(out + ".shape") as f:
        shape = f.read().split()
    lg = np.fromfile(out, dtype="<f4")
    check_true("CLI .shape file = '100 1024' and size matches",
               shape == ["100", "1024"] and lg.size == 100 * 1024, " ".join(shape))
    check_true("(5) logits finite (1M model, 100 tokens)", bool(np.all(np.isfinite(lg))))
    ref, _ = R.forward(R.Model(d), toks)
    check("CLI float32 output == library float64 logits rounded", rel(lg.reshape(100, 1024), ref),
          1e-6, "max rel diff")
    lines = [x for x in r.stdout.splitlines() if x.startswith("pos ")]
    check_true("--print-top prints one line per position", len(lines) == 100, lines[-1] if lines else "")
    r2 = subprocess.run([sys.executable, os.path.join(HERE, "ref_forward.py"), d, "--tokens",
                         ",".join(map(str, toks[:10])), "--out", out, "--last-only"],
                        capture_output=True, text=True)
    with open(out + ".shape") as f:
        check_true("--last-only writes one row", r2.returncode == 0 and f.read().split() == ["1", "1024"])
    r3 = subprocess.run([sys.executable, os.path.join(HERE, "ref_forward.py"), d, "--tokens", ""],
                        capture_output=True, text=True)
    check_true("CLI empty --tokens: clean error, exit 2", r3.returncode == 2 and "error" in r3.stderr,
               r3.stderr.strip().splitlines()[-1])
    # all presets, both layouts: finite
    ok = True
    for arch in RM.PRESETS:
        for lay in ("fused", "per_expert"):
            dd, _ = make(f"fin_{arch}_{lay}", preset(arch), seed=2, layout=lay)
            lgt, _ = R.forward(R.Model(dd), list(range(0, 256, 5)))
            ok &= bool(np.all(np.isfinite(lgt))) and float(np.std(lgt)) > 0.1
    check_true("(5) logits finite and non-degenerate for every preset and layout", ok)


def test_mrope_and_embeds():
    """(6) The image-input extensions of forward(): M-RoPE positions with T = H = W give the 1-D
    RoPE's logits bitwise; the slot rule by hand; input_embeds equal to the tokens' own rows
    change nothing; other rows change the logits from their position on only (causal)."""
    slots = R.mrope_slots(32, [11, 11, 10], True)
    want = [0 if i % 3 == 0 or (i % 3 == 2 and i >= 30) else 1 if i % 3 == 1 else 2
            for i in range(32)]
    check_true("(6) interleaved M-RoPE slots [11,11,10]: T 0,3..30, H 1,4..31, W 2,5..29",
               list(slots) == want and list(slots).count(0) == 11 and list(slots).count(2) == 10)
    check_true("(6) contiguous M-RoPE slots [2,1,1]",
               list(R.mrope_slots(4, [2, 1, 1], False)) == [0, 0, 1, 2])
    d, _ = make("mrope", preset("qwen3_5_moe"), seed=4)
    m = R.Model(d)
    toks = list(range(3, 60, 3))
    T = len(toks)
    a, _ = R.forward(m, toks)
    pos = np.repeat(np.arange(T)[:, None], 3, axis=1)
    b, _ = R.forward(m, toks, mrope_positions=pos)
    check("(6) M-RoPE with T = H = W == 1-D RoPE", float(np.max(np.abs(a - b))), 0.0)
    pos2 = pos.copy()
    pos2[5:9, 1] += 3
    cc, _ = R.forward(m, toks, mrope_positions=pos2)
    check_true("(6) an H position change moves the logits from that token on only",
               float(np.max(np.abs(cc[:5] - a[:5]))) == 0.0 and float(np.max(np.abs(cc[5:] - a[5:]))) > 1e-6)
    E = m.w("embed_tokens.weight")
    e1, _ = R.forward(m, toks, input_embeds=([2, 7], E[[toks[2], toks[7]]]))
    check("(6) input_embeds = the tokens' own rows", float(np.max(np.abs(e1 - a))), 0.0)
    rows = np.random.default_rng(1).standard_normal((2, E.shape[1]))
    e2, _ = R.forward(m, toks, input_embeds=([6, 7], rows))
    check_true("(6) other input_embeds rows change the logits from their position on only",
               float(np.max(np.abs(e2[:6] - a[:6]))) == 0.0 and float(np.max(np.abs(e2[6:] - a[6:]))) > 1e-6)


def main():
    t0 = time.time()
    test_primitives_by_hand()
    test_chunked_vs_recurrent()
    test_gdn_chunked_model()
    test_prefill_vs_incremental()
    test_expert_layouts()
    test_tiny_scalar_models()
    test_head_mapping_equivalence()
    test_io()
    test_bad_input()
    test_cli_and_speed()
    test_mrope_and_embeds()
    bad = [n for n, ok in RESULTS if not ok]
    keep = "--keep" in sys.argv[1:]
    print(f"\n{len(RESULTS) - len(bad)}/{len(RESULTS)} passed in {time.time() - t0:.1f}s"
          + (f" (fixtures kept in {TMP})" if keep else ""))
    if not keep:
        shutil.rmtree(TMP, ignore_errors=True)
    if bad:
        print("FAILED: " + "; ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
