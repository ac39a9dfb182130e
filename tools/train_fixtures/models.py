"""Trainable pure-PyTorch DeepSeek-V3 (with its MTP layer), Qwen3-MoE and Kimi K3 models in the tensor layouts
strata reads.

Why not transformers' classes: the training must run where transformers is absent too (this repository's machines,
Debian's torch 1.13, to smoke-test the whole pipeline), transformers has no MTP layer and no K3, and its MoE blocks
loop over experts.  So each model here is written out once, batched, and checked against the real thing:
  * DeepSeek-V3 and Qwen3-MoE against transformers' reference logits committed in tests/fixtures/models/
    (check_models.py loads those checkpoints into these modules and compares; on the device, make_references.py
    compares again with transformers itself on the trained weights);
  * K3 against tools/make_k3_fixtures.py's K3Reference (the transcription strata is tested against), whose helpers
    (rms_norm, situ_and_mul, l2norm_fla, the weight names of init_weights, text_config) are imported, not copied.

Forward passes follow the reference maths step by step (in the reference's order where it matters for f32
agreement).  The routed experts are computed densely for every token (all experts, then weighted by a gate matrix
that is zero off the selected ones): the result and its gradients are exactly those of the sparse computation, and
on a GPU one batched matmul beats a loop over 32 experts.  Routing keeps the DeepSeek-V3 recipe: selection from
sigmoid(logits) + e_score_correction_bias (a buffer, moved by the auxiliary-loss-free balancing rule in train.py),
weights from the sigmoid scores alone.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import make_k3_fixtures as k3  # noqa: E402  (tools/make_k3_fixtures.py)

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class RMSNorm(nn.Module):
    """DeepseekV3RMSNorm / Qwen3MoeRMSNorm: x * rsqrt(mean(x^2) + eps) in f32, cast back, times the weight."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_cos_sin(positions, dim, theta, dtype):
    """Default RoPE as transformers: inv_freq = theta^(-2i/dim); emb = cat(freqs, freqs)."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim))
    freqs = positions.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def apply_rope(x, cos, sin, interleave):
    """x [B, heads, T, d]; cos/sin [T, d].  interleave: DeepSeek-V3's rope_interleave (pairs (2i, 2i+1) are
    de-interleaved to halves first, as transformers' apply_rotary_pos_emb_interleave)."""
    if interleave:
        b, h, s, d = x.shape
        x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return x * cos + rotate_half(x) * sin


def attention(q, k, v, scale):
    """Causal softmax attention; q, k [B, h, T, dk], v [B, h, T, dv] -> [B, T, h*dv]."""
    B, h, T, _ = q.shape
    if HAS_SDPA and q.is_cuda:
        # RoPE in f32 makes q/k f32 while v is bf16 under autocast: one dtype for the fused kernels
        dt = autocast_dtype(q)
        o = F.scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), is_causal=True, scale=scale)
    else:
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        o = torch.matmul(torch.softmax(s.float(), -1).to(q.dtype), v)
    return o.transpose(1, 2).reshape(B, T, -1)


