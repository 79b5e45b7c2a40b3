"""Qwen3.5-MoE text model in plain PyTorch, written from docs/model.md (§2).

Parameter names match the HF checkpoint layout (prefix `model.language_model.` added on export).
"""
import json, math, struct
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def rms1p(x, w, eps):  # zero-centred RMSNorm: x * rsqrt(mean x^2 + eps) * (1 + w), fp32
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * (1.0 + w.float())).to(x.dtype)


class Norm1p(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return rms1p(x, self.weight, self.eps)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


# ---------------------------------------------------------------- gated delta rule
def gdn_recurrent(q, k, v, g, beta, S0=None):
    """Token-by-token reference. q,k [B,H,T,dk] (already l2normed, q scaled), v [B,H,T,dv],
    g,beta [B,H,T]. Returns o [B,H,T,dv], S [B,H,dk,dv]."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(B, H, dk, dv, dtype=torch.float32) if S0 is None else S0
    outs = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        kt, vt = k[:, :, t], v[:, :, t]
        u = torch.einsum("bhm,bhmn->bhn", kt, S)
        d = (vt - u) * beta[:, :, t, None]
        S = S + kt[..., :, None] * d[..., None, :]
        outs.append(torch.einsum("bhm,bhmn->bhn", q[:, :, t], S))
    return torch.stack(outs, 2), S


def gdn_chunked(q, k, v, g, beta, C=64, S0=None):
    """Chunked form (docs/model.md §2.4, HF torch_chunk_gated_delta_rule); same inputs as gdn_recurrent."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (C - T % C) % C
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    Tp = T + pad
    N = Tp // C
    kb = k * beta[..., None]
    vb = v * beta[..., None]
    q, k, kb, vb = (x.reshape(B, H, N, C, x.shape[-1]) for x in (q, k, kb, vb))
    gam = g.reshape(B, H, N, C).cumsum(-1)
    diff = gam[..., :, None] - gam[..., None, :]
    D = diff.tril().exp().tril()  # exp(γi-γj) for j<=i else 0
    L = (kb @ k.transpose(-1, -2) * D).tril(-1)
    eye = torch.eye(C, dtype=q.dtype)
    M = L + eye
    U = torch.linalg.solve_triangular(M, vb, upper=False, unitriangular=True)
    W = torch.linalg.solve_triangular(M, kb * gam.exp()[..., None], upper=False, unitriangular=True)
    A = (q @ k.transpose(-1, -2) * D).tril()
    S = torch.zeros(B, H, dk, dv, dtype=q.dtype) if S0 is None else S0
    outs = []
    for i in range(N):
        gi = gam[:, :, i]
        Vn = U[:, :, i] - W[:, :, i] @ S
        O = (q[:, :, i] * gi.exp()[..., None]) @ S + A[:, :, i] @ Vn
        glast = gi[..., -1:]
        S = S * glast.exp()[..., None] + (k[:, :, i] * (glast - gi).exp()[..., None]).transpose(-1, -2) @ Vn
        outs.append(O)
    o = torch.stack(outs, 2).reshape(B, H, Tp, dv)[:, :, :T]
    return o, S


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.nk, self.nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.K = c["linear_conv_kernel_dim"]
        self.eps = c["rms_norm_eps"]
        self.conv_dim = 2 * self.nk * self.dk + self.nv * self.dv
        self.in_proj_qkv = nn.Linear(H, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(H, self.nv * self.dv, bias=False)
        self.in_proj_b = nn.Linear(H, self.nv, bias=False)
        self.in_proj_a = nn.Linear(H, self.nv, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.K, groups=self.conv_dim,
                                bias=False, padding=self.K - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.nv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nv).uniform_(1, 16)))
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(self.dv))  # plain w (NOT 1+w)
        self.out_proj = nn.Linear(self.nv * self.dv, H, bias=False)
        self.recurrent = False  # use token-by-token recurrence instead of chunked form

    def forward(self, x):
        B, T, _ = x.shape
        qkv = self.in_proj_qkv(x)
        z = self.in_proj_z(x)
        b = self.in_proj_b(x)
        a = self.in_proj_a(x)
        qkv = F.silu(self.conv1d(qkv.transpose(1, 2))[..., :T]).transpose(1, 2)
        nkdk = self.nk * self.dk
        q = qkv[..., :nkdk].reshape(B, T, self.nk, self.dk)
        k = qkv[..., nkdk:2 * nkdk].reshape(B, T, self.nk, self.dk)
        v = qkv[..., 2 * nkdk:].reshape(B, T, self.nv, self.dv)
        q = l2norm(q.float()) * self.dk ** -0.5
        k = l2norm(k.float())
        rep = self.nv // self.nk
        q = q.repeat_interleave(rep, dim=2)  # value head h uses key head h // rep
        k = k.repeat_interleave(rep, dim=2)
        beta = torch.sigmoid(b.float())
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        tr = lambda t: t.transpose(1, 2)
        fn = gdn_recurrent if self.recurrent else gdn_chunked
        o, _ = fn(tr(q), tr(k), tr(v.float()), tr(g), tr(beta))
        o = o.transpose(1, 2)  # [B,T,nv,dv]
        of = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm.weight.float()
        of = of * F.silu(z.float().reshape(B, T, self.nv, self.dv))
        return self.out_proj(of.reshape(B, T, -1).to(x.dtype))


