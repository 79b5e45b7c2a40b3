#!/usr/bin/python3
"""Independent float64 numpy reference forward pass for qwen3_5_moe, qwen3, qwen3_moe and qwen2.

Written from docs/model.md (section numbers below are that spec's) and,
for qwen3 / qwen3_moe, from the HF transformers model definitions as remembered; for qwen2 from
HF transformers' configuration_qwen2.py / modeling_qwen2.py (docs/model.md "Qwen2"); never from
the C code. Slow and obvious on purpose: every formula is spelled out once, all math in
float64 (weights are converted to float64 on load), a loop over tokens where the model is
sequential (attention, the delta rule), numpy only across heads / dims.

Usage:
  /usr/bin/python3 tools/ref/ref_forward.py MODEL_DIR --tokens 1,2,3 --out logits.f32
      [--last-only] [--print-top 5] [--gdn recurrent|chunked] [--split N] [--dump-hidden DIR]
writes raw little-endian float32 [n_tokens][vocab] (one row with --last-only) and
logits.f32.shape containing "n_rows vocab".
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import SafetensorsModel  # noqa: E402

QWEN35_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")
SUPPORTED = QWEN35_TYPES + ("qwen3", "qwen3_moe", "qwen2")


# ----------------------------------------------------------------------------- config (§1)

class Config:
    """Everything the forward needs, normalised across the three architectures."""

    def __repr__(self):
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items())
                                     if k != "raw") + ")"


def _need(d, key, where):
    if key not in d or d[key] is None:
        raise ValueError(f"config.json: missing required field '{key}' ({where})")
    return d[key]


def parse_config(raw):
    """config.json dict -> Config. qwen3_5_moe reads the nested text_config (docs/model.md §1)."""
    mt = raw.get("model_type")
    if mt not in SUPPORTED:
        raise ValueError(f"config.json: unsupported model_type {mt!r} (supported: "
                         f"{', '.join(SUPPORTED)})")
    c = Config()
    c.raw = raw
    c.arch = "qwen3_5_moe" if mt in QWEN35_TYPES else mt
    t = raw.get("text_config", raw) if c.arch == "qwen3_5_moe" else raw
    where = "text_config" if t is not raw else "top level"
    c.hidden = int(_need(t, "hidden_size", where))
    c.n_layers = int(_need(t, "num_hidden_layers", where))
    c.vocab = int(_need(t, "vocab_size", where))
    c.n_heads = int(_need(t, "num_attention_heads", where))
    c.n_kv = int(t.get("num_key_value_heads") or c.n_heads)
    c.head_dim = t.get("head_dim")  # None -> inferred from q_norm's shape in Model
    c.eps = float(t.get("rms_norm_eps", 1e-6))
    act = t.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"config.json: hidden_act {act!r} unsupported (only silu)")
    # tie_word_embeddings: the top-level key governs a nested (multimodal) config, as in HF
    tie = raw.get("tie_word_embeddings", t.get("tie_word_embeddings", False))
    c.tie = bool(tie)
    c.max_pos = t.get("max_position_embeddings")

    # RoPE: rope_parameters (transformers v5) or rope_scaling + top-level keys (older configs)
    rp = t.get("rope_parameters") or t.get("rope_scaling") or {}
    rtype = rp.get("rope_type", rp.get("type", "default"))
    if rtype not in ("default", None):
        raise ValueError(f"config.json: rope_type {rtype!r} unsupported by the reference")
    is35 = c.arch == "qwen3_5_moe"
    c.rope_theta = float(rp.get("rope_theta", t.get("rope_theta", 1e7 if is35 else 10000.0)))
    c.partial_rotary_factor = float(rp.get("partial_rotary_factor",
                                           t.get("partial_rotary_factor", 0.25 if is35 else 1.0)))
    # M-RoPE (docs/model.md "Vision tower", 3-D positions): which of (T, H, W) drives each
    # rotary frequency slot; only used when forward() is given mrope_positions
    sec = rp.get("mrope_section", t.get("mrope_section"))
    c.mrope_section = [int(x) for x in sec] if sec else ([11, 11, 10] if is35 else None)
    c.mrope_interleaved = bool(rp.get("mrope_interleaved", t.get("mrope_interleaved", is35)))

    # Norm flavour and attention output gate
    c.norm_one_plus = is35                # §2.1: Qwen3.5 norms are x*rms*(1+w); Qwen3: x*rms*w
    c.attn_output_gate = bool(t.get("attn_output_gate", True)) if is35 else False
    # Qwen2Attention: q/k/v Linear layers with bias=True always, o_proj bias=False, and no
    # q_norm / k_norm (Qwen3 added those); Qwen3/3.5 biases follow attention_bias (optional here)
    c.qk_norm = c.arch != "qwen2"
    c.qkv_bias_required = c.arch == "qwen2"

    # Layer types (§1): layer_types list or full_attention_interval (full at (i+1)%n==0)
    if is35:
        lt = t.get("layer_types")
        if lt is None:
            n = int(t.get("full_attention_interval", 4))
            lt = ["full_attention" if (i + 1) % n == 0 else "linear_attention"
                  for i in range(c.n_layers)]
        if len(lt) != c.n_layers:
            raise ValueError(f"config.json: layer_types has {len(lt)} entries, "
                             f"num_hidden_layers is {c.n_layers}")
        for x in lt:
            if x not in ("full_attention", "linear_attention"):
                raise ValueError(f"config.json: unknown layer type {x!r}")
        c.layer_types = list(lt)
    else:
        if t.get("use_sliding_window"):
            raise ValueError("config.json: use_sliding_window=true unsupported by the reference")
        for x in t.get("layer_types") or []:
            if x != "full_attention":
                raise ValueError(f"config.json: layer type {x!r} unsupported by the reference")
        c.layer_types = ["full_attention"] * c.n_layers

    # Gated DeltaNet dims (§1, §2.4)
    if is35 and "linear_attention" in c.layer_types:
        c.lin_k_heads = int(_need(t, "linear_num_key_heads", where))
        c.lin_v_heads = int(_need(t, "linear_num_value_heads", where))
        c.lin_k_dim = int(_need(t, "linear_key_head_dim", where))
        c.lin_v_dim = int(_need(t, "linear_value_head_dim", where))
        c.conv_kernel = int(t.get("linear_conv_kernel_dim", 4))
        if c.lin_v_heads % c.lin_k_heads:
            raise ValueError("config.json: linear_num_value_heads must be a multiple of "
                             "linear_num_key_heads")

    # MLP per layer.
    #  qwen3_moe: MoE where (i not in mlp_only_layers) and num_experts > 0 and
    #             (i+1) % decoder_sparse_step == 0, else a dense MLP of intermediate_size (HF rule).
    #  qwen3_5_moe: every layer is MoE (HF Qwen3_5MoeDecoderLayer builds the sparse block
    #             unconditionally; the real config has mlp_only_layers = []); other keys ignored.
    c.warnings = []
    c.num_experts = int(t.get("num_experts", 0) or 0) if c.arch not in ("qwen3", "qwen2") else 0
    if is35:
        if c.num_experts <= 0:
            raise ValueError("config.json: qwen3_5_moe needs num_experts > 0")
        if t.get("mlp_only_layers") or int(t.get("decoder_sparse_step", 1) or 1) != 1:
            c.warnings.append("mlp_only_layers / decoder_sparse_step ignored for qwen3_5_moe "
                              "(every layer is MoE, as in HF)")
        c.mlp_types = ["moe"] * c.n_layers
    else:
        step = int(t.get("decoder_sparse_step", 1) or 1)
        only = set(t.get("mlp_only_layers", []) or [])
        c.mlp_types = ["moe" if (c.num_experts > 0 and i not in only and (i + 1) % step == 0)
                       else "dense" for i in range(c.n_layers)]
    c.intermediate = t.get("intermediate_size")
    if "dense" in c.mlp_types and c.intermediate is None:
        raise ValueError("config.json: intermediate_size required for dense MLP layers")
    if "moe" in c.mlp_types:
        c.top_k = int(_need(t, "num_experts_per_tok", where))
        c.moe_intermediate = int(_need(t, "moe_intermediate_size", where))
        # qwen3_moe: renormalise only if norm_topk_prob (HF Qwen3MoeConfig default False).
        # qwen3_5_moe: the HF router always renormalises (docs/model.md §1, §2.5); the key is ignored.
        if is35:
            if t.get("norm_topk_prob") is False:
                c.warnings.append("norm_topk_prob=false ignored for qwen3_5_moe (HF router "
                                  "always renormalises)")
            c.norm_topk_prob = True
        else:
            c.norm_topk_prob = bool(t.get("norm_topk_prob", False))
        # shared expert: qwen3_5_moe only (qwen3_moe has none)
        c.shared_intermediate = int(t.get("shared_expert_intermediate_size", 0) or 0) if is35 else 0
        if c.top_k > c.num_experts:
            raise ValueError("config.json: num_experts_per_tok > num_experts")
    # MTP head (§2.7): its layers are full-attention MoE layers under "mtp.layers.N."
    c.mtp_layers = int(t.get("mtp_num_hidden_layers", 0) or 0) if is35 else 0
    return c


# ----------------------------------------------------------------------------- primitives

def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    """torch.nn.functional.softplus(beta=1, threshold=20): x where x>20, else log(1+e^x)."""
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rmsnorm(x, w, eps, one_plus):
    """§2.1 over the last axis: x * rsqrt(mean(x^2)+eps) * (1+w)   (one_plus, Qwen3.5)
                                 x * rsqrt(mean(x^2)+eps) * w       (Qwen3 / Qwen3-MoE)"""
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * r * ((1.0 + w) if one_plus else w)


def gated_rmsnorm(x, w, z, eps):
    """§2.1 GDN output norm (linear_attn.norm), NOT zero-centred: (x*rsqrt(mean x^2+eps))*w*silu(z),
    over the last axis (one value head of dv)."""
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return (x * r) * w * silu(z)


def l2norm(x, eps=1e-6):
    """§2.4 / §7.7: x * rsqrt(sum(x^2) + 1e-6) over the last axis (HF/FLA form)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def rope_neox(x, positions, rotary_dim, theta):
    """§2.3 / §7.1: NeoX (rotate_half) RoPE on the first rotary_dim dims of each head.
    x: [T, heads, head_dim]; positions: [T]. For i < rotary_dim/2 the pair is (i, i+rotary_dim/2),
    inv_freq[i] = theta^(-2i/rotary_dim), angle = pos*inv_freq[i];
    x[i] <- a cos - b sin, x[i+half] <- b cos + a sin (a=x[i], b=x[i+half]); the rest untouched.
    Angles in float64 (HF computes inv_freq and angles in float32)."""
    half = rotary_dim // 2
    if half == 0:
        return x.copy()
    inv_freq = theta ** (-(2.0 * np.arange(half, dtype=np.float64)) / rotary_dim)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]   # [T, half]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    a = x[..., :half]
    b = x[..., half:rotary_dim]
    out = x.copy()
    out[..., :half] = a * cos - b * sin
    out[..., half:rotary_dim] = b * cos + a * sin
    return out


