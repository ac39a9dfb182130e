#!/usr/bin/env python3
"""Copy a GGUF, converting every non-F32 tensor to F32 exactly (gguf-py's dequantize).

    PYTHONPATH=LLAMA_DIR/gguf-py /usr/bin/python3 bench/llama_cpp/dequantize_gguf.py IN.gguf OUT.gguf

All metadata (architecture, hyper-parameters, tokenizer) is copied verbatim, except
general.file_type, which is set to ALL_F32. The tensors keep their names and shapes;
only their storage type becomes F32, holding exactly the values the quantized blocks
decode to (BF16/F16 widen exactly; Q8_0, Q4_K, Q6_K, MXFP4, ... are d*q (+m) in f32).
llama.cpp then multiplies f32 weights by f32 activations, so a run on OUT shows what
the stored weights compute without llama.cpp's activation rounding (it converts the
activations to bf16 / Q8_0 / Q8_K before matmuls with bf16 / quantized weights).
Fails (exit 1) on a type gguf-py cannot dequantize.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    reader = gguf.GGUFReader(args.input, "r")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(args.output, arch=arch, endianess=reader.endianess)
    align = reader.get_field(gguf.Keys.General.ALIGNMENT)
    if align is not None:
        writer.data_alignment = int(align.contents())

    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            val = int(gguf.LlamaFileType.ALL_F32)
        writer.add_key_value(field.name, val, vtype, sub_type=sub)

    counts: dict[str, int] = {}
    tensors = []
    for t in reader.tensors:
        qt = T(t.tensor_type)
        if qt == T.F32:
            arr = np.asarray(t.data, dtype=np.float32)
        else:
            try:
                arr = gguf.quants.dequantize(t.data, qt)
            except NotImplementedError as e:
                print(f"dequantize_gguf: {t.name}: {e}", file=sys.stderr)
                return 1
            arr = np.ascontiguousarray(arr, dtype=np.float32)
        want = tuple(int(x) for x in reversed(t.shape.tolist()))
        if arr.size != int(np.prod(want)):
            print(f"dequantize_gguf: {t.name}: {arr.size} values, shape {want}", file=sys.stderr)
            return 1
        arr = arr.reshape(want)
        counts[qt.name] = counts.get(qt.name, 0) + 1
        if args.verbose:
            print(f"{t.name:40s} {qt.name:6s} -> F32 {want}")
        tensors.append((t.name, arr))

    for name, arr in tensors:
        writer.add_tensor(name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"dequantize_gguf: {args.input} -> {args.output}: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + " tensors -> F32")
    return 0


if __name__ == "__main__":
    sys.exit(main())
