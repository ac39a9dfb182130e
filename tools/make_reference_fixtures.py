#!/usr/bin/env python3
"""Make tiny random-weight MoE checkpoints and their Hugging Face transformers reference outputs.

This script is the provenance of tests/fixtures/models/<name>/.  It needs torch and transformers
(written against transformers 5.17 / torch 2.11 / safetensors 0.8), which this repository's
machines do not have, so it is run on the lent accelerator machine (CPU math only, no network):

    run(command="set -o pipefail; PYTHONUNBUFFERED=1 python3 tools/make_reference_fixtures.py \
                 --out /tmp/fx --tar $OUT/fixtures.tar.gz 2>&1 | tee $OUT/log.txt",
        timeout_s=480)

then, here:

    tar -xzf <files_at>/fixtures.tar.gz -C /tmp/fx
    cp -r /tmp/fx/committed/* tests/fixtures/models/        # committed set
    cp -r /tmp/fx/heldout/*   <somewhere outside the repo>  # held-out set, never committed

Options: --only NAME[,NAME...] to make a subset, --max-tries N (re-seeds per fixture).  The CPU math is
deterministic per seed; the whole set takes ~25 s there (most of it importing transformers).  The committed
set was made with exactly this script: the full run above, then qwen_sparse_step again with
`--only qwen_sparse_step --max-tries 40` after its embed_std/out_gain/min_distinct settings were added (the
settings do not change any other fixture).

What it writes, per fixture, into <out>/{committed,heldout}/<name>/:
  config.json, generation_config.json     as written by save_pretrained, except: fixtures with legacy_config
                                          (ds_yarn_grouped, qwen_sparse_step, h_ds_yarn_grouped8, h_qwen_wide)
                                          are rewritten to the released checkpoints' spelling: top-level
                                          "rope_theta" + "rope_scaling" ({"type": "yarn", ...} or null), and for
                                          Qwen "num_experts" (transformers 5 writes "num_local_experts" and
                                          "rope_parameters"); the fp8 fixtures get a "quantization_config".
  model.safetensors                       or model-0000x-of-0000N.safetensors + model.safetensors.index.json
                                          bf16 weights (per-expert tensors model.layers.L.mlp.experts.E.
                                          {gate,up,down}_proj.weight; DeepSeek's e_score_correction_bias F32);
                                          fp8 fixtures: every attention/MLP/expert projection weight is
                                          F8_E4M3 with a companion F32 "<name>_scale_inv" of shape
                                          [ceil(out/128), ceil(in/128)], W = fp8 * scale_inv per 128x128 block.
  reference.json                          {"prompt_ids", "greedy_ids" (16), "vocab_size", "n_rows" (= P+15),
                                          "logits_file", "script", "transformers_version", "torch_version",
                                          "notes", + diagnostics: "seed", "min_greedy_gap", "min_route_margin", ...}
  reference_logits.f32                    raw little-endian float32, row-major [n_rows][vocab_size]; row i =
                                          logits after position i of prompt_ids + greedy_ids[:15] from ONE full
                                          forward pass (row P-1 is what greedy_ids[0] was chosen from, row
                                          P-1+j is what greedy_ids[j] was chosen from).

How the reference is computed: the model is built with a seed, its weights re-initialised so activations are
O(1) and logits spread, cast to bfloat16 and saved; it is then reloaded from disk with
from_pretrained(dir, dtype=float32, attn_implementation="eager") on CPU, so the reference is f32 math on the
exact stored bf16 weights (fp8 fixtures: on the exactly dequantized weights fp8->f32 * scale_inv, loaded into
an unquantized f32 model).  Greedy decoding = 16 repeated full forward passes (no KV cache), argmax.
A seed is rejected (and the next tried) unless every greedy step has top1-top2 logit gap >= 2e-2 (checked on
the step passes and on the final full pass) and every routing decision at every MoE layer and position, in
every pass, has a margin >= 1e-4 between the k-th and (k+1)-th selection score (DeepSeek: sigmoid +
e_score_correction_bias among the unmasked groups; also the topk_group-th vs next group score when group-limited;
Qwen: the softmax probability, and the raw router logit), or when the greedy continuation is degenerate (fewer
than MIN_DISTINCT_GREEDY distinct tokens).  The routing margins come from forward hooks on every mlp.gate
router, whose selection is re-derived here and asserted equal to the module's own top-k indices.  Each saved
checkpoint is also round-tripped (save_pretrained of the loaded model must reproduce the stored tensors
exactly) so no weight can have been silently re-initialised; legacy-spelled configs are checked to give
bit-identical logits to the transformers-5 spelling.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tarfile
import tempfile
import time

import torch

GREEDY_STEPS = 16
MIN_GREEDY_GAP = 2e-2
MIN_ROUTE_MARGIN = 1e-4
MIN_DISTINCT_GREEDY = 6  # reject degenerate (e.g. one repeated token) continuations
FP8_MAX = 448.0
BLOCK = 128

# --------------------------------------------------------------------------------------------------
# Fixture specifications
# --------------------------------------------------------------------------------------------------

YARN_A = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
          "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 64}
YARN_B = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "mscale": 1.0, "mscale_all_dim": 0.8,
          "beta_fast": 16, "beta_slow": 2, "original_max_position_embeddings": 64}

FIXTURES = [
    # ---------------------------------------------------------------- committed set
    dict(name="ds_yarn_grouped", set="committed", family="ds", seed=1101, prompt_len=14, legacy_config=True,
         cfg=dict(vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                  q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=1,
                  first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                  max_position_embeddings=256, rope_parameters=YARN_A)),
    dict(name="ds_noqlora_dense2", set="committed", family="ds", seed=1201, prompt_len=11,
         cfg=dict(vocab_size=288, hidden_size=64, intermediate_size=128, moe_intermediate_size=24,
                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                  q_lora_rank=None, kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=24,
                  n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=2,
                  first_k_dense_replace=2, norm_topk_prob=False, routed_scaling_factor=1.25,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="ds_fp8", set="committed", family="ds", seed=1301, prompt_len=12, fp8=True,
         cfg=dict(vocab_size=256, hidden_size=256, intermediate_size=320, moe_intermediate_size=160,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                  q_lora_rank=192, kv_lora_rank=160, qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32,
                  n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
                  first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="ds_sharded", set="committed", family="ds", seed=1401, prompt_len=17, shards=4,
         cfg=dict(vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                  q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  n_routed_experts=12, num_experts_per_tok=3, n_group=3, topk_group=2, n_shared_experts=1,
                  first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.0,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="qwen_gqa", set="committed", family="qwen", seed=1501, prompt_len=15,
         cfg=dict(vocab_size=352, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                  num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                  mlp_only_layers=[], tie_word_embeddings=False, attention_bias=False,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    dict(name="qwen_sparse_step", set="committed", family="qwen", seed=1601, prompt_len=10, legacy_config=True,
         embed_std=0.25, out_gain=2.5, min_distinct=10,
         cfg=dict(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=2,
                  mlp_only_layers=[0], tie_word_embeddings=True, attention_bias=True,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # ---------------------------------------------------------------- held-out set (never committed)
    dict(name="h_ds_yarn_grouped8", set="heldout", family="ds", seed=2101, prompt_len=19, legacy_config=True,
         cfg=dict(vocab_size=300, hidden_size=96, intermediate_size=112, moe_intermediate_size=24,
                  num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=3,
                  q_lora_rank=64, kv_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=20,
                  n_routed_experts=16, num_experts_per_tok=4, n_group=8, topk_group=3, n_shared_experts=1,
                  first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                  max_position_embeddings=128, rope_parameters=YARN_B)),
    dict(name="h_ds_fp8_odd", set="heldout", family="ds", seed=2201, prompt_len=13, fp8=True,
         cfg=dict(vocab_size=256, hidden_size=200, intermediate_size=272, moe_intermediate_size=144,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                  q_lora_rank=None, kv_lora_rank=96, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=40,
                  n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=1,
                  first_k_dense_replace=1, norm_topk_prob=False, routed_scaling_factor=1.5,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="h_qwen_wide", set="heldout", family="qwen", seed=2301, prompt_len=16, legacy_config=True,
         cfg=dict(vocab_size=400, hidden_size=96, intermediate_size=160, moe_intermediate_size=48,
                  num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                  num_experts=16, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                  mlp_only_layers=[2], tie_word_embeddings=False, attention_bias=False,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 5e5})),
    dict(name="h_ds_sharded_allmoe", set="heldout", family="ds", seed=2401, prompt_len=18, shards=3,
         cfg=dict(vocab_size=272, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2,
                  q_lora_rank=None, kv_lora_rank=40, qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=16,
                  n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
                  first_k_dense_replace=0, norm_topk_prob=False, routed_scaling_factor=1.0,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 50000.0})),
]

# --------------------------------------------------------------------------------------------------
# Pure helpers (torch only; unit-testable without transformers)
# --------------------------------------------------------------------------------------------------


def init_weights_(named_params, named_buffers, hidden_size, gen, router_gain=2.0, lm_gain=3.0, embed_std=1.0,
                  out_gain=1.0):
    """Re-initialise in place so activations are O(1) and logits/routing scores are well spread."""
    with torch.no_grad():
        for name, p in named_params:
            def n(*shape):
                return torch.randn(*shape, generator=gen, dtype=torch.float32)
            if name.endswith("embed_tokens.weight"):
                v = n(*p.shape) * embed_std
            elif "norm" in (name.split(".")[-2] if "." in name else ""):  # *layernorm, model.norm, q/k_norm
                v = 1.0 + 0.1 * n(*p.shape)
            elif name.endswith("mlp.gate.weight"):  # router
                v = n(*p.shape) * (router_gain / math.sqrt(p.shape[-1]))
            elif name.endswith("lm_head.weight"):
                v = n(*p.shape) * (lm_gain / math.sqrt(p.shape[-1]))
            elif name.endswith(".bias"):
                v = 0.1 * n(*p.shape)
            elif p.dim() in (2, 3):  # nn.Linear [out, in] or stacked experts [E, out, in]
                v = n(*p.shape) / math.sqrt(p.shape[-1])
                if name.endswith(("o_proj.weight", "down_proj.weight", "experts.down_proj")):
                    v = v * out_gain  # residual-branch outputs (tied-embedding fixture: beat the self-logit)
            else:
                raise ValueError(f"don't know how to initialise {name} {tuple(p.shape)}")
            p.copy_(v.to(p.dtype))
        for name, b in named_buffers:
            if name.endswith("e_score_correction_bias"):
                b.copy_((0.05 * torch.randn(*b.shape, generator=gen)).to(b.dtype))


def topk_gap(x, k):
    """x: [..., n] -> (sorted desc values[..., k-1] - values[..., k]); needs n > k."""
    s = torch.sort(x, dim=-1, descending=True)[0]
    return s[..., k - 1] - s[..., k]


def ds_route_margins(router_logits, bias, n_group, topk_group, top_k):
    """DeepSeek-V3 router (noaux_tc): returns (min expert margin, min group margin or None).

    Mirrors DeepseekV3TopkRouter.forward: scores = sigmoid(logits); choice = scores + bias; group score =
    sum of top-2 choice scores in each group; keep topk_group groups; top_k among the kept experts."""
    scores = router_logits.float().sigmoid()
    choice = scores + bias.float()
    T, E = choice.shape
    per = E // n_group
    gmargin = None
    if n_group > 1 and topk_group < n_group:
        gs = choice.view(T, n_group, per).topk(2, dim=-1)[0].sum(dim=-1)
        gmargin = topk_gap(gs, topk_group).min().item()
        gidx = torch.topk(gs, k=topk_group, dim=-1)[1]
        gmask = torch.zeros_like(gs).scatter_(1, gidx, 1.0)
        smask = gmask.unsqueeze(-1).expand(T, n_group, per).reshape(T, E).bool()
        n_avail = topk_group * per
        choice = choice.masked_fill(~smask, float("-inf"))
    else:
        n_avail = E
    emargin = topk_gap(choice, top_k).min().item() if top_k < n_avail else float("inf")
    sel = torch.topk(choice, k=top_k, dim=-1)[1]
    return emargin, gmargin, sel


def qwen_route_margins(router_logits, top_k):
    """Qwen3-MoE router: softmax then top_k. Returns (min prob margin, min logit margin)."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    return topk_gap(probs, top_k).min().item(), topk_gap(router_logits.float(), top_k).min().item()