class SwiGlu(nn.Module):
    def __init__(self, H, inter):
        super().__init__()
        self.gate_proj = nn.Linear(H, inter, bias=False)
        self.up_proj = nn.Linear(H, inter, bias=False)
        self.down_proj = nn.Linear(inter, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DenseExperts(nn.Module):
    """E SwiGLU experts stored stacked: gate/up [E, I, H], down [E, H, I] (per-expert tensors when saved).
    forward(x [N, H], G [N, E] gate weights, zero off the selected experts) = sum_e G[:, e] * expert_e(x)."""

    def __init__(self, E, H, inter, act="silu"):
        super().__init__()
        self.E, self.H, self.I, self.act = E, H, inter, act
        self.gate = nn.Parameter(torch.empty(E, inter, H))
        self.up = nn.Parameter(torch.empty(E, inter, H))
        self.down = nn.Parameter(torch.empty(E, H, inter))

    def forward(self, x, G, stats=None):
        N = x.shape[0]
        g = (x @ self.gate.reshape(-1, self.H).t()).view(N, self.E, self.I)
        u = (x @ self.up.reshape(-1, self.H).t()).view(N, self.E, self.I)
        if stats is not None:  # SiTU diagnostics on the selected experts only
            sel = G != 0
            stats.append((g[sel].detach(), u[sel].detach()))
        a = situ_and_mul(g, u) if self.act == "situ" else F.silu(g) * u
        a = a * G.to(a.dtype)[..., None]
        return a.reshape(N, -1) @ self.down.permute(0, 2, 1).reshape(-1, self.H)

    def hf_tensors(self, prefix, names=("gate_proj", "up_proj", "down_proj")):
        out = {}
        for e in range(self.E):
            out[f"{prefix}{e}.{names[0]}.weight"] = self.gate[e]
            out[f"{prefix}{e}.{names[1]}.weight"] = self.up[e]
            out[f"{prefix}{e}.{names[2]}.weight"] = self.down[e]
        return out

    def load_hf(self, t, prefix, names=("gate_proj", "up_proj", "down_proj")):
        with torch.no_grad():
            for e in range(self.E):
                self.gate[e].copy_(t[f"{prefix}{e}.{names[0]}.weight"])
                self.up[e].copy_(t[f"{prefix}{e}.{names[1]}.weight"])
                self.down[e].copy_(t[f"{prefix}{e}.{names[2]}.weight"])


def situ_and_mul(gate, up):
    return k3.situ_and_mul(gate, up, 4.0, 25.0)


class SigmoidRouter(nn.Module):
    """DeepSeek-V3 / K3 noaux_tc router.  logits in f32; choice = sigmoid + e_score_correction_bias; group-limited:
    groups scored by the sum of their top-2 choices, the best topk_group kept, the rest masked (-inf, as DeepSeek's
    own code; transformers fills 0.0, which selects the same experts as long as every choice is > 0: train.py keeps
    the bias >= 0); top-k of the rest; weights = the sigmoid scores of the chosen, renormalized (+1e-20) when
    norm_topk, times routed_scaling_factor.  Returns (idx [N, k], G [N, E] dense gate weights)."""

    def __init__(self, E, H, top_k, n_group, topk_group, norm_topk, scaling):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, H))
        self.register_buffer("e_score_correction_bias", torch.zeros(E))
        self.E, self.k, self.n_group, self.topk_group = E, top_k, n_group, topk_group
        self.norm_topk, self.scaling = norm_topk, scaling
        self.last_idx = None
        self.margins = None  # list to collect (min expert margin, min group margin) when set

    def forward(self, x):
        with no_autocast(x):  # router logits in f32, as transformers' DeepseekV3TopkRouter computes them
            logits = F.linear(x.float(), self.weight.float())
        scores = logits.sigmoid()
        choice = scores.detach() + self.e_score_correction_bias.float()[None, :]
        N = choice.shape[0]
        gmargin = None
        if self.n_group > 1 and self.topk_group < self.n_group:
            per = self.E // self.n_group
            gs = choice.view(N, self.n_group, per).topk(2, dim=-1)[0].sum(-1)
            if self.margins is not None:
                s = torch.sort(gs, -1, descending=True)[0]
                gmargin = float((s[:, self.topk_group - 1] - s[:, self.topk_group]).min())
            gidx = gs.topk(self.topk_group, dim=-1)[1]
            keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gidx, True)
            choice = choice.masked_fill(~keep[:, :, None].expand(N, self.n_group, per).reshape(N, self.E),
                                        float("-inf"))
        if self.margins is not None:
            s = torch.sort(choice, -1, descending=True)[0]
            self.margins.append((float((s[:, self.k - 1] - s[:, self.k]).min()), gmargin))
        idx = choice.topk(self.k, dim=-1)[1]
        w = scores.gather(1, idx)
        if self.norm_topk:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * self.scaling
        self.last_idx = idx.detach()
        G = torch.zeros_like(scores).scatter(1, idx, w)
        return idx, G


# ------------------------------------------------------------------------------------------------ DeepSeek-V3