def mrope_slots(half, section, interleaved):
    """The position component (0 = T, 1 = H, 2 = W) of each of the `half` rotary frequency
    slots. Interleaved (Qwen3-VL / Qwen3.5, HF apply_interleaved_mrope): slot i is H when
    i % 3 == 1 and i < 3 * section[1], W when i % 3 == 2 and i < 3 * section[2], else T.
    Contiguous (Qwen2-VL): the first section[0] slots T, the next section[1] H, then W."""
    comp = np.zeros(half, dtype=np.int64)
    for i in range(half):
        if interleaved:
            if i % 3 == 1 and i < 3 * section[1]:
                comp[i] = 1
            elif i % 3 == 2 and i < 3 * section[2]:
                comp[i] = 2
        else:
            comp[i] = 0 if i < section[0] else 1 if i < section[0] + section[1] else 2
    return comp


def rope_mrope(x, pos3, rotary_dim, theta, section, interleaved):
    """rope_neox with a 3-D position per token (pos3 [T, 3]: T, H, W): slot i's angle is
    pos3[:, comp_i] * inv_freq[i] (mrope_slots). With T = H = W it equals rope_neox."""
    half = rotary_dim // 2
    if half == 0:
        return x.copy()
    inv_freq = theta ** (-(2.0 * np.arange(half, dtype=np.float64)) / rotary_dim)
    comp = mrope_slots(half, section, interleaved)
    pos3 = np.asarray(pos3, dtype=np.float64)
    ang = pos3[:, comp] * inv_freq[None, :]                                      # [T, half]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    a = x[..., :half]
    b = x[..., half:rotary_dim]
    out = x.copy()
    out[..., :half] = a * cos - b * sin
    out[..., half:rotary_dim] = b * cos + a * sin
    return out