def quantize_fp8_blockwise(w, fp8_dtype, block=BLOCK):
    """w [out, in] -> (q [out, in] fp8_dtype, scale_inv [ceil(out/b), ceil(in/b)] f32), W ~= q * scale_inv."""
    out_f, in_f = w.shape
    R, C = -(-out_f // block), -(-in_f // block)
    wp = torch.zeros(R * block, C * block, dtype=torch.float32)
    wp[:out_f, :in_f] = w.float()
    blocks = wp.view(R, block, C, block)
    amax = blocks.abs().amax(dim=3).amax(dim=1)  # [R, C]
    scale_inv = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax)).float()
    q = (blocks / scale_inv[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(R * block, C * block)[:out_f, :in_f].contiguous().to(fp8_dtype)
    return q, scale_inv


def dequantize_fp8_blockwise(q, scale_inv, block=BLOCK):
    out_f, in_f = q.shape
    s = scale_inv.float().repeat_interleave(block, 0).repeat_interleave(block, 1)[:out_f, :in_f]
    return q.float() * s


def is_fp8_target(name):
    """Linear weights that DeepSeek-V3 / Kimi-K2 release as fp8: every attention and MLP/expert projection."""
    return name.endswith("proj.weight") or name.endswith("proj_with_mqa.weight")


def legacy_config(cfg):
    """Rewrite a transformers-5 config dict to the spelling of the released checkpoints' config.json.

    DeepSeek-V3 / Kimi-K2: top-level "rope_theta" + "rope_scaling": {"type": "yarn", ...} (or null).
    Qwen3-30B-A3B: top-level "rope_theta", "rope_scaling": null, "num_experts" (5.x writes "num_local_experts")."""
    cfg = dict(cfg)
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    rtype = rp.pop("rope_type")
    rp.pop("type", None)
    cfg["rope_scaling"] = None if rtype == "default" else dict(sorted({**rp, "type": rtype}.items()))
    if cfg.get("model_type") == "qwen3_moe" and "num_local_experts" in cfg:
        cfg["num_experts"] = cfg.pop("num_local_experts")
    return cfg


# --------------------------------------------------------------------------------------------------
# transformers-side machinery (device machine)
# --------------------------------------------------------------------------------------------------


def load_dir_tensors(d):
    from safetensors.torch import load_file
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            t = load_file(os.path.join(d, f))
            assert not (set(t) & set(out)), f"duplicate tensor names in {d}"
            out.update(t)
    return out


def family_classes(family):
    import transformers as tf
    if family == "ds":
        return tf.DeepseekV3Config, tf.DeepseekV3ForCausalLM
    return tf.Qwen3MoeConfig, tf.Qwen3MoeForCausalLM


def make_config(spec):
    Cfg, _ = family_classes(spec["family"])
    kw = json.loads(json.dumps(spec["cfg"]))  # deep copy
    head_dim = kw.pop("head_dim", None)
    if head_dim is not None:
        kw["head_dim"] = head_dim
    cfg = None
    if spec["family"] == "ds":  # no MTP module weights are written, so say so (as Kimi-K2's config does)
        try:
            cfg = Cfg(**kw, num_mtp_layers=0)
        except Exception:  # noqa: BLE001
            cfg = None
    if cfg is None:
        cfg = Cfg(**kw)
    if head_dim is not None:
        assert getattr(cfg, "head_dim", None) == head_dim, "explicit head_dim not kept by config"
    return cfg


def load_ref_model(d, family):
    _, Model = family_classes(family)
    model, info = Model.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                        output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys",
                                                         "error_msgs")}
    assert not bad, f"loading {d}: {bad}"
    model.eval()
    return model


