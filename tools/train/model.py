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


def mrope_tables(pos3, rot, theta, section, interleaved=True):
    """cos, sin [..., T, rot/2] for 3-D (T, H, W) positions pos3 [..., T, 3] (docs/model.md §2.3,
    M-RoPE): frequency slot i takes component H when i % 3 == 1 and i < 3 * section[1], W when
    i % 3 == 2 and i < 3 * section[2], else T (interleaved, Qwen3-VL / Qwen3.5); contiguous
    sections otherwise. With T = H = W it is rope_tables at those positions."""
    half = rot // 2
    comp = []
    for i in range(half):
        if interleaved:
            comp.append(1 if i % 3 == 1 and i < 3 * section[1] else
                        2 if i % 3 == 2 and i < 3 * section[2] else 0)
        else:
            comp.append(0 if i < section[0] else 1 if i < section[0] + section[1] else 2)
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    ang = pos3.to(torch.float64)[..., comp] * inv
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
        self.mrope_section = rp.get("mrope_section")
        self.mrope_interleaved = bool(rp.get("mrope_interleaved", False))

    def forward(self, x, pos3=None):
        """pos3: None (1-D positions 0..T-1) or [T, 3] / [B, T, 3] M-RoPE positions."""
        B, T, _ = x.shape
        qg = self.q_proj(x).reshape(B, T, self.nh, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:]
        k = self.k_proj(x).reshape(B, T, self.nkv, self.hd)
        v = self.v_proj(x).reshape(B, T, self.nkv, self.hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(k).transpose(1, 2)
        v = v.transpose(1, 2)
        if pos3 is None:
            cos, sin = rope_tables(T, self.rot, self.theta)
        else:
            cos, sin = mrope_tables(pos3, self.rot, self.theta, self.mrope_section,
                                    self.mrope_interleaved)
            if cos.dim() == 3:  # per sequence: [B, 1, T, half] against q [B, h, T, D]
                cos, sin = cos[:, None], sin[:, None]
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

    def forward(self, h, pos3=None):
        if self.kind == "linear_attention":
            h = h + self.linear_attn(self.input_layernorm(h))
        else:
            h = h + self.self_attn(self.input_layernorm(h), pos3)
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

    def forward(self, ids, input_embeds=None, pos3=None):
        return self.lm_head(self.hidden(ids, input_embeds, pos3))

    def hidden(self, ids, input_embeds=None, pos3=None):
        """Final-normed hidden state (model.norm output): what the lm_head reads and what the MTP
        head reads as h_p (docs/model.md §2.7). input_embeds: (mask [B, T] bool, rows [K, H]):
        rows replace the token embeddings where mask is set, in row-major order (an image's
        encoder output at its image-pad tokens). pos3: M-RoPE positions for the full-attention
        layers ([T, 3] or [B, T, 3]); None = 1-D positions, as before."""
        h = self.embed_tokens(ids)
        if input_embeds is not None:
            mask, rows = input_embeds
            h = h.masked_scatter(mask[..., None], rows.to(h.dtype))
        for l in self.layers:
            h = l(h, pos3)
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


# ---------------------------------------------------------------- vision tower
class VisionBlock(nn.Module):
    def __init__(self, D, F_, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(D, eps=1e-6)
        self.norm2 = nn.LayerNorm(D, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(D, 3 * D)
        self.attn.proj = nn.Linear(D, D)
        self.mlp = nn.Module()
        self.mlp.linear_fc1 = nn.Linear(D, F_)
        self.mlp.linear_fc2 = nn.Linear(F_, D)

    def forward(self, x, cos, sin):
        """x [B, N, D] (one frame per sequence: attention over all N, both directions);
        cos, sin [N, hd]."""
        B, N, D = x.shape
        hd = D // self.heads
        qkv = self.attn.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [B, h, N, hd]

        def rope(a):  # rotate_half over the whole head
            return a * cos + torch.cat([-a[..., hd // 2:], a[..., :hd // 2]], -1) * sin

        q, k = rope(q), rope(k)
        o = torch.softmax(q @ k.transpose(-1, -2) * hd ** -0.5, -1) @ v
        x = x + self.attn.proj(o.transpose(1, 2).reshape(B, N, D))
        u = F.gelu(self.mlp.linear_fc1(self.norm2(x)), approximate="tanh")
        return x + self.mlp.linear_fc2(u)


class VisionTower(nn.Module):
    """Qwen3-VL-style ViT as docs/model.md "Vision tower" and tools/ref/vision_ref.py describe it:
    Conv3d patch embedding (stride = kernel, so a matmul over the flattened (channel, temporal,
    py, px) patch) + bias, the learned side x side position table bilinearly resampled to the grid
    (align_corners), blocks of LayerNorm -> qkv -> 2-D rotary (row | column angles) -> attention
    -> proj and LayerNorm -> fc1 -> gelu_tanh -> fc2, then the merger: LayerNorm -> 2x2 groups
    (consecutive rows in the processor's patch order) -> fc1 -> GELU(erf) -> fc2 to the text
    hidden size. Names as the checkpoint's `model.visual.*` without the prefix. Images of one
    batch share a grid (t = 1)."""

    def __init__(self, vc):
        super().__init__()
        self.vc = vc
        D, self.heads = vc["hidden_size"], vc["num_heads"]
        self.D, self.m, self.P = D, vc["spatial_merge_size"], vc["patch_size"]
        self.side = int(round(math.sqrt(vc["num_position_embeddings"])))
        C, TP = vc["in_channels"], vc["temporal_patch_size"]
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Module()
        self.patch_embed.proj.weight = nn.Parameter(torch.randn(D, C, TP, self.P, self.P) * 0.02)
        self.patch_embed.proj.bias = nn.Parameter(torch.zeros(D))
        self.pos_embed = nn.Embedding(vc["num_position_embeddings"], D)
        nn.init.normal_(self.pos_embed.weight, std=0.02)
        self.blocks = nn.ModuleList([VisionBlock(D, vc["intermediate_size"], self.heads)
                                     for _ in range(vc["depth"])])
        M = D * self.m * self.m
        self.merger = nn.Module()
        self.merger.norm = nn.LayerNorm(D, eps=1e-6)
        self.merger.linear_fc1 = nn.Linear(M, M)
        self.merger.linear_fc2 = nn.Linear(M, vc["out_hidden_size"])
        self._grid = {}

    def _merge_order(self, a, h, w):
        m = self.m
        rest = a.shape[1:]
        a = a.reshape((h // m, m, w // m, m) + rest)
        return a.permute((0, 2, 1, 3) + tuple(range(4, 4 + len(rest)))).reshape((h * w,) + rest)

    def _tables(self, h, w):
        """Per grid: bilinear indices/weights of the position table and rotary cos/sin, both in
        the processor's patch order."""
        if (h, w) not in self._grid:
            def axis(n):
                src = torch.linspace(0.0, self.side - 1, n, dtype=torch.float64)
                lo = src.floor().long()
                return lo, (lo + 1).clamp(max=self.side - 1), src - lo

            h0, h1, dh = axis(h)
            w0, w1, dw = axis(w)
            dh, dw = dh[:, None], dw[None, :]
            idx = [(h0[:, None] * self.side + w0[None, :]), (h0[:, None] * self.side + w1[None, :]),
                   (h1[:, None] * self.side + w0[None, :]), (h1[:, None] * self.side + w1[None, :])]
            wt = [(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw]
            idx = torch.stack([self._merge_order(i.reshape(-1), h, w) for i in idx])
            wt = torch.stack([self._merge_order(x.reshape(-1), h, w) for x in wt]).float()
            hd = self.D // self.heads
            sd = hd // 2
            inv = 10000.0 ** (-torch.arange(0, sd, 2, dtype=torch.float64) / sd)
            rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            ang = torch.cat([rows.reshape(-1, 1) * inv, cols.reshape(-1, 1) * inv], 1)
            ang = self._merge_order(torch.cat([ang, ang], 1), h, w)
            self._grid[(h, w)] = (idx, wt, ang.cos().float(), ang.sin().float())
        return self._grid[(h, w)]

    def forward(self, pixels, h, w):
        """pixels [B, h*w, C*TP*P*P] in the processor's order -> [B, h*w/m^2, out_hidden]."""
        B, N, _ = pixels.shape
        idx, wt, cos, sin = self._tables(h, w)
        x = pixels @ self.patch_embed.proj.weight.reshape(self.D, -1).t() + self.patch_embed.proj.bias
        x = x + (self.pos_embed.weight[idx] * wt[..., None]).sum(0)
        for b in self.blocks:
            x = b(x, cos, sin)
        x = self.merger.norm(x).reshape(B, N // (self.m * self.m), -1)
        return self.merger.linear_fc2(F.gelu(self.merger.linear_fc1(x)))


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
        if n.startswith(("mtp.", "model.visual.")):  # MTP head, vision tower: not the trunk
            continue
        own[n if n == "lm_head.weight" else n[len("model.language_model."):]] = t
    missing = set(m.state_dict()) ^ set(own)
    assert not missing, missing
    m.load_state_dict(own)
    return m, cfg