# ----------------------------------------------------------------------------- delta rule (§2.4)

def gdn_recurrent(q, k, v, g, beta, S):
    """Gated delta rule, token by token, exactly the §2.4 decode step (float64).
    q, k: [T, H, dk] (already l2-normalised, q scaled, expanded to value heads);
    v: [T, H, dv]; g, beta: [T, H]; S: [H, dk, dv] initial state (not modified).
    Per token:  S *= e^g;  u = S^T k;  d = (v - u) * beta;  S += k d^T;  o = S^T q.
    Returns (o [T, H, dv], S_final)."""
    S = S.copy()
    T = q.shape[0]
    o = np.zeros(v.shape, dtype=np.float64)
    for t in range(T):
        S = S * np.exp(g[t])[:, None, None]
        u = np.einsum("hmn,hm->hn", S, k[t])
        d = (v[t] - u) * beta[t][:, None]
        S = S + k[t][:, :, None] * d[:, None, :]
        o[t] = np.einsum("hmn,hm->hn", S, q[t])
    return o, S


def gdn_chunked(q, k, v, g, beta, S, chunk=64):
    """The same rule in the chunked (WY) form of §2.4 (HF torch_chunk_gated_delta_rule), one
    value head at a time, chunks of `chunk` tokens from the start of this call (the last one
    may be shorter: same as HF's zero padding). Within a chunk, with gamma = cumsum(g):
      D[i,j] = exp(gamma_i - gamma_j) for j <= i else 0
      L = strict_lower((k*beta) k^T . D);  U = (I+L)^-1 (v*beta);  W = (I+L)^-1 (k*beta*e^gamma)
      A = lower_incl_diag(q k^T . D)
      Vn = U - W S;  O = (q*e^gamma) S + A Vn;  S <- e^gamma_last S + (k*e^(gamma_last-gamma))^T Vn
    Returns (o [T, H, dv], S_final)."""
    T, H, _ = q.shape
    o = np.zeros(v.shape, dtype=np.float64)
    S_out = np.empty_like(S)
    for h in range(H):
        Sh = S[h].copy()                                   # [dk, dv]
        for c0 in range(0, T, chunk):
            c1 = min(T, c0 + chunk)
            n = c1 - c0
            qc, kc, vc = q[c0:c1, h], k[c0:c1, h], v[c0:c1, h]
            gc, bc = g[c0:c1, h], beta[c0:c1, h]
            gam = np.cumsum(gc)                            # gamma_t, <= 0, decreasing
            lower = np.tril(np.ones((n, n), dtype=bool))   # j <= i
            diff = np.where(lower, gam[:, None] - gam[None, :], 0.0)
            D = np.where(lower, np.exp(diff), 0.0)
            kb = kc * bc[:, None]
            vb = vc * bc[:, None]
            Lm = np.tril((kb @ kc.T) * D, -1)
            IL = np.eye(n) + Lm
            U = np.linalg.solve(IL, vb)
            W = np.linalg.solve(IL, kb * np.exp(gam)[:, None])
            A = np.tril((qc @ kc.T) * D)
            Vn = U - W @ Sh
            o[c0:c1, h] = (qc * np.exp(gam)[:, None]) @ Sh + A @ Vn
            Sh = np.exp(gam[-1]) * Sh + (kc * np.exp(gam[-1] - gam)[:, None]).T @ Vn
        S_out[h] = Sh
    return o, S_out


# ----------------------------------------------------------------------------- model / weights

class DictTensors:
    """The part of SafetensorsModel's interface Model uses, over a {name: array} dict."""

    def __init__(self, tensors):
        self.t = tensors

    def __contains__(self, name):
        return name in self.t

    def keys(self):
        return list(self.t.keys())

    def shape(self, name):
        return tuple(np.shape(self.t[name]))

    def get(self, name, index=None):
        if name not in self.t:
            raise KeyError(f"missing tensor {name}")
        a = self.t[name] if index is None else self.t[name][index]
        return np.asarray(a, dtype=np.float64)


