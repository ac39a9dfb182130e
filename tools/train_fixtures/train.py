#!/usr/bin/env python3
"""Train the tokenizer and the four small test models of issue 18 on the Debian-docs corpus (make_corpus.py), and
two larger bench-only models (stages bench_ds, bench_draft: README.md, "Bench-only models"; never committed).

Runs on the lent H200 machine (torch 2.11 + CUDA, transformers 5.17, tokenizers 0.23, safetensors; no network);
the exact `run` commands are in tools/train_fixtures/README.md.  Stages, each skipped when its output exists (so a
run can be split over device calls and resumed):

  tokenizer   byte-level BPE, vocab 4096 (tok.py), trained on the training split; the corpus is then encoded once
              (documents joined by <|endoftext|>, chat samples rendered with the chat template; the training
              documents shuffled with a fixed seed, the held-out ones in corpus order) into <out>/data/.
  ds          DeepSeek-V3 architecture MoE + one MTP layer (num_nextn_predict_layers 1), trained jointly:
              loss = CE(next token) + 0.3 * CE(MTP: the token after next), DeepSeek-V3 report §2.2.
  qwen        Qwen3-MoE architecture (softmax router, switch-style balance loss).
  draft       a small dense draft model: Qwen3-MoE config whose layers are all dense (mlp_only_layers = every
              layer), tied embeddings.
  k3          Kimi K3 architecture (KDA + gated NoPE MLA layers, AttnRes, latent MoE with SiTU).

Each model goes to <out>/models/<name>/ in the layout strata reads (config.json, generation_config.json,
tokenizer.json, tokenizer_config.json, safetensors: bf16, router e_score_correction_bias F32, K3's small KDA
tensors F32) with train_result.json (held-out loss, steps, seconds, tokens, sizes).  Sigmoid routers (DeepSeek-V3,
K3) are balanced without an auxiliary loss, as DeepSeek-V3 does: after each step every expert's bias moves by
gamma = 1e-3 towards the mean load (sign rule), then all biases of a router are shifted so the smallest is 0
(selection is unchanged by a common shift; non-negative biases keep transformers' 0.0-filled group mask and the
official -inf mask in agreement).

Steps are fixed per model (deterministic seeds); a per-model wall-clock cap (--cap-minutes) stops a model early if
the machine is slower than planned, and train_result.json says so.  --smoke: tiny widths, 3 steps, a corpus subset,
CPU is fine, the byte-level stand-in tokenizer when `tokenizers` is missing.
"""

import argparse
import json
import lzma
import math
import os
import random
import shutil
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models as M  # noqa: E402
import tok  # noqa: E402

k3 = M.k3

VOCAB = 4096
SEQ = 512
MTP_LAMBDA = 0.3
BIAS_GAMMA = 1e-3
QWEN_AUX = 0.01
FIT_AT = 40        # the step at which the step count is fitted to the wall-clock cap

# ------------------------------------------------------------------------------------------------ model specs
# Sizes: issue 18 allows 48 MB for all four; they are kept near 30 MB (bf16, with their reference files) because
# every `run` call sends the whole working tree, 64 MiB at most, the corpus carried besides.

DS = dict(hidden_size=160, intermediate_size=320, moe_intermediate_size=48, num_hidden_layers=4,
          num_nextn_predict_layers=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=80, kv_lora_rank=64,
          qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=32, num_experts_per_tok=4,
          n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1, moe_layer_freq=1,
          norm_topk_prob=True, routed_scaling_factor=2.5, rope_theta=10000.0, rms_norm_eps=1e-6,
          rope_interleave=True, max_position_embeddings=4096)
QWEN = dict(hidden_size=160, intermediate_size=320, moe_intermediate_size=32, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=40, num_experts=32, num_experts_per_tok=4,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False,
            attention_bias=False, rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=4096)
DRAFT = dict(hidden_size=128, intermediate_size=384, moe_intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
             norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0, 1], tie_word_embeddings=True,
             attention_bias=False, rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=4096)
