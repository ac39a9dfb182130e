#!/usr/bin/env python3
"""The arithmetic a DeepSeek-V3-family (MLA) prefill must do, next to the time the drives need.

    PYTHONPATH=/path/to/llama.cpp/gguf-py python3 bench/prefill_compute.py MODEL.gguf \
        [--prompts 512 4096] [--gflops 115] [--drive-s 1.67]

Counts the multiply-adds of a prompt of P tokens from the GGUF's own metadata (read with
llama.cpp's gguf-py): per token, every projection of every layer (MLA q/kv low-rank and
up-projections, output), the router, the dense MLPs, the shared experts and the top-k routed
experts; per pair of positions, the causal attention scores and weighted sums in the absorbed
form strata computes (against the kv_lora latent plus the rope key). The output head runs for
the last token only. Prints GFLOP (2 per multiply-add) and, with --gflops (a rate the
machine sustains, e.g. kernels_bench's batched matmul), the seconds the compute alone takes;
with --drive-s (the drive bound of bench/ttft_bench.sh), how that compares with 1.3x the bound.
Element-wise work (norms, RoPE, softmax, SiLU) is left out, so the figures are a floor.
"""
import argparse
import sys

try:
    import gguf
except ImportError:
    sys.exit("prefill_compute.py: needs llama.cpp's gguf-py on PYTHONPATH")


def metadata(path):
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    out = {}
    for name, f in r.fields.items():
        if name.startswith(arch + ".") and len(f.data) == 1:
            v = f.parts[f.data[0]]
            if len(v) == 1:
                out[name[len(arch) + 1:]] = v[0].item()
    out["arch"] = arch
    if "vocab_size" not in out and "tokenizer.ggml.tokens" in r.fields:
        out["vocab_size"] = len(r.fields["tokenizer.ggml.tokens"].data)
    return out


def macs(m, prompt):
    if m["arch"] != "deepseek2":
        sys.exit(f"prefill_compute.py: {m['arch']}: only deepseek2 (MLA) models are counted")
    H = m["embedding_length"]
    L = m["block_count"]
    dense = m.get("leading_dense_block_count", 0)
    heads = m["attention.head_count"]
    q_lora = m.get("attention.q_lora_rank", 0)
    kv_lora = m["attention.kv_lora_rank"]
    # Per-head dims: llama.cpp's converter stores them as key_length_mla / value_length_mla and
    # the latent sizes as key_length / value_length; legacy files have only the per-head ones.
    qk = m.get("attention.key_length_mla", m["attention.key_length"])  # nope + rope
    v = m.get("attention.value_length_mla", m["attention.value_length"])
    rope = m["rope.dimension_count"]
    nope = qk - rope
    E, k = m["expert_count"], m["expert_used_count"]
    I_moe, I_dense = m["expert_feed_forward_length"], m["feed_forward_length"]
    shared = m.get("expert_shared_count", 0)

    q = H * q_lora + q_lora * heads * qk if q_lora else H * heads * qk
    kv = H * (kv_lora + rope) + kv_lora * heads * (nope + v)
    o = heads * v * H
    per_token = L * (q + kv + o)
    per_token += dense * 3 * H * I_dense
    per_token += (L - dense) * (H * E + k * 3 * H * I_moe + shared * 3 * H * I_moe)
    # Causal attention: position p attends to p + 1 keys. Absorbed MLA, per head and pair: a score
    # against the latent and the rope key (kv_lora + rope), a sum over the latent (kv_lora). The
    # absorption (q_nope into the latent, the latent out to v) is the per-token kv term above.
    pairs = prompt * (prompt + 1) // 2
    attention = L * heads * (2 * kv_lora + rope) * pairs
    head = H * m["vocab_size"]
    return per_token * prompt, attention, head


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--prompts", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--gflops", type=float, help="sustained GFLOP/s of this machine")
    ap.add_argument("--drive-s", type=float, help="the drive bound in seconds")
    a = ap.parse_args()
    m = metadata(a.model)
    print(f"{a.model}: {m['block_count']} layers, hidden {m['embedding_length']}, "
          f"{m['expert_count']} experts top-{m['expert_used_count']} of width {m['expert_feed_forward_length']}")
    for p in a.prompts:
        tokens, attention, head = macs(m, p)
        gflop = 2 * (tokens + attention + head) / 1e9
        line = (f"prompt {p}: {gflop:.0f} GFLOP ({2 * tokens / 1e9:.0f} per-token layers, "
                f"{2 * attention / 1e9:.0f} attention)")
        if a.gflops:
            s = gflop / a.gflops
            line += f"; {s:.2f} s at {a.gflops:g} GFLOP/s"
            if a.drive_s:
                line += f" = {s / a.drive_s:.2f}x the drive bound (goal <= 1.3x)"
        print(line)


if __name__ == "__main__":
    main()