def rope_tables(T, rot, theta):
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin, rot):  # x [B,h,T,D]; NeoX pairs (i, i+rot/2) within first rot dims
    half = rot // 2
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], -1)


class GatedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = nn.Linear(H, self.nh * self.hd * 2, bias=False)  # per head [q | gate]
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.q_norm = Norm1p(self.hd, c["rms_norm_eps"])
        self.k_norm = Norm1p(self.hd, c["rms_norm_eps"])
        rp = c["rope_parameters"]
        self.rot = int(self.hd * rp["partial_rotary_factor"])
        self.theta = rp["rope_theta"]

    def forward(self, x):
        B, T, _ = x.shape
        qg = self.q_proj(x).reshape(B, T, self.nh, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:]
        k = self.k_proj(x).reshape(B, T, self.nkv, self.hd)
        v = self.v_proj(x).reshape(B, T, self.nkv, self.hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(k).transpose(1, 2)
        v = v.transpose(1, 2)
        cos, sin = rope_tables(T, self.rot, self.theta)
        q = apply_rope(q, cos, sin, self.rot)
        k = apply_rope(k, cos, sin, self.rot)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        sc = (q @ k.transpose(-1, -2)).float() * self.hd ** -0.5
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        o = torch.softmax(sc.masked_fill(mask, float("-inf")), -1).to(v.dtype) @ v
        o = o.transpose(1, 2) * torch.sigmoid(gate)
        return self.o_proj(o.reshape(B, T, -1))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.E, self.k, I = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        Is = c["shared_expert_intermediate_size"]
        self.I = I
        self.gate = nn.Linear(H, self.E, bias=False)
        self.experts = nn.Module()
        self.experts.gate_up_proj = nn.Parameter(torch.randn(self.E, 2 * I, H) * 0.02)
        self.experts.down_proj = nn.Parameter(torch.randn(self.E, H, I) * 0.02)
        self.shared_expert = nn.Module()
        self.shared_expert.gate_proj = nn.Linear(H, Is, bias=False)
        self.shared_expert.up_proj = nn.Linear(H, Is, bias=False)
        self.shared_expert.down_proj = nn.Linear(Is, H, bias=False)
        self.shared_expert_gate = nn.Linear(H, 1, bias=False)
        self.aux = torch.zeros(())

    def forward(self, x):
        shp = x.shape
        x = x.reshape(-1, shp[-1])
        p = torch.softmax(self.gate(x).float(), -1)
        topv, topi = p.topk(self.k, -1)
        w = (topv / topv.sum(-1, keepdim=True)).to(x.dtype)
        y = torch.zeros_like(x)
        for e in range(self.E):
            rows, slot = (topi == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            xe = x[rows]
            gu = xe @ self.experts.gate_up_proj[e].t()
            h = F.silu(gu[:, :self.I]) * gu[:, self.I:]
            y.index_add_(0, rows, (h @ self.experts.down_proj[e].t()) * w[rows, slot, None])
        se = self.shared_expert
        s = se.down_proj(F.silu(se.gate_proj(x)) * se.up_proj(x)) * torch.sigmoid(self.shared_expert_gate(x))
        if self.training:  # Switch-style load-balancing loss
            f = torch.zeros(self.E).index_add_(0, topi.reshape(-1), torch.ones(topi.numel())) / topi.numel()
            self.aux = self.E * (f * p.mean(0)).sum()
        return (y + s).reshape(shp)


class Layer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        eps = c["rms_norm_eps"]
        self.kind = kind
        self.input_layernorm = Norm1p(c["hidden_size"], eps)
        self.post_attention_layernorm = Norm1p(c["hidden_size"], eps)
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = GatedAttention(c)
        self.mlp = MoE(c)

    def forward(self, h):
        mix = self.linear_attn if self.kind == "linear_attention" else self.self_attn
        h = h + mix(self.input_layernorm(h))
        return h + self.mlp(self.post_attention_layernorm(h))


class Qwen35MoeText(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c, t) for t in c["layer_types"]])
        self.norm = Norm1p(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        for n, p in self.named_parameters():
            if p.dim() == 2 and "norm" not in n:
                nn.init.normal_(p, std=0.02)
        for n, p in self.named_parameters():  # scale residual-branch outputs
            if n.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight", "down_proj")):
                with torch.no_grad():
                    p.mul_(1.0 / math.sqrt(2 * len(self.layers)))

    def set_recurrent(self, on):
        for l in self.layers:
            if l.kind == "linear_attention":
                l.linear_attn.recurrent = on

    def forward(self, ids):
        return self.lm_head(self.hidden(ids))

    def hidden(self, ids):
        """Final-normed hidden state (model.norm output): what the lm_head reads and what the MTP
        head reads as h_p (docs/model.md §2.7)."""
        h = self.embed_tokens(ids)
        for l in self.layers:
            h = l(h)
        return self.norm(h)

    def aux_loss(self):
        return sum(l.mlp.aux for l in self.layers) / len(self.layers)


class MTP(nn.Module):
    """Multi-token-prediction head (docs/model.md §2.7, vLLM qwen3_5_mtp.py): row p reads the
    trunk's final-normed hidden h_p and the embedding of t_{p+1} (the trunk's own embed_tokens,
    mtp_use_dedicated_embeddings false) and predicts t_{p+2} through the trunk's lm_head:
      x = fc(concat(pre_fc_norm_embedding(e), pre_fc_norm_hidden(h)))   # embedding first
      x = full-attention MoE decoder layer (own KV, positions p), out = norm(x).
    Names under `mtp.` exactly as the checkpoint (no `model.language_model.` prefix)."""

    def __init__(self, c):
        super().__init__()
        H, eps = c["hidden_size"], c["rms_norm_eps"]
        self.pre_fc_norm_embedding = Norm1p(H, eps)
        self.pre_fc_norm_hidden = Norm1p(H, eps)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.layers = nn.ModuleList([Layer(c, "full_attention")])
        self.norm = Norm1p(H, eps)

    def forward(self, emb_next, hid):
        """emb_next [B,T,H] = embed(t_{p+1}), hid [B,T,H] = h_p; returns normed output [B,T,H]
        (the lm_head input, and the hidden input of a chained draft)."""
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb_next), self.pre_fc_norm_hidden(hid)], -1))
        for l in self.layers:
            x = l(x)
        return self.norm(x)

    def init_from_trunk(self, trunk):
        """Start from something that already computes a useful residual stream: the decoder layer is
        a copy of the trunk's last full-attention layer, fc = [I | I] / 2 (mean of the two normed
        inputs), mtp.norm = the trunk's final norm (the shared lm_head expects its scale), the
        two pre-fc norms at identity (w = 0 under the (1 + w) convention)."""
        last = [l for l in trunk.layers if l.kind == "full_attention"][-1]
        H = self.fc.weight.shape[0]
        with torch.no_grad():
            self.layers[0].load_state_dict(last.state_dict())
            self.fc.weight.copy_(torch.cat([torch.eye(H), torch.eye(H)], 1) * 0.5)
            self.norm.weight.copy_(trunk.norm.weight)
            self.pre_fc_norm_embedding.weight.zero_()
            self.pre_fc_norm_hidden.weight.zero_()

    def aux_loss(self):
        return sum(l.mlp.aux for l in self.layers) / len(self.layers)