class Model:
    """Config + lazily converted float64 weights (cached), with every expected tensor's shape
    checked at load (clear error naming the tensor, expected and actual shape)."""

    def __init__(self, model_dir, dtype_check=True, tensors=None, config=None):
        """tensors: {HF name: array} instead of model_dir's safetensors (e.g.
        gguf_np.gguf_to_hf_arrays); config: the config.json dict instead of model_dir's."""
        self.dir = model_dir
        if config is None:
            with open(os.path.join(model_dir, "config.json")) as f:
                config = json.load(f)
        self.cfg = parse_config(config)
        self.st = SafetensorsModel(model_dir) if tensors is None else DictTensors(tensors)
        c = self.cfg
        if c.arch == "qwen3_5_moe":
            self.prefix = ("model.language_model." if any(
                n.startswith("model.language_model.") for n in self.st.keys()) else "model.")
        else:
            self.prefix = "model."
        if c.head_dim is None:
            qn = self.prefix + self._first_attn_name("q_norm.weight")
            if qn is None or qn not in self.st:
                c.head_dim = c.hidden // c.n_heads
            else:
                c.head_dim = self.st.shape(qn)[0]
        c.head_dim = int(c.head_dim)
        c.rotary_dim = int(c.head_dim * c.partial_rotary_factor)
        if c.rotary_dim % 2:
            raise ValueError(f"rotary_dim {c.rotary_dim} is odd")
        if c.n_heads % c.n_kv:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        # tied: logits use embed_tokens (a stored lm_head.weight is then ignored, as HF ties it)
        self.lm_head_name = self.prefix + "embed_tokens.weight" if c.tie else "lm_head.weight"
        self._cache = {}
        self.fused_experts = {}
        self._validate()

    def _first_attn_name(self, suffix):
        for L, lt in enumerate(self.cfg.layer_types):
            if lt == "full_attention":
                return f"layers.{L}.self_attn.{suffix}"
        return None

    # -- shapes every tensor must have
    def expected(self):
        c, P = self.cfg, self.prefix
        e = {P + "embed_tokens.weight": (c.vocab, c.hidden), P + "norm.weight": (c.hidden,)}
        if self.lm_head_name == "lm_head.weight":
            e["lm_head.weight"] = (c.vocab, c.hidden)
        H, hd = c.hidden, c.head_dim
        opt = {}
        for L in range(c.n_layers):
            p = f"{P}layers.{L}."
            e[p + "input_layernorm.weight"] = (H,)
            e[p + "post_attention_layernorm.weight"] = (H,)
            if c.layer_types[L] == "full_attention":
                a = p + "self_attn."
                qrows = c.n_heads * hd * (2 if c.attn_output_gate else 1)
                e[a + "q_proj.weight"] = (qrows, H)
                e[a + "k_proj.weight"] = (c.n_kv * hd, H)
                e[a + "v_proj.weight"] = (c.n_kv * hd, H)
                e[a + "o_proj.weight"] = (H, c.n_heads * hd)
                if c.qk_norm:
                    e[a + "q_norm.weight"] = (hd,)
                    e[a + "k_norm.weight"] = (hd,)
                bias = e if c.qkv_bias_required else opt
                bias[a + "q_proj.bias"] = (qrows,)
                bias[a + "k_proj.bias"] = (c.n_kv * hd,)
                bias[a + "v_proj.bias"] = (c.n_kv * hd,)
                if c.arch != "qwen2":   # Qwen2's o_proj has no bias
                    opt[a + "o_proj.bias"] = (H,)
            else:
                g = p + "linear_attn."
                kd, vd = c.lin_k_heads * c.lin_k_dim, c.lin_v_heads * c.lin_v_dim
                e[g + "in_proj_qkv.weight"] = (2 * kd + vd, H)
                e[g + "in_proj_z.weight"] = (vd, H)
                e[g + "in_proj_b.weight"] = (c.lin_v_heads, H)
                e[g + "in_proj_a.weight"] = (c.lin_v_heads, H)
                e[g + "conv1d.weight"] = (2 * kd + vd, 1, c.conv_kernel)
                opt[g + "conv1d.bias"] = (2 * kd + vd,)
                e[g + "dt_bias"] = (c.lin_v_heads,)
                e[g + "A_log"] = (c.lin_v_heads,)
                e[g + "norm.weight"] = (c.lin_v_dim,)
                e[g + "out_proj.weight"] = (H, vd)
            m = p + "mlp."
            if c.mlp_types[L] == "dense":
                I = int(c.intermediate)
                e[m + "gate_proj.weight"] = (I, H)
                e[m + "up_proj.weight"] = (I, H)
                e[m + "down_proj.weight"] = (H, I)
            else:
                E, I = c.num_experts, c.moe_intermediate
                e[m + "gate.weight"] = (E, H)
                if (m + "experts.gate_up_proj") in self.st:       # fused 3-D (docs/model.md §3)
                    self.fused_experts[L] = True
                    e[m + "experts.gate_up_proj"] = (E, 2 * I, H)
                    e[m + "experts.down_proj"] = (E, H, I)
                else:                                              # per-expert 2-D
                    self.fused_experts[L] = False
                    for x in range(E):
                        ep = f"{m}experts.{x}."
                        e[ep + "gate_proj.weight"] = (I, H)
                        e[ep + "up_proj.weight"] = (I, H)
                        e[ep + "down_proj.weight"] = (H, I)
                if c.shared_intermediate:
                    S = c.shared_intermediate
                    e[m + "shared_expert.gate_proj.weight"] = (S, H)
                    e[m + "shared_expert.up_proj.weight"] = (S, H)
                    e[m + "shared_expert.down_proj.weight"] = (H, S)
                    e[m + "shared_expert_gate.weight"] = (1, H)
        if c.mtp_layers and "mtp.fc.weight" in self.st:   # §2.7, checked when present
            for n in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                      "mtp.norm.weight"):
                e[n] = (H,)
            e["mtp.fc.weight"] = (H, 2 * H)
            for j in range(c.mtp_layers):
                p = f"mtp.layers.{j}."
                for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
                    e[p + n] = (H,)
                a = p + "self_attn."
                qrows = c.n_heads * hd * (2 if c.attn_output_gate else 1)
                e[a + "q_proj.weight"] = (qrows, H)
                e[a + "k_proj.weight"] = (c.n_kv * hd, H)
                e[a + "v_proj.weight"] = (c.n_kv * hd, H)
                e[a + "o_proj.weight"] = (H, c.n_heads * hd)
                e[a + "q_norm.weight"] = (hd,)
                e[a + "k_norm.weight"] = (hd,)
                m, E, I = p + "mlp.", c.num_experts, c.moe_intermediate
                e[m + "gate.weight"] = (E, H)
                if (m + "experts.gate_up_proj") in self.st:
                    e[m + "experts.gate_up_proj"] = (E, 2 * I, H)
                    e[m + "experts.down_proj"] = (E, H, I)
                else:
                    for x in range(E):
                        ep = f"{m}experts.{x}."
                        e[ep + "gate_proj.weight"] = (I, H)
                        e[ep + "up_proj.weight"] = (I, H)
                        e[ep + "down_proj.weight"] = (H, I)
                if c.shared_intermediate:
                    S = c.shared_intermediate
                    e[m + "shared_expert.gate_proj.weight"] = (S, H)
                    e[m + "shared_expert.up_proj.weight"] = (S, H)
                    e[m + "shared_expert.down_proj.weight"] = (H, S)
                    e[m + "shared_expert_gate.weight"] = (1, H)
        return e, opt

    def _validate(self):
        exp, opt = self.expected()
        for name, shp in exp.items():
            if name not in self.st:
                raise ValueError(f"{self.dir}: missing tensor {name} (expected shape {list(shp)})")
            got = self.st.shape(name)
            if tuple(got) != tuple(shp):
                raise ValueError(f"{self.dir}: tensor {name}: expected shape {list(shp)}, "
                                 f"got {list(got)}")
        for name, shp in opt.items():
            if name in self.st and tuple(self.st.shape(name)) != tuple(shp):
                raise ValueError(f"{self.dir}: tensor {name}: expected shape {list(shp)}, "
                                 f"got {list(self.st.shape(name))}")
        known = set(exp) | set(opt)
        self.unused = [n for n in self.st.keys() if n not in known]

    # -- weight access (float64)
    def w(self, name, optional=False):
        """Tensor under the decoder prefix (or top-level lm_head), as float64, cached."""
        full = name if name == self.lm_head_name or name.startswith("mtp.") else self.prefix + name
        if full not in self._cache:
            if optional and full not in self.st:
                return None
            self._cache[full] = self.st.get(full)
        return self._cache[full]

    def expert(self, L, e):
        """(G [I,H], U [I,H], D [H,I]) of routed expert e in layer L. Fused: gate_up_proj[e]
        rows 0..I-1 are the gate, I..2I-1 the up projection (§2.5); down_proj[e] is [H, I]."""
        key = ("expert", L, e)
        if key not in self._cache:
            m = (L if isinstance(L, str) else f"{self.prefix}layers.{L}.") + "mlp.experts."
            I = self.cfg.moe_intermediate
            fused = (m + "gate_up_proj") in self.st if isinstance(L, str) else self.fused_experts[L]
            if fused:
                gu = self.st.get(m + "gate_up_proj", index=e)
                G, U = gu[:I], gu[I:]
                D = self.st.get(m + "down_proj", index=e)
            else:
                G = self.st.get(f"{m}{e}.gate_proj.weight")
                U = self.st.get(f"{m}{e}.up_proj.weight")
                D = self.st.get(f"{m}{e}.down_proj.weight")
            self._cache[key] = (G, U, D)
        return self._cache[key]


