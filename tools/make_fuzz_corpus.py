#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, fuzz/corpus/<target>/ (fuzz/README.md).

Seeds are small valid inputs, so that the fuzzer starts from files that reach
deep into each reader: the committed test fixtures (config.json of every
architecture, the real chat templates and the template snippet cases), files
synthesized here (tokenizer.json variants, tiktoken files, safetensors
headers, OpenAI request bodies), and files the strata CLI writes (tiny GGUF
models with their tokenizer via `strata synth`, a pack manifest via
`strata pack`). Deterministic; run from the repository root:

    python3 tools/make_fuzz_corpus.py build/strata
"""
import base64
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fuzz" / "corpus"
FIXTURES = ROOT / "tests" / "fixtures"
PART = "\n#---8<---\n"  # fuzz/fuzz_support.h kPartMarker


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def dump(v):
    return json.dumps(v, ensure_ascii=False, indent=1)


# --- byte-level BPE vocabularies --------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE = bytes_to_unicode()
WORDS = ["the", " the", "Hello", " world", "ing", " a", "er", "12", " 3", "\u4f60\u597d"]


def merges_for(words):
    """Merges that build each word left to right, and the tokens they make."""
    merges, tokens = [], []
    for w in words:
        cur = "".join(BYTE[b] for b in w.encode()[:1])
        for b in w.encode()[1:]:
            nxt = BYTE[b]
            if (cur, nxt) not in merges:
                merges.append((cur, nxt))
                tokens.append(cur + nxt)
            cur = cur + nxt
    return merges, tokens


def tokenizer_json(variant):
    merges, merged = merges_for(WORDS)
    vocab = {BYTE[b]: b for b in range(256)}
    for t in merged:
        vocab.setdefault(t, len(vocab))
    added = [
        {"id": len(vocab), "content": "<|im_start|>", "special": True, "normalized": False},
        {"id": len(vocab) + 1, "content": "<|im_end|>", "special": True, "normalized": False, "rstrip": True},
        {"id": len(vocab) + 2, "content": " word", "special": False, "normalized": True, "single_word": True,
         "lstrip": True},
    ]
    split = {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False}
    if variant == "qwen":
        pre = {"type": "Sequence", "pretokenizers": [split, {"type": "ByteLevel", "add_prefix_space": False,
                                                             "trim_offsets": False, "use_regex": False}]}
        norm = {"type": "NFC"}
        post = {"type": "ByteLevel"}
        merge_list = [f"{a} {b}" for a, b in merges]
    elif variant == "deepseek":
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
            {"type": "Split", "pattern": {"String": "\u4f60"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
        norm = {"type": "Sequence", "normalizers": []}
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
                "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [added[0]["id"]], "tokens": ["<|im_start|>"]},
                                   "<|im_end|>": {"id": "<|im_end|>", "ids": [added[1]["id"]], "tokens": ["<|im_end|>"]}}}
        merge_list = [[a, b] for a, b in merges]
    else:  # gpt2: ByteLevel with its own regex, ignore_merges
        pre = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}
        norm = None
        post = {"type": "Sequence", "processors": [{"type": "ByteLevel"}]}
        merge_list = [f"{a} {b}" for a, b in merges]
    return {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": norm,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": variant == "gpt2", "vocab": vocab, "merges": merge_list},
    }


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tokenizer_seeds():
    for variant in ["qwen", "deepseek", "gpt2"]:
        tj = dump(tokenizer_json(variant))
        write("tokenizer_json", f"{variant}", tj)
        cfg = {"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>", "special": True},
               "add_bos_token": variant == "gpt2", "add_eos_token": variant == "deepseek",
               "chat_template": CHAT_TEMPLATE if variant != "gpt2" else [{"name": "default", "template": CHAT_TEMPLATE}]}
        gen = {"bos_token_id": 0, "eos_token_id": [1, 2]}
        write("tokenizer_json", f"{variant}_with_configs", tj + PART + dump(cfg) + PART + dump(gen))


def tiktoken_seeds():
    ranks = [bytes([b]) for b in range(256)]
    for w in WORDS:
        e = w.encode()
        for i in range(2, len(e) + 1):
            if e[:i] not in ranks:
                ranks.append(e[:i])
    lines = "".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(ranks))
    n = len(ranks)
    cfg = {"bos_token": "[BOS]", "eos_token": "[EOS]", "added_tokens_decoder": {
        str(n): {"content": "[BOS]", "special": True},
        str(n + 1): {"content": "[EOS]", "special": True},
        str(n + 2): {"content": "<|im_end|>", "special": True, "rstrip": True},
    }}
    write("tiktoken", "base", lines)
    write("tiktoken", "with_config", lines + PART + dump(cfg))
    real = json.loads((FIXTURES / "tokenizer" / "tiktoken_tokenizer_config.json").read_text())
    write("tiktoken", "kimi_style_config", lines + PART + dump(real))


# --- safetensors --------------------------------------------------------------

def safetensors(tensors, metadata=None, pad=0):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    write("safetensors", "f32_bf16", safetensors({
        "model.embed_tokens.weight": ("F32", [4, 2], struct.pack("<8f", *range(8))),
        "model.norm.weight": ("BF16", [2], b"\x80\x3f\x00\x40"),
    }, {"format": "pt"}))
    write("safetensors", "dtypes", safetensors({
        "a": ("F16", [2, 2], bytes(8)), "b": ("I8", [3], b"\x01\x02\x03"), "c": ("U8", [1], b"\xff"),
        "d": ("F8_E4M3", [2, 1], b"\x38\x40"), "e": ("I32", [1], bytes(4)), "f": ("F64", [], bytes(8)),
        "g": ("BF16", [0, 4], b""), "h": ("I64", [1], bytes(8)), "i": ("BOOL", [2], b"\x00\x01"),
    }, pad=7))
    write("safetensors", "empty", safetensors({}))
    write("safetensors", "mxfp4", safetensors({
        "model.layers.0.mlp.experts.gate_up_proj_blocks": ("U8", [1, 2, 1, 16], bytes(32)),
        "model.layers.0.mlp.experts.gate_up_proj_scales": ("U8", [1, 2, 1], b"\x7f\x7f"),
    }, {"format": "pt", "note": "mxfp4"}))


# --- config.json ----------------------------------------------------------------

def config_seeds():
    seen = set()
    for cfg in sorted((FIXTURES / "models").glob("*/config.json")):
        text = cfg.read_text()
        if text in seen:
            continue
        seen.add(text)
        write("config", cfg.parent.name, text)
    # The presets' shapes, as strata synth writes them (full size: the
    # checks, not the weights, are what is fuzzed).
    write("config", "qwen3_moe_minimal", dump({
        "model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "rope_theta": 1000000.0, "max_position_embeddings": 40960, "bos_token_id": 151643,
        "eos_token_id": 151645, "use_sliding_window": False, "rope_scaling": None}))


# --- OpenAI requests --------------------------------------------------------------

def request_seeds():
    chat, completion = b"\x01", b"\x00"
    write("openai_request", "chat_simple", chat + json.dumps({
        "model": "strata-model", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}).encode())
    write("openai_request", "chat_full", chat + json.dumps({
        "model": "strata-model",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "4"}],
        "tools": [{"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}],
        "tool_choice": "auto", "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["\n\n", "END"],
        "stream": True, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 3,
        "logit_bias": {"5": -100, "17": 2.5}, "presence_penalty": 0.5, "frequency_penalty": 0.1,
        "response_format": {"type": "text"}, "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": False}, "n": 1, "user": "u1"}).encode())
    write("openai_request", "completion_text", completion + json.dumps({
        "model": "strata-model", "prompt": "Once upon a time", "max_tokens": 32, "temperature": 0,
        "echo": False, "stop": "\n"}).encode())
    write("openai_request", "completion_ids", completion + json.dumps({
        "prompt": [1, 2, 3, 999], "max_tokens": 4, "logprobs": 2, "seed": 1, "ignore_eos": True}).encode())


# --- chat templates -----------------------------------------------------------------

def template_seeds():
    for t in sorted((FIXTURES / "chat_templates").glob("*.jinja")):
        write("chat_template", t.stem, t.read_text())
    cases = json.loads((FIXTURES / "chat_templates" / "snippets.json").read_text())["cases"]
    for i, case in enumerate(cases):
        write("chat_template", f"snippet_{i:03d}", case["template"])


# --- files the CLI writes -----------------------------------------------------------

def cli_seeds(strata):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        # The smallest models synth makes (~150 KB each: tools/fuzz.sh lets
        # gguf inputs be that long).
        tiny = ["--layers", "1", "--experts", "8", "--hidden", "32", "--vocab", "512", "--seed", "1", "--threads", "1"]
        for preset in ["kimi-k2", "qwen3-30b-a3b", "gpt-oss-20b"]:
            out = tmp / f"{preset}.gguf"
            subprocess.run([strata, "synth", "--preset", preset, "--format", "gguf", "--quant", "q8_0", "--out", str(out)]
                           + tiny, check=True, stdout=subprocess.DEVNULL)
            write("gguf", preset, out.read_bytes())
        model = tmp / "qwen"
        subprocess.run([strata, "synth", "--preset", "qwen3-30b-a3b", "--out", str(model)] + tiny, check=True,
                       stdout=subprocess.DEVNULL)
        write("tokenizer_json", "synth_qwen", (model / "tokenizer.json").read_text() + PART +
              (model / "tokenizer_config.json").read_text())
        pack = tmp / "pack"
        subprocess.run([strata, "pack", str(model), "--out", str(pack), "--skip-fidelity", "-q"], check=True,
                       stdout=subprocess.DEVNULL)
        write("manifest", "qwen_pack", (pack / "manifest.json").read_text())
        pack_q = tmp / "pack_int4"
        subprocess.run([strata, "pack", str(model), "--out", str(pack_q), "--experts", "int4", "--skip-fidelity", "-q"],
                       check=True, stdout=subprocess.DEVNULL)
        write("manifest", "qwen_pack_int4", (pack_q / "manifest.json").read_text())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    shutil.rmtree(OUT, ignore_errors=True)
    tokenizer_seeds()
    tiktoken_seeds()
    safetensors_seeds()
    config_seeds()
    request_seeds()
    template_seeds()
    cli_seeds(sys.argv[1])
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"{OUT.relative_to(ROOT)}: {sum(1 for f in OUT.rglob('*') if f.is_file())} seeds, {total} bytes")


if __name__ == "__main__":
    main()
