#!/usr/bin/env python3
"""Reference fixtures for the trained test models (train.py's <out>/models/*), in the format of
tools/make_reference_fixtures.py, so tests/reference_model_test.cpp runs them from tests/fixtures/models/.

Per model it writes <out>/fixtures/<fixture>/: the model's files (config, generation config, tokenizer, weights,
train_result.json) plus
  reference.json           {"prompt_ids", "greedy_ids" (16), "vocab_size", "n_rows" (= P+15), "logits_file", "script",
                           "transformers_version", "torch_version", "notes", "family", "model_class",
                           "min_greedy_gap", "min_route_margin", "min_group_margin", "heldout_loss", "prompt_source",
                           "prompt_text", "greedy_text", cross-checks, and for DeepSeek-V3 "mtp" (below)}
  reference_logits.f32     little-endian f32 [n_rows][vocab]: row i = logits after position i of prompt_ids +
                           greedy_ids[:15] from one full forward pass (row P-1+j is what greedy_ids[j] came from).
  mtp_logits.f32           (DeepSeek-V3 only) f32 [n_rows][vocab]: row i = the MTP layer's logits for the token
                           at position i+2 of s = prompt_ids + greedy_ids, given the main model's final hidden state
                           at position i (after model.norm, what lm_head reads) and the token s[i+1]; the MTP
                           block's attention runs causally over MTP rows 0..i at RoPE positions 0..i.

Who computes what: DeepSeek-V3, Qwen3-MoE and the draft: transformers (DeepseekV3ForCausalLM /
Qwen3MoeForCausalLM, f32, eager attention, CPU, on the exact stored bf16 weights; greedy = 16 full forwards) through
tools/make_reference_fixtures.py's load_ref_model / run_reference (its routing-margin hooks included); transformers
does not load the MTP layer, so it gets a copy of the checkpoint without it.  The MTP rows: models.py's MtpLayer in
f32 on the stored weights, fed transformers' last_hidden_state, and cross-checked against transformers' own
DeepseekV3DecoderLayer running the MTP block (max |diff| recorded).  K3: tools/make_k3_fixtures.py's K3Reference
(f32, recurrent KDA) on the stored weights, read back by its own safetensors reader.  Every model is also run
through models.py's training module in f32 and the max |logit diff| recorded.

The prompt: P = 20 consecutive held-out tokens from inside one held-out document (not its first tokens), tried in a
fixed order (prose documents first) until the same acceptance rules as the random fixtures hold: every greedy
step's top1-top2 gap >= 2e-2 (step passes and the final full pass), every routing decision's margin >= 1e-4 (and
the group margin), >= 6 distinct greedy tokens, and no end-of-text / <|im_end|> among the greedy tokens (strata
would stop there).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import check_models  # noqa: E402
import models as M  # noqa: E402
import tok  # noqa: E402
import make_reference_fixtures as mrf  # noqa: E402  (tools/)

k3 = M.k3
PROMPT_LEN = 20
GREEDY = mrf.GREEDY_STEPS
MAX_TRIES = 60
STOP_IDS = {tok.EOT, tok.IM_END}


# --reference models (a machine without transformers): models.py's modules in f32 on the stored weights.  They are
# the same computation as transformers': check_models.py runs them against the committed transformers logits of
# four fixtures (ds_sharded, ds_noqlora_dense2, qwen_gqa, qwen_sparse_step; max |diff| < 1e-5, greedy equal) and
# this script refuses to write a reference unless that check passes first.
MODELS_CLASS = {"ds": "models.py DeepseekV3 (f32; checked against transformers by check_models.py)",
                "qwen": "models.py Qwen3Moe (f32; checked against transformers by check_models.py)"}
BY_MODELS_NOTE = ("reference = tools/train_fixtures/models.py f32 on CPU on the exact stored bf16 weights (transformers "
                  "was not installed where this ran; check_models.py verifies models.py against transformers' committed "
                  "reference logits of four fixtures first), greedy = 16 full forwards")


def log(s):
    print(f"[{time.strftime('%H:%M:%S')}] {s}", flush=True)


def have_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


def candidates(held, P):
    """Held-out prompt windows: (start, path, kind), prose documents first, each window inside one document and
    starting 16 tokens into it."""
    ids, starts, kinds, paths = held["ids"], held["starts"].tolist(), held["kinds"], held["paths"]
    ends = starts[1:] + [ids.numel()]
    order = {"man": 0, "doc": 0, "info": 0, "code": 1, "chat": 2}
    out = []
    for s, e, k, p in zip(starts, ends, kinds, paths):
        if e - s >= 16 + P + 1:
            out.append((order.get(k, 3), s + 16, p, k))
    out.sort(key=lambda t: (t[0], t[1]))
    return [(s, p, k) for _, s, p, k in out]


# ------------------------------------------------------------------------------------------------ main models


def main_model_module(family, d, c):
    """models.py's module with the stored weights, f32."""
    t = check_models.read_dir_tensors(d)
    model = M.DeepseekV3(c) if family == "ds" else M.Qwen3Moe(c)
    check_models.load_into(model, t)
    model.eval()
    return model


