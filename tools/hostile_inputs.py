#!/usr/bin/env python3
"""Hostile inputs against the strata binary: mutants of every input kind it reads.

Each mutant is a copy of a small valid model (made here with `strata synth` and
`strata pack`) with one thing broken the way an attacker or a damaged download
would break it. strata runs on it with a time and memory limit, and the result
is classed:

  refused   exit 1 with an error (the expected result); "one line" and
            "names the file" are counted separately
  same      exit 0 with exactly the unmutated model's output (the mutation
            touched something strata does not use, e.g. an unread config key)
  changed   exit 0 with other, finite output: reported for review (a value
            still in range, e.g. a flipped bf16 weight bit in an HF file,
            which has no checksum)
  FAILED    a signal, a timeout, exit 0 with non-finite logits, more than
            the memory limit, or any exit code other than 0/1

Usage:
  tools/hostile_inputs.py --strata build/strata [--work DIR] [--classes a,b]
                          [--seed N] [--flips N] [--json FILE] [--keep-going]
Exit status: 0 when nothing FAILED.
The classes: config, tokenizer, tiktoken, safetensors, gguf, manifest, pack.
"""
import argparse
import base64
import json
import math
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT_S = 60
MEMORY_LIMIT = 8 << 30  # address space of one strata run
BIG_INTS = [0, -1, 2**31, 2**32 + 5, 2**33, 2**63 - 1, 2**64 + 5]
ODD_VALUES = BIG_INTS + [-1e30, 1e30, 1e308, "x", None, True, [], {}]


def deep(depth, kind="list"):
    """JSON text nested `depth` levels (built as text: json.dumps would recurse)."""
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "0" + "}" * depth