class MlaAttention(nn.Module):
    """DeepseekV3Attention (q-LoRA or plain q_proj, rope_interleave, default RoPE)."""

    def __init__(self, c):
        super().__init__()
        H, nh = c["hidden_size"], c["num_attention_heads"]
        self.nh, self.nope, self.rope, self.vd = nh, c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.kvl, self.qlr = c["kv_lora_rank"], c["q_lora_rank"]
        qk = self.nope + self.rope
        if self.qlr:
            self.q_a_proj = nn.Linear(H, self.qlr, bias=False)
            self.q_a_layernorm = RMSNorm(self.qlr, 1e-6)
            self.q_b_proj = nn.Linear(self.qlr, nh * qk, bias=False)
        else:
            self.q_proj = nn.Linear(H, nh * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(H, self.kvl + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kvl, 1e-6)
        self.kv_b_proj = nn.Linear(self.kvl, nh * (self.nope + self.vd), bias=False)
        self.o_proj = nn.Linear(nh * self.vd, H, bias=False)
        self.scale = qk ** -0.5
        self.interleave = c.get("rope_interleave", True)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        qk = self.nope + self.rope
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if self.qlr else self.q_proj(x)
        q = q.view(B, T, self.nh, qk).transpose(1, 2)
        q_pass, q_rot = q.split([self.nope, self.rope], -1)
        ckv = self.kv_a_proj_with_mqa(x)
        k_pass, k_rot = ckv.split([self.kvl, self.rope], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(B, T, self.nh, self.nope + self.vd).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.vd], -1)
        k_rot = k_rot.view(B, 1, T, self.rope)
        q_rot = apply_rope(q_rot, cos, sin, self.interleave)
        k_rot = apply_rope(k_rot, cos, sin, self.interleave)
        query = torch.cat([q_pass, q_rot], -1)
        key = torch.cat([k_nope, k_rot.expand(B, self.nh, T, self.rope)], -1)
        return self.o_proj(attention(query, key, v, self.scale))


