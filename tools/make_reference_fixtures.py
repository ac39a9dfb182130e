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

gpt-oss fixtures (family "gptoss", GptOssForCausalLM; the forward pass is written out in docs/gpt_oss.md):
  gptoss_bf16    bf16 save_pretrained checkpoint, transformers-5 config spelling (rope_parameters): fused
                 model.layers.L.mlp.experts.gate_up_proj [E, H, 2I] (interleaved gate/up columns), gate_up_proj_bias
                 [E, 2I], down_proj [E, I, H], down_proj_bias [E, H]; self_attn.sinks [n_heads]; mlp.router.{weight,bias}.
  gptoss_mxfp4   the same architecture in the openai/gpt-oss release layout: experts as U8
                 {gate_up,down}_proj_blocks [E, out, in/32, 16] + _scales [E, out, in/32] (MXFP4: E8M0 scale per 32
                 inputs, FP4 E2M1 codes, low nibble = even element), expert biases and every other tensor bf16, written
                 with safetensors.torch.save_file; config.json in the release spelling (top-level rope_theta +
                 rope_scaling {rope_type yarn, factor 32, beta_fast 32, beta_slow 1, original_max_position_embeddings
                 4096, truncate false}) with "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert":
                 [...]}.  The reference model is an unquantized f32 GptOssForCausalLM loaded with the expert weights
                 dequantized by transformers' own integrations.mxfp4.convert_moe_packed_tensors (our quantize/dequantize
                 helpers are checked bit-equal to it); transformers' own loading of the release-layout dir
                 (Mxfp4Config(dequantize=True), cast to f32) reproduces the reference logits exactly (diff 0.0).
  Both: 4 layers (sliding, full, sliding, full), sliding_window 8 with prompts of 13-14 tokens, yarn exactly as
  gpt-oss ships it (theta 150000), non-zero sinks/biases, expert gate/up pre-activations large enough that the
  swiglu clamp at 7 triggers on ~4% of values (counted; a seed is rejected if it never does), >= 10 distinct greedy
  tokens.  Each gpt-oss fixture is also checked against gptoss_replica_logits(), an independent f32 implementation of
  docs/gpt_oss.md, which matches transformers bit-exactly (max |diff| 0.0) while each single deliberate deviation
  (window of W+1 keys, no sinks, interleaved rope, no clamp) moves the logits by > 10.  Regenerate them with
  `--only gptoss_bf16,gptoss_mxfp4` under CUDA_VISIBLE_DEVICES= (CPU); two runs gave byte-identical files.

How the reference is computed: the model is built with a seed, its weights re-initialised so activations are
O(1) and logits spread, cast to bfloat16 and saved; it is then reloaded from disk with
from_pretrained(dir, dtype=float32, attn_implementation="eager") on CPU, so the reference is f32 math on the
exact stored bf16 weights (fp8 fixtures: on the exactly dequantized weights fp8->f32 * scale_inv, loaded into
an unquantized f32 model; compressed-tensors fixtures ds_int4_ct, ds_mxfp4_ct, qwen_mxfp4_ct and the held-out
h_ds_int4_ct, h_qwen_mxfp4_ct likewise: their routed experts stored as the compressed-tensors library packs them
-- int4 "pack-quantized" weight_packed I32 [out, in/8] (nibble q+8, element 8k+j in bits 4j of word k) +
weight_scale BF16 [out, in/32] + weight_shape I64, in Kimi-K2-Thinking's layout and quantization_config, or
"mxfp4-pack-quantized" weight_packed U8 [out, in/2] (even element in the low nibble) + weight_scale U8 E8M0
[out, in/32] -- and dequantized exactly for the reference; transformers itself needs the compressed_tensors
package for these, which the device machine lacks).  Greedy decoding = 16 repeated full forward passes (no KV cache), argmax.
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
import re
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

GPTOSS_YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
               "original_max_position_embeddings": 4096, "truncate": False}
GPTOSS_CFG = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=8,
                  num_experts_per_tok=2, sliding_window=8, swiglu_limit=7.0, attention_bias=True,
                  rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=131072,
                  rope_parameters=GPTOSS_YARN)
GPTOSS_QUANT_CONFIG = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                  "model.embed_tokens", "lm_head"],
                       "quant_method": "mxfp4"}
