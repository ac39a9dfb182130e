#!/usr/bin/env python3
"""Make tests/fixtures/quants/quantize_*: f32 rows and the Q8_0 / MXFP4 blocks gguf-py makes of them.

Provenance of the quantizer fixtures (`strata pack --trunk int8` on GGUF and `--experts q8|mxfp4`
write these formats). gguf-py's quantize_blocks reproduce ggml-quants.c's reference quantizers
(quantize_row_q8_0_ref, quantize_row_mxfp4_ref) bit for bit; it is not part of this repository:

    PYTHONPATH=/path/to/llama.cpp/gguf-py /usr/bin/python3 tools/make_quantize_fixtures.py [--out DIR]

Writes quantize_<TYPE>.f32 (little-endian float32 input, rows of 256) and quantize_<TYPE>.blocks
(gguf.quants.quantize of it). Values are Gaussian with a per-row scale spread over 2^-12 .. 2^4, plus
a row of zeros and a row with one large outlier. tests/quantize_test.cpp requires identical bytes.
"""
import argparse
import os
import sys

import numpy as np

try:
    import gguf
    from gguf.constants import GGMLQuantizationType
except ImportError:
    sys.exit("make_quantize_fixtures.py: needs llama.cpp's gguf-py on PYTHONPATH")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "quants"))
    ap.add_argument("--seed", type=int, default=20261129)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    rows = []
    for _ in range(30):
        rows.append(rng.standard_normal(256).astype(np.float32) * np.float32(2.0 ** rng.uniform(-12, 4)))
    rows.append(np.zeros(256, dtype=np.float32))
    spike = (rng.standard_normal(256) * 0.01).astype(np.float32)
    spike[17] = 50.0
    rows.append(spike)
    x = np.stack(rows).astype(np.float32)
    os.makedirs(a.out, exist_ok=True)
    for name, qt in (("Q8_0", GGMLQuantizationType.Q8_0), ("MXFP4", GGMLQuantizationType.MXFP4)):
        q = gguf.quants.quantize(x, qt)
        x.astype("<f4").tofile(os.path.join(a.out, f"quantize_{name}.f32"))
        np.ascontiguousarray(q).tofile(os.path.join(a.out, f"quantize_{name}.blocks"))
        print(name, x.shape, q.shape)


if __name__ == "__main__":
    main()