class DsMoe(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.gate = SigmoidRouter(c["n_routed_experts"], H, c["num_experts_per_tok"], c["n_group"], c["topk_group"],
                                  c["norm_topk_prob"], c["routed_scaling_factor"])
        self.experts = DenseExperts(c["n_routed_experts"], H, c["moe_intermediate_size"])
        self.shared_experts = SwiGlu(H, c["moe_intermediate_size"] * c["n_shared_experts"]) \
            if c["n_shared_experts"] else None

    def forward(self, x):
        shp = x.shape
        flat = x.reshape(-1, shp[-1])
        _, G = self.gate(flat)
        y = self.experts(flat, G).to(x.dtype).view(shp)
        return y + self.shared_experts(x) if self.shared_experts is not None else y


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: x + attn(input_layernorm(x)), then + mlp(post_attention_layernorm(x))."""

    def __init__(self, c, attn, mlp):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = attn
        self.mlp = mlp

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


def ds_layer(c, moe):
    return DecoderLayer(c, MlaAttention(c), DsMoe(c) if moe else SwiGlu(c["hidden_size"], c["intermediate_size"]))


def ds_layer_is_moe(c, i):
    return i >= c["first_k_dense_replace"] and i % c.get("moe_layer_freq", 1) == 0


class MtpLayer(nn.Module):
    """DeepSeek-V3's next-token-prediction module (report §2.2, checkpoint layer num_hidden_layers): for position i,
    x = eh_proj([enorm(embed(t_{i+1})); hnorm(h_i)]) (embedding first, as the release's eh_proj and vLLM's
    deepseek_mtp.py), the decoder block, then shared_head.head(shared_head.norm(.)) -> logits of t_{i+2}.  h_i is the
    main model's final hidden state after model.norm (what lm_head reads; vLLM and SGLang hand over that one).  The
    embedding and the output head are the main model's (shared in training; stored again under the layer's names)."""

    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.enorm = RMSNorm(H, c["rms_norm_eps"])
        self.hnorm = RMSNorm(H, c["rms_norm_eps"])
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.block = ds_layer(c, ds_layer_is_moe(c, c["num_hidden_layers"]))
        self.head_norm = RMSNorm(H, c["rms_norm_eps"])

    def forward(self, emb_next, h, cos, sin):
        x = self.eh_proj(torch.cat([self.enorm(emb_next), self.hnorm(h)], -1))
        return self.head_norm(self.block(x, cos, sin))


class CausalLM(nn.Module):
    """Embedding, decoder layers, final norm, output head (tied to the embedding or not), HF names."""

    def __init__(self, c, layers):
        super().__init__()
        self.c = c
        H, V = c["hidden_size"], c["vocab_size"]
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(H, c["rms_norm_eps"])
        self.tied = c.get("tie_word_embeddings", False)
        self.lm_head = None if self.tied else nn.Linear(H, V, bias=False)
        self.mtp = None

    def head(self, h):
        return h @ self.embed_tokens.weight.t() if self.tied else self.lm_head(h)

    def trunk_tensors(self):
        out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight}
        if not self.tied:
            out["lm_head.weight"] = self.lm_head.weight
        return out


class DeepseekV3(CausalLM):
    family = "ds"

    def __init__(self, c):
        super().__init__(c, [ds_layer(c, ds_layer_is_moe(c, i)) for i in range(c["num_hidden_layers"])])
        assert not self.tied, "DeepSeek-V3 stores its output head"
        self.mtp = MtpLayer(c) if c.get("num_nextn_predict_layers", 0) else None
        self.theta = c.get("rope_theta", 10000.0)

    def routers(self):
        return [m for m in self.modules() if isinstance(m, SigmoidRouter)]

    def hidden(self, ids):
        T = ids.shape[1]
        cos, sin = rope_cos_sin(torch.arange(T, device=ids.device), self.c["qk_rope_head_dim"], self.theta,
                                self.embed_tokens.weight.dtype)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x), (cos, sin)

    def forward(self, ids, with_mtp=False):
        """ids [B, T] -> logits [B, T, V] (and, with_mtp, MTP logits [B, T-1, V]: row i predicts t_{i+2})."""
        h, (cos, sin) = self.hidden(ids)
        logits = self.lm_head(h)
        if not with_mtp:
            return logits
        emb_next = self.embed_tokens(ids[:, 1:])
        T1 = ids.shape[1] - 1
        m = self.mtp(emb_next, h[:, :-1], cos[:T1], sin[:T1])
        return logits, self.lm_head(m)

    def hf_tensors(self):
        """{HF name: tensor} as DeepSeek-V3's release names them (MTP layer at index num_hidden_layers)."""
        out = self.trunk_tensors()
        for i, layer in enumerate(self.layers):
            out.update(ds_layer_tensors(layer, f"model.layers.{i}."))
        if self.mtp is not None:
            p = f"model.layers.{self.c['num_hidden_layers']}."
            out.update(ds_layer_tensors(self.mtp.block, p))
            out[p + "enorm.weight"] = self.mtp.enorm.weight
            out[p + "hnorm.weight"] = self.mtp.hnorm.weight
            out[p + "eh_proj.weight"] = self.mtp.eh_proj.weight
            out[p + "embed_tokens.weight"] = self.embed_tokens.weight
            out[p + "shared_head.norm.weight"] = self.mtp.head_norm.weight
            out[p + "shared_head.head.weight"] = self.lm_head.weight
        return out


def ds_layer_tensors(layer, p):
    out = {}
    for name, t in layer.named_parameters():
        if name.startswith("mlp.experts."):
            continue
        out[p + name] = t
    if isinstance(layer.mlp, DsMoe):
        out[p + "mlp.gate.e_score_correction_bias"] = layer.mlp.gate.e_score_correction_bias
        out.update(layer.mlp.experts.hf_tensors(p + "mlp.experts."))
    return out


# ------------------------------------------------------------------------------------------------ Qwen3-MoE


class GqaAttention(nn.Module):
    """Qwen3MoeAttention: q/k/v projections, per-head q_norm/k_norm before RoPE, GQA."""

    def __init__(self, c):
        super().__init__()
        H, nh, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        hd = c.get("head_dim") or H // nh
        bias = c.get("attention_bias", False)
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.q_proj = nn.Linear(H, nh * hd, bias=bias)
        self.k_proj = nn.Linear(H, nkv * hd, bias=bias)
        self.v_proj = nn.Linear(H, nkv * hd, bias=bias)
        self.o_proj = nn.Linear(nh * hd, H, bias=bias)
        self.q_norm = RMSNorm(hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, False), apply_rope(k, cos, sin, False)
        rep = self.nh // self.nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return self.o_proj(attention(q, k, v, self.hd ** -0.5))