def twin_without_mtp(d, c, tmp):
    """A copy of a DeepSeek-V3 checkpoint without the MTP layer (transformers does not load it)."""
    out = tempfile.mkdtemp(dir=tmp)
    t = {}
    for k, (_, _, v) in k3.read_safetensors(os.path.join(d, "model.safetensors")).items():
        if not k.startswith(f"model.layers.{c['num_hidden_layers']}."):
            t[k] = v
    k3.save_safetensors(t, os.path.join(out, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_nextn_predict_layers"] = 0
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copy(os.path.join(d, "generation_config.json"), out)
    return out


def run_mine(model, family, prompt):
    """The same outputs as mrf.run_reference, from models.py's module (smoke runs without transformers, and the
    cross-check)."""
    routers = [m for m in model.modules() if isinstance(m, (M.SigmoidRouter, M.QwenMoe))]
    for r in routers:
        r.margins = []
    with torch.no_grad():
        res = greedy_run(lambda ids: model(torch.tensor([ids]))[0].float(), prompt)
    em = [m[0] for r in routers for m in r.margins]
    gm = [m[1] for r in routers for m in r.margins if m[1] is not None]
    for r in routers:
        r.margins = None
    return dict(res, route_margin=min(em) if em else None, group_margin=min(gm) if gm else None,
                n_routers=len(routers))


def run_k3(ref_model, prompt):
    rec = k3.Recorder()
    with torch.no_grad():
        res = greedy_run(lambda ids: ref_model.forward(ids, rec=rec), prompt)
    return dict(res, route_margin=min(rec.route_margins) if rec.route_margins else None, group_margin=None,
                n_routers=len(rec.routed_sel), attnres_max_prob=max(rec.attnres_maxp))


def greedy_run(logits_of, prompt):
    """As mrf.run_reference: GREEDY full forwards (no cache) with argmax, then one forward over prompt +
    greedy[:-1] whose rows are the reference logits.  logits_of(ids) -> [len(ids), vocab]."""
    ids, gaps = list(prompt), []
    for _ in range(GREEDY):
        top = torch.topk(logits_of(ids)[-1], 2)
        gaps.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
    full = logits_of(ids[:-1])
    rows = full[len(prompt) - 1:]
    greedy = ids[len(prompt):]
    return dict(greedy=greedy, logits=full, step_gaps=gaps, full_gaps=mrf.topk_gap(rows, 1).tolist(),
                argmax_ok=rows.argmax(-1).tolist() == greedy)


def reasons(res, min_route_margin=None):
    min_route_margin = mrf.MIN_ROUTE_MARGIN if min_route_margin is None else min_route_margin
    r = []
    min_gap = min(min(res["step_gaps"]), min(res["full_gaps"]))
    if min_gap < mrf.MIN_GREEDY_GAP:
        r.append(f"greedy gap {min_gap:.3g}")
    if len(set(res["greedy"])) < mrf.MIN_DISTINCT_GREEDY:
        r.append(f"only {len(set(res['greedy']))} distinct greedy tokens")
    if not res["argmax_ok"]:
        r.append("final-pass argmax != greedy")
    if res["n_routers"] and (res["route_margin"] is None or res["route_margin"] < min_route_margin):
        r.append(f"route margin {res['route_margin']}")
    if res["group_margin"] is not None and res["group_margin"] < min_route_margin:
        r.append(f"group margin {res['group_margin']:.3g}")
    if STOP_IDS & set(res["greedy"]):
        r.append("an end-of-text token among the greedy tokens")
    return r


# ------------------------------------------------------------------------------------------------ MTP


def mtp_reference(mine, hidden, seq, n_rows):
    """MtpLayer rows 0..n_rows-1 in f32: token s[i+1], hidden h_i -> logits of s[i+2] (shared head)."""
    with torch.no_grad():
        T = n_rows
        cos, sin = M.rope_cos_sin(torch.arange(T), mine.c["qk_rope_head_dim"], mine.theta, torch.float32)
        emb = mine.embed_tokens(torch.tensor([seq[1:T + 1]]))
        m = mine.mtp(emb, hidden[:, :T], cos, sin)
        return mine.lm_head(m)[0].float()


def expert_layouts(key):
    """Candidate ways transformers may hold per-expert weights under `key` (fused or not), each a function of
    {(e, 'gate'|'up'|'down'): [out, in] tensor} and E."""
    def g(t, E, w):
        return [t[(e, w)] for e in range(E)]
    if key.endswith("gate_up_proj"):
        return [lambda t, E: torch.stack([torch.cat([a, b], 0) for a, b in zip(g(t, E, "gate"), g(t, E, "up"))]),
                lambda t, E: torch.stack([torch.cat([a, b], 0) for a, b in zip(g(t, E, "gate"), g(t, E, "up"))])
                .transpose(1, 2),
                lambda t, E: torch.stack([torch.stack([a, b], 1).reshape(-1, a.shape[1])
                                          for a, b in zip(g(t, E, "gate"), g(t, E, "up"))]),
                lambda t, E: torch.stack([torch.stack([a, b], 1).reshape(-1, a.shape[1])
                                          for a, b in zip(g(t, E, "gate"), g(t, E, "up"))]).transpose(1, 2)]
    for w in ("gate", "up", "down"):
        if key.endswith(f"experts.{w}_proj"):
            return [lambda t, E, w=w: torch.stack(g(t, E, w)),
                    lambda t, E, w=w: torch.stack(g(t, E, w)).transpose(1, 2)]
    return []


def per_expert(tensors, E):
    out = {}
    for e in range(E):
        for w in ("gate", "up", "down"):
            out[(e, w)] = tensors[f"mlp.experts.{e}.{w}_proj.weight"]
    return out


def hf_layer_state(layer, main_layer, file_main, file_mtp, E):
    """A state dict for transformers' decoder layer `layer` from the MTP block's stored tensors, in whatever layout
    the loaded main model uses: each key the file lacks (fused experts) is built the way that reproduces the main
    model's own loaded tensor from its stored per-expert tensors."""
    sd, main_sd = {}, main_layer.state_dict()
    pm, pt = per_expert(file_main, E), per_expert(file_mtp, E)
    for key in layer.state_dict():
        if key in file_mtp:
            sd[key] = file_mtp[key]
            continue
        for fn in expert_layouts(key):
            cand = fn(pm, E)
            if key in main_sd and cand.shape == main_sd[key].shape and torch.equal(cand.float(), main_sd[key].float()):
                sd[key] = fn(pt, E)
                break
        else:
            raise KeyError(f"no stored tensor or known expert layout gives {key}")
    return sd


def mtp_transformers_check(hf_model, d, c, hidden, seq, n_rows, mine_logits):
    """Runs the MTP block through transformers' own DeepseekV3DecoderLayer (enorm/hnorm/eh_proj/shared head are
    three norms and two matmuls, done here); returns max |diff| against mine_logits, or the failure as text."""
    try:
        L, E = c["num_hidden_layers"], c["n_routed_experts"]
        k0 = c["first_k_dense_replace"]
        stored = {k: v.float() for k, (_, _, v) in k3.read_safetensors(os.path.join(d, "model.safetensors")).items()}
        p, pm = f"model.layers.{L}.", f"model.layers.{k0}."
        file_mtp = {k[len(p):]: v for k, v in stored.items() if k.startswith(p)}
        file_main = {k[len(pm):]: v for k, v in stored.items() if k.startswith(pm)}
        layer = type(hf_model.model.layers[k0])(hf_model.config, layer_idx=L).float().eval()
        layer.load_state_dict(hf_layer_state(layer, hf_model.model.layers[k0], file_main, file_mtp, E), strict=True)
        eps = c["rms_norm_eps"]

        def rms(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

        with torch.no_grad():
            T = n_rows
            emb = file_mtp["embed_tokens.weight"][torch.tensor(seq[1:T + 1])][None]
            x = torch.cat([rms(emb, file_mtp["enorm.weight"]), rms(hidden[:, :T], file_mtp["hnorm.weight"])], -1)
            x = x @ file_mtp["eh_proj.weight"].t()
            pos = torch.arange(T)[None]
            pe = hf_model.model.rotary_emb(x, pos)
            mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
            out = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=pe)
            out = out[0] if isinstance(out, tuple) else out
            logits = rms(out, file_mtp["shared_head.norm.weight"]) @ file_mtp["shared_head.head.weight"].t()
        return float((logits[0] - mine_logits).abs().max())
    except Exception as e:  # noqa: BLE001
        return f"failed: {type(e).__name__}: {str(e)[:300]}"


# ------------------------------------------------------------------------------------------------ per model


def make_one(name, out, smoke, tmp, reference="auto", min_route_margin=None, max_tries=MAX_TRIES):
    d = os.path.join(out, "models", name)
    with open(os.path.join(d, "train_result.json")) as f:
        tr = json.load(f)
    family, fixture = tr["family"], tr["fixture"]
    dst = os.path.join(out, "fixtures", fixture)
    if os.path.exists(os.path.join(dst, "reference.json")):
        log(f"{fixture}: done already")
        return json.load(open(os.path.join(dst, "reference.json")))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    held = torch.load(os.path.join(out, "data", "heldout.pt"))
    enc = tok.Encoder(os.path.join(out, "tokenizer"))
    use_tf = family != "k3" and have_transformers() and reference != "models"
    if family != "k3" and not use_tf and not smoke and reference == "transformers":
        raise SystemExit("transformers is needed for --reference transformers (or --reference models, or --smoke)")
    by_models = family != "k3" and not use_tf and not smoke
    c = dict(tr["config"])
    cross = {}
    hf_model = None
    if family == "k3":
        stored, _ = k3.read_checkpoint(d)
        tc = cfg["text_config"]
        ref_model = k3.K3Reference(k3.reference_tensors(stored), tc)
        mine = M.KimiK3(tc)
        with torch.no_grad():
            for k_, v in mine.hf_tensors().items():
                v.copy_(stored[k3.PREFIX + k_].float())
        mine.eval()
    else:
        mine = main_model_module(family, d, c)
        if use_tf:
            ref_dir = twin_without_mtp(d, c, tmp) if family == "ds" else d
            hf_model = mrf.load_ref_model(ref_dir, family)
    tried, chosen, first = [], None, None
    for start, path, kind in candidates(held, PROMPT_LEN)[:2 if smoke else max_tries]:
        prompt = held["ids"][start:start + PROMPT_LEN].tolist()
        if family == "k3":
            res = run_k3(ref_model, prompt)
        elif use_tf:
            res = mrf.run_reference(hf_model, family, prompt)
        else:
            res = run_mine(mine, family, prompt)
        why = reasons(res, min_route_margin)
        tried.append({"source": path, "start": start, "rejected": why})
        log(f"{fixture}: prompt from {path} @{start}: " + ("; ".join(why) if why else "accepted"))
        if not why:
            chosen = (prompt, res, path, kind, start)
            break
        first = first or (prompt, res, path, kind, start)
    if chosen is None and smoke and first:
        log(f"{fixture}: SMOKE: keeping the first prompt although it breaks the acceptance rules")
        chosen = first
    if chosen is None:
        raise RuntimeError(f"{fixture}: no acceptable held-out prompt in {len(tried)} tries")
    prompt, res, path, kind, start = chosen
    P = len(prompt)
    n_rows = P + GREEDY - 1
    seq = prompt + res["greedy"]
    logits = res["logits"].float().contiguous()
    assert logits.shape == (n_rows, cfg.get("vocab_size") or cfg["text_config"]["vocab_size"])
    # cross-check: models.py's training module on the same weights
    with torch.no_grad():
        mine_logits = mine(torch.tensor([seq[:-1]]))[0].float()
    cross["training_module_max_abs_logit_diff"] = float((mine_logits - logits).abs().max())
    mtp = None
    if family == "ds" and c.get("num_nextn_predict_layers"):
        with torch.no_grad():
            if use_tf:
                hidden = hf_model.model(torch.tensor([seq])).last_hidden_state.float()
            else:
                hidden, _ = mine.hidden(torch.tensor([seq]))
        mtp_logits = mtp_reference(mine, hidden, seq, n_rows)
        targets = seq[2:n_rows + 2]
        agree = sum(int(a == b) for a, b in zip(mtp_logits.argmax(-1).tolist(), targets))
        mtp = {"logits_file": "mtp_logits.f32", "n_rows": n_rows,
               "row_meaning": "row i: logits for token i+2 of prompt_ids + greedy_ids, from MTP layer "
                              f"{c['num_hidden_layers']} given the main model's final hidden state at position i "
                              "(after model.norm) and token i+1; MTP attention causal over rows 0..i, RoPE "
                              "position i",
               "argmax": mtp_logits.argmax(-1).tolist(),
               "top1_equals_next_next_token": f"{agree}/{n_rows}",
               "hidden_state_from": "transformers last_hidden_state" if use_tf else
                                    ("models.py" if by_models else "models.py (smoke)"),
               "transformers_decoder_layer_max_abs_diff":
                   mtp_transformers_check(hf_model, d, c, hidden, seq, n_rows, mtp_logits) if use_tf else None}
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    work = dst + ".tmp"
    if os.path.exists(work):
        shutil.rmtree(work)
    shutil.copytree(d, work)
    logits.numpy().astype("<f4").tofile(os.path.join(work, "reference_logits.f32"))
    if mtp is not None:
        mtp_logits.numpy().astype("<f4").tofile(os.path.join(work, "mtp_logits.f32"))
    versions = {"torch_version": torch.__version__}
    if use_tf:
        import transformers
        versions["transformers_version"] = transformers.__version__
    else:
        versions["transformers_version"] = None
    model_class = {"ds": "DeepseekV3ForCausalLM", "qwen": "Qwen3MoeForCausalLM",
                   "k3": "K3Reference (tools/make_k3_fixtures.py)"}[family]
    ref = {
        "prompt_ids": prompt, "greedy_ids": res["greedy"], "vocab_size": int(logits.shape[1]), "n_rows": n_rows,
        "logits_file": "reference_logits.f32", "script": "tools/train_fixtures/make_references.py",
        **versions,
        "notes": notes(family, fixture, use_tf, tr, by_models),
        "family": family,
        "model_class": model_class if (use_tf or family == "k3") else
                       (MODELS_CLASS[family] if by_models else "models.py (smoke)"),
        "weights": "bf16 (trained)",
        "min_greedy_gap": min(min(res["step_gaps"]), min(res["full_gaps"])),
        "min_route_margin": res["route_margin"], "min_group_margin": res["group_margin"],
        "accepted_if_route_margin_at_least": mrf.MIN_ROUTE_MARGIN if min_route_margin is None else min_route_margin,
        "n_moe_layers": res["n_routers"],
        "heldout_loss": tr["heldout"], "train_steps": tr["steps_done"], "train_tokens": tr["tokens_seen"],
        "prompt_source": {"path": path, "kind": kind, "heldout_token_offset": start},
        "prompt_text": enc.decode(prompt), "greedy_text": enc.decode(res["greedy"]),
        "prompts_tried": tried, "cross_checks": cross,
    }
    if "attnres_max_prob" in res:
        ref["attnres_max_prob"] = res["attnres_max_prob"]
    if mtp is not None:
        ref["mtp"] = mtp
    with open(os.path.join(work, "reference.json"), "w") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.rename(work, dst)
    log(f"{fixture}: written ({sum(os.path.getsize(os.path.join(dst, f)) for f in os.listdir(dst)) / 1e6:.2f} MB); "
        f"cross-checks {json.dumps(cross)}" + (f"; mtp {json.dumps({k: v for k, v in mtp.items() if k != 'argmax'})}"
                                               if mtp else ""))
    return ref


def notes(family, fixture, use_tf, tr, by_models=False):
    c = tr["config"]
    what = {
        "ds": f"DeepSeek-V3 architecture MoE trained on Debian documentation (tools/train_fixtures): MLA with q-LoRA "
              f"{c.get('q_lora_rank')}, sigmoid noaux_tc routing with e_score_correction_bias (auxiliary-loss-free "
              f"balancing), {c.get('n_routed_experts')} routed experts top-{c.get('num_experts_per_tok')}, n_group "
              f"{c.get('n_group')} topk_group {c.get('topk_group')}, {c.get('n_shared_experts')} shared, first "
              f"{c.get('first_k_dense_replace')} layer(s) dense, {c.get('num_nextn_predict_layers')} MTP layer "
              f"trained jointly (lambda {tr.get('mtp_lambda')})",
        "qwen": (f"Qwen3-MoE architecture trained on Debian documentation (tools/train_fixtures): "
                 f"{c.get('num_experts')} experts top-{c.get('num_experts_per_tok')}, mlp_only_layers "
                 f"{c.get('mlp_only_layers')}, tie_word_embeddings {c.get('tie_word_embeddings')}"
                 if len(c.get("mlp_only_layers") or []) < c.get("num_hidden_layers", 0) else
                 f"a dense draft model in a Qwen3-MoE config (every layer in mlp_only_layers, so no routed "
                 f"experts) trained on Debian documentation (tools/train_fixtures), "
                 f"tie_word_embeddings {c.get('tie_word_embeddings')}"),
        "k3": "Kimi K3 architecture trained on Debian documentation (tools/train_fixtures): KDA and gated NoPE MLA "
              "layers, AttnRes, latent MoE with SiTU",
    }[family]
    how = ("reference = transformers f32 eager on CPU on the exact stored bf16 weights, greedy = 16 full forwards"
           if use_tf else BY_MODELS_NOTE if by_models else ("reference = K3Reference f32 (recurrent KDA) on the exact stored weights, greedy = 16 "
                           "full forwards" if family == "k3" else "SMOKE: reference from models.py, not transformers"))
    return f"{what}. {how}; logits rows from one full forward over prompt + greedy[:15]; prompt = held-out text."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".train/out")
    ap.add_argument("--only", default="ds,qwen,draft,k3")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--reference", choices=["auto", "transformers", "models"], default="auto",
                    help="who computes the DeepSeek-V3 / Qwen3-MoE references: transformers (auto: when installed) "
                         "or models.py, itself checked against transformers by check_models.py")
    ap.add_argument("--min-route-margin", type=float, default=None,
                    help=f"least routing margin of an accepted prompt (default {mrf.MIN_ROUTE_MARGIN}); a briefly "
                         "trained softmax router (Qwen3-MoE) rarely keeps every one of its 144 decisions above "
                         "that; strata's router logits agree with the reference to about 1e-6")
    ap.add_argument("--max-tries", type=int, default=MAX_TRIES)
    args = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    if args.reference == "models" or (args.reference == "auto" and not have_transformers() and not args.smoke):
        if check_models.main() != 0:
            raise SystemExit("check_models.py failed: models.py is not transformers' computation here")
    tmp = tempfile.mkdtemp()
    failures, summary = [], {}
    for name in args.only.split(","):
        if not os.path.exists(os.path.join(args.out, "models", name, "train_result.json")):
            log(f"{name}: no trained model, skipped")
            continue
        try:
            ref = make_one(name, args.out, args.smoke, tmp, args.reference, args.min_route_margin, args.max_tries)
            summary[name] = {k: ref.get(k) for k in ("min_greedy_gap", "min_route_margin", "cross_checks")}
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            failures.append(f"{name}: {type(e).__name__}: {e}")
    shutil.rmtree(tmp, ignore_errors=True)
    fx = os.path.join(args.out, "fixtures")
    total = 0
    if os.path.isdir(fx):
        for f_ in sorted(os.listdir(fx)):
            p = os.path.join(fx, f_)
            if os.path.isdir(p):
                b = sum(os.path.getsize(os.path.join(p, x)) for x in os.listdir(p))
                total += b
                log(f"fixture {f_}: {b / 1e6:.2f} MB")
    log(f"fixtures together: {total / 1e6:.2f} MB (issue 18's limit: 48 MB)")
    log("failures: " + json.dumps(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
