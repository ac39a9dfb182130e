#!/usr/bin/env python3
"""Write a tiny random-weight GGUF that llama.cpp loads, for parity and speed tests.

    PYTHONPATH=LLAMA_DIR/gguf-py /usr/bin/python3 bench/llama_cpp/make_tiny_gguf.py \
        --arch qwen3moe --out /tmp/tiny-qwen3moe.gguf [--type q8_0] [--expert-type mxfp4]

Architectures (tensor names and metadata keys as llama.cpp's loader expects them):
  qwen3moe   GQA + q/k RMS norm, NEOX RoPE, softmax top-k routing with renormalised weights
  deepseek2  MLA (split attn_k_b/attn_v_b, q_lora), YaRN, sigmoid routing with exp_probs_b,
             group-limited top-k, shared expert, one leading dense layer (DeepSeek-V3 style)
  gpt-oss    GQA with q/k/v/o biases, attention sinks, alternating sliding window (even
             layers), YaRN, router bias, softmax over the selected top-k, swiglu-oai experts
             with biases

Weight types: --type applies to token_embd/output/attention/dense/shared-expert matrices,
--expert-type (default: --type) to the routed experts. gguf-py quantizes f32, f16, bf16,
q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4 in numpy. K-quants (Q4_K etc.) need llama.cpp's
quantizer: --llama-quantize Q4_K_M [--pure] writes f32 first and runs llama-quantize on it
(--quantize-bin, default $LLAMA_QUANTIZE, else build/bin/llama-quantize of the llama.cpp
checkout whose gguf-py is imported).
Norm weights, biases, sinks, routers (ffn_gate_inp) and exp_probs_b stay f32, as in
converted checkpoints.

Vocabulary: by default a small byte-level BPE (256 GPT-2 byte tokens, some letter-pair
merges, three control tokens, padding) of --vocab entries; or --tokenizer-json PATH to
embed a real Hugging Face tokenizer.json (vocab, merges, added tokens).

Initialisation keeps activations O(1) (weights ~ N(0, 1/fan_in)) and makes the output
logits spread (std ~ 3) so greedy decoding and top-1 probabilities are meaningful.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import quants
    from gguf.constants import GGMLQuantizationType as QT
except ImportError:  # pragma: no cover
    sys.exit("make_tiny_gguf: needs gguf-py: PYTHONPATH=LLAMA_DIR/gguf-py /usr/bin/python3 ...")


TYPES = {
    "f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0,
    "q4_0": QT.Q4_0, "q4_1": QT.Q4_1, "q5_0": QT.Q5_0, "q5_1": QT.Q5_1, "mxfp4": QT.MXFP4,
}

FILE_TYPES = {  # general.file_type (llama_ftype) for uniform files
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "bf16": 32, "mxfp4": 38,
}

ARCH_DEFAULTS = {
    "qwen3moe": dict(layers=2, embd=256, heads=4, kv_heads=2, head_dim=64, experts=8, top_k=2,
                     ff_exp=256, vocab=1024, ctx=4096, rope_base=1000000.0, eps=1e-6),
    "deepseek2": dict(layers=3, embd=256, heads=4, q_lora=256, kv_lora=256, qk_nope=64, qk_rope=32,
                      v_head=64, experts=16, top_k=4, groups=4, groups_used=2, shared=1, dense_lead=1,
                      ff=512, ff_exp=256, routed_scale=2.5, vocab=1024, ctx=163840, orig_ctx=4096,
                      yarn_factor=40.0, mscale_all_dim=1.0, rope_base=10000.0, eps=1e-6),
    "gpt-oss": dict(layers=2, embd=256, heads=4, kv_heads=2, head_dim=64, experts=8, top_k=2,
                    ff_exp=256, vocab=1024, ctx=131072, orig_ctx=4096, yarn_factor=32.0,
                    rope_base=150000.0, eps=1e-5, swa=8),
}

PRE = {"qwen3moe": "qwen2", "deepseek2": "deepseek-v3", "gpt-oss": "gpt-4o"}


def bytes_to_unicode() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def byte_vocab(size: int, arch: str):
    specials = {
        "qwen3moe": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "deepseek2": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>"],
        "gpt-oss": ["<|start|>", "<|end|>", "<|return|>"],
    }[arch]
    toks = bytes_to_unicode()
    types = [1] * 256
    merges = []
    have = set(toks)
    space = toks[ord(" ")]
    letters = [toks[c] for c in range(ord("a"), ord("z") + 1)]
    room = size - len(specials)
    for a in [space] + letters:
        for b in letters:
            if len(toks) >= room:
                break
            if a + b in have:
                continue
            merges.append(f"{a} {b}")
            toks.append(a + b)
            have.add(a + b)
            types.append(1)
    while len(toks) < room:
        toks.append(f"[PAD{len(toks)}]")
        types.append(5)  # UNUSED
    toks += specials
    types += [3] * len(specials)  # CONTROL
    if len(toks) != size:
        raise SystemExit(f"make_tiny_gguf: --vocab {size} is too small (need > {256 + len(specials)})")
    ids = {t: i for i, t in enumerate(toks)}
    if arch == "qwen3moe":
        special_ids = dict(eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"], bos=ids["<|endoftext|>"], add_bos=False)
    elif arch == "deepseek2":
        special_ids = dict(bos=ids["<｜begin▁of▁sentence｜>"], eos=ids["<｜end▁of▁sentence｜>"],
                           pad=ids["<｜end▁of▁sentence｜>"], add_bos=True)
    else:
        special_ids = dict(bos=ids["<|start|>"], eos=ids["<|return|>"], pad=ids["<|end|>"], add_bos=False)
    return toks, types, merges, special_ids


def hf_vocab(path: str, size: int | None):
    with open(path, encoding="utf-8") as f:
        tj = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"make_tiny_gguf: {path}: only BPE tokenizer.json is supported")
    vocab = dict(model["vocab"])
    added = {t["id"]: t for t in tj.get("added_tokens", [])}
    for i, t in added.items():
        vocab[t["content"]] = i
    n = max(vocab.values()) + 1
    if size is not None and size > n:
        n = size
    toks = [f"[PAD{i}]" for i in range(n)]
    types = [5] * n
    for t, i in vocab.items():
        toks[i] = t
        types[i] = 1
    for i, t in added.items():
        types[i] = 3 if t.get("special") else 4  # CONTROL / USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    # special ids from a tokenizer_config.json next to it, when there is one
    special = None
    cfg_path = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        ids = {t: i for i, t in enumerate(toks)}

        def tok_id(key):
            v = cfg.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            return ids.get(v) if isinstance(v, str) else None

        special = dict(bos=tok_id("bos_token"), eos=tok_id("eos_token"), pad=tok_id("pad_token"),
                       add_bos=bool(cfg.get("add_bos_token", False)))
    return toks, types, merges, special


class Builder:
    def __init__(self, args, arch):
        self.args = args
        self.rng = np.random.default_rng(args.seed)
        self.w = gguf.GGUFWriter(args.out_tmp, arch)
        self.main_t = args.type
        self.exp_t = args.expert_type or args.type
        self.log = []

    def _put(self, name, data, tname):
        data = np.ascontiguousarray(data, dtype=np.float32)
        qt = TYPES[tname]
        if qt == QT.F32:
            self.w.add_tensor(name, data)
        elif qt == QT.F16:
            self.w.add_tensor(name, data.astype(np.float16))
        else:
            bs = gguf.GGML_QUANT_SIZES[qt][0]
            if data.shape[-1] % bs:
                raise SystemExit(f"make_tiny_gguf: {name}: row of {data.shape[-1]} is not a multiple of {bs} for {tname}")
            self.w.add_tensor(name, quants.quantize(data, qt), raw_dtype=qt)
        self.log.append((name, tuple(reversed(data.shape)), tname))

    def mat(self, name, ne, scale=1.0, kind="main"):
        """ne = ggml order (ne0 = input features). numpy shape is the reverse."""
        shape = tuple(reversed(ne))
        data = self.rng.standard_normal(shape, dtype=np.float32) * (scale / np.sqrt(ne[0]))
        self._put(name, data, self.exp_t if kind == "expert" else self.main_t)

    def vec(self, name, ne, kind="norm", scale=0.1):
        shape = tuple(reversed(ne))
        if kind == "norm":
            data = 1.0 + scale * self.rng.standard_normal(shape, dtype=np.float32)
        else:
            data = scale * self.rng.standard_normal(shape, dtype=np.float32)
        self._put(name, data, "f32")

    def f32mat(self, name, ne, scale=1.0):
        shape = tuple(reversed(ne))
        self._put(name, self.rng.standard_normal(shape, dtype=np.float32) * (scale / np.sqrt(ne[0])), "f32")


def build(args):
    arch = args.arch
    d = dict(ARCH_DEFAULTS[arch])
    for kv in args.set or []:
        k, _, v = kv.partition("=")
        if k not in d:
            raise SystemExit(f"make_tiny_gguf: unknown --set key {k!r} for {arch}; keys: {', '.join(d)}")
        d[k] = type(d[k])(float(v)) if isinstance(d[k], (int, float)) else v
    if args.layers:
        d["layers"] = args.layers
    if args.vocab:
        d["vocab"] = args.vocab

    gguf_arch = gguf.MODEL_ARCH_NAMES[{"qwen3moe": gguf.MODEL_ARCH.QWEN3MOE,
                                       "deepseek2": gguf.MODEL_ARCH.DEEPSEEK2,
                                       "gpt-oss": gguf.MODEL_ARCH.GPT_OSS}[arch]]
    b = Builder(args, gguf_arch)
    w = b.w
    L, E = d["layers"], d["embd"]

    # ---- vocabulary ----
    if args.tokenizer_json:
        toks, types, merges, special = hf_vocab(args.tokenizer_json, args.vocab)
    else:
        toks, types, merges, special = byte_vocab(d["vocab"], arch)
    V = len(toks)

    # ---- metadata ----
    w.add_name(f"tiny-{arch}-{args.type}" + (f"-{args.expert_type}" if args.expert_type else ""))
    w.add_block_count(L)
    w.add_context_length(d["ctx"])
    w.add_embedding_length(E)
    w.add_layer_norm_rms_eps(d["eps"])
    w.add_rope_freq_base(d["rope_base"])
    w.add_expert_count(d["experts"])
    w.add_expert_used_count(d["top_k"])
    w.add_expert_feed_forward_length(d["ff_exp"])
    w.add_vocab_size(V)
    ft = FILE_TYPES.get(b.exp_t if b.exp_t == b.main_t else "", None)
    if ft is None and b.exp_t == "mxfp4":
        ft = 38
    if ft is not None:
        w.add_file_type(ft)

    if arch == "qwen3moe":
        w.add_feed_forward_length(d["ff_exp"] * d["top_k"])
        w.add_head_count(d["heads"])
        w.add_head_count_kv(d["kv_heads"])
        w.add_key_length(d["head_dim"])
        w.add_value_length(d["head_dim"])
    elif arch == "deepseek2":
        w.add_feed_forward_length(d["ff"])
        w.add_head_count(d["heads"])
        w.add_head_count_kv(1)  # MLA as MQA over the compressed cache
        w.add_leading_dense_block_count(d["dense_lead"])
        w.add_q_lora_rank(d["q_lora"])
        w.add_kv_lora_rank(d["kv_lora"])
        w.add_key_length(d["kv_lora"] + d["qk_rope"])
        w.add_value_length(d["kv_lora"])
        w.add_key_length_mla(d["qk_nope"] + d["qk_rope"])
        w.add_value_length_mla(d["v_head"])
        w.add_rope_dimension_count(d["qk_rope"])
        w.add_expert_shared_count(d["shared"])
        w.add_expert_weights_scale(d["routed_scale"])
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(d["groups"])
        w.add_expert_group_used_count(d["groups_used"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(d["yarn_factor"])
        w.add_rope_scaling_orig_ctx_len(d["orig_ctx"])
        w.add_rope_scaling_yarn_log_mul(0.1 * d["mscale_all_dim"])
    else:  # gpt-oss
        w.add_feed_forward_length(d["ff_exp"])
        w.add_head_count(d["heads"])
        w.add_head_count_kv(d["kv_heads"])
        w.add_key_length(d["head_dim"])
        w.add_value_length(d["head_dim"])
        w.add_sliding_window(d["swa"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(d["yarn_factor"])
        w.add_rope_scaling_orig_ctx_len(d["orig_ctx"])

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE[arch])
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if special:
        for key, add in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id), ("pad", w.add_pad_token_id)):
            if special[key] is not None:
                add(special[key])
        w.add_add_bos_token(special["add_bos"])

    # ---- tensors ----
    b.mat("token_embd.weight", (E, V), scale=np.sqrt(E))  # rows ~ N(0,1)
    b.vec("output_norm.weight", (E,))
    b.mat("output.weight", (E, V), scale=args.logit_scale)

    X, K = d["experts"], d["top_k"]
    for i in range(L):
        p = f"blk.{i}."
        b.vec(p + "attn_norm.weight", (E,))
        if arch == "qwen3moe":
            H, KV, D, F = d["heads"], d["kv_heads"], d["head_dim"], d["ff_exp"]
            b.mat(p + "attn_q.weight", (E, H * D))
            b.mat(p + "attn_k.weight", (E, KV * D))
            b.mat(p + "attn_v.weight", (E, KV * D))
            b.mat(p + "attn_output.weight", (H * D, E))
            b.vec(p + "attn_q_norm.weight", (D,))
            b.vec(p + "attn_k_norm.weight", (D,))
            b.vec(p + "ffn_norm.weight", (E,))
            b.f32mat(p + "ffn_gate_inp.weight", (E, X), scale=2.0)
            b.mat(p + "ffn_gate_exps.weight", (E, F, X), kind="expert")
            b.mat(p + "ffn_up_exps.weight", (E, F, X), kind="expert")
            b.mat(p + "ffn_down_exps.weight", (F, E, X), kind="expert")
        elif arch == "deepseek2":
            H, QL, KL = d["heads"], d["q_lora"], d["kv_lora"]
            NOPE, ROPE, VD, F = d["qk_nope"], d["qk_rope"], d["v_head"], d["ff_exp"]
            b.mat(p + "attn_q_a.weight", (E, QL))
            b.vec(p + "attn_q_a_norm.weight", (QL,))
            b.mat(p + "attn_q_b.weight", (QL, H * (NOPE + ROPE)))
            b.mat(p + "attn_kv_a_mqa.weight", (E, KL + ROPE))
            b.vec(p + "attn_kv_a_norm.weight", (KL,))
            # MLA absorption layout: k_b is transposed per head ({nope, kv_lora, H}), v_b is not
            b.mat(p + "attn_k_b.weight", (NOPE, KL, H), scale=np.sqrt(NOPE / KL))
            b.mat(p + "attn_v_b.weight", (KL, VD, H))
            b.mat(p + "attn_output.weight", (H * VD, E))
            b.vec(p + "ffn_norm.weight", (E,))
            if i < d["dense_lead"]:
                b.mat(p + "ffn_gate.weight", (E, d["ff"]))
                b.mat(p + "ffn_up.weight", (E, d["ff"]))
                b.mat(p + "ffn_down.weight", (d["ff"], E))
            else:
                b.f32mat(p + "ffn_gate_inp.weight", (E, X), scale=2.0)
                b.vec(p + "exp_probs_b.bias", (X,), kind="bias", scale=0.1)
                b.mat(p + "ffn_gate_exps.weight", (E, F, X), kind="expert")
                b.mat(p + "ffn_up_exps.weight", (E, F, X), kind="expert")
                b.mat(p + "ffn_down_exps.weight", (F, E, X), kind="expert")
                S = F * d["shared"]
                b.mat(p + "ffn_gate_shexp.weight", (E, S))
                b.mat(p + "ffn_up_shexp.weight", (E, S))
                b.mat(p + "ffn_down_shexp.weight", (S, E))
        else:  # gpt-oss
            H, KV, D, F = d["heads"], d["kv_heads"], d["head_dim"], d["ff_exp"]
            b.mat(p + "attn_q.weight", (E, H * D))
            b.vec(p + "attn_q.bias", (H * D,), kind="bias")
            b.mat(p + "attn_k.weight", (E, KV * D))
            b.vec(p + "attn_k.bias", (KV * D,), kind="bias")
            b.mat(p + "attn_v.weight", (E, KV * D))
            b.vec(p + "attn_v.bias", (KV * D,), kind="bias")
            b.mat(p + "attn_output.weight", (H * D, E))
            b.vec(p + "attn_output.bias", (E,), kind="bias")
            b.vec(p + "attn_sinks.weight", (H,), kind="bias", scale=1.0)
            b.vec(p + "post_attention_norm.weight", (E,))
            b.f32mat(p + "ffn_gate_inp.weight", (E, X), scale=2.0)
            b.vec(p + "ffn_gate_inp.bias", (X,), kind="bias")
            b.mat(p + "ffn_gate_exps.weight", (E, F, X), kind="expert")
            b.vec(p + "ffn_gate_exps.bias", (F, X), kind="bias")
            b.mat(p + "ffn_up_exps.weight", (E, F, X), kind="expert")
            b.vec(p + "ffn_up_exps.bias", (F, X), kind="bias")
            b.mat(p + "ffn_down_exps.weight", (F, E, X), kind="expert")
            b.vec(p + "ffn_down_exps.bias", (E, X), kind="bias")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return b, V


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=sorted(ARCH_DEFAULTS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="f32", choices=sorted(TYPES))
    ap.add_argument("--expert-type", choices=sorted(TYPES))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--vocab", type=int, help="vocabulary size (byte vocab) or padding target (tokenizer.json)")
    ap.add_argument("--tokenizer-json", help="embed this Hugging Face tokenizer.json instead of the byte vocab")
    ap.add_argument("--logit-scale", type=float, default=3.0, help="std of the output logits (default 3)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="override an architecture default (see ARCH_DEFAULTS)")
    ap.add_argument("--llama-quantize", metavar="FTYPE", help="run llama-quantize to FTYPE (e.g. Q4_K_M, Q4_K_S, MXFP4_MOE) on the written file")
    ap.add_argument("--pure", action="store_true", help="with --llama-quantize: pass --pure (one type for all matrices)")
    # default: $LLAMA_QUANTIZE, else the llama-quantize of the llama.cpp checkout gguf-py comes from
    llama_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(gguf.__file__))))
    ap.add_argument("--quantize-bin", default=os.environ.get(
        "LLAMA_QUANTIZE", os.path.join(llama_dir, "build", "bin", "llama-quantize")))
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    if args.llama_quantize:
        fd, args.out_tmp = tempfile.mkstemp(suffix=".gguf", dir=os.path.dirname(os.path.abspath(args.out)))
        os.close(fd)
    else:
        args.out_tmp = args.out
    b, V = build(args)
    if args.verbose:
        for name, ne, t in b.log:
            print(f"  {name:40s} {str(ne):22s} {t}")
    if args.llama_quantize:
        cmd = [args.quantize_bin] + (["--pure"] if args.pure else []) + [args.out_tmp, args.out, args.llama_quantize]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        os.unlink(args.out_tmp)
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-4000:])
            raise SystemExit(f"make_tiny_gguf: {' '.join(cmd)} failed ({r.returncode})")
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {args.arch}, {len(b.log)} tensors, vocab {V}, "
          f"type {args.type}/{args.expert_type or args.type}"
          + (f" -> llama-quantize {args.llama_quantize}{' --pure' if args.pure else ''}" if args.llama_quantize else "")
          + f", {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