class QwenMoe(nn.Module):
    """Qwen3MoeSparseMoeBlock: softmax router in f32, top-k, renormalized when norm_topk_prob, no shared expert."""

    def __init__(self, c):
        super().__init__()
        H, E = c["hidden_size"], c["num_experts"]
        self.E, self.k, self.norm_topk = E, c["num_experts_per_tok"], c["norm_topk_prob"]
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = DenseExperts(E, H, c["moe_intermediate_size"])
        self.last = None      # (router probs [N, E] f32, idx [N, k]) for the balance loss
        self.margins = None

    def forward(self, x):
        shp = x.shape
        flat = x.reshape(-1, shp[-1])
        logits = self.gate(flat)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        w, idx = probs.topk(self.k, dim=-1)
        if self.margins is not None:
            s = torch.sort(probs, -1, descending=True)[0]
            sl = torch.sort(logits.float(), -1, descending=True)[0]
            self.margins.append((min(float((s[:, self.k - 1] - s[:, self.k]).min()),
                                     float((sl[:, self.k - 1] - sl[:, self.k]).min())), None))
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        w = w.to(flat.dtype)
        self.last = (probs, idx)
        G = torch.zeros(flat.shape[0], self.E, dtype=w.dtype, device=w.device).scatter(1, idx, w)
        return self.experts(flat, G).to(x.dtype).view(shp)


def qwen_layer_is_moe(c, i):
    return (i not in c.get("mlp_only_layers", [])) and c["num_experts"] > 0 and \
        (i + 1) % c.get("decoder_sparse_step", 1) == 0


def qwen_layer(c, i):
    mlp = QwenMoe(c) if qwen_layer_is_moe(c, i) else SwiGlu(c["hidden_size"], c["intermediate_size"])
    return DecoderLayer(c, GqaAttention(c), mlp)


class Qwen3Moe(CausalLM):
    family = "qwen"

    def __init__(self, c):
        super().__init__(c, [qwen_layer(c, i) for i in range(c["num_hidden_layers"])])
        self.hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]

    def routers(self):
        return []

    def moe_blocks(self):
        return [m for m in self.modules() if isinstance(m, QwenMoe)]

    def forward(self, ids, with_mtp=False):
        T = ids.shape[1]
        cos, sin = rope_cos_sin(torch.arange(T, device=ids.device), self.hd, self.c.get("rope_theta", 1e6),
                                self.embed_tokens.weight.dtype)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))

    def hf_tensors(self):
        out = self.trunk_tensors()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            for name, t in layer.named_parameters():
                if not name.startswith("mlp.experts."):
                    out[p + name] = t
            if isinstance(layer.mlp, QwenMoe):
                out.update(layer.mlp.experts.hf_tensors(p + "mlp.experts."))
        return out


# ------------------------------------------------------------------------------------------------ Kimi K3