def layer_prefix(L):
    """Tensor-name prefix of decoder layer L: an index into the main stack, or an MTP layer's
    own prefix ("mtp.layers.0.", §2.7: always full attention + MoE)."""
    return L if isinstance(L, str) else f"layers.{L}."


def linear(x, W, b=None):
    """HF Linear: weight [out, in], y = x W^T (+ b). x: [T, in]."""
    y = x @ W.T
    return y if b is None else y + b


class State:
    """Per-sequence cache: K/V per attention layer (after k_norm + RoPE, §2.6), conv state
    (last K-1 pre-conv qkv columns, zero-initialised) and recurrent state S [Hv, dk, dv] per GDN
    layer, plus the next position."""

    def __init__(self, model):
        c = model.cfg
        self.pos = 0
        self.k, self.v, self.conv, self.S = {}, {}, {}, {}
        for L, lt in enumerate(c.layer_types):
            if lt == "full_attention":
                self.k[L] = np.zeros((0, c.n_kv, c.head_dim))
                self.v[L] = np.zeros((0, c.n_kv, c.head_dim))
            else:
                C = 2 * c.lin_k_heads * c.lin_k_dim + c.lin_v_heads * c.lin_v_dim
                self.conv[L] = np.zeros((C, c.conv_kernel - 1))
                self.S[L] = np.zeros((c.lin_v_heads, c.lin_k_dim, c.lin_v_dim))

    def copy(self):
        s = State.__new__(State)
        s.pos = self.pos
        s.k = {L: a.copy() for L, a in self.k.items()}
        s.v = {L: a.copy() for L, a in self.v.items()}
        s.conv = {L: a.copy() for L, a in self.conv.items()}
        s.S = {L: a.copy() for L, a in self.S.items()}
        return s


# ----------------------------------------------------------------------------- mixers

def attention(model, L, x, state, pos3=None):
    """§2.3 gated full attention (qwen3_5_moe) / plain Qwen3 attention (no gate, plain-w norms,
    rotary over the whole head) / Qwen2 attention (Qwen3's without q/k norms, q/k/v biases). x: [T, H] normed input; appends to state's K/V. pos3: [T, 3]
    M-RoPE positions (rope_mrope) instead of state.pos + t (the causal mask is by order, not by
    position)."""
    c = model.cfg
    a = layer_prefix(L) + "self_attn."
    T, nh, nkv, hd = x.shape[0], c.n_heads, c.n_kv, c.head_dim
    qa = linear(x, model.w(a + "q_proj.weight"), model.w(a + "q_proj.bias", True))
    if c.attn_output_gate:
        qg = qa.reshape(T, nh, 2 * hd)          # §7.3 per head: [query hd | gate hd]
        q, gate = qg[:, :, :hd], qg[:, :, hd:]
    else:
        q, gate = qa.reshape(T, nh, hd), None
    k = linear(x, model.w(a + "k_proj.weight"), model.w(a + "k_proj.bias", True)).reshape(T, nkv, hd)
    v = linear(x, model.w(a + "v_proj.weight"), model.w(a + "v_proj.bias", True)).reshape(T, nkv, hd)
    if c.qk_norm:   # per head; gate not normed. Qwen2: no q/k norm, RoPE on the raw projections
        q = rmsnorm(q, model.w(a + "q_norm.weight"), c.eps, c.norm_one_plus)
        k = rmsnorm(k, model.w(a + "k_norm.weight"), c.eps, c.norm_one_plus)
    if pos3 is None:
        pos = state.pos + np.arange(T)
        q = rope_neox(q, pos, c.rotary_dim, c.rope_theta)
        k = rope_neox(k, pos, c.rotary_dim, c.rope_theta)
    else:
        if c.mrope_section is None:
            raise ValueError("forward: mrope_positions need mrope_section in the config")
        q = rope_mrope(q, pos3, c.rotary_dim, c.rope_theta, c.mrope_section, c.mrope_interleaved)
        k = rope_mrope(k, pos3, c.rotary_dim, c.rope_theta, c.mrope_section, c.mrope_interleaved)
    K = np.concatenate([state.k[L], k], axis=0)     # [P+T, nkv, hd]
    V = np.concatenate([state.v[L], v], axis=0)
    P = state.k[L].shape[0]
    kv_of_head = np.arange(nh) // (nh // nkv)       # GQA: query head h reads kv head h // group
    scale = hd ** -0.5
    o = np.zeros((T, nh, hd))
    for t in range(T):
        n = P + t + 1                               # causal: keys 0..pos
        Kh = K[:n][:, kv_of_head]                   # [n, nh, hd]
        Vh = V[:n][:, kv_of_head]
        s = np.einsum("hd,nhd->hn", q[t], Kh) * scale
        p = softmax(s, axis=-1)
        o[t] = np.einsum("hn,nhd->hd", p, Vh)
    state.k[L], state.v[L] = K, V
    o = o.reshape(T, nh * hd)
    if gate is not None:
        o = o * sigmoid(gate.reshape(T, nh * hd))   # sigmoid output gate, same head-major order
    ob = None if c.arch == "qwen2" else model.w(a + "o_proj.bias", True)   # Qwen2: bias=False
    return linear(o, model.w(a + "o_proj.weight"), ob)