def check_roundtrip(model, ref_tensors, tmp):
    """save_pretrained(model) must reproduce exactly the (f32-cast) tensors the reference model was loaded from."""
    d = tempfile.mkdtemp(dir=tmp)
    model.save_pretrained(d)
    got = load_dir_tensors(d)
    assert set(got) == set(ref_tensors), (sorted(set(got) ^ set(ref_tensors)))[:10]
    for k, v in ref_tensors.items():
        assert torch.equal(got[k].float(), v.float()), f"weight {k} differs after reload"
    shutil.rmtree(d)


class RouteRecorder:
    def __init__(self, model, family):
        self.family, self.margins, self.gmargins, self.handles = family, [], [], []
        self.n_routers = 0
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate") and type(mod).__name__.endswith("Router"):
                self.handles.append(mod.register_forward_hook(self.hook))
                self.n_routers += 1

    def hook(self, mod, inp, out):
        logits = out[0].detach()
        if self.family == "ds":
            em, gm, sel = ds_route_margins(logits, mod.e_score_correction_bias, mod.num_group, mod.topk_group,
                                           mod.top_k)
            # cross-check our replica against the module's own selection
            assert torch.equal(sel.sort(-1)[0], out[2].sort(-1)[0]), "router replica disagrees"
            self.margins.append(em)
            if gm is not None:
                self.gmargins.append(gm)
        else:
            pm, lm = qwen_route_margins(logits, mod.top_k)
            sel = torch.topk(logits.float(), k=mod.top_k, dim=-1)[1]
            assert torch.equal(sel.sort(-1)[0], out[2].sort(-1)[0]), "router replica disagrees"
            self.margins.append(min(pm, lm))

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def run_reference(model, family, prompt):
    rec = RouteRecorder(model, family)
    ids, gaps = list(prompt), []
    for _ in range(GREEDY_STEPS):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        top = torch.topk(logits, 2)
        gaps.append((top.values[0] - top.values[1]).item())
        ids.append(int(top.indices[0]))
    greedy = ids[len(prompt):]
    full = model(torch.tensor([ids[:-1]])).logits[0].float()
    rec.close()
    P = len(prompt)
    rows = full[P - 1:]
    assert rows.shape[0] == GREEDY_STEPS
    full_gaps = topk_gap(rows, 1).tolist()
    argmax_ok = rows.argmax(-1).tolist() == greedy
    return dict(greedy=greedy, logits=full, step_gaps=gaps, full_gaps=full_gaps, argmax_ok=argmax_ok,
                route_margin=min(rec.margins) if rec.margins else None,
                group_margin=min(rec.gmargins) if rec.gmargins else None, n_routers=rec.n_routers)