def kda_chunked(q, k, v, g, beta, chunk):
    """Batched, differentiable chunked KDA (the WY / UT-transform form of make_k3_fixtures.kda_chunked, fla
    naive_chunk_kda), initial state 0.  q, k [B, T, H, K] (q l2-normed and scaled, k l2-normed), v [B, T, H, V],
    g [B, T, H, K] log-decay, beta [B, T, H] -> o [B, T, H, V].  The forward substitution (I + A)^-1 is one
    triangular solve instead of the reference's row loop; everything runs in f32."""
    B, T, H, K = q.shape
    Vd = v.shape[-1]
    BT = chunk
    pad = (BT - T % BT) % BT
    if pad:
        def P(x):
            return torch.cat([x, x.new_zeros(B, pad, *x.shape[2:])], 1)
        q, k, v, g, beta = P(q), P(k), P(v), P(g), P(beta)
    NT = (T + pad) // BT
    # [B, H, NT, BT, .]
    q, k, v, g = [x.reshape(B, NT, BT, H, x.shape[-1]).permute(0, 3, 1, 2, 4) for x in (q, k, v, g)]
    beta = beta.reshape(B, NT, BT, H).permute(0, 3, 1, 2)
    g = g.cumsum(-2)
    dev = q.device
    lower = torch.tril(torch.ones(BT, BT, dtype=torch.bool, device=dev), diagonal=-1)
    lower_eq = torch.tril(torch.ones(BT, BT, dtype=torch.bool, device=dev), diagonal=0)
    diff = g[..., :, None, :] - g[..., None, :, :]                       # [B, H, NT, c, i, K]
    dec_strict = diff.masked_fill(~lower[:, :, None], float("-inf")).exp()
    dec_incl = diff.masked_fill(~lower_eq[:, :, None], float("-inf")).exp()
    A = torch.einsum("bhncd,bhncid,bhnid->bhnci", k, dec_strict, k) * beta[..., :, None]
    eye = torch.eye(BT, dtype=q.dtype, device=dev)
    Tm = torch.linalg.solve_triangular(A + eye, torch.diag_embed(beta), upper=False, unitriangular=True)
    w = Tm @ (g.exp() * k)
    u = Tm @ v
    S = q.new_zeros(B, H, K, Vd)
    outs = []
    for n in range(NT):
        q_n, k_n, u_n, g_n, w_n = q[:, :, n], k[:, :, n], u[:, :, n], g[:, :, n], w[:, :, n]
        Aqk = torch.einsum("bhcd,bhcjd,bhjd->bhcj", q_n, dec_incl[:, :, n], k_n)
        v_n = u_n - w_n @ S
        outs.append((q_n * g_n.exp()) @ S + Aqk @ v_n)
        g_last = g_n[:, :, -1]                                           # [B, H, K]
        S = S * g_last.exp()[..., None] + ((g_last[:, :, None, :] - g_n).exp() * k_n).transpose(-1, -2) @ v_n
    o = torch.stack(outs, 2).reshape(B, H, NT * BT, Vd).permute(0, 2, 1, 3)
    return o[:, :T]


