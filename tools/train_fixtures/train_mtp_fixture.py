#!/usr/bin/env python3
"""tests/fixtures/models/ds_mtp_trained: a tiny DeepSeek-V3 with its next-token-prediction (MTP) layer, trained
jointly (loss = CE + 0.3 CE(MTP), as train.py's `ds` stage) for a few CPU minutes on the license texts every Debian
system ships (/usr/share/common-licenses, package base-files), byte-level (vocab 256, no tokenizer), so that a test
can see `--draft mtp` accepted under greedy until the device-trained trained_ds_mtp is committed.

Held out: GPL-1 (never trained on); the prompt is 24 bytes from inside it.  train_result.json records every file's
sha256, the held-out losses (main and MTP) and the prompt.  The weights are train.py's storage (bf16, router biases
f32); models.py is checked against transformers by check_models.py.

    /usr/bin/python3 tools/train_fixtures/train_mtp_fixture.py      # torch only (Debian's 1.13)

Debian's torch 1.13 on 2 busy cores does about 2 steps a second here: the wall-clock cap (CAP_S) ends the run before
STEPS, and train_result.json says how many steps ran (the committed one: 778, held-out loss 1.88 nats/byte, MTP
1.77).
"""

import hashlib
import json
import math
import os
import shutil
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_models as C  # noqa: E402
import train as T  # noqa: E402

LICENSES = "/usr/share/common-licenses"
TRAIN_FILES = ["Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-2", "GPL-3", "LGPL-2",
               "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0"]
HELD_OUT = "GPL-1"
DST = os.path.join(C.FIXTURES, "ds_mtp_trained")
CFG = dict(T.DS, vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
           num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=32, kv_lora_rank=32,
           qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2,
           n_group=4, topk_group=2, max_position_embeddings=512)
SEQ, BATCH, STEPS, LR, SEED, CAP_S = 64, 4, 1500, 3e-3, 1801, 420.0
PROMPT_AT, PROMPT_LEN = 2000, 24


def read(name):
    with open(os.path.join(LICENSES, name), "rb") as f:
        data = f.read()
    return data, hashlib.sha256(data).hexdigest()


def held_out_loss(model, ids):
    """Mean next-token and MTP (token after next) cross-entropy over non-overlapping windows."""
    model.eval()
    windows = [ids[s:s + SEQ + 1] for s in range(0, ids.numel() - SEQ - 1, SEQ)]
    with torch.no_grad():
        losses = [T.loss_fn(model, "ds", torch.stack(windows[i:i + BATCH]))[1] for i in range(0, len(windows), BATCH)]
    model.train()
    return {k: float(sum(p[k] for p in losses) / len(losses)) for k in losses[0]}


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    files = {n: read(n) for n in TRAIN_FILES + [HELD_OUT]}
    train_ids = torch.tensor(list(b"".join(files[n][0] for n in TRAIN_FILES)), dtype=torch.long)
    held = torch.tensor(list(files[HELD_OUT][0]), dtype=torch.long)
    model, c = T.build("ds", CFG, 256)
    T.M.init_for_training(model, SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(SEED)
    t0, step = time.time(), 0
    while step < STEPS and time.time() - t0 < CAP_S:
        for g in opt.param_groups:
            g["lr"] = LR * 0.5 * (1 + math.cos(math.pi * step / STEPS))
        starts = torch.randint(0, train_ids.numel() - SEQ - 1, (BATCH,), generator=gen)
        batch = torch.stack([train_ids[s:s + SEQ + 1] for s in starts.tolist()])
        loss, parts = T.loss_fn(model, "ds", batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        T.balance_biases(model, "ds")
        step += 1
        if step % 100 == 0:
            print(f"step {step}: main {float(parts['main']):.3f} mtp {float(parts['mtp']):.3f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
    seconds = time.time() - t0
    loss = held_out_loss(model, held)
    print(f"held-out {HELD_OUT}: {loss}", flush=True)

    if os.path.exists(DST):
        shutil.rmtree(DST)
    os.makedirs(DST)
    stored = T.storage_tensors(model, "ds", c)
    T.M.k3.save_safetensors(stored, os.path.join(DST, "model.safetensors"))
    cfg = T.hf_config("ds", c)
    cfg.update(bos_token_id=0, eos_token_id=0)  # byte 0 never occurs in the texts
    T.write_json(os.path.join(DST, "config.json"), cfg)
    T.write_json(os.path.join(DST, "generation_config.json"), {"bos_token_id": 0, "eos_token_id": 0})
    prompt = held[PROMPT_AT:PROMPT_AT + PROMPT_LEN].tolist()
    T.write_json(os.path.join(DST, "train_result.json"), {
        "script": "tools/train_fixtures/train_mtp_fixture.py", "torch_version": torch.__version__,
        "corpus": {n: {"path": os.path.join(LICENSES, n), "bytes": len(files[n][0]), "sha256": files[n][1]}
                   for n in files},
        "held_out": HELD_OUT, "heldout_loss": loss, "steps": step, "seconds": round(seconds, 1),
        "batch": BATCH, "seq": SEQ, "lr": LR, "seed": SEED, "mtp_lambda": T.MTP_LAMBDA,
        "prompt_ids": prompt, "prompt_text": bytes(prompt).decode("latin-1"),
    })
    print(f"wrote {DST}: {sum(os.path.getsize(os.path.join(DST, f)) for f in os.listdir(DST))} bytes, "
          f"{step} steps in {seconds:.0f} s")


if __name__ == "__main__":
    main()