def write_fp8_checkpoint(bf16_dir, dst, tmp):
    """bf16 save_pretrained dir -> dst with fp8 weights; returns the dequantized f32 tensor dict."""
    from safetensors.torch import save_file
    src = load_dir_tensors(bf16_dir)
    out, deq = {}, {}
    for k, v in src.items():
        if is_fp8_target(k):
            assert v.dim() == 2, k
            q, s = quantize_fp8_blockwise(v.float(), torch.float8_e4m3fn)
            out[k], out[k + "_scale_inv"] = q, s
            deq[k] = dequantize_fp8_blockwise(q, s)
        else:
            out[k] = v
            deq[k] = v.float()
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(bf16_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [BLOCK, BLOCK]}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(bf16_dir, extra)):
            shutil.copy(os.path.join(bf16_dir, extra), dst)
    # unquantized f32 twin for the reference model
    deq_dir = tempfile.mkdtemp(dir=tmp)
    save_file({k: v.contiguous() for k, v in deq.items()}, os.path.join(deq_dir, "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copy(os.path.join(bf16_dir, "config.json"), deq_dir)
    n_q = sum(1 for k in out if k.endswith("_scale_inv"))
    return deq, deq_dir, n_q


def dtype_summary(d):
    from safetensors import safe_open
    summ = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as sf:
                for k in sf.keys():
                    dt = str(sf.get_slice(k).get_dtype())
                    summ[dt] = summ.get(dt, 0) + 1
    return summ


def attempt(spec, seed, tmp, log):
    """One try at a fixture; returns (fixture_dir, result dict) or (None, reason)."""
    import transformers
    _, Model = family_classes(spec["family"])
    cfg = make_config(spec)
    torch.manual_seed(seed)
    model = Model(cfg).float()
    gen = torch.Generator().manual_seed(seed)
    init_weights_(list(model.named_parameters()), list(model.named_buffers()), cfg.hidden_size, gen,
                  embed_std=spec.get("embed_std", 1.0), out_gain=spec.get("out_gain", 1.0))
    model.to(torch.bfloat16)
    if spec["family"] == "ds":  # DeepSeek-V3 / Kimi-K2 ship e_score_correction_bias as F32
        for name, mod in model.named_modules():
            if hasattr(mod, "e_score_correction_bias"):
                mod.e_score_correction_bias.data = mod.e_score_correction_bias.data.float()
    if spec["cfg"].get("tie_word_embeddings"):
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "not tied"
    work = tempfile.mkdtemp(dir=tmp)
    fx = os.path.join(work, "fixture")
    os.makedirs(fx)
    extra = {}
    if spec.get("shards"):
        total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        model.save_pretrained(fx, max_shard_size=int(total / spec["shards"]) + 1)
        n_sh = len([f for f in os.listdir(fx) if f.endswith(".safetensors")])
        assert n_sh >= 3 and os.path.exists(os.path.join(fx, "model.safetensors.index.json")), \
            f"only {n_sh} shards"
        extra["n_shards"] = n_sh
    elif spec.get("fp8"):
        bf = os.path.join(work, "bf16")
        model.save_pretrained(bf)
    else:
        model.save_pretrained(fx)
    del model

    if spec.get("fp8"):
        ref_tensors, ref_dir, n_q = write_fp8_checkpoint(bf, fx, work)
        extra["n_fp8_tensors"] = n_q
    else:
        ref_tensors = load_dir_tensors(fx)
        ref_dir = fx
        if spec["cfg"].get("tie_word_embeddings"):
            assert "lm_head.weight" not in ref_tensors, "tied model saved lm_head.weight"
    if spec.get("legacy_config"):
        cpath = os.path.join(fx, "config.json")
        with open(cpath) as f:
            orig = json.load(f)
        newdir = os.path.join(work, "orig_cfg")
        os.makedirs(newdir)
        for f_ in os.listdir(fx):
            shutil.copy(os.path.join(fx, f_), newdir)
        with open(cpath, "w") as f:
            json.dump(legacy_config(orig), f, indent=2, sort_keys=True)
        orig_dir = newdir

    model = load_ref_model(ref_dir, spec["family"])
    check_roundtrip(model, ref_tensors, work)
    if spec["cfg"].get("tie_word_embeddings"):
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "not tied on load"
    g2 = torch.Generator().manual_seed(seed + 7)
    P = spec["prompt_len"]
    prompt = torch.randint(0, cfg.vocab_size, (P,), generator=g2).tolist()
    res = run_reference(model, spec["family"], prompt)
    res.update(extra)
    res["prompt"] = prompt
    res["attn_scaling"] = [float(l.self_attn.scaling) for l in model.model.layers][0]
    res["rope_attention_scaling"] = float(model.model.rotary_emb.attention_scaling)
    res["rope_parameters"] = dict(model.config.rope_parameters)

    if spec.get("legacy_config"):
        m2 = load_ref_model(orig_dir, spec["family"])
        r2 = run_reference(m2, spec["family"], prompt)
        same_freq = torch.equal(m2.model.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq)
        res["legacy_vs_new"] = dict(
            rope_parameters_new=dict(m2.config.rope_parameters),
            config_diff={k: (v, model.config.to_dict().get(k)) for k, v in m2.config.to_dict().items()
                         if k not in ("rope_scaling", "rope_theta") and model.config.to_dict().get(k) != v},
            inv_freq_equal=bool(same_freq),
            scaling_equal=float(m2.model.layers[0].self_attn.scaling) == res["attn_scaling"],
            max_abs_logit_diff=(r2["logits"] - res["logits"]).abs().max().item(),
            greedy_equal=r2["greedy"] == res["greedy"])
        assert res["legacy_vs_new"]["greedy_equal"] and res["legacy_vs_new"]["max_abs_logit_diff"] == 0.0, \
            res["legacy_vs_new"]
    if spec.get("fp8"):
        # informational: does transformers' own fp8 path (dequantize=True) agree with our dequantization?
        try:
            _, M = family_classes(spec["family"])
            qc = transformers.FineGrainedFP8Config(dequantize=True)
            m3 = M.from_pretrained(fx, dtype=torch.float32, attn_implementation="eager", quantization_config=qc,
                                   device_map="cpu")
            m3.eval()
            with torch.no_grad():
                l3 = m3(torch.tensor([prompt + res["greedy"][:15]])).logits[0].float()
            res["hf_fp8_dequant_max_abs_diff"] = (l3 - res["logits"]).abs().max().item()
        except Exception as e:  # noqa: BLE001
            res["hf_fp8_dequant_max_abs_diff"] = f"failed: {type(e).__name__}: {str(e)[:300]}"

    min_gap = min(min(res["step_gaps"]), min(res["full_gaps"]))
    rm = res["route_margin"]
    gm = res["group_margin"]
    reasons = []
    if min_gap < MIN_GREEDY_GAP:
        reasons.append(f"greedy gap {min_gap:.3g}")
    if len(set(res["greedy"])) < spec.get("min_distinct", MIN_DISTINCT_GREEDY):
        reasons.append(f"only {len(set(res['greedy']))} distinct greedy tokens")
    if not res["argmax_ok"]:
        reasons.append("final-pass argmax != greedy")
    if rm is None or rm < MIN_ROUTE_MARGIN:
        reasons.append(f"route margin {rm}")
    if gm is not None and gm < MIN_ROUTE_MARGIN:
        reasons.append(f"group margin {gm:.3g}")
    res["dtypes"] = dtype_summary(fx)
    res["min_gap"] = min_gap
    if reasons:
        return None, "; ".join(reasons)
    return fx, res


def notes_for(spec, res):
    c = spec["cfg"]
    parts = []
    if spec["family"] == "ds":
        parts.append("DeepseekV3ForCausalLM (MLA, sigmoid noaux_tc router with e_score_correction_bias, "
                     f"{c['n_routed_experts']} routed experts top-{c['num_experts_per_tok']}, n_group {c['n_group']} "
                     f"topk_group {c['topk_group']}, {c['n_shared_experts']} shared, first_k_dense_replace "
                     f"{c['first_k_dense_replace']}, norm_topk_prob {c['norm_topk_prob']}, routed_scaling_factor "
                     f"{c['routed_scaling_factor']}, q_lora_rank {c['q_lora_rank']}, rope_interleave true)")
    else:
        parts.append("Qwen3MoeForCausalLM (GQA with q_norm/k_norm, softmax top-k router, "
                     f"{c['num_experts']} experts top-{c['num_experts_per_tok']}, norm_topk_prob "
                     f"{c['norm_topk_prob']}, decoder_sparse_step {c['decoder_sparse_step']}, mlp_only_layers "
                     f"{c['mlp_only_layers']}, tie_word_embeddings {c['tie_word_embeddings']}, attention_bias "
                     f"{c['attention_bias']})")
    rp = c["rope_parameters"]
    parts.append(f"rope {rp['rope_type']} theta {rp['rope_theta']}"
                 + (f" factor {rp['factor']} mscale {rp['mscale']} mscale_all_dim {rp['mscale_all_dim']} beta_fast "
                    f"{rp['beta_fast']} beta_slow {rp['beta_slow']} original_max_position_embeddings "
                    f"{rp['original_max_position_embeddings']}" if rp["rope_type"] == "yarn" else ""))
    if spec.get("legacy_config"):
        parts.append("config.json rewritten to the released checkpoints' spelling (top-level rope_theta + "
                     "rope_scaling" + (" {type: yarn, ...}" if rp["rope_type"] == "yarn" else " null")
                     + ("; num_experts instead of transformers-5's num_local_experts" if spec["family"] == "qwen"
                        else "") + "); the reference was computed from the rewritten dir and is bit-identical to "
                     "the one from the transformers-5 spelling (rope_parameters)")
    elif spec["family"] == "qwen":
        parts.append("config.json as transformers 5 writes it: rope_parameters and num_local_experts (= num_experts)")
    if spec.get("fp8"):
        parts.append("fp8 e4m3 128x128 block-scaled projection weights with <name>_scale_inv (F32, blockmax/448); "
                     "reference uses f32 dequantized weights fp8*scale_inv in an unquantized f32 model")
    else:
        parts.append("bf16 weights; reference = f32 forward on the exact bf16 weights")
    if spec.get("shards"):
        parts.append(f"saved with max_shard_size -> {res.get('n_shards')} shards + index")
    parts.append("eager attention, CPU, no KV cache; greedy = 16 full forwards with argmax; logits rows from one "
                 "full forward over prompt + greedy[:15]")
    return ". ".join(parts) + "."


def make_fixture(spec, out_root, tmp, max_tries, log):
    import transformers
    for t in range(max_tries):
        seed = spec["seed"] + 1000 * t
        t0 = time.time()
        fx, res = attempt(spec, seed, tmp, log)
        if fx is None:
            log(f"  {spec['name']} seed {seed}: rejected ({res}) [{time.time() - t0:.1f}s]")
            continue
        dst = os.path.join(out_root, spec["set"], spec["name"])
        if os.path.exists(dst):
            shutil.rmtree(dst)
        shutil.copytree(fx, dst)
        P = len(res["prompt"])
        logits = res["logits"].contiguous()
        assert logits.shape == (P + GREEDY_STEPS - 1, spec["cfg"]["vocab_size"])
        logits.numpy().astype("<f4").tofile(os.path.join(dst, "reference_logits.f32"))
        ref = {
            "prompt_ids": res["prompt"],
            "greedy_ids": res["greedy"],
            "vocab_size": spec["cfg"]["vocab_size"],
            "n_rows": P + GREEDY_STEPS - 1,
            "logits_file": "reference_logits.f32",
            "script": "tools/make_reference_fixtures.py",
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "notes": notes_for(spec, res),
            "seed": seed,
            "family": spec["family"],
            "model_class": "DeepseekV3ForCausalLM" if spec["family"] == "ds" else "Qwen3MoeForCausalLM",
            "weights": "fp8_e4m3_block128" if spec.get("fp8") else "bf16",
            "min_greedy_gap": res["min_gap"],
            "min_route_margin": res["route_margin"],
            "min_group_margin": res["group_margin"],
            "n_moe_layers": res["n_routers"],
            "softmax_scale": res["attn_scaling"],
            "rope_attention_scaling": res["rope_attention_scaling"],
        }
        with open(os.path.join(dst, "reference.json"), "w") as f:
            json.dump(ref, f, indent=2)
            f.write("\n")
        size = sum(os.path.getsize(os.path.join(dst, f_)) for f_ in os.listdir(dst))
        summary = {k: v for k, v in res.items() if k not in ("logits", "step_gaps", "full_gaps")}
        summary.update(name=spec["name"], seed=seed, tries=t + 1, bytes=size, files=sorted(os.listdir(dst)),
                       secs=round(time.time() - t0, 1))
        log(f"  {spec['name']}: OK " + json.dumps(summary, default=str))
        return summary
    raise RuntimeError(f"{spec['name']}: no acceptable seed in {max_tries} tries")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tar", default=None, help="write <out> as this .tar.gz (committed/ and heldout/ folders)")
    ap.add_argument("--only", default=None)
    ap.add_argument("--max-tries", type=int, default=30)
    args = ap.parse_args()
    import transformers
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    os.makedirs(args.out, exist_ok=True)

    def log(s):
        print(s, flush=True)

    log(f"transformers {transformers.__version__} torch {torch.__version__}")
    only = set(args.only.split(",")) if args.only else None
    tmp = tempfile.mkdtemp()
    summaries, failures = [], []
    for spec in FIXTURES:
        if only and spec["name"] not in only:
            continue
        log(f"== {spec['name']}")
        try:
            summaries.append(make_fixture(spec, args.out, tmp, args.max_tries, log))
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            failures.append(f"{spec['name']}: {type(e).__name__}: {e}")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"fixtures": summaries, "failures": failures}, f, indent=2, default=str)
    if args.tar:
        with tarfile.open(args.tar, "w:gz") as tf:
            for sub in ("committed", "heldout", "summary.json"):
                p = os.path.join(args.out, sub)
                if os.path.exists(p):
                    tf.add(p, arcname=sub)
        log(f"tar {args.tar}: {os.path.getsize(args.tar)} bytes")
    shutil.rmtree(tmp, ignore_errors=True)
    log("failures: " + json.dumps(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