class KimiK3(nn.Module):
    """Batched Kimi K3 text model (training form of make_k3_fixtures.K3Reference.forward, same maths; parameters
    keyed by K3Reference's tensor names with '.' -> '__').  tc: the text_config dict (make_k3_fixtures.text_config)."""
    family = "k3"

    def __init__(self, tc, kda_chunk=32):
        super().__init__()
        self.tc = tc
        self.kda_chunk = kda_chunk
        shapes = k3.init_weights(tc, torch.Generator().manual_seed(0))  # names and shapes only
        self.p = nn.ParameterDict({n.replace(".", "__"): nn.Parameter(torch.empty_like(v))
                                   for n, v in shapes.items() if not n.endswith("e_score_correction_bias")})
        for n, v in shapes.items():
            if n.endswith("e_score_correction_bias"):
                self.register_buffer(n.replace(".", "__"), torch.zeros_like(v))
        self.last_idx = {}
        self.margins = None
        self.situ_stats = None
        self.eps = tc["rms_norm_eps"]

    def w(self, name):
        key = name.replace(".", "__")
        return self.p[key] if key in self.p else getattr(self, key)

    def bias_buffers(self):
        return [(n, b) for n, b in self.named_buffers() if n.endswith("e_score_correction_bias")]

    def hf_tensors(self):
        """{K3Reference name (no language_model. prefix): tensor}."""
        out = {n.replace("__", "."): v for n, v in self.p.items()}
        out.update({n.replace("__", "."): b for n, b in self.bias_buffers()})
        return out

    def attn_res(self, prefix_sum, bank, proj, norm):
        v = torch.stack(list(bank) + [prefix_sum], dim=2)                # [B, T, nb+1, H]
        vf = v.float()
        kk = vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + self.eps)
        scores = (kk * (self.w(norm).float() * self.w(proj).float().squeeze(0))).sum(-1)
        probs = scores.softmax(-1)
        return (probs.unsqueeze(-2) @ vf).squeeze(-2).to(prefix_sum.dtype)

    def lin(self, x, name):
        return x @ self.w(name).t()

    def kda(self, i, x):
        p = f"model.layers.{i}.self_attn."
        la = self.tc["linear_attn_config"]
        H, K = la["num_heads"], la["head_dim"]
        B, T, _ = x.shape

        def conv(name, t):
            wgt = self.w(p + name)                                       # [D, 1, W]
            W = wgt.shape[-1]
            y = F.conv1d(F.pad(t.transpose(1, 2), (W - 1, 0)), wgt.to(t.dtype), groups=wgt.shape[0])
            return F.silu(y.transpose(1, 2))

        q = conv("q_conv1d.weight", self.lin(x, p + "q_proj.weight"))
        kk = conv("k_conv1d.weight", self.lin(x, p + "k_proj.weight"))
        v = conv("v_conv1d.weight", self.lin(x, p + "v_proj.weight"))
        g_raw = self.lin(self.lin(x, p + "f_a_proj.weight"), p + "f_b_proj.weight").reshape(B, T, H, K).float()
        beta = torch.sigmoid(self.lin(x, p + "b_proj.weight").float())
        A_log = self.w(p + "A_log").float().reshape(-1)[:H]
        g = la["gate_lower_bound"] * torch.sigmoid(A_log.exp().reshape(H, 1) *
                                                   (g_raw + self.w(p + "dt_bias").float().reshape(H, K)))
        q, kk, v = [t.float().reshape(B, T, H, K) for t in (q, kk, v)]
        qn = k3.l2norm_fla(q) * K ** -0.5
        kn = k3.l2norm_fla(kk)
        with no_autocast(x):
            o = kda_chunked(qn, kn, v, g, beta, self.kda_chunk)
        gate = self.lin(x, p + "g_proj.weight").float().reshape(B, T, H, K)
        y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.w(p + "o_norm.weight").float() \
            * torch.sigmoid(gate)
        return self.lin(y.reshape(B, T, H * K).to(x.dtype), p + "o_proj.weight")

    def mla(self, i, x):
        p, tc = f"model.layers.{i}.self_attn.", self.tc
        nh, nope, rope, vd, kvl = (tc["num_attention_heads"], tc["qk_nope_head_dim"], tc["qk_rope_head_dim"],
                                   tc["v_head_dim"], tc["kv_lora_rank"])
        B, T, _ = x.shape
        qa = k3.rms_norm(self.lin(x, p + "q_a_proj.weight"), self.w(p + "q_a_layernorm.weight"), 1e-6)
        q = self.lin(qa, p + "q_b_proj.weight").reshape(B, T, nh, nope + rope).transpose(1, 2)
        ckv = self.lin(x, p + "kv_a_proj_with_mqa.weight")
        k_pass, k_rot = ckv[..., :kvl], ckv[..., kvl:]
        kv = self.lin(k3.rms_norm(k_pass, self.w(p + "kv_a_layernorm.weight"), 1e-6), p + "kv_b_proj.weight")
        kv = kv.reshape(B, T, nh, nope + vd).transpose(1, 2)
        k_nope, val = kv[..., :nope], kv[..., nope:]
        key = torch.cat([k_nope, k_rot[:, None].expand(B, nh, T, rope)], -1)
        o = attention(q, key, val, (nope + rope) ** -0.5)
        o = o * torch.sigmoid(self.lin(x, p + "g_proj.weight"))
        return self.lin(o, p + "o_proj.weight")

    def mlp(self, x, prefix):
        g, u = self.lin(x, prefix + "gate_proj.weight"), self.lin(x, prefix + "up_proj.weight")
        return self.lin(situ_and_mul(g, u), prefix + "down_proj.weight")

    def moe(self, i, x):
        tc, p = self.tc, f"model.layers.{i}.block_sparse_moe."
        E, topk = tc["num_experts"], tc["num_experts_per_token"]
        shp = x.shape
        flat = x.reshape(-1, shp[-1])
        with no_autocast(flat):
            scores = F.linear(flat.float(), self.w(p + "gate.weight").float()).sigmoid()
        choice = scores.detach() + self.w(p + "gate.e_score_correction_bias").float()[None, :]
        if self.margins is not None:
            s = torch.sort(choice, -1, descending=True)[0]
            self.margins.append((float((s[:, topk - 1] - s[:, topk]).min()), None))
        idx = choice.topk(topk, dim=-1)[1]
        wts = scores.gather(1, idx)
        if topk > 1 and tc["moe_renormalize"]:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * tc["routed_scaling_factor"]
        self.last_idx[i] = idx.detach()
        G = torch.zeros_like(scores).scatter(1, idx, wts)
        h = self.lin(flat, p + "routed_expert_down_proj.weight")
        mi = tc["moe_intermediate_size"]
        w1 = torch.stack([self.w(p + f"experts.{e}.w1.weight") for e in range(E)])
        w3 = torch.stack([self.w(p + f"experts.{e}.w3.weight") for e in range(E)])
        w2 = torch.stack([self.w(p + f"experts.{e}.w2.weight") for e in range(E)])
        N, lat = h.shape
        gt = (h @ w1.reshape(-1, lat).t()).view(N, E, mi)
        up = (h @ w3.reshape(-1, lat).t()).view(N, E, mi)
        if self.situ_stats is not None:
            sel = G != 0
            self.situ_stats.append((gt[sel].detach(), up[sel].detach()))
        a = situ_and_mul(gt, up) * G.to(gt.dtype)[..., None]
        y = a.reshape(N, -1) @ w2.permute(0, 2, 1).reshape(-1, lat)
        y = k3.rms_norm(y.float(), self.w(p + "routed_expert_norm.weight").float(), self.eps).to(h.dtype)
        y = self.lin(y, p + "routed_expert_up_proj.weight")
        return y.view(shp) + self.mlp(x, p + "shared_experts.")

    def forward(self, ids, with_mtp=False):
        tc = self.tc
        bs = tc["attn_res_block_size"]
        h = self.w("model.embed_tokens.weight")[ids]
        bank = []
        for i in range(tc["num_hidden_layers"]):
            p = f"model.layers.{i}."
            prefix_sum = h
            x = h
            if bank:
                x = self.attn_res(prefix_sum, bank, p + "self_attention_res_proj.weight",
                                  p + "self_attention_res_norm.weight")
            if i % bs == 0:
                bank.append(prefix_sum)
                prefix_sum = None
            x = k3.rms_norm(x, self.w(p + "input_layernorm.weight"), self.eps)
            a = self.kda(i, x) if k3.is_kda_layer(tc, i) else self.mla(i, x)
            prefix_sum = a if prefix_sum is None else prefix_sum + a
            x = self.attn_res(prefix_sum, bank, p + "mlp_res_proj.weight", p + "mlp_res_norm.weight")
            x = k3.rms_norm(x, self.w(p + "post_attention_layernorm.weight"), self.eps)
            m = self.moe(i, x) if k3.is_moe_layer(tc, i) else self.mlp(x, p + "mlp.")
            h = prefix_sum + m
        h = self.attn_res(h, bank, "model.output_attn_res_proj.weight", "model.output_attn_res_norm.weight")
        h = k3.rms_norm(h, self.w("model.norm.weight"), self.eps)
        return self.lin(h, "lm_head.weight")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def autocast_dtype(x):
    """The dtype CUDA autocast computes in (x's own dtype when it is off)."""
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        return torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype
    return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else x.dtype