def gated_deltanet(model, L, x, state, mode="recurrent", chunk=64):
    """§2.4 Gated DeltaNet. x: [T, H] normed input. Updates state.conv[L] and state.S[L]."""
    c = model.cfg
    g_ = f"layers.{L}.linear_attn."
    T = x.shape[0]
    Hk, Hv, dk, dv, K = c.lin_k_heads, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim, c.conv_kernel
    qkv = linear(x, model.w(g_ + "in_proj_qkv.weight"))       # [T, 2*Hk*dk + Hv*dv]  q|k|v
    z = linear(x, model.w(g_ + "in_proj_z.weight"))           # [T, Hv*dv]
    b = linear(x, model.w(g_ + "in_proj_b.weight"))           # [T, Hv]
    a = linear(x, model.w(g_ + "in_proj_a.weight"))           # [T, Hv]

    # causal depthwise conv1d over the qkv channels (z, a, b not convolved), then SiLU.
    # buf = [K-1 previous pre-conv inputs | this call's inputs]; y_t = sum_j w[:, j] * buf[:, t+j]
    cw = model.w(g_ + "conv1d.weight")[:, 0, :]               # [C, K]; w[:, K-1] hits the newest
    cb = model.w(g_ + "conv1d.bias", True)
    buf = np.concatenate([state.conv[L], qkv.T], axis=1)      # [C, K-1+T]
    y = np.empty_like(qkv)
    for t in range(T):
        y[t] = np.sum(cw * buf[:, t:t + K], axis=1)
    if cb is not None:
        y = y + cb
    state.conv[L] = buf[:, buf.shape[1] - (K - 1):].copy()    # last K-1 raw inputs
    y = silu(y)

    q = y[:, :Hk * dk].reshape(T, Hk, dk)
    k = y[:, Hk * dk:2 * Hk * dk].reshape(T, Hk, dk)
    v = y[:, 2 * Hk * dk:].reshape(T, Hv, dv)
    q = l2norm(q) * dk ** -0.5
    k = l2norm(k)
    k_of_v = np.arange(Hv) // (Hv // Hk)                      # §7.4: value head h uses key head h/rep
    q, k = q[:, k_of_v], k[:, k_of_v]                         # [T, Hv, dk]
    beta = sigmoid(b)
    g = -np.exp(model.w(g_ + "A_log"))[None, :] * softplus(a + model.w(g_ + "dt_bias")[None, :])
    if mode == "recurrent":
        o, state.S[L] = gdn_recurrent(q, k, v, g, beta, state.S[L])
    elif mode == "chunked":
        o, state.S[L] = gdn_chunked(q, k, v, g, beta, state.S[L], chunk)
    else:
        raise ValueError(f"unknown gdn mode {mode!r}")
    o = gated_rmsnorm(o, model.w(g_ + "norm.weight"), z.reshape(T, Hv, dv), c.eps)
    return linear(o.reshape(T, Hv * dv), model.w(g_ + "out_proj.weight"))


def swiglu(x, G, U, D):
    """Down( silu(G x) * (U x) ) for one token x [H]."""
    return D @ (silu(G @ x) * (U @ x))


def mlp(model, L, x, trace=None):
    """Dense SwiGLU MLP or §2.5 MoE block (softmax -> top-k -> optional renormalise, routed
    experts, plus the sigmoid-gated shared expert where present). x: [T, H] normed input."""
    c = model.cfg
    m = layer_prefix(L) + "mlp."
    T = x.shape[0]
    out = np.zeros_like(x)
    if not isinstance(L, str) and c.mlp_types[L] == "dense":
        G, U, D = (model.w(m + "gate_proj.weight"), model.w(m + "up_proj.weight"),
                   model.w(m + "down_proj.weight"))
        for t in range(T):
            out[t] = swiglu(x[t], G, U, D)
        return out
    Wr = model.w(m + "gate.weight")
    for t in range(T):
        p = softmax(Wr @ x[t])
        top = np.argsort(-p, kind="stable")[:c.top_k]     # ties: lower expert index first
        wts = p[top]
        if c.norm_topk_prob:
            wts = wts / np.sum(wts)
        if trace is not None:
            trace.append((L, t, top.tolist(), wts.tolist()))
        y = np.zeros(c.hidden)
        for e, we in zip(top, wts):
            y += we * swiglu(x[t], *model.expert(L, int(e)))
        if c.shared_intermediate:
            s = swiglu(x[t], model.w(m + "shared_expert.gate_proj.weight"),
                       model.w(m + "shared_expert.up_proj.weight"),
                       model.w(m + "shared_expert.down_proj.weight"))
            y += sigmoid(model.w(m + "shared_expert_gate.weight")[0] @ x[t]) * s
        out[t] = y
    return out