MXFP4_BLOCK = 32
FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

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
    # gpt-oss: GptOssForCausalLM, alternating sliding/full attention with sinks, yarn rope as openai/gpt-oss-20b
    # ships it (factor 32, beta 32/1, original 4096, truncate false, theta 150000), biased router + clamped SwiGLU
    # experts; H=64, I=96 (multiples of 32 for MXFP4) so no expert tensor is square and layouts are unambiguous.
    dict(name="gptoss_bf16", set="committed", family="gptoss", seed=1701, prompt_len=14, min_distinct=10,
         cfg=dict(GPTOSS_CFG)),
    dict(name="gptoss_mxfp4", set="committed", family="gptoss", seed=1801, prompt_len=13, min_distinct=10,
         mxfp4=True, legacy_config=True, cfg=dict(GPTOSS_CFG)),
    # compressed-tensors as publishers ship it (routed experts only; everything else bf16): int4
    # "pack-quantized" in Kimi-K2-Thinking's layout (model_type kimi_k2, its quantization_config), and
    # "mxfp4-pack-quantized" with the format named at the top (DeepSeek) or only in its config group (Qwen).
    dict(name="ds_int4_ct", set="committed", family="ds", seed=1901, prompt_len=13, ct="int4",
         cfg=dict(vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=64,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                  q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  n_routed_experts=12, num_experts_per_tok=4, n_group=1, topk_group=1, n_shared_experts=1,
                  first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.827,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 50000.0})),
    dict(name="ds_mxfp4_ct", set="committed", family="ds", seed=1951, prompt_len=12, ct="mxfp4",
         cfg=dict(vocab_size=288, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                  q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
                  first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="qwen_mxfp4_ct", set="committed", family="qwen", seed=1971, prompt_len=14, ct="mxfp4",
         ct_format_in_group_only=True,
         cfg=dict(vocab_size=320, hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                  mlp_only_layers=[], tie_word_embeddings=False, attention_bias=False,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
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
    dict(name="h_ds_int4_ct", set="heldout", family="ds", seed=2501, prompt_len=15, ct="int4",
         cfg=dict(vocab_size=300, hidden_size=96, intermediate_size=128, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=3,
                  q_lora_rank=None, kv_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
                  n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=2,
                  first_k_dense_replace=1, norm_topk_prob=False, routed_scaling_factor=1.5,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="h_qwen_mxfp4_ct", set="heldout", family="qwen", seed=2601, prompt_len=16, ct="mxfp4",
         cfg=dict(vocab_size=272, hidden_size=96, intermediate_size=160, moe_intermediate_size=32,
                  num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                  num_experts=12, num_experts_per_tok=3, norm_topk_prob=False, decoder_sparse_step=1,
                  mlp_only_layers=[], tie_word_embeddings=False, attention_bias=False,
                  max_position_embeddings=128, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
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


def gptoss_released_config(cfg):
    """transformers-5 GptOssConfig dict -> openai/gpt-oss-20b config.json spelling: top-level "rope_theta" and
    "rope_scaling": {"beta_fast", "beta_slow", "factor", "original_max_position_embeddings", "rope_type": "yarn",
    "truncate": false} (transformers 5 writes "rope_parameters")."""
    cfg = dict(cfg)
    if "rope_parameters" not in cfg:  # already in the release spelling
        return cfg
    rp = cfg.pop("rope_parameters")
    if "rope_type" not in rp:  # per-layer-type dict: all entries must agree
        vals = list(rp.values())
        assert all(v == vals[0] for v in vals), rp
        rp = vals[0]
    rp = dict(rp)
    cfg["rope_theta"] = rp.pop("rope_theta")
    rp.pop("type", None)
    cfg["rope_scaling"] = dict(sorted(rp.items()))
    return cfg


def gptoss_rope_params(c):
    """rope dict (with rope_theta) from either config spelling."""
    rp = c.get("rope_parameters")
    if rp is None:
        rp = dict(c["rope_scaling"])
        rp["rope_theta"] = c["rope_theta"]
    elif "rope_type" not in rp:
        rp = list(rp.values())[0]
    return rp


def gptoss_yarn_inv_freq(rp, head_dim):
    """YaRN as transformers' _compute_yarn_parameters (no mscale keys, so attention_factor = 0.1 ln(factor) + 1).
    truncate=False: the correction range [low, high] is NOT floored/ceiled."""
    base, dim, factor = float(rp["rope_theta"]), head_dim, float(rp["factor"])
    orig = rp["original_max_position_embeddings"]
    att = rp.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)

    def corr(nrot):
        return (dim * math.log(orig / (nrot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr(rp.get("beta_fast") or 32), corr(rp.get("beta_slow") or 1)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extra_factor = 1 - ramp
    return inter * (1 - extra_factor) + extra * extra_factor, float(att), (low, high)


def orient(t, rows, cols):
    """3-D stacked expert tensor -> ([E, rows, cols] view, transposed?) for a layout of either orientation."""
    if tuple(t.shape[1:]) == (rows, cols):
        return t, False
    assert tuple(t.shape[1:]) == (cols, rows), (tuple(t.shape), rows, cols)
    return t.transpose(1, 2), True


def quantize_mxfp4(w):
    """w [..., N, K] (K % 32 == 0, quantized along K) -> (blocks u8 [..., N, K/32, 16], scales u8 [..., N, K/32]).

    OCP MX: per 32 values one E8M0 scale 2^(s-127), s = 127 + ceil(log2(amax / 6)); values FP4 E2M1 rounded to the
    nearest of FP4_VALUES; code = magnitude index | 8 if negative; byte j of a block = code[2j] | code[2j+1] << 4."""
    *pre, N, K = w.shape
    assert K % MXFP4_BLOCK == 0
    g = w.float().reshape(*pre, N, K // MXFP4_BLOCK, MXFP4_BLOCK)
    amax = g.abs().amax(-1)
    e = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.zeros_like(amax)).clamp(-127, 127)
    scaled = g / torch.exp2(e)[..., None]
    mags = torch.tensor(FP4_VALUES[:8])
    idx = (scaled.abs()[..., None] - mags).abs().argmin(-1)
    code = (idx + 8 * ((scaled < 0) & (idx > 0)).long()).to(torch.uint8)
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).contiguous()
    scales = (e + 127).to(torch.uint8).contiguous()
    return blocks, scales


def dequantize_mxfp4(blocks, scales):
    """blocks [..., N, G, 16] u8, scales [..., N, G] u8 -> f32 [..., N, G*32] (low nibble = even element)."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    lo, hi = lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]
    v = torch.stack([lo, hi], dim=-1).flatten(-2)  # [..., N, G, 32]
    v = v * torch.exp2(scales.float() - 127.0)[..., None]
    return v.flatten(-2)


def gptoss_replica_logits(t, c, ids, window_plus1=False, no_sinks=False, interleaved_rope=False,
                          clamp=True):
    """Independent f32 re-implementation of GptOssForCausalLM's forward (docs/gpt_oss.md), for cross-checking.

    t: tensor name -> f32 tensor as saved by transformers 5; c: config dict.  Variants flip one detail to show the
    fixture discriminates it."""
    import torch.nn.functional as F
    H, nh, nkv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    I, E, k_top = c["intermediate_size"], c["num_local_experts"], c["num_experts_per_tok"]
    eps, W, limit, alpha = c["rms_norm_eps"], c["sliding_window"], c.get("swiglu_limit", 7.0), 1.702
    inv_freq, att, _ = gptoss_yarn_inv_freq(gptoss_rope_params(c), d)
    T = len(ids)
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]  # [T, d/2]
    cos, sin = (freqs.cos() * att)[:, None, :], (freqs.sin() * att)[:, None, :]

    def rope(x):  # [T, n, d]
        if interleaved_rope:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    i_ = torch.arange(T)[:, None]
    j_ = torch.arange(T)[None, :]
    x = t["model.embed_tokens.weight"][torch.tensor(ids)]
    for li in range(c["num_hidden_layers"]):
        p = f"model.layers.{li}."
        h = rms(x, t[p + "input_layernorm.weight"])

        def lin(name, inp):
            return F.linear(inp, t[p + name + ".weight"], t.get(p + name + ".bias"))

        q = rope(lin("self_attn.q_proj", h).view(T, nh, d))
        kk = rope(lin("self_attn.k_proj", h).view(T, nkv, d)).repeat_interleave(nh // nkv, dim=1)
        v = lin("self_attn.v_proj", h).view(T, nkv, d).repeat_interleave(nh // nkv, dim=1)
        s = torch.einsum("thd,shd->hts", q, kk) * d ** -0.5
        vis = j_ <= i_
        if c["layer_types"][li] == "sliding_attention":
            vis = vis & (j_ >= i_ - W if window_plus1 else j_ > i_ - W)
        s = s.masked_fill(~vis, float("-inf"))
        if no_sinks:
            a = torch.softmax(s, -1)
        else:
            sink = t[p + "self_attn.sinks"][:, None, None].expand(nh, T, 1)
            a = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
        o = torch.einsum("hts,shd->thd", a, v).reshape(T, nh * d)
        x = x + lin("self_attn.o_proj", o)
        h = rms(x, t[p + "post_attention_layernorm.weight"])
        logits_r = lin("mlp.router", h)
        topv, topi = torch.topk(logits_r, k_top, dim=-1)
        wts = torch.softmax(topv, -1)
        gu_w, _ = orient(t[p + "mlp.experts.gate_up_proj"], H, 2 * I)  # [E, H, 2I]
        dn_w, _ = orient(t[p + "mlp.experts.down_proj"], I, H)  # [E, I, H]
        gu_b, dn_b = t[p + "mlp.experts.gate_up_proj_bias"], t[p + "mlp.experts.down_proj_bias"]
        out = torch.zeros_like(x)
        for e in range(E):
            tok, slot = torch.where(topi == e)
            if tok.numel() == 0:
                continue
            gu = h[tok] @ gu_w[e] + gu_b[e]
            gate, up = gu[:, 0::2], gu[:, 1::2]
            if clamp:
                gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
            y = ((up + 1) * (gate * torch.sigmoid(alpha * gate))) @ dn_w[e] + dn_b[e]
            out.index_add_(0, tok, y * wts[tok, slot, None])
        x = x + out
    x = rms(x, t["model.norm.weight"])
    return x @ t["lm_head.weight"].T


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
    if family == "gptoss":
        return tf.GptOssConfig, tf.GptOssForCausalLM
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
    kw = {}
    if family == "gptoss":  # the plain per-expert loop (GptOssExperts.forward), not a grouped-mm kernel
        kw["experts_implementation"] = "eager"
    try:
        model, info = Model.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                            output_loading_info=True, **kw)
    except (TypeError, ValueError) as e:
        if not kw:
            raise
        print(f"  (experts_implementation=eager refused: {type(e).__name__}: {str(e)[:200]})", flush=True)
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
        self.clamp = [0, 0, 0, 0]  # gpt-oss: [gate > limit, up > limit, up < -limit, n gate values] (selected experts)
        self.weight_diff = 0.0
        mods = dict(model.named_modules())
        for name, mod in model.named_modules():
            if family == "gptoss" and name.endswith("mlp.router"):
                experts = mods[name[: -len("router")] + "experts"]
                limit = float(getattr(model.config, "swiglu_limit", 7.0))
                self.handles.append(mod.register_forward_hook(
                    lambda m, a, kw, o, ex=experts, lim=limit: self.hook_gptoss(m, a, kw, o, ex, lim),
                    with_kwargs=True))
                self.n_routers += 1
            elif name.endswith("mlp.gate") and type(mod).__name__.endswith("Router"):
                self.handles.append(mod.register_forward_hook(self.hook))
                self.n_routers += 1

    def hook_gptoss(self, mod, args, kwargs, out, experts, limit):
        """GptOssTopKRouter: logits = x W^T + b; top-k of the logits; weights = softmax over the k selected logits."""
        import torch.nn.functional as F
        H = mod.weight.shape[1]
        x = (args[0] if args else kwargs["hidden_states"]).detach().reshape(-1, H).float()
        logits = F.linear(x, mod.weight.float(), mod.bias.float())
        k = mod.top_k
        self.margins.append(topk_gap(logits, k).min().item())
        topv, sel = torch.topk(logits, k, dim=-1)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        idx = [o for o in outs if torch.is_tensor(o) and not o.is_floating_point() and tuple(o.shape) == tuple(sel.shape)]
        assert idx, "router output has no [T, k] index tensor"
        assert torch.equal(sel.sort(-1)[0], idx[0].long().sort(-1)[0]), "router replica disagrees"
        w = torch.softmax(topv, -1)
        mine_full = torch.zeros_like(logits).scatter_(1, sel, w)  # [T, E]
        for o in outs:  # 5.x returns (logits, scores [T, k] in its index order, indices); 4.x (scores [T, E], indices)
            if torch.is_tensor(o) and o.is_floating_point():
                if tuple(o.shape) == tuple(sel.shape):
                    mine = torch.gather(mine_full, 1, idx[0].long())
                elif tuple(o.shape) == tuple(logits.shape) and not torch.allclose(o.float(), logits, atol=1e-6):
                    mine = mine_full
                else:
                    continue
                self.weight_diff = max(self.weight_diff, (o.float() - mine).abs().max().item())
        gu_w, _ = orient(experts.gate_up_proj.detach().float(), H, experts.gate_up_proj_bias.shape[-1])
        gu = torch.einsum("th,tkhj->tkj", x, gu_w[sel]) + experts.gate_up_proj_bias.detach().float()[sel]
        gate, up = gu[..., 0::2], gu[..., 1::2]
        for i, c in enumerate([(gate > limit).sum(), (up > limit).sum(), (up < -limit).sum(), gate.numel()]):
            self.clamp[i] += int(c)

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
    out = dict(greedy=greedy, logits=full, step_gaps=gaps, full_gaps=full_gaps, argmax_ok=argmax_ok,
               route_margin=min(rec.margins) if rec.margins else None,
               group_margin=min(rec.gmargins) if rec.gmargins else None, n_routers=rec.n_routers)
    if family == "gptoss":
        out.update(clamp_counts=dict(zip(["gate_gt_limit", "up_gt_limit", "up_lt_minus_limit", "n_values"],
                                         rec.clamp)),
                   router_weight_replica_diff=rec.weight_diff)
    return out


def write_fp8_checkpoint(bf16_dir, dst, tmp):
    """bf16 save_pretrained dir -> dst with fp8 weights; returns the dequantized f32 tensor dict."""
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
    cfg = read_config(bf16_dir)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [BLOCK, BLOCK]}
    deq_dir = save_quantized(bf16_dir, dst, tmp, out, deq, cfg)
    n_q = sum(1 for k in out if k.endswith("_scale_inv"))
    return deq, deq_dir, n_q


def read_config(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def save_quantized(bf16_dir, dst, tmp, out, deq, cfg):
    """Writes the quantized checkpoint (tensors `out`, config `cfg`, bf16_dir's generation_config) into dst, and
    the unquantized f32 twin the reference model loads (tensors `deq`, bf16_dir's config); returns the twin's dir."""
    from safetensors.torch import save_file
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(bf16_dir, extra)):
            shutil.copy(os.path.join(bf16_dir, extra), dst)
    deq_dir = tempfile.mkdtemp(dir=tmp)
    save_file({k: v.contiguous() for k, v in deq.items()}, os.path.join(deq_dir, "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copy(os.path.join(bf16_dir, "config.json"), deq_dir)
    return deq_dir


CT_EXPERT = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")
# Kimi-K2-Thinking's quantization_config (its config.json; int4 levels -7..7 as its experts use).
K2_THINKING_QUANT = {
    "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
    "kv_cache_scheme": None,
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                  "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                              "group_size": 32, "dynamic": False, "observer": "minmax",
                                              "actorder": None, "block_structure": None, "observer_kwargs": {}}}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]}


def ct_mxfp4_quant(format_at_top):
    q = {"quant_method": "compressed-tensors", "quantization_status": "compressed",
         "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"],
                                       "input_activations": None,
                                       "weights": {"num_bits": 4, "type": "float", "symmetric": True,
                                                   "strategy": "group", "group_size": 32}}},
         "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_expert.*", "re:.*mlp\\.gate$",
                    "re:.*mlp\\.(gate|up|down)_proj$"]}
    if format_at_top:
        q["format"] = "mxfp4-pack-quantized"
    return q


def pack_int4(w):
    """compressed-tensors pack_to_int32 (pack_quantized.py): symmetric int4 per group of 32 inputs, levels
    -7..7, scale = max|w|/7 stored BF16; nibble = q + 8, element 8k+j of a row in bits 4j..4j+3 of word k.
    Returns (packed int32 [out, in/8], scale bf16 [out, in/32], the exactly dequantized f32 weight)."""
    out, inn = w.shape
    g = w.float().reshape(out, inn // 32, 32)
    scale = (g.abs().amax(-1) / 7.0).clamp_min(1e-8).to(torch.bfloat16)
    q = torch.clamp(torch.round(g / scale.float().unsqueeze(-1)), -7, 7).to(torch.int64)
    deq = (q.float() * scale.float().unsqueeze(-1)).reshape(out, inn)
    nib = (q.reshape(out, inn // 8, 8) + 8)
    words = (nib << (torch.arange(8) * 4)).sum(-1)               # int64, < 2^32
    packed = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    # the library's unpack (unpack_from_int32) must give q back
    un = torch.stack([(packed.to(torch.int64) >> (4 * j)) & 15 for j in range(8)], -1).reshape(out, inn) - 8
    assert torch.equal(un, q.reshape(out, inn)), "int4 pack/unpack mismatch"
    return packed, scale, deq


def write_ct_checkpoint(bf16_dir, dst, tmp, spec):
    """bf16 save_pretrained dir -> dst with compressed-tensors routed experts (int4 or MXFP4 weight_packed +
    weight_scale); returns the dequantized f32 tensor dict, an unquantized twin dir, and the expert count."""
    src = load_dir_tensors(bf16_dir)
    out, deq, n = {}, {}, 0
    for k, v in src.items():
        if CT_EXPERT.search(k):
            base = k[:-len("weight")]
            if spec["ct"] == "int4":
                packed, scale, d = pack_int4(v)
                out[base + "weight_packed"], out[base + "weight_scale"] = packed, scale
                out[base + "weight_shape"] = torch.tensor(list(v.shape), dtype=torch.int64)
            else:
                blocks, scales = quantize_mxfp4(v.float())              # [out, in/32, 16], [out, in/32]
                out[base + "weight_packed"] = blocks.reshape(v.shape[0], v.shape[1] // 2).contiguous()
                out[base + "weight_scale"] = scales.contiguous()
                d = dequantize_mxfp4(blocks, scales)
            deq[k] = d.reshape(v.shape).float()
            n += 1
        else:
            out[k] = v
            deq[k] = v.float()
    cfg = read_config(bf16_dir)
    if spec["ct"] == "int4":
        cfg["quantization_config"] = K2_THINKING_QUANT
        cfg["model_type"] = "kimi_k2"          # as Kimi-K2-Thinking's config.json names it
        cfg["architectures"] = ["DeepseekV3ForCausalLM"]
    else:
        cfg["quantization_config"] = ct_mxfp4_quant(not spec.get("ct_format_in_group_only"))
    return deq, save_quantized(bf16_dir, dst, tmp, out, deq, cfg), n


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
    elif spec.get("fp8") or spec.get("ct"):
        bf = os.path.join(work, "bf16")
        model.save_pretrained(bf)
    else:
        model.save_pretrained(fx)
    del model

    if spec.get("fp8"):
        ref_tensors, ref_dir, n_q = write_fp8_checkpoint(bf, fx, work)
        extra["n_fp8_tensors"] = n_q
    elif spec.get("ct"):
        ref_tensors, ref_dir, n_q = write_ct_checkpoint(bf, fx, work, spec)
        extra["n_ct_expert_tensors"] = n_q
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


def init_gptoss_weights_(named_params, cfg, gen, router_gain=2.0, lm_gain=3.0, gu_gain=4.0, gu_bias_std=0.5,
                         down_gain=0.5, sink_mean=0.5):
    """gpt-oss re-initialisation: O(1) activations, well-spread router logits, expert gate/up pre-activations with
    std ~gu_gain so the swiglu clamp (|.| > 7) triggers on a few percent of values, non-zero sinks and biases."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    with torch.no_grad():
        for name, p in named_params:
            def n(*shape):
                return torch.randn(*shape, generator=gen, dtype=torch.float32)
            if name.endswith("embed_tokens.weight"):
                v = n(*p.shape)
            elif name.endswith("norm.weight"):  # input_layernorm, post_attention_layernorm, model.norm
                v = 1.0 + 0.1 * n(*p.shape)
            elif name.endswith("self_attn.sinks"):
                v = sink_mean + n(*p.shape)
            elif name.endswith("mlp.router.weight"):
                v = n(*p.shape) * (router_gain / math.sqrt(H))
            elif name.endswith("lm_head.weight"):
                v = n(*p.shape) * (lm_gain / math.sqrt(H))
            elif name.endswith("mlp.experts.gate_up_proj"):
                orient(p, H, 2 * I)  # asserts one of the two layouts
                v = n(*p.shape) * (gu_gain / math.sqrt(H))
            elif name.endswith("mlp.experts.gate_up_proj_bias"):
                v = gu_bias_std * n(*p.shape)
            elif name.endswith("mlp.experts.down_proj"):
                orient(p, I, H)
                v = n(*p.shape) * (down_gain / math.sqrt(I))
            elif name.endswith(".bias") or name.endswith("down_proj_bias"):
                v = 0.1 * n(*p.shape)
            elif name.endswith("proj.weight") and p.dim() == 2:
                v = n(*p.shape) / math.sqrt(p.shape[-1])
            else:
                raise ValueError(f"don't know how to initialise {name} {tuple(p.shape)}")
            p.copy_(v.to(p.dtype))


def hf_convert_moe_packed(blocks, scales):
    """transformers' own MXFP4 dequantization (integrations/mxfp4.py convert_moe_packed_tensors), f32 on CPU."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    try:
        r = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.float32)
    except TypeError:
        r = convert_moe_packed_tensors(blocks.clone(), scales.clone())
    return r.float().cpu()


def write_mxfp4_checkpoint(bf16_dir, dst, tmp):
    """bf16 save_pretrained dir -> dst in the openai/gpt-oss release layout: experts as
    <p>.{gate_up,down}_proj_{blocks,scales} U8 (blocks [E, out, in/32, 16], scales [E, out, in/32]), everything else
    (incl. expert biases) bf16; config.json in the release spelling with quantization_config.  Returns the
    dequantized f32 tensors (transformers' convert_moe_packed_tensors, in the model's parameter layout), an f32 twin
    dir (transformers-5 config, no quantization) and info."""
    from safetensors.torch import save_file
    src = load_dir_tensors(bf16_dir)
    with open(os.path.join(bf16_dir, "config.json")) as f:
        cfg = json.load(f)
    H, I = cfg["hidden_size"], cfg["intermediate_size"]
    out, deq = {}, {}
    info = dict(mxfp4_tensors=0, mxfp4_max_rel_err=0.0, mxfp4_scale_range=[255, 0])
    for k, v in src.items():
        if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            rows, cols = (2 * I, H) if k.endswith("gate_up_proj") else (H, I)
            w, transposed = orient(v.float(), rows, cols)  # [E, out, in]
            blocks, scales = quantize_mxfp4(w.contiguous())
            out[k + "_blocks"], out[k + "_scales"] = blocks, scales
            mine = dequantize_mxfp4(blocks, scales)  # [E, out, in]
            mine_p = mine.transpose(1, 2).contiguous() if transposed else mine
            try:
                hf = hf_convert_moe_packed(blocks, scales)
                if tuple(hf.shape) == tuple(v.shape):
                    hf_p = hf
                    info["hf_convert_returns"] = "parameter layout " + str(list(hf.shape))
                else:
                    hf_p = hf.transpose(1, 2).contiguous()
                    assert tuple(hf_p.shape) == tuple(v.shape), (hf.shape, v.shape)
                    info["hf_convert_returns"] = "transposed vs parameter " + str(list(hf.shape))
                eq = torch.equal(hf_p, mine_p)
                info["mine_equals_hf_dequant"] = info.get("mine_equals_hf_dequant", True) and eq
                if not eq:
                    info["mine_vs_hf_max_abs"] = max(info.get("mine_vs_hf_max_abs", 0.0),
                                                     (hf_p - mine_p).abs().max().item())
                deq[k] = hf_p
            except Exception as e:  # noqa: BLE001
                info["hf_convert_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                deq[k] = mine_p
            info["mxfp4_tensors"] += 1
            rel = ((deq[k] - v.float()).norm() / v.float().norm()).item()
            info["mxfp4_max_rel_err"] = max(info["mxfp4_max_rel_err"], rel)
            info["mxfp4_scale_range"] = [min(info["mxfp4_scale_range"][0], int(scales.min())),
                                         max(info["mxfp4_scale_range"][1], int(scales.max()))]
        else:
            out[k] = v
            deq[k] = v.float()
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    rel_cfg = gptoss_released_config(cfg)
    rel_cfg["quantization_config"] = dict(GPTOSS_QUANT_CONFIG)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(rel_cfg, f, indent=2, sort_keys=True)
    if os.path.exists(os.path.join(bf16_dir, "generation_config.json")):
        shutil.copy(os.path.join(bf16_dir, "generation_config.json"), dst)
    deq_dir = tempfile.mkdtemp(dir=tmp)
    save_file({k: v.contiguous() for k, v in deq.items()}, os.path.join(deq_dir, "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copy(os.path.join(bf16_dir, "config.json"), deq_dir)
    return deq, deq_dir, info


def tensor_table(d):
    from safetensors import safe_open
    tab = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as sf:
                for k in sf.keys():
                    if ".layers." in k and ".layers.0." not in k:
                        continue
                    sl = sf.get_slice(k)
                    tab[k] = [str(sl.get_dtype()), list(sl.get_shape())]
    return tab


def attempt_gptoss(spec, seed, tmp, log):
    """One try at a gpt-oss fixture; returns (fixture_dir, result dict) or (None, reason)."""
    import transformers
    _, Model = family_classes("gptoss")
    cfg = make_config(spec)
    L = cfg.num_hidden_layers
    assert list(cfg.layer_types) == ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)], \
        cfg.layer_types
    torch.manual_seed(seed)
    model = Model(cfg).float()
    gen = torch.Generator().manual_seed(seed)
    init_gptoss_weights_(list(model.named_parameters()), cfg, gen, **spec.get("init", {}))
    model.to(torch.bfloat16)
    work = tempfile.mkdtemp(dir=tmp)
    fx = os.path.join(work, "fixture")
    os.makedirs(fx)
    extra = {}
    if spec.get("mxfp4"):
        bf = os.path.join(work, "bf16")
        model.save_pretrained(bf)
        extra["bf16_tensor_table"] = tensor_table(bf)
        ref_tensors, ref_dir, info = write_mxfp4_checkpoint(bf, fx, work)
        extra.update(info)
    else:
        model.save_pretrained(fx)
        ref_tensors = load_dir_tensors(fx)
        ref_dir = fx
    del model
    with open(os.path.join(ref_dir, "config.json")) as f:
        cfg_new = json.load(f)  # transformers-5 spelling
    extra["config_written"] = cfg_new

    model = load_ref_model(ref_dir, "gptoss")
    extra["experts_implementation"] = str(getattr(model.config, "_experts_implementation", None))
    check_roundtrip(model, ref_tensors, work)
    g2 = torch.Generator().manual_seed(seed + 7)
    P = spec["prompt_len"]
    prompt = torch.randint(0, cfg.vocab_size, (P,), generator=g2).tolist()
    res = run_reference(model, "gptoss", prompt)
    res.update(extra)
    res["prompt"] = prompt
    res["attn_scaling"] = float(model.model.layers[0].self_attn.scaling)
    res["rope_attention_scaling"] = float(model.model.rotary_emb.attention_scaling)
    res["rope_parameters"] = dict(model.config.rope_parameters)
    res["tensor_table"] = tensor_table(fx)
    res["sliding_window_per_layer"] = [getattr(l.self_attn, "sliding_window", "n/a") for l in model.model.layers]
    hf_inv = model.model.rotary_emb.inv_freq.float()
    my_inv, my_att, corr = gptoss_yarn_inv_freq(gptoss_rope_params(cfg_new), cfg_new["head_dim"])
    res["yarn_check"] = dict(inv_freq_max_abs_diff=(hf_inv - my_inv).abs().max().item(),
                             attention_factor_hf=res["rope_attention_scaling"], attention_factor_mine=my_att,
                             correction_range=list(corr))
    ids_full = prompt + res["greedy"][:15]
    t32 = {k: v.float() for k, v in ref_tensors.items()}
    rep = {}
    for label, kw in [("exact", {}), ("window_plus1", dict(window_plus1=True)), ("no_sinks", dict(no_sinks=True)),
                      ("interleaved_rope", dict(interleaved_rope=True)), ("no_clamp", dict(clamp=False))]:
        try:
            rep[label] = (gptoss_replica_logits(t32, cfg_new, ids_full, **kw) - res["logits"]).abs().max().item()
        except Exception as e:  # noqa: BLE001
            rep[label] = f"failed: {type(e).__name__}: {str(e)[:300]}"
    res["replica_max_abs_diff"] = rep

    if spec.get("legacy_config"):
        # the released config spelling (rope_theta + rope_scaling) must give bit-identical logits
        ldir = os.path.join(work, "released_cfg")
        os.makedirs(ldir)
        for f_ in os.listdir(ref_dir):
            shutil.copy(os.path.join(ref_dir, f_), ldir)
        with open(os.path.join(ldir, "config.json"), "w") as f:
            json.dump(gptoss_released_config(cfg_new), f, indent=2, sort_keys=True)
        if not spec.get("mxfp4"):
            with open(os.path.join(fx, "config.json"), "w") as f:
                json.dump(gptoss_released_config(cfg_new), f, indent=2, sort_keys=True)
        m2 = load_ref_model(ldir, "gptoss")
        r2 = run_reference(m2, "gptoss", prompt)
        res["legacy_vs_new"] = dict(
            rope_parameters_loaded=dict(m2.config.rope_parameters),
            inv_freq_equal=bool(torch.equal(m2.model.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq)),
            max_abs_logit_diff=(r2["logits"] - res["logits"]).abs().max().item(),
            greedy_equal=r2["greedy"] == res["greedy"])
        assert res["legacy_vs_new"]["greedy_equal"] and res["legacy_vs_new"]["max_abs_logit_diff"] == 0.0, \
            res["legacy_vs_new"]
        del m2
    if spec.get("mxfp4"):
        # informational: transformers' own MXFP4 loading (dequantize=True, CPU) of the release-layout checkpoint
        try:
            qc = transformers.Mxfp4Config(dequantize=True)
            m3 = Model.from_pretrained(fx, dtype=torch.float32, attn_implementation="eager", quantization_config=qc,
                                       device_map="cpu")
            m3.eval()
            with torch.no_grad():
                l3 = m3(torch.tensor([ids_full])).logits[0].float()
            res["hf_mxfp4_dequant_max_abs_diff"] = (l3 - res["logits"]).abs().max().item()
            res["hf_mxfp4_param_dtypes"] = sorted({str(p.dtype) for p in m3.parameters()})
            res["hf_mxfp4_experts_dtype"] = str(m3.model.layers[0].mlp.experts.gate_up_proj.dtype)
            # its dequantized experts come back bf16 (exact values; convert_moe_packed_tensors' default dtype) and
            # the forward then runs partly in bf16; cast to f32 to compare the weights themselves
            m3.float()
            with torch.no_grad():
                l4 = m3(torch.tensor([ids_full])).logits[0].float()
            res["hf_mxfp4_dequant_f32_max_abs_diff"] = (l4 - res["logits"]).abs().max().item()
            del m3
        except Exception as e:  # noqa: BLE001
            res["hf_mxfp4_dequant_max_abs_diff"] = f"failed: {type(e).__name__}: {str(e)[:400]}"

    min_gap = min(min(res["step_gaps"]), min(res["full_gaps"]))
    rm = res["route_margin"]
    cc = res["clamp_counts"]
    reasons = []
    if min_gap < MIN_GREEDY_GAP:
        reasons.append(f"greedy gap {min_gap:.3g}")
    if len(set(res["greedy"])) < spec.get("min_distinct", MIN_DISTINCT_GREEDY):
        reasons.append(f"only {len(set(res['greedy']))} distinct greedy tokens")
    if not res["argmax_ok"]:
        reasons.append("final-pass argmax != greedy")
    if rm is None or rm < MIN_ROUTE_MARGIN:
        reasons.append(f"route margin {rm}")
    if cc["gate_gt_limit"] == 0 or cc["up_gt_limit"] + cc["up_lt_minus_limit"] == 0:
        reasons.append(f"swiglu clamp never triggers {cc}")
    res["dtypes"] = dtype_summary(fx)
    res["min_gap"] = min_gap
    res["ref_extra"] = {
        "min_distinct_greedy": len(set(res["greedy"])),
        "clamp_counts": cc,
        "rope_inv_freq": [float(x) for x in hf_inv.tolist()],
        "layer_types": list(cfg_new["layer_types"]),
        "sliding_window": cfg_new["sliding_window"],
        "replica_max_abs_diff": rep.get("exact"),
    }
    if spec.get("mxfp4"):
        res["ref_extra"]["mxfp4_scale_range"] = res.get("mxfp4_scale_range")
    if reasons:
        return None, "; ".join(reasons)
    return fx, res


def notes_for(spec, res):
    c = spec["cfg"]
    parts = []
    if spec["family"] == "gptoss":
        rp = c["rope_parameters"]
        parts.append(f"GptOssForCausalLM ({c['num_hidden_layers']} layers alternating sliding_attention (window "
                     f"{c['sliding_window']}) / full_attention, attention sinks, GQA {c['num_attention_heads']}/"
                     f"{c['num_key_value_heads']} heads of dim {c['head_dim']}, q/k/v/o biases, router with bias, "
                     f"{c['num_local_experts']} experts top-{c['num_experts_per_tok']} softmax over the selected logits, "
                     f"interleaved gate/up clamped SwiGLU limit {c['swiglu_limit']} alpha 1.702)")
        parts.append(f"rope yarn theta {rp['rope_theta']} factor {rp['factor']} beta_fast {rp['beta_fast']} beta_slow "
                     f"{rp['beta_slow']} original_max_position_embeddings {rp['original_max_position_embeddings']} "
                     f"truncate {rp['truncate']}")
        if spec.get("mxfp4"):
            parts.append("experts in the openai/gpt-oss release layout: {gate_up,down}_proj_{blocks,scales} U8 MXFP4 "
                         "(E8M0 scale per 32 inputs, FP4 E2M1, low nibble first), biases and all other weights bf16; "
                         "config.json in the release spelling (rope_theta + rope_scaling, quantization_config mxfp4); "
                         "reference uses f32 weights dequantized with transformers' convert_moe_packed_tensors in an "
                         "unquantized f32 model")
        else:
            parts.append("bf16 weights as transformers 5 save_pretrained writes them (fused experts.gate_up_proj "
                         "[E, H, 2I] with interleaved gate/up columns); reference = f32 forward on the exact bf16 weights")
        parts.append("eager attention, eager experts, CPU, no KV cache; greedy = 16 full forwards with argmax; logits "
                     "rows from one full forward over prompt + greedy[:15]; see docs/gpt_oss.md")
        return ". ".join(parts) + "."
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
        fx, res = (attempt_gptoss if spec["family"] == "gptoss" else attempt)(spec, seed, tmp, log)
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
            "model_class": {"ds": "DeepseekV3ForCausalLM", "qwen": "Qwen3MoeForCausalLM",
                            "gptoss": "GptOssForCausalLM"}[spec["family"]],
            "weights": "fp8_e4m3_block128" if spec.get("fp8") else ("mxfp4_experts" if spec.get("mxfp4") else
                        ("compressed_tensors_" + spec["ct"] + "_experts" if spec.get("ct") else "bf16")),
            "min_greedy_gap": res["min_gap"],
            "min_route_margin": res["route_margin"],
            "min_group_margin": res["group_margin"],
            "n_moe_layers": res["n_routers"],
            "softmax_scale": res["attn_scaling"],
            "rope_attention_scaling": res["rope_attention_scaling"],
        }
        ref.update(res.get("ref_extra", {}))
        with open(os.path.join(dst, "reference.json"), "w") as f:
            json.dump(ref, f, indent=2)
            f.write("\n")
        size = sum(os.path.getsize(os.path.join(dst, f_)) for f_ in os.listdir(dst))
        summary = {k: v for k, v in res.items() if k not in ("logits", "step_gaps", "full_gaps", "ref_extra")}
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
