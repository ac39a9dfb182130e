#!/usr/bin/env python3
"""Checks the training modules of models.py against references, on CPU in f32 (torch only; runs here and on the
device):

  * DeepseekV3 / Qwen3Moe loaded with the weights of committed transformers fixtures (tests/fixtures/models/
    ds_sharded, ds_noqlora_dense2, qwen_gqa, qwen_sparse_step: default RoPE) must reproduce their
    reference_logits.f32 (transformers 5.17, f32 eager) and greedy tokens;
  * KimiK3 (batched, chunked KDA) must reproduce make_k3_fixtures.K3Reference (recurrent KDA, one sequence at a
    time) on random weights for a batch of two sequences;
  * the batched chunked KDA must match make_k3_fixtures.kda_recurrent, and its gradients must be finite.

    /usr/bin/python3 tools/train_fixtures/check_models.py      # exit 0 when every check passes
"""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models as M  # noqa: E402

k3 = M.k3
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "models")
TOL = 2e-4


def read_dir_tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            for k, (_, _, t) in k3.read_safetensors(os.path.join(d, f)).items():
                out[k] = t.float()
    return out


def hf_cfg(d):
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    rp = c.get("rope_parameters") or {}
    if rp:
        assert rp.get("rope_type", "default") == "default", "only default RoPE here"
        c["rope_theta"] = rp["rope_theta"]
    elif c.get("rope_scaling"):
        raise ValueError("rope scaling not supported here")
    if "num_local_experts" in c and "num_experts" not in c:
        c["num_experts"] = c["num_local_experts"]
    return c


def load_into(model, t):
    """Loads HF tensors into a DeepseekV3 / Qwen3Moe module (the inverse of hf_tensors)."""
    mine = model.hf_tensors()
    missing = [k for k in mine if k not in t]
    extra = [k for k in t if k not in mine]
    assert not missing and not extra, (missing[:5], extra[:5])
    with torch.no_grad():
        for k, p in mine.items():
            p.copy_(t[k])
        for layer in model.layers:
            if isinstance(layer.mlp, (M.DsMoe, M.QwenMoe)):
                pass  # stacked experts were filled through their per-expert views above


def check_fixture(name):
    d = os.path.join(FIXTURES, name)
    c = hf_cfg(d)
    with open(os.path.join(d, "reference.json")) as f:
        ref = json.load(f)
    model = M.DeepseekV3(c) if c["model_type"] in ("deepseek_v3", "kimi_k2") else M.Qwen3Moe(c)
    load_into(model, read_dir_tensors(d))
    model.eval()
    ids = ref["prompt_ids"] + ref["greedy_ids"][:-1]
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
        want = torch.from_file(os.path.join(d, ref["logits_file"]), size=ref["n_rows"] * ref["vocab_size"],
                               dtype=torch.float32).view(ref["n_rows"], ref["vocab_size"])
        diff = float((logits - want).abs().max())
        P = len(ref["prompt_ids"])
        greedy = logits[P - 1:].argmax(-1).tolist()
    ok = diff < TOL and greedy == ref["greedy_ids"]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max |logit diff| vs transformers {diff:.2e}, greedy "
          f"{'equal' if greedy == ref['greedy_ids'] else 'DIFFERENT'}")
    return ok


def check_kda():
    g = torch.Generator().manual_seed(5)
    B, T, H, K = 2, 21, 2, 8
    q = k3.l2norm_fla(torch.randn(B, T, H, K, generator=g)) * K ** -0.5
    k = k3.l2norm_fla(torch.randn(B, T, H, K, generator=g))
    v = torch.randn(B, T, H, K, generator=g)
    gg = -5 * torch.sigmoid(torch.randn(B, T, H, K, generator=g))
    beta = torch.sigmoid(torch.randn(B, T, H, generator=g))
    for t_ in (q, k, v, gg, beta):
        t_.requires_grad_(True)
    o = M.kda_chunked(q, k, v, gg, beta, 8)
    worst = 0.0
    for b in range(B):
        r, _ = k3.kda_recurrent(q[b].detach(), k[b].detach(), v[b].detach(), gg[b].detach(), beta[b].detach())
        worst = max(worst, float((o[b].detach() - r).abs().max()))
    o.pow(2).sum().backward()
    finite = all(torch.isfinite(t_.grad).all() for t_ in (q, k, v, gg, beta))
    ok = worst < 1e-5 and finite
    print(f"{'ok  ' if ok else 'FAIL'} batched chunked KDA vs recurrent: max |diff| {worst:.2e}, gradients finite "
          f"{finite}")
    return ok


def check_k3():
    c = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4, attn_res_block_size=2,
             full_attn_layers=[2, 4], kda_num_heads=2, kda_head_dim=8, num_attention_heads=2, q_lora_rank=16,
             kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, num_experts=8,
             num_experts_per_token=2, num_shared_experts=1, moe_intermediate_size=16, routed_expert_hidden_size=24,
             first_k_dense_replace=1, routed_scaling_factor=2.5, moe_renormalize=True)
    spec = dict(name="check", experts="bf16", small_dtype="F32", shards=1, cfg=c)
    tc = k3.text_config(spec)
    w = k3.init_weights(tc, torch.Generator().manual_seed(11))
    model = M.KimiK3(tc, kda_chunk=4)
    with torch.no_grad():
        for name, t in model.hf_tensors().items():
            t.copy_(w[name])
    ref = k3.K3Reference(w, tc)
    g = torch.Generator().manual_seed(12)
    ids = torch.randint(0, 96, (2, 13), generator=g)
    with torch.no_grad():
        mine = model(ids)
    worst = 0.0
    for b in range(2):
        r = ref.forward(ids[b].tolist())
        worst = max(worst, float((mine[b] - r).abs().max()))
    ok = worst < 1e-4
    print(f"{'ok  ' if ok else 'FAIL'} batched KimiK3 vs K3Reference (random weights, batch of 2): max |logit diff| "
          f"{worst:.2e}")
    return ok


def main():
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    results = [check_fixture(n) for n in ("ds_sharded", "ds_noqlora_dense2", "qwen_gqa", "qwen_sparse_step")]
    results += [check_kda(), check_k3()]
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