# ----------------------------------------------------------------------------- forward (§2.2)

def forward(model, tokens, state=None, gdn_mode="recurrent", chunk=64, hidden_out=None,
            trace=None, input_embeds=None, mrope_positions=None):
    """Run `tokens` (continuing from `state`, or from scratch) and return (logits [T, vocab],
    state). hidden_out, if a list, receives the residual stream: embeddings, after each layer,
    after the final norm (each [T, H]).
    input_embeds: (idx [K], rows [K, H]): rows replacing the token embeddings at call positions
    idx (an image's encoder output at its image-pad tokens). mrope_positions: [T, 3] (T, H, W)
    positions of the call's tokens for the attention's M-RoPE (tools/ref/vision_ref.py
    get_rope_index); None = 1-D positions state.pos + t."""
    c = model.cfg
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 1 or tokens.size == 0:
        raise ValueError("forward: need a non-empty 1-D list of token ids")
    if tokens.min() < 0 or tokens.max() >= c.vocab:
        raise ValueError(f"forward: token id out of range [0, {c.vocab})")
    if state is None:
        state = State(model)
    if c.max_pos and state.pos + len(tokens) > int(c.max_pos):
        raise ValueError(f"forward: position {state.pos + len(tokens) - 1} beyond "
                         f"max_position_embeddings {c.max_pos}")
    h = model.w("embed_tokens.weight")[tokens]           # no scaling, no BOS
    if input_embeds is not None:
        idx, rows = input_embeds
        h = h.copy()
        h[np.asarray(idx, dtype=np.int64)] = np.asarray(rows, dtype=np.float64)
    if mrope_positions is not None:
        mrope_positions = np.asarray(mrope_positions, dtype=np.int64).reshape(len(tokens), 3)
    if hidden_out is not None:
        hidden_out.append(h.copy())
    for L in range(c.n_layers):
        xn = rmsnorm(h, model.w(f"layers.{L}.input_layernorm.weight"), c.eps, c.norm_one_plus)
        if c.layer_types[L] == "full_attention":
            h = h + attention(model, L, xn, state, mrope_positions)
        else:
            h = h + gated_deltanet(model, L, xn, state, gdn_mode, chunk)
        xn = rmsnorm(h, model.w(f"layers.{L}.post_attention_layernorm.weight"), c.eps,
                     c.norm_one_plus)
        h = h + mlp(model, L, xn, trace)
        if hidden_out is not None:
            hidden_out.append(h.copy())
    h = rmsnorm(h, model.w("norm.weight"), c.eps, c.norm_one_plus)
    if hidden_out is not None:
        hidden_out.append(h.copy())
    logits = h @ model.w(model.lm_head_name).T
    state.pos += len(tokens)
    return logits, state


def forward_split(model, tokens, split=0, **kw):
    """Prefill in calls of `split` tokens (0 = one call) carrying the state; all logits."""
    tokens = list(tokens)
    if split <= 0:
        return forward(model, tokens, **kw)[0]
    state, out = None, []
    for i in range(0, len(tokens), split):
        lg, state = forward(model, tokens[i:i + split], state, **kw)
        out.append(lg)
    return np.concatenate(out, axis=0)


# ----------------------------------------------------------------------------- MTP head (§2.7)

class MtpState:
    """The MTP layers' own K/V (after k_norm + RoPE) and the next MTP position."""

    def __init__(self, model):
        c = model.cfg
        self.pos = 0
        self.k = {f"mtp.layers.{j}.": np.zeros((0, c.n_kv, c.head_dim)) for j in range(c.mtp_layers)}
        self.v = {L: a.copy() for L, a in self.k.items()}


def mtp_forward(model, hidden, tokens, state):
    """§2.7, as vLLM's qwen3_5_mtp.py (Qwen3_5MultiTokenPredictor.forward): row p reads the
    target's final-normed hidden state h_p [H] and the token t_{p+1};
    x = fc(concat(pre_fc_norm_embedding(embed(t_{p+1})), pre_fc_norm_hidden(h_p))) (embedding
    first), one full-attention MoE decoder layer at position p over the MTP's own K/V, then
    mtp.norm; logits = the shared lm_head of that, predicting t_{p+2}. The MTP norms are
    Qwen3_5RMSNorm ((1 + w)). Returns (logits [T, vocab], normed output [T, H]); the normed output
    is the hidden input of the next chained draft (vLLM feeds it back for non-DeepSeek MTP)."""
    c = model.cfg
    if c.mtp_layers != 1:
        raise ValueError(f"mtp: mtp_num_hidden_layers {c.mtp_layers}: the reference runs 1 "
                         "(vLLM uses layer step % N per draft step)")
    if "mtp.fc.weight" not in model.st:
        raise ValueError("mtp: the checkpoint has no mtp.* tensors")
    tokens = np.asarray(tokens, dtype=np.int64)
    hidden = np.asarray(hidden, dtype=np.float64).reshape(len(tokens), c.hidden)
    e = model.w("embed_tokens.weight")[tokens]
    en = rmsnorm(e, model.w("mtp.pre_fc_norm_embedding.weight"), c.eps, True)
    hn = rmsnorm(hidden, model.w("mtp.pre_fc_norm_hidden.weight"), c.eps, True)
    h = linear(np.concatenate([en, hn], axis=1), model.w("mtp.fc.weight"))
    L = "mtp.layers.0."
    xn = rmsnorm(h, model.w(L + "input_layernorm.weight"), c.eps, c.norm_one_plus)
    h = h + attention(model, L, xn, state)                  # positions state.pos ..
    xn = rmsnorm(h, model.w(L + "post_attention_layernorm.weight"), c.eps, c.norm_one_plus)
    h = h + mlp(model, L, xn)
    out = rmsnorm(h, model.w("mtp.norm.weight"), c.eps, True)
    state.pos += len(tokens)
    return out @ model.w(model.lm_head_name).T, out


