#!/usr/bin/env python3
"""Logits of tiny fixture models at the end of a 32k-token prompt, from Hugging Face transformers.

The provenance of tests/fixtures/long_context/<fixture>/ (tests/prefill_test.cpp, LongContext.*): strata's KV
cache and attention at 32768 positions checked against transformers, one full forward of the whole prompt.
Run on the device machine (torch + transformers, no network) from the repository root:

    python3 tools/make_long_context_reference.py --out $OUT/long_context qwen_gqa ds_yarn_grouped

The prompt is ids[i] = (7919 * i + 13) mod vocab_size, i < 32768.  For each fixture, <out>/<fixture>/ gets
reference.json ({"fixture", "n_tokens", "ids": "(7919 * i + 13) % vocab", "rows": [positions],
"logits_file", "transformers_version", "torch_version", "device", "dtype"}) and logits.f32 (little-endian
float32 [len(rows)][vocab], row k = logits after position rows[k]).  The model is loaded from
tests/fixtures/models/<fixture> in float32 with eager attention on the GPU (TF32 off) or the CPU.
"""
import argparse
import json
import os

import torch
import transformers

N_TOKENS = 32768
ROWS = [4095, 16383, N_TOKENS - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixtures", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for name in a.fixtures:
        src = os.path.join("tests", "fixtures", "models", name)
        model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32,
                                                                  attn_implementation="eager").to(dev).eval()
        vocab = model.config.vocab_size
        ids = torch.tensor([[(7919 * i + 13) % vocab for i in range(N_TOKENS)]], device=dev)
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=False, logits_to_keep=0)
        logits = out.logits[0, ROWS].float().cpu().contiguous()
        dst = os.path.join(a.out, name)
        os.makedirs(dst, exist_ok=True)
        logits.numpy().astype("<f4").tofile(os.path.join(dst, "logits.f32"))
        ref = dict(fixture=name, n_tokens=N_TOKENS, ids="(7919 * i + 13) % vocab_size", rows=ROWS,
                   vocab_size=vocab, logits_file="logits.f32", script="tools/make_long_context_reference.py",
                   transformers_version=transformers.__version__, torch_version=torch.__version__, device=dev,
                   dtype="float32, eager attention, TF32 off")
        with open(os.path.join(dst, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
            f.write("\n")
        print(name, "ok", logits[:, :4].tolist(), flush=True)
        del model, out
        if dev == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