def no_autocast(x):
    """A context that turns CUDA autocast off (f32 maths inside), or nothing on CPU."""
    return torch.autocast(device_type="cuda", enabled=False) if x.is_cuda else _null()


# ------------------------------------------------------------------------------------------------ init


def init_for_training(model, seed):
    """Small-scale init: linear weights and embeddings N(0, 0.02), norms 1, router biases 0; K3 extras: A_log =
    log U(1, 16), dt_bias ~ -1 (decay exp(g) mostly in (0.3, 1) at the start), short-conv weights U(-0.5, 0.5)
    (nn.Conv1d's default for kernel 4), AttnRes projections 0 (an even mix over depth at the start)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = name.replace("__", ".")
            if n.endswith(("norm.weight", "layernorm.weight")) or ".norm." in n or n.endswith("o_norm.weight"):
                v = torch.ones(p.shape)
            elif n.endswith("A_log"):
                v = torch.log(1.0 + 15.0 * torch.rand(p.shape, generator=gen))
            elif n.endswith("dt_bias"):
                v = -1.0 + 0.1 * torch.randn(p.shape, generator=gen)
            elif "conv1d" in n:
                v = torch.rand(p.shape, generator=gen) - 0.5
            elif n.endswith("_res_proj.weight"):
                v = torch.zeros(p.shape)
            else:
                v = 0.02 * torch.randn(p.shape, generator=gen)
            p.copy_(v.to(p.dtype))
        for name, b in model.named_buffers():
            if name.replace("__", ".").endswith("e_score_correction_bias"):
                b.zero_()


def param_count(model):
    return sum(t.numel() for t in model.hf_tensors().values())