# ---------------------------------------------------------------- HF export / import
def hf_state_dict(model):
    out = {}
    for n, p in model.state_dict().items():
        out["lm_head.weight" if n == "lm_head.weight" else "model.language_model." + n] = p
    return out


def _bf16_bytes(t):
    a = t.detach().float().contiguous().numpy().view(np.uint32)
    r = ((a + 0x7FFF + ((a >> 16) & 1)) >> 16).astype(np.uint16)  # round-to-nearest-even
    return r.tobytes()


def save_safetensors(path, tensors, f32_names=()):
    """tensors: dict name -> torch tensor. BF16 except names ending with any of f32_names."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if any(name.endswith(s) for s in f32_names):
            b, dt = t.detach().float().contiguous().numpy().tobytes(), "F32"
        else:
            b, dt = _bf16_bytes(t), "BF16"
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        buf = data[a:b]
        if h["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype=np.float32)
        elif h["dtype"] == "BF16":
            arr = (np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(h["dtype"])
        out[name] = torch.from_numpy(arr.copy()).reshape(h["shape"])
    return out


def load_hf(model_dir):
    cfg = json.load(open(f"{model_dir}/config.json"))["text_config"]
    m = Qwen35MoeText(cfg)
    sd = load_safetensors(f"{model_dir}/model.safetensors")
    own = {}
    for n, t in sd.items():
        if n.startswith("mtp."):  # the MTP head (train_mtp.py) is not part of the trunk
            continue
        own[n if n == "lm_head.weight" else n[len("model.language_model."):]] = t
    missing = set(m.state_dict()) ^ set(own)
    assert not missing, missing
    m.load_state_dict(own)
    return m, cfg