K3 = dict(hidden_size=160, intermediate_size=320, num_hidden_layers=6, attn_res_block_size=3,
          full_attn_layers=[3, 6], kda_num_heads=4, kda_head_dim=32, num_attention_heads=4, q_lora_rank=80,
          kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, num_experts=32,
          num_experts_per_token=4, num_shared_experts=1, moe_intermediate_size=32, routed_expert_hidden_size=80,
          first_k_dense_replace=1, routed_scaling_factor=2.5, moe_renormalize=True, max_position_embeddings=4096)

# Bench-only models (never committed; tools/train_fixtures/bench_models_device.sh trains and measures them in one
# device call):
# issue 18's 1.5x for a draft model in RAM needs a target whose token costs many draft tokens and whose verification
# rows cost little more than one, i.e. weights past the last-level cache (the fixtures above sit inside it, where
# five rows cost 3.2-3.5 one-row steps). A verification batch reads the union of its rows' experts, so the share of
# a token's weights that every row shares (attention, the shared expert, the dense layer) decides what a batch
# costs: here the shared expert is eight experts wide and the routed ones narrow (about 70% of a token's weights
# are shared by all rows; on DeepSeek-V3 itself about 40%).
BENCH_DS = dict(DS, hidden_size=1024, intermediate_size=4096, moe_intermediate_size=256, num_hidden_layers=12,
                num_attention_heads=8, num_key_value_heads=8, q_lora_rank=384, kv_lora_rank=256, qk_nope_head_dim=64,
                qk_rope_head_dim=32, v_head_dim=64, n_routed_experts=32, num_experts_per_tok=4, n_group=4,
                topk_group=2, n_shared_experts=8)
BENCH_DRAFT = dict(DRAFT, hidden_size=384, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=6,
                   num_key_value_heads=2, head_dim=64, mlp_only_layers=[0, 1, 2, 3])

STAGES = {
    # name: (family, cfg, steps, batch, lr, seed, cap minutes)
    "ds": ("ds", DS, 2000, 32, 3e-3, 181, 3.0),
    "qwen": ("qwen", QWEN, 2000, 32, 3e-3, 182, 2.0),
    "draft": ("qwen", DRAFT, 2000, 32, 3e-3, 183, 1.0),
    "k3": ("k3", K3, 1200, 32, 3e-3, 184, 3.5),
    "bench_ds": ("ds", BENCH_DS, 4000, 32, 1.5e-3, 185, 4.0),
    "bench_draft": ("qwen", BENCH_DRAFT, 4000, 32, 2e-3, 186, 1.0),
}
FIXTURE_NAMES = {"ds": "trained_ds_mtp", "qwen": "trained_qwen_moe", "draft": "trained_draft_dense",
                 "k3": "trained_k3", "bench_ds": "bench_ds_target", "bench_draft": "bench_draft_dense"}

SMOKE = {
    "ds": dict(DS, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
               num_attention_heads=2, num_key_value_heads=2, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8,
               qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2),
    "qwen": dict(QWEN, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_experts=8, num_experts_per_tok=2),
    "draft": dict(DRAFT, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                  head_dim=16),
    "k3": dict(K3, hidden_size=32, intermediate_size=64, num_hidden_layers=3, attn_res_block_size=2,
               full_attn_layers=[2], kda_num_heads=2, kda_head_dim=16, num_attention_heads=2, q_lora_rank=16,
               kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, num_experts=8,
               num_experts_per_token=2, moe_intermediate_size=16, routed_expert_hidden_size=16),
}
SMOKE["bench_ds"], SMOKE["bench_draft"] = SMOKE["ds"], SMOKE["draft"]


def log(s):
    print(f"[{time.strftime('%H:%M:%S')}] {s}", flush=True)


# ------------------------------------------------------------------------------------------------ corpus, data


def read_corpus(path, max_docs=0):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        header = json.loads(f.readline())
        docs = []
        for line in f:
            docs.append(json.loads(line))
            if max_docs and len(docs) >= max_docs:
                break
    return header, docs


def doc_text(d):
    return tok.render_chat(d["messages"]) if d["kind"] == "chat" else d["text"]


