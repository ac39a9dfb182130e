"""Cross-checks the committed transformers.js reference (expected_<model>.json)
against HuggingFace `tokenizers`, the library the checkpoints are published for.

  python3 tools/tokenizer_reference/check_against_hf.py [STRINGS_JSON OUT_JSON]

Prints every string where the two disagree; exits 1 if any do. With extra
arguments it also writes HF's ids for another strings file (stress testing).
"""
import json
import os
import sys

from tokenizers import Tokenizer

from kimi_tiktoken import FIXTURES, MODELS

MODELS_BY_NAME = {"deepseek_v3": "tokenizer-deepseek_v3", "qwen3": "tokenizer-qwen3"}


def main():
    with open(os.path.join(FIXTURES, "strings.json"), encoding="utf-8") as f:
        strings = json.load(f)
    bad = 0
    tokenizers = {}
    for name, pkg in MODELS_BY_NAME.items():
        tok = Tokenizer.from_file(os.path.join(MODELS, pkg, "models", "tokenizer.json"))
        tokenizers[name] = tok
        with open(os.path.join(FIXTURES, f"expected_{name}.json"), encoding="utf-8") as f:
            cases = json.load(f)["cases"]
        assert len(cases) == len(strings), f"{name}: expected file is stale, rerun make_reference.mjs"
        for i, (s, case) in enumerate(zip(strings, cases)):
            ids = tok.encode(s, add_special_tokens=False).ids
            text = tok.decode(ids, skip_special_tokens=False)
            if ids != case["ids"] or text != case["decoded"]:
                bad += 1
                print(f"{name} #{i} {s!r}\n  hf ids {ids}\n  js ids {case['ids']}\n  hf text {text!r}\n  js text {case['decoded']!r}")
        print(f"{name}: checked {len(strings)} strings")
    if len(sys.argv) > 2:
        with open(sys.argv[1], encoding="utf-8") as f:
            extra = json.load(f)
        out = {"strings": extra}
        for name, tok in tokenizers.items():
            out[name] = [e.ids for e in tok.encode_batch(extra, add_special_tokens=False)]
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False)
    print("mismatches:", bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