def mtp_rows(model, target_hidden, mtp_tokens):
    """MTP rows 0..len(mtp_tokens)-1, one at a time: row p reads mtp_tokens[p] and
    target_hidden[p] while p < len(target_hidden), past that (a chained draft) the MTP's own
    output of row p-1. Returns (logits [R, vocab], hidden [R, H])."""
    st, lg, hs = MtpState(model), [], []
    for p, tok in enumerate(mtp_tokens):
        h_in = target_hidden[p] if p < len(target_hidden) else hs[-1]
        l1, o1 = mtp_forward(model, h_in[None, :], [tok], st)
        lg.append(l1[0])
        hs.append(o1[0])
    return np.array(lg), np.array(hs)


# ----------------------------------------------------------------------------- CLI

def parse_tokens(s):
    if s.startswith("@"):
        with open(s[1:]) as f:
            s = f.read()
    toks = [int(x) for x in s.replace(",", " ").split()]
    if not toks:
        raise ValueError("--tokens: empty")
    return toks


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 numpy reference forward (tools/ref)")
    ap.add_argument("model_dir")
    ap.add_argument("--tokens", required=True, help="ids: 1,2,3 or '1 2 3' or @FILE")
    ap.add_argument("--out", help="write logits as raw little-endian float32 [rows][vocab]")
    ap.add_argument("--last-only", action="store_true", help="write only the last position")
    ap.add_argument("--print-top", type=int, default=0, metavar="K",
                    help="print the top-K ids and logits of each position")
    ap.add_argument("--gdn", choices=("recurrent", "chunked"), default="recurrent",
                    help="delta-rule form (default: the token-by-token recurrence)")
    ap.add_argument("--chunk", type=int, default=64, help="chunk size for --gdn chunked")
    ap.add_argument("--split", type=int, default=0,
                    help="feed the prompt in calls of N tokens with carried state")
    ap.add_argument("--dump-hidden", metavar="DIR",
                    help="write the residual stream as float32 [n_tokens][hidden]: "
                         "h_embed.f32, h_layer_NN.f32, h_final_norm.f32")
    ap.add_argument("--print-routing", action="store_true", help="print MoE top-k choices")
    ap.add_argument("--mtp-tokens", metavar="IDS",
                    help="run the MTP head (§2.7) after the forward: row p reads this list's "
                         "token p and the final-normed hidden state of position p (rows past "
                         "the prompt: the MTP's own output of the row before)")
    ap.add_argument("--mtp-out", metavar="FILE", help="MTP logits, float32 [rows][vocab]")
    ap.add_argument("--mtp-hidden-out", metavar="FILE",
                    help="MTP normed output (mtp.norm), float32 [rows][hidden]")
    args = ap.parse_args(argv)

    model = Model(args.model_dir)
    c = model.cfg
    print(f"# {c.arch}: layers={c.n_layers} hidden={c.hidden} vocab={c.vocab} heads={c.n_heads}/"
          f"{c.n_kv}x{c.head_dim} rotary_dim={c.rotary_dim} theta={c.rope_theta:g} "
          f"experts={c.num_experts} prefix={model.prefix!r} lm_head={model.lm_head_name}",
          file=sys.stderr)
    for wmsg in c.warnings:
        print(f"# warning: {wmsg}", file=sys.stderr)
    if model.unused:
        print(f"# {len(model.unused)} tensors not used by the text forward "
              f"(e.g. {model.unused[0]})", file=sys.stderr)
    toks = parse_tokens(args.tokens)
    hidden = [] if args.dump_hidden else None
    trace = [] if args.print_routing else None
    if args.split > 0:
        state, parts = None, []
        for i in range(0, len(toks), args.split):
            lg, state = forward(model, toks[i:i + args.split], state, gdn_mode=args.gdn,
                                chunk=args.chunk, hidden_out=None, trace=trace)
            parts.append(lg)
        logits = np.concatenate(parts, axis=0)
        if hidden is not None:
            print("# --dump-hidden ignored with --split", file=sys.stderr)
            hidden = None
    else:
        logits, _ = forward(model, toks, gdn_mode=args.gdn, chunk=args.chunk,
                            hidden_out=hidden, trace=trace)
    if args.mtp_tokens:
        if hidden is None:
            hl = []
            forward(model, toks, gdn_mode=args.gdn, chunk=args.chunk, hidden_out=hl)
            target = hl[-1]
        else:
            target = hidden[-1]
        ml, mh = mtp_rows(model, target, parse_tokens(args.mtp_tokens))
        if args.mtp_out:
            ml.astype("<f4").tofile(args.mtp_out)
        if args.mtp_hidden_out:
            mh.astype("<f4").tofile(args.mtp_hidden_out)
    if not np.all(np.isfinite(logits)):
        print("# WARNING: non-finite logits", file=sys.stderr)
    rows = logits[-1:] if args.last_only else logits
    if args.out:
        rows.astype("<f4").tofile(args.out)
        with open(args.out + ".shape", "w") as f:
            f.write(f"{rows.shape[0]} {rows.shape[1]}\n")
    if hidden is not None:
        os.makedirs(args.dump_hidden, exist_ok=True)
        names = ["h_embed"] + [f"h_layer_{i:02d}" for i in range(c.n_layers)] + ["h_final_norm"]
        for nm, hh in zip(names, hidden):
            hh.astype("<f4").tofile(os.path.join(args.dump_hidden, nm + ".f32"))
    if trace:
        for L, t, top, wts in trace:
            print(f"route L{L} t{t}: " + " ".join(f"{e}:{w:.6f}" for e, w in zip(top, wts)))
    if args.print_top > 0:
        first = len(toks) - rows.shape[0]
        for i, row in enumerate(rows):
            top = np.argsort(-row, kind="stable")[:args.print_top]
            print(f"pos {first + i} tok {toks[first + i]}: " +
                  " ".join(f"{j}:{row[j]:.6f}" for j in top))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, KeyError, FileNotFoundError, OSError) as e:
        print(f"ref_forward: error: {e}", file=sys.stderr)
        sys.exit(2)
