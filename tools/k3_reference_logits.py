#!/usr/bin/env python3
"""Reference logits of any Kimi K3 checkpoint directory, from the pure-PyTorch K3 reference.

The reference is tools/make_k3_fixtures.py's K3Reference (a transcription of Moonshot's published modeling code;
its docstring cites the functions each piece follows), run in f32 on exactly the stored weights (MXFP4 experts
exactly dequantized).  This script points it at a checkpoint someone else wrote -- `strata synth --preset kimi-k3`
-- so that what synth writes is checked to mean, to the reference, what strata computes from it:

    python3 tools/k3_reference_logits.py DIR --prompt-ids 1,2,3 --out OUT_DIR

writes OUT_DIR/reference.json ({"prompt_ids", "greedy_ids" (16 greedy tokens from 16 full forwards),
"vocab_size", "n_rows", "logits_file", "min_greedy_gap", "min_route_margin" (the smallest gap between the
k-th and (k+1)-th expert score, any MoE layer, position and pass), "script", "torch_version"}) and
OUT_DIR/reference_logits.f32 (little-endian float32 [n_rows][vocab]: row i = logits after position i of
prompt_ids + greedy_ids[:15], one full forward), the conventions of tests/fixtures/models/*/.
Needs torch (the device machine has it); no network.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_k3_fixtures as k3  # noqa: E402


def read_dir(d):
    """Every tensor of the checkpoint in `d` (one model.safetensors, or shards through the index)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        return k3.read_checkpoint(d)[0]
    return {k: t for k, (_, _, t) in k3.read_safetensors(os.path.join(d, "model.safetensors")).items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        tc = json.load(f)["text_config"]
    model = k3.K3Reference(k3.reference_tensors(read_dir(a.model)), tc)
    prompt = [int(x) for x in a.prompt_ids.split(",")]
    ids, gaps, rec = list(prompt), [], k3.Recorder()
    with torch.no_grad():
        for _ in range(k3.GREEDY_STEPS):
            top = torch.topk(model.forward(ids, rec=rec)[-1], 2)
            gaps.append(float(top.values[0] - top.values[1]))
            ids.append(int(top.indices[0]))
        full = model.forward(ids[:-1], rec=rec).float()
    os.makedirs(a.out, exist_ok=True)
    full.contiguous().numpy().astype("<f4").tofile(os.path.join(a.out, "reference_logits.f32"))
    ref = dict(prompt_ids=prompt, greedy_ids=ids[len(prompt):], vocab_size=tc["vocab_size"], n_rows=full.shape[0],
               logits_file="reference_logits.f32", min_greedy_gap=min(gaps),
               min_route_margin=min(rec.route_margins),
               script="tools/k3_reference_logits.py (K3Reference of tools/make_k3_fixtures.py)",
               torch_version=torch.__version__)
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(json.dumps({k: v for k, v in ref.items() if k != "prompt_ids"}))


if __name__ == "__main__":
    main()