def stage_tokenizer(args, out):
    tdir = os.path.join(out, "tokenizer")
    ddir = os.path.join(out, "data")
    if os.path.exists(os.path.join(ddir, "DONE")):
        log("tokenizer: done already")
        return
    t0 = time.time()
    header, docs = read_corpus(args.corpus, 400 if args.smoke else 0)
    train_docs = [d for d in docs if d["split"] == "train"]
    held_docs = [d for d in docs if d["split"] == "heldout"]
    log(f"corpus: {len(train_docs)} training and {len(held_docs)} held-out documents ({time.time() - t0:.1f}s)")
    info_path = os.path.join(tdir, "tokenizer_info.json")
    if os.path.exists(info_path):  # trained by an earlier call (carried back): only the encoding is redone
        with open(info_path) as f:
            info = json.load(f)
        log(f"tokenizer: trained already: {info}")
    else:
        texts = [doc_text(d) for d in train_docs]
        info = tok.train_tokenizer(texts, VOCAB, tdir, SEQ * 8, allow_stand_in=args.smoke)
        info["seconds"] = round(time.time() - t0, 1)
        write_json(info_path, info)
        log(f"tokenizer: {info} ({time.time() - t0:.1f}s)")
    enc = tok.Encoder(tdir)
    rng = random.Random(1234)
    order = list(range(len(train_docs)))
    rng.shuffle(order)
    os.makedirs(ddir, exist_ok=True)
    stats = {}
    for split, ds_, idx in (("train", train_docs, order), ("heldout", held_docs, list(range(len(held_docs))))):
        ids_list = enc.encode_batch([doc_text(ds_[i]) for i in idx])
        flat, kinds, starts = [], [], []
        for i, ids in zip(idx, ids_list):
            starts.append(len(flat))
            kinds.append(ds_[i]["kind"])
            flat.extend(ids)
            flat.append(tok.EOT)
        t = torch.tensor(flat, dtype=torch.int32)
        torch.save({"ids": t, "starts": torch.tensor(starts, dtype=torch.int64), "kinds": kinds,
                    "paths": [ds_[i]["path"] for i in idx]}, os.path.join(ddir, f"{split}.pt"))
        chars = sum(len(doc_text(ds_[i])) for i in idx)
        stats[split] = {"documents": len(idx), "tokens": len(flat), "chars": chars,
                        "chars_per_token": round(chars / max(1, len(flat)), 3)}
        log(f"{split}: {stats[split]} ({time.time() - t0:.1f}s)")
    with open(os.path.join(ddir, "stats.json"), "w") as f:
        json.dump({"tokenizer": info, "corpus_header": header, "splits": stats,
                   "seconds": round(time.time() - t0, 1)}, f, indent=2)
    open(os.path.join(ddir, "DONE"), "w").close()


def load_split(out, split):
    return torch.load(os.path.join(out, "data", f"{split}.pt"))


# ------------------------------------------------------------------------------------------------ models


def build(family, cfg, vocab):
    c = dict(cfg, vocab_size=vocab)
    if family == "ds":
        return M.DeepseekV3(c), c
    if family == "qwen":
        return M.Qwen3Moe(c), c
    spec = k3_spec(c)
    tc = k3.text_config(spec)
    return M.KimiK3(tc), c


def k3_spec(c):
    return dict(name="trained_k3", experts="bf16", small_dtype="F32", shards=1, cfg=c)


def balance_biases(model, family):
    """DeepSeek-V3's auxiliary-loss-free balancing: b_e += gamma * sign(mean load - load_e), then shift to min 0."""
    pairs = []
    if family == "ds":
        pairs = [(r.last_idx, r.e_score_correction_bias, r.E) for r in model.routers() if r.last_idx is not None]
    elif family == "k3":
        bufs = dict(model.bias_buffers())
        for i, idx in model.last_idx.items():
            b = bufs[f"model__layers__{i}__block_sparse_moe__gate__e_score_correction_bias"]
            pairs.append((idx, b, b.numel()))
    with torch.no_grad():
        for idx, b, E in pairs:
            load = torch.bincount(idx.reshape(-1), minlength=E).float()
            b += BIAS_GAMMA * torch.sign(load.mean() - load)
            b -= b.min()