class Runner:
    def __init__(self, strata, work):
        self.strata = str(Path(strata).resolve())
        self.work = work
        self.results = []

    def run(self, args, timeout=TIMEOUT_S):
        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        start = time.monotonic()
        p = subprocess.Popen([self.strata] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=limit, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            timed_out = True
        return {"rc": p.returncode, "out": essence(out.decode("utf-8", "replace")), "err": err.decode("utf-8", "replace"),
                "seconds": time.monotonic() - start, "timed_out": timed_out}

    def judge(self, cls, name, args, baseline, names):
        r = self.run(args)
        lines = [l for l in r["err"].splitlines() if l.strip()]
        if r["timed_out"]:
            verdict = "FAILED"
            why = "timeout"
        elif r["rc"] is not None and r["rc"] < 0:
            verdict, why = "FAILED", "signal %d" % -r["rc"]
        elif r["rc"] == 1:
            verdict, why = "refused", lines[-1] if lines else "(no message)"
            if "bad_alloc" in r["err"] or "std::" in r["err"]:
                verdict, why = "FAILED", "internal exception text: " + why
        elif r["rc"] == 0:
            if not finite_output(r["out"]):
                verdict, why = "FAILED", "non-finite logits with exit 0"
            elif r["out"] == baseline:
                verdict, why = "same", ""
            else:
                verdict, why = "changed", r["out"][:120]
        else:
            verdict, why = "FAILED", "exit %s: %s" % (r["rc"], lines[-1] if lines else "")
        res = {"class": cls, "mutant": name, "verdict": verdict, "why": why, "seconds": round(r["seconds"], 2),
               "one_line": len(lines) == 1, "names_file": any(n in r["err"] for n in names)}
        self.results.append(res)
        mark = {"refused": ".", "same": "=", "changed": "~", "FAILED": "X"}[verdict]
        print(mark, end="", flush=True)
        if verdict == "FAILED":
            print("\n  FAILED %s/%s: %s" % (cls, name, why), flush=True)
        return res


def essence(text):
    """What a run decided (tokens, text, logits), without its timings."""
    try:
        j = json.loads(text)
    except ValueError:
        return text
    if isinstance(j, dict) and "stats" in j:
        j = {k: j[k] for k in ("tokens", "text", "logits") if k in j}
    return json.dumps(j)


def finite_output(text):
    try:
        j = json.loads(text)
    except ValueError:
        return "nan" not in text.lower() and "inf" not in text.lower()
    stack = [j]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return True


GEN = ["--prompt", "Hello world", "-n", "3", "--temperature", "0", "--json", "--logits", "--threads", "2"]


def fresh(src, dst):
    if dst.exists():
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy2(src, dst)
    return dst


# ---------------------------------------------------------------- the models

def make_models(runner, work):
    models = {}
    presets = {"qwen": "qwen3-30b-a3b", "deepseek": "deepseek-v3", "gptoss": "gpt-oss-20b", "k3": "kimi-k3"}
    for key, preset in presets.items():
        out = work / ("base_" + key)
        if not (out / "config.json").exists():
            r = runner.run(["synth", "--preset", preset, "--size", "0.01", "--threads", "2", "--force", "--seed", "7",
                            "--out", str(out)], timeout=600)
            if r["rc"] != 0:
                sys.exit("synth %s failed: %s" % (preset, r["err"]))
        models[key] = out
    gguf = work / "base_qwen.gguf"
    if not gguf.exists():
        r = runner.run(["synth", "--preset", "qwen3-30b-a3b", "--size", "0.01", "--threads", "2", "--force", "--seed",
                        "7", "--format", "gguf", "--out", str(gguf)], timeout=600)
        if r["rc"] != 0:
            sys.exit("synth gguf failed: " + r["err"])
    models["gguf"] = gguf
    pack = work / "base_pack"
    if not (pack / "manifest.json").exists():
        r = runner.run(["pack", str(models["qwen"]), "--out", str(pack), "--skip-fidelity"], timeout=600)
        if r["rc"] != 0:
            sys.exit("pack failed: " + r["err"])
    models["pack"] = pack
    return models


def baseline(runner, model):
    r = runner.run(["generate", str(model)] + GEN, timeout=600)
    if r["rc"] != 0:
        sys.exit("baseline on %s failed: %s" % (model, r["err"]))
    return r["out"]


# ---------------------------------------------------------------- mutants

def leaves(j, path=()):
    """(path, value) of every scalar leaf, iteratively."""
    out, stack = [], [(path, j)]
    while stack:
        p, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((p + (k,), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((p + (i,), x) for i, x in enumerate(v))
        else:
            out.append((p, v))
    return sorted(out, key=lambda pv: [str(x) for x in pv[0]])


def set_path(j, path, value):
    for k in path[:-1]:
        j = j[k]
    if value is DELETE:
        del j[path[-1]]
    else:
        j[path[-1]] = value


DELETE = object()


def config_mutants(cfg, rng, per_field):
    for path, v in leaves(cfg):
        if isinstance(v, str) and path[-1] not in ("model_type", "hidden_act", "torch_dtype", "scoring_func",
                                                  "topk_method", "quant_method", "format", "type"):
            continue
        values = [x for x in ODD_VALUES if x != v]
        for value in rng.sample(values, min(per_field, len(values))) + [DELETE]:
            m = json.loads(json.dumps(cfg))
            set_path(m, path, value)
            label = "/".join(map(str, path)) + "=" + ("<deleted>" if value is DELETE else json.dumps(value))
            yield label, json.dumps(m, allow_nan=True)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            for special in ("NaN", "Infinity", "-Infinity"):
                m = json.loads(json.dumps(cfg))
                set_path(m, path, "@@SPECIAL@@")
                yield "/".join(map(str, path)) + "=" + special, json.dumps(m).replace('"@@SPECIAL@@"', special)
    yield "deep nesting", deep(200000)
    yield "truncated", json.dumps(cfg)[: len(json.dumps(cfg)) // 2]
    yield "empty", ""
    yield "not an object", "[]"


def run_config(runner, models, bases, rng, per_field):
    for key in ("qwen", "deepseek", "gptoss", "k3"):
        src = models[key]
        cfg = json.loads((src / "config.json").read_text())
        for i, (label, text) in enumerate(config_mutants(cfg, rng, per_field)):
            d = fresh(src, runner.work / "m_config")
            (d / "config.json").write_text(text)
            runner.judge("config", key + ":" + label, ["generate", str(d)] + GEN, bases[key], ["config.json"])


def run_tokenizer(runner, models, bases, rng, flips):
    src = models["qwen"]
    tj = json.loads((src / "tokenizer.json").read_text())
    mutants = []
    for part in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        for depth in (1000, 50000):
            inner = {"normalizers": "NFC", "pretokenizers": "ByteLevel", "decoders": "ByteLevel",
                     "processors": "ByteLevel"}
            field = {"normalizer": "normalizers", "pre_tokenizer": "pretokenizers", "decoder": "decoders",
                     "post_processor": "processors"}[part]
            text = ('{"type":"Sequence","%s":[' % field) * depth + '{"type":"%s"}' % inner[field] + "]}" * depth
            m = json.dumps(dict(tj, **{part: "@@X@@"})).replace('"@@X@@"', text)
            mutants.append(("%s Sequence depth %d" % (part, depth), m))
    for bad in (2**28, 2**32 + 5, -1, 2**63 - 1, 2**64 + 5, "x", None):
        m = json.loads(json.dumps(tj))
        if m.get("added_tokens"):
            m["added_tokens"][0]["id"] = bad
            mutants.append(("added_tokens[0].id=%s" % bad, json.dumps(m)))
        m = json.loads(json.dumps(tj))
        vocab = m["model"]["vocab"]
        k = sorted(vocab)[len(vocab) // 2]
        vocab[k] = bad
        mutants.append(("model.vocab[%r]=%s" % (k, bad), json.dumps(m)))
    m = json.loads(json.dumps(tj))
    if m["model"].get("merges"):
        m["model"]["merges"][0] = "NOT_A_TOKEN ALSO_NOT" if isinstance(m["model"]["merges"][0], str) else ["NOT_A", "TOKEN"]
        mutants.append(("merge of unknown tokens", json.dumps(m)))
    mutants.append(("model.vocab deep", json.dumps(dict(tj, model=dict(tj["model"], vocab="@@X@@"))).replace(
        '"@@X@@"', deep(300000, "obj"))))
    mutants.append(("model type unknown", json.dumps(dict(tj, model=dict(tj["model"], type="Nope")))))
    raw = (src / "tokenizer.json").read_bytes()
    for i in range(flips):
        cut = rng.randrange(1, len(raw))
        mutants.append(("truncated at %d" % cut, raw[:cut]))
    for label, text in mutants:
        d = fresh(src, runner.work / "m_tok")
        (d / "tokenizer.json").write_bytes(text if isinstance(text, bytes) else text.encode())
        runner.judge("tokenizer", label, ["generate", str(d)] + GEN, bases["qwen"], ["tokenizer.json"])


def run_tiktoken(runner, rng, flips):
    base = runner.work / "base_tiktoken"
    base.mkdir(exist_ok=True)
    lines = [base64.b64encode(bytes([b])).decode() + " %d" % b for b in range(256)]
    merged = [b"he", b"ll", b"hello", b" world", b"wor"]
    lines += [base64.b64encode(t).decode() + " %d" % (256 + i) for i, t in enumerate(merged)]
    (base / "tiktoken.model").write_text("\n".join(lines) + "\n")
    (base / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {
        "261": {"content": "<|im_end|>", "special": True}}}))
    args = lambda d: ["tokenize", str(d), "--text", "hello world", "--json"]
    good = runner.run(args(base))
    if good["rc"] != 0:
        sys.exit("tiktoken base failed: " + good["err"])
    mutants = []
    for bad in ("4294967301", "-1", "99999999999999999999", "268435456", "x", "", "1 2"):
        m = list(lines)
        m[300 % len(m)] = m[300 % len(m)].split()[0] + " " + bad
        mutants.append(("rank " + bad, "\n".join(m)))
    mutants.append(("duplicate rank", "\n".join(lines + [base64.b64encode(b"zz").decode() + " 5"])))
    mutants.append(("bad base64", "\n".join(lines + ["!!!! 400"])))
    mutants.append(("one huge line", "A" * (8 << 20) + " 400"))
    for bad in (2**28, 2**32 + 5, -1):
        mutants.append(("special id %d" % bad, None, json.dumps({"added_tokens_decoder": {
            str(bad): {"content": "<|x|>", "special": True}}})))
    raw = "\n".join(lines)
    for i in range(flips):
        cut = rng.randrange(1, len(raw))
        mutants.append(("truncated at %d" % cut, raw[:cut]))
    for mut in mutants:
        d = fresh(base, runner.work / "m_tt")
        if mut[1] is not None:
            (d / "tiktoken.model").write_text(mut[1])
        if len(mut) > 2:
            (d / "tokenizer_config.json").write_text(mut[2])
        runner.judge("tiktoken", mut[0], args(d), good["out"], ["tiktoken.model", "tokenizer_config.json"])


def safetensors_parts(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return raw, json.loads(raw[8:8 + n]), raw[8 + n:]


def safetensors_bytes(header, data, pad=True):
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def run_safetensors(runner, models, bases, rng, flips):
    src = models["qwen"]
    shard = sorted(src.glob("*.safetensors"))[0]
    raw, header, data = safetensors_parts(shard)
    names = sorted(k for k in header if k != "__metadata__")
    mutants = []
    for v in (0, 7, len(raw), 2**40, 2**64 - 1):
        mutants.append(("header length %d" % v, struct.pack("<Q", v) + raw[8:]))
    for name in rng.sample(names, min(4, len(names))):
        t = header[name]
        a, b = t["data_offsets"]
        for label, offs in (("end past data", [a, len(data) + 4096]), ("end < start", [b, a]),
                            ("huge", [2**63, 2**63 + 8]), ("negative", [-8, b]), ("overlap", [0, b - a])):
            h = json.loads(json.dumps(header))
            h[name]["data_offsets"] = offs
            mutants.append(("%s offsets %s" % (name, label), safetensors_bytes(h, data)))
        for label, shape in (("overflow", [2**33, 2**33]), ("negative", [-1] + t["shape"][1:]),
                             ("swapped", list(reversed(t["shape"]))), ("halved", [max(1, t["shape"][0] // 2)] +
                                                                                t["shape"][1:])):
            h = json.loads(json.dumps(header))
            h[name]["shape"] = shape
            mutants.append(("%s shape %s" % (name, label), safetensors_bytes(h, data)))
        h = json.loads(json.dumps(header))
        h[name]["dtype"] = "Q9"
        mutants.append(("%s dtype unknown" % name, safetensors_bytes(h, data)))
        h = json.loads(json.dumps(header))
        del h[name]
        mutants.append(("%s removed" % name, safetensors_bytes(h, data)))
    h = json.dumps(header).replace('"__metadata__": {', '"__metadata__": {"deep": %s, ' % deep(200000), 1)
    if '"deep"' in h:
        hb = h.encode()
        mutants.append(("metadata deep", struct.pack("<Q", len(hb)) + hb + data))
    for i in range(flips):
        cut = rng.randrange(1, len(raw))
        mutants.append(("truncated at %d" % cut, raw[:cut]))
    for label, blob in mutants:
        d = fresh(src, runner.work / "m_st")
        (d / shard.name).write_bytes(blob)
        runner.judge("safetensors", label, ["generate", str(d)] + GEN, bases["qwen"], [shard.name])


GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_fields(raw):
    """Offsets of the header's count and length fields (what a mutation aims at)."""
    fields = [("tensor count", 8, 8), ("kv count", 16, 8)]
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", raw, 8)

    def string(label):
        nonlocal pos
        n = struct.unpack_from("<Q", raw, pos)[0]
        fields.append((label + " length", pos, 8))
        pos += 8 + n

    def value(t, label):
        nonlocal pos
        if t == 8:
            string(label)
        elif t == 9:
            fields.append((label + " array type", pos, 4))
            et = struct.unpack_from("<I", raw, pos)[0]
            fields.append((label + " array count", pos + 4, 8))
            n = struct.unpack_from("<Q", raw, pos + 4)[0]
            pos += 12
            for _ in range(n):
                value(et, label + "[]")
        else:
            pos += GGUF_SIZES[t]

    for _ in range(n_kv):
        start = pos
        n = struct.unpack_from("<Q", raw, pos)[0]
        key = raw[pos + 8:pos + 8 + n].decode()
        string("key " + key)
        fields.append(("kv %s type" % key, pos, 4))
        t = struct.unpack_from("<I", raw, pos)[0]
        pos += 4
        value(t, key)
    for _ in range(n_tensors):
        n = struct.unpack_from("<Q", raw, pos)[0]
        name = raw[pos + 8:pos + 8 + n].decode()
        string("tensor " + name + " name")
        fields.append(("tensor %s n_dims" % name, pos, 4))
        nd = struct.unpack_from("<I", raw, pos)[0]
        pos += 4
        for i in range(nd):
            fields.append(("tensor %s dim %d" % (name, i), pos, 8))
            pos += 8
        fields.append(("tensor %s type" % name, pos, 4))
        fields.append(("tensor %s offset" % name, pos + 4, 8))
        pos += 12
    return fields, pos


def run_gguf(runner, models, bases, rng, flips, per_class):
    src = models["gguf"]
    raw = src.read_bytes()
    fields, header_end = gguf_fields(raw)
    # Array elements are many (the vocabulary): keep a sample of them.
    plain = [f for f in fields if "[]" not in f[0]]
    arrays = [f for f in fields if "[]" in f[0]]
    chosen = plain if len(plain) <= per_class else rng.sample(plain, per_class)
    chosen += rng.sample(arrays, min(len(arrays), 20))
    mutants = []
    for label, off, size in chosen:
        for v in ((0, 2**31 - 1, 2**32 - 1) if size == 4 else (0, 2**32 + 5, 2**62, 2**64 - 1)):
            b = bytearray(raw)
            b[off:off + size] = v.to_bytes(size, "little")
            mutants.append(("%s=%d" % (label, v), bytes(b)))
    for i in range(flips):
        b = bytearray(raw)
        p = rng.randrange(0, header_end)
        b[p] ^= 1 << rng.randrange(8)
        mutants.append(("header bit flip at %d" % p, bytes(b)))
        cut = rng.randrange(1, len(raw))
        mutants.append(("truncated at %d" % cut, raw[:cut]))
    dst = runner.work / "m.gguf"
    for label, blob in mutants:
        dst.write_bytes(blob)
        runner.judge("gguf", label, ["generate", str(dst)] + GEN, bases["gguf"], ["m.gguf"])


def run_manifest(runner, models, bases, rng):
    src = models["pack"]
    man = json.loads((src / "manifest.json").read_text())
    mutants = []
    for li, layout in enumerate(man["layouts"][:2]):
        for mat, fields in layout.items():
            if not isinstance(fields, dict):
                continue
            for k in ("out", "in", "scale_group", "block_out", "block_in", "data", "scales", "block_scale"):
                if k not in fields:
                    continue
                for v in (0, 1, 2**33, 2**63 - 1, -1, fields[k] // 2, fields[k] * 2, "x"):
                    m = json.loads(json.dumps(man))
                    m["layouts"][li][mat][k] = v
                    mutants.append(("layouts[%d].%s.%s=%s" % (li, mat, k, v), m))
            if "out" in fields and "in" in fields:
                m = json.loads(json.dumps(man))
                m["layouts"][li][mat]["out"], m["layouts"][li][mat]["in"] = fields["in"], fields["out"]
                mutants.append(("layouts[%d].%s out/in swapped" % (li, mat), m))
            for k, v in (("dtype", "Q9"), ("dtype", "F32"), ("packing", "nope"), ("packing", "int4x8")):
                m = json.loads(json.dumps(man))
                m["layouts"][li][mat][k] = v
                mutants.append(("layouts[%d].%s.%s=%s" % (li, mat, k, v), m))
    layer = next(i for i, l in enumerate(man["experts"]) if l)
    for col, name in enumerate(("drive", "offset", "length", "xxh3", "layout")):
        for v in (2**32, 2**32 + 5, 2**63 - 1, 2**64 + 5, -1, 0, 1, "x", None):
            if name == "xxh3":
                v = "0" * 16 if v == 0 else ("zz" if v == "x" else v)
            m = json.loads(json.dumps(man))
            m["experts"][layer][0][col] = v
            mutants.append(("experts[%d][0].%s=%s" % (layer, name, v), m))
    for k, v in (("version", 99), ("format", "nope"), ("drives", []), ("experts", []), ("layouts", []),
                 ("trunk", "../../etc"), ("tensors", {}), ("config", {}), ("hf_config", None)):
        m = json.loads(json.dumps(man))
        m[k] = v
        mutants.append(("%s=%s" % (k, v), m))
    m = json.loads(json.dumps(man))
    m["experts"][layer] = m["experts"][layer][:1]
    mutants.append(("experts of layer %d cut to one" % layer, m))
    m = json.loads(json.dumps(man))
    m["drives"][0]["file"] = "../../../../etc/passwd"
    mutants.append(("drive file outside", m))
    for t in rng.sample(sorted(man["tensors"]), min(3, len(man["tensors"]))):
        shape = man["tensors"][t].get("shape")
        if isinstance(shape, list) and len(shape) == 2:
            m = json.loads(json.dumps(man))
            m["tensors"][t]["shape"] = list(reversed(shape))
            mutants.append(("tensors[%s] shape swapped" % t, m))
    for label, m in mutants:
        d = fresh(src, runner.work / "m_pack")
        (d / "manifest.json").write_text(json.dumps(m))
        runner.judge("manifest", label, ["generate", str(d)] + GEN, bases["pack"], ["manifest.json"])
    d = fresh(src, runner.work / "m_pack")
    (d / "manifest.json").write_text(json.dumps(dict(man, options="@@X@@")).replace('"@@X@@"', deep(200000)))
    runner.judge("manifest", "options deep", ["generate", str(d)] + GEN, bases["pack"], ["manifest.json"])


def run_pack_files(runner, models, bases, rng, flips):
    """Bytes of a pack's files: the trunk, the expert file, files missing."""
    src = models["pack"]
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file() and p.name != "manifest.json")
    mutants = []
    for rel in files:
        mutants.append(("%s missing" % rel, rel, None))
        size = (src / rel).stat().st_size
        if size:
            mutants.append(("%s truncated to half" % rel, rel, ("cut", size // 2)))
            for _ in range(flips):
                mutants.append(("%s bit flip" % rel, rel, ("flip", rng.randrange(size), rng.randrange(8))))
    for label, rel, how in mutants:
        d = fresh(src, runner.work / "m_pack")
        p = d / rel
        if how is None:
            p.unlink()
        elif how[0] == "cut":
            os.truncate(p, how[1])
        else:
            with open(p, "r+b") as f:
                f.seek(how[1])
                byte = f.read(1)[0]
                f.seek(how[1])
                f.write(bytes([byte ^ (1 << how[2])]))
            label += " at %d" % how[1]
        names = [rel.name, str(rel)]
        # Under a RAM budget too, so expert blobs are read from the drive.
        runner.judge("pack", label, ["generate", str(d)] + GEN, bases["pack"], names)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--work", default="/tmp/strata-hostile")
    ap.add_argument("--classes", default="config,tokenizer,tiktoken,safetensors,gguf,manifest,pack")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flips", type=int, default=6, help="random truncations / bit flips per file kind")
    ap.add_argument("--per-field", type=int, default=4, help="odd values tried per config field")
    ap.add_argument("--per-class", type=int, default=40, help="header fields mutated per GGUF")
    ap.add_argument("--json", help="write every result here")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(a.strata, work)
    rng = random.Random(a.seed)
    models = make_models(runner, work)
    bases = {k: baseline(runner, v) for k, v in models.items()}
    classes = a.classes.split(",")
    steps = {
        "config": lambda: run_config(runner, models, bases, rng, a.per_field),
        "tokenizer": lambda: run_tokenizer(runner, models, bases, rng, a.flips),
        "tiktoken": lambda: run_tiktoken(runner, rng, a.flips),
        "safetensors": lambda: run_safetensors(runner, models, bases, rng, a.flips),
        "gguf": lambda: run_gguf(runner, models, bases, rng, a.flips, a.per_class),
        "manifest": lambda: run_manifest(runner, models, bases, rng),
        "pack": lambda: run_pack_files(runner, models, bases, rng, a.flips),
    }
    for c in classes:
        print("%-12s" % c, end="", flush=True)
        steps[c]()
        print(flush=True)
    print("\n%-12s %7s %8s %6s %8s %7s %9s %10s %8s" % ("class", "mutants", "refused", "same", "changed", "FAILED",
                                                      "one-line", "names-file", "max s"))
    failed = 0
    for c in classes:
        rs = [r for r in runner.results if r["class"] == c]
        cnt = lambda v: sum(r["verdict"] == v for r in rs)
        ref = [r for r in rs if r["verdict"] == "refused"]
        failed += cnt("FAILED")
        print("%-12s %7d %8d %6d %8d %7d %9d %10d %8.1f" % (
            c, len(rs), cnt("refused"), cnt("same"), cnt("changed"), cnt("FAILED"), sum(r["one_line"] for r in ref),
            sum(r["names_file"] for r in ref), max((r["seconds"] for r in rs), default=0)))
    changed = [r for r in runner.results if r["verdict"] == "changed"]
    if changed:
        print("\nchanged output (review):")
        for r in changed:
            print("  %s/%s" % (r["class"], r["mutant"]))
    if a.json:
        Path(a.json).write_text(json.dumps(runner.results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
