#!/usr/bin/env python3
"""Make tests/fixtures/quants/: random GGUF quant blocks and their values as gguf-py dequantizes them.

This script is the provenance of tests/fixtures/quants/. It needs numpy and llama.cpp's gguf-py (an
independent, numpy implementation of ggml's dequantize_row_* functions), which is not part of this
repository:

    PYTHONPATH=/path/to/llama.cpp/gguf-py /usr/bin/python3 tools/make_quant_fixtures.py [--out DIR]

For each type it writes, into DIR (default tests/fixtures/quants):
  <TYPE>.blocks     the raw blocks, as a GGUF tensor stores them (ggml-common.h layouts)
  <TYPE>.f32        gguf.quants.dequantize of those bytes: little-endian float32, one per weight
  manifest.json     per type: blocks, values, block_bytes; the gguf-py version; the seed

The blocks are uniformly random bytes except for their f16 scales (d, and m / dmin where the type has
one), which are replaced by finite values of random sign spread over 2^-20 .. 2^3 (f16 subnormals
included), so no value is NaN or Inf; d is +0 in block 0 and -0 in block 1 of the 32-value types and
-0 in the last super-block of the K types.
tests/kernels_formats_test.cpp (QuantFixtures) dequantizes the blocks with every ISA of the kernels and
requires the same bits. The output is deterministic for a given seed and gguf-py version.
"""
import argparse
import json
import os
import sys

import numpy as np

try:
    import gguf
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
except ImportError:
    sys.exit("make_quant_fixtures.py: needs llama.cpp's gguf-py on PYTHONPATH")

# Byte offsets of each type's f16 scale fields inside a block (ggml-common.h).
F16_FIELDS = {
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q8_0": [0],
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
}

VALUES_PER_TYPE = 1024  # 32 blocks of 32 or 4 super-blocks of 256


def random_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    mag = rng.uniform(1.0, 2.0, n) * np.exp2(rng.integers(-20, 4, n).astype(np.float64))
    sign = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    return (sign * mag).astype(np.float16)


def make_blocks(rng: np.random.Generator, name: str) -> np.ndarray:
    block_elems, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    n_blocks = VALUES_PER_TYPE // block_elems
    blocks = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        blocks[:, off:off + 2] = random_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    # Zero scales (ggml writes d = 0 for an all-zero block): +0 and -0 for the
    # 32-value types, -0 in the last of the four super-blocks for the K types.
    d = F16_FIELDS[name][0]
    zeros = {0: 0.0, 1: -0.0} if block_elems == 32 else {n_blocks - 1: -0.0}
    for b, z in zeros.items():
        blocks[b, d:d + 2] = np.array([z], dtype=np.float16).view(np.uint8)
    return blocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "quants"))
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    manifest = {
        "script": "tools/make_quant_fixtures.py",
        "seed": args.seed,
        "reference": "gguf-py gguf.quants.dequantize",
        "gguf_py_version": getattr(gguf, "__version__", None) or _gguf_py_version(),
        "numpy_version": np.__version__,
        "types": {},
    }
    for name in F16_FIELDS:
        blocks = make_blocks(rng, name)
        values = gguf.quants.dequantize(blocks.reshape(-1), GGMLQuantizationType[name]).astype(np.float32)
        values = values.reshape(-1)
        if values.size != VALUES_PER_TYPE or not np.all(np.isfinite(values)):
            sys.exit(f"{name}: gguf-py gave {values.size} values, finite: {np.all(np.isfinite(values))}")
        blocks.tofile(os.path.join(args.out, f"{name}.blocks"))
        values.astype("<f4").tofile(os.path.join(args.out, f"{name}.f32"))
        manifest["types"][name] = {
            "blocks": int(blocks.shape[0]),
            "block_bytes": int(blocks.shape[1]),
            "values": int(values.size),
        }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def _gguf_py_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:  # gguf-py used from a source tree, not installed
        pyproject = os.path.join(os.path.dirname(gguf.__file__), "..", "pyproject.toml")
        try:
            for line in open(pyproject):
                if line.startswith("version"):
                    return line.split("=")[1].strip().strip('"')
        except OSError:
            pass
    return None


if __name__ == "__main__":
    main()