def qwen_balance_loss(model):
    """Switch-style loss as transformers' load_balancing_loss_func: E * sum_e f_e * P_e per MoE layer (f_e: share
    of routing slots, P_e: mean router probability), averaged over layers."""
    losses = []
    for blk in model.moe_blocks():
        probs, idx = blk.last
        f = F.one_hot(idx, blk.E).float().sum(1).mean(0)
        losses.append(blk.E * (f * probs.mean(0)).sum())
    return torch.stack(losses).mean() if losses else None


def loss_fn(model, family, batch):
    x, y = batch[:, :-1], batch[:, 1:]
    V = model.c["vocab_size"] if family != "k3" else model.tc["vocab_size"]
    parts = {}
    if family == "ds" and model.mtp is not None:
        logits, mtp_logits = model(x, with_mtp=True)
        parts["main"] = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
        # MTP row i (0..T-2) predicts token i+2 of x, i.e. y[:, i+1]
        parts["mtp"] = F.cross_entropy(mtp_logits.float().reshape(-1, V), y[:, 1:].reshape(-1))
        loss = parts["main"] + MTP_LAMBDA * parts["mtp"]
    else:
        logits = model(x)
        parts["main"] = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
        loss = parts["main"]
        if family == "qwen":
            aux = qwen_balance_loss(model)
            if aux is not None:
                parts["balance"] = aux
                loss = loss + QWEN_AUX * aux
    return loss, parts


@torch.no_grad()
def evaluate(model, family, held, T, n_windows, bs, device, amp):
    """Mean per-token loss over the first n_windows non-overlapping windows of T+1 held-out tokens."""
    ids = held["ids"].long()
    n = min(n_windows, (ids.numel() - 1) // T)
    sums, counts, loads = {}, 0, {}
    model.eval()
    for s in range(0, n, bs):
        rows = [ids[j * T: j * T + T + 1] for j in range(s, min(n, s + bs))]
        batch = torch.stack(rows).to(device)
        with amp():
            _, parts = loss_fn(model, family, batch)
        k = batch.shape[0]
        for key, v in parts.items():
            sums[key] = sums.get(key, 0.0) + float(v) * k
        counts += k
        for name, idx, E in route_indices(model, family):
            loads.setdefault(name, torch.zeros(E))
            loads[name] += torch.bincount(idx.reshape(-1).cpu(), minlength=E).float()
    model.train()
    res = {key: v / max(1, counts) for key, v in sums.items()}
    res["windows"], res["tokens"] = counts, counts * T
    if loads:
        res["expert_load_max_over_mean"] = {name: round(float(l.max() / l.mean()), 3) for name, l in loads.items()}
        res["expert_load_min_over_mean"] = {name: round(float(l.min() / l.mean()), 3) for name, l in loads.items()}
    return res


def route_indices(model, family):
    if family == "ds":
        out = []
        for name, m in model.named_modules():
            if isinstance(m, M.SigmoidRouter) and m.last_idx is not None:
                out.append((name, m.last_idx, m.E))
        return out
    if family == "qwen":
        return [(name, m.last[1], m.E) for name, m in model.named_modules()
                if isinstance(m, M.QwenMoe) and m.last is not None]
    return [(f"layer{i}", idx, model.tc["num_experts"]) for i, idx in model.last_idx.items()]


def storage_tensors(model, family, c):
    """HF name -> CPU tensor as stored: bf16; router biases F32; K3 via make_k3_fixtures.storage_tensors."""
    t = {k: v.detach().float().cpu().clone() for k, v in model.hf_tensors().items()}
    if family == "k3":
        return k3.storage_tensors(t, {}, k3_spec(c))
    return {k: (v if k.endswith("e_score_correction_bias") else v.to(torch.bfloat16)).contiguous()
            for k, v in t.items()}


def hf_config(family, c):
    if family == "ds":
        keys = ["vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
                "num_nextn_predict_layers", "num_attention_heads", "num_key_value_heads", "n_shared_experts",
                "n_routed_experts", "routed_scaling_factor", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                "v_head_dim", "qk_nope_head_dim", "n_group", "topk_group", "num_experts_per_tok", "moe_layer_freq",
                "first_k_dense_replace", "norm_topk_prob", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                "rope_interleave"]
        cfg = {k: c[k] for k in keys}
        cfg.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", topk_method="noaux_tc",
                   scoring_func="sigmoid", hidden_act="silu", rope_scaling=None, attention_bias=False,
                   attention_dropout=0.0, initializer_range=0.02, tie_word_embeddings=False, use_cache=True,
                   ep_size=1, aux_loss_alpha=0.0, seq_aux=False, torch_dtype="bfloat16",
                   bos_token_id=tok.EOT, eos_token_id=tok.EOT)
        return cfg
    if family == "qwen":
        keys = ["vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "num_experts", "num_experts_per_tok",
                "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "tie_word_embeddings", "attention_bias",
                "rope_theta", "rms_norm_eps", "max_position_embeddings"]
        cfg = {k: c[k] for k in keys}
        cfg.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_act="silu",
                   rope_scaling=None, attention_dropout=0.0, initializer_range=0.02, use_cache=True,
                   use_sliding_window=False, sliding_window=None, max_window_layers=c["num_hidden_layers"],
                   output_router_logits=False, router_aux_loss_coef=QWEN_AUX, torch_dtype="bfloat16",
                   bos_token_id=tok.EOT, eos_token_id=tok.EOT)
        return cfg
    cfg = k3.full_config(k3_spec(c))
    for d in (cfg, cfg["text_config"]):
        d.update(bos_token_id=tok.EOT, eos_token_id=tok.EOT, pad_token_id=tok.EOT)
    cfg["media_placeholder_token_id"] = tok.IM_START  # no image ever: any id of the vocabulary
    cfg["text_config"]["max_position_embeddings"] = c.get("max_position_embeddings", 4096)
    return cfg


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def save_model(model, family, c, out_dir, tok_dir):
    os.makedirs(out_dir, exist_ok=True)
    stored = storage_tensors(model, family, c)
    if family == "k3":
        k3.write_checkpoint(out_dir, stored, k3_spec(c))
    else:
        k3.save_safetensors(stored, os.path.join(out_dir, "model.safetensors"))
    write_json(os.path.join(out_dir, "config.json"), hf_config(family, c))
    write_json(os.path.join(out_dir, "generation_config.json"),
               {"bos_token_id": tok.EOT, "eos_token_id": [tok.EOT, tok.IM_END], "pad_token_id": tok.EOT})
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), out_dir)
    return sum(v.numel() * v.element_size() for v in stored.values())


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def stage_model(args, out, name, device):
    family, cfg, steps, B, lr, seed, cap = STAGES[name]
    dst = os.path.join(out, "models", name)
    if os.path.exists(os.path.join(dst, "train_result.json")):
        log(f"{name}: done already")
        return
    if args.smoke:
        cfg, steps, B, cap = SMOKE[name], args.smoke_steps, 2, 5.0
    if args.steps:
        steps = args.steps
    if args.batch:
        B = args.batch
    cap *= args.cap_scale
    T = args.seq
    t_start = time.time()
    tok_dir = os.path.join(out, "tokenizer")
    vocab = tok.Encoder(tok_dir).vocab_size
    train, held = load_split(out, "train"), load_split(out, "heldout")
    torch.manual_seed(seed)
    model, c = build(family, cfg, vocab)
    M.init_for_training(model, seed)
    n_params = M.param_count(model)
    log(f"{name}: {family}, {n_params / 1e6:.2f}M parameters ({n_params * 2 / 1e6:.1f} MB in bf16), {steps} steps "
        f"of {B}x{T} tokens, lr {lr}, cap {cap} min")
    model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if device.type == "cuda" else {}))
    warm = args.warmup or max(1, min(100, steps // 10))

    def lr_at(s):
        if s < warm:
            return lr * (s + 1) / warm
        prog = (s - warm) / max(1, steps - warm)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))

    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else M._null
    ids = train["ids"].long().to(device)
    window = torch.arange(T + 1, device=device)
    gen = torch.Generator().manual_seed(seed)
    n_start = ids.numel() - T - 1
    hist, t0, done, t_half, cut_short = [], time.time(), 0, None, False
    planned, step = steps, 0
    while step < steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = torch.randint(0, n_start, (B,), generator=gen).to(device)
        batch = ids[starts[:, None] + window[None, :]]
        with amp():
            loss, parts = loss_fn(model, family, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        balance_biases(model, family)
        done = step + 1
        if step % args.log_every == 0 or step == steps - 1:
            el = time.time() - t0
            rec = {k: round(float(v), 4) for k, v in parts.items()}
            rec.update(step=step, lr=round(lr_at(step), 6), gnorm=round(float(gnorm), 3), sec=round(el, 1),
                       tok_per_s=round(done * B * T / max(el, 1e-9)))
            hist.append(rec)
            log(f"{name} " + json.dumps(rec))
        step += 1
        if step == FIT_AT // 2:
            sync(device)
            t_half = time.time()
        if step == FIT_AT and steps > FIT_AT:
            # fit the step count to the cap, timed over steps FIT_AT/2..FIT_AT (past the warm-up kernels) and
            # decided while the learning rate is still warming up, so the cosine schedule ends where it should
            sync(device)
            per = (time.time() - t_half) / (FIT_AT - FIT_AT // 2)
            fit = FIT_AT + int((cap * 60 - (time.time() - t0)) / per)
            log(f"{name}: {per * 1e3:.1f} ms a step; {steps} steps take ~{steps * per / 60:.1f} min (cap {cap})")
            if fit < steps:
                steps = max(fit, FIT_AT + 1)
                log(f"{name}: cut to {steps} steps to fit the cap")
        if time.time() - t0 > cap * 60 * 1.15 and step < steps:
            log(f"{name}: 15% past the wall-clock cap of {cap} min after {step} steps: stopping")
            cut_short = True
            break
    train_s = time.time() - t0
    ev = evaluate(model, family, held, T, 16 if args.smoke else 128, 16, device, amp)
    log(f"{name}: held-out {json.dumps(ev)}")
    tmp = dst + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    model.to("cpu")
    weight_bytes = save_model(model, family, c, tmp, tok_dir)
    res = {"name": name, "fixture": FIXTURE_NAMES[name], "family": family, "config": c, "seed": seed,
           "steps_planned": planned, "steps_done": done,
           "steps_cut_to_fit_cap": steps != planned, "stopped_past_cap": cut_short, "batch": B, "seq_len": T,
           "tokens_seen": done * B * T, "lr": lr, "warmup_steps": warm, "command": " ".join(sys.argv),
           "train_seconds": round(train_s, 1),
           "stage_seconds": round(time.time() - t_start, 1), "heldout": ev, "history": hist,
           "params": n_params, "weight_bytes": weight_bytes, "dir_bytes": dir_bytes(tmp),
           "mtp_lambda": MTP_LAMBDA if family == "ds" else None,
           "bias_gamma": BIAS_GAMMA if family in ("ds", "k3") else None,
           "balance_loss_coef": QWEN_AUX if family == "qwen" else None,
           "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
           "torch_version": torch.__version__, "smoke": bool(args.smoke)}
    write_json(os.path.join(tmp, "train_result.json"), res)
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.rename(tmp, dst)
    log(f"{name}: saved {dst} ({res['dir_bytes'] / 1e6:.2f} MB) in {res['stage_seconds']}s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=".train/corpus.jsonl.xz")
    ap.add_argument("--out", default=".train/out")
    ap.add_argument("--stages", default="tokenizer,ds,qwen,draft,k3")
    ap.add_argument("--smoke", action="store_true", help="tiny widths and a few steps: a pipeline check")
    ap.add_argument("--smoke-steps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="override every model's step count")
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--batch", type=int, default=0, help="override every model's batch (sequences a step)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="warm-up steps (default min(100, steps/10) of the planned steps; on a machine where the cap "
                         "cuts the steps to a few hundred, give a short one: the fit at step 40 keeps it)")
    ap.add_argument("--cap-scale", type=float, default=1.0, help="multiply every model's wall-clock cap")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    if not args.seq:
        args.seq = 32 if args.smoke else SEQ
    if args.smoke:
        args.log_every = 1
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    log(f"torch {torch.__version__} on {device}" +
        (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""))
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    for st in args.stages.split(","):
        if st == "tokenizer":
            stage_tokenizer(args, args.out)
        else:
            stage_model(args, args.out, st, device)
        log(f"stage {st} finished at {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
