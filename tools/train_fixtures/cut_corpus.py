#!/usr/bin/env python3
"""Cut make_corpus.py's corpus to a compressed size that fits what one device call carries (64 MiB with the
working tree and the carried build dependencies): every held-out document, and training documents in a seeded
random order until the compressed file would pass --mb.  The header gains a "cut" record (seed, budget, documents
kept of each kind), which train.py's tokenizer stage copies into <out>/data/stats.json.

    python3 tools/train_fixtures/cut_corpus.py .train/corpus.jsonl.xz --mb 6.0 --out .train/cut/corpus.jsonl.xz
"""

import argparse
import json
import lzma
import os
import random
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, required=True, help="compressed size to stay under (MB)")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if a.mb <= 0:
        sys.exit("cut_corpus.py: --mb must be positive")
    with lzma.open(a.corpus, "rt", encoding="utf-8") as f:
        header = json.loads(f.readline())
        lines = [s for s in f.read().split("\n") if s]  # not splitlines(): documents may hold U+2028 and the like
    docs = [json.loads(s) for s in lines]
    held = [i for i, d in enumerate(docs) if d["split"] == "heldout"]
    train = [i for i, d in enumerate(docs) if d["split"] == "train"]
    random.Random(a.seed).shuffle(train)

    def payload(keep):
        kept = sorted(keep)  # the corpus's own order (kind, then path)
        counts = {}
        for i in kept:
            counts[docs[i]["kind"]] = counts.get(docs[i]["kind"], 0) + 1
        h = dict(header, cut={"from": a.corpus, "seed": a.seed, "mb": a.mb, "documents": len(kept),
                              "of": len(docs), "by_kind": counts})
        return lzma.compress((json.dumps(h, sort_keys=True) + "\n" + "".join(lines[i] + "\n" for i in kept))
                             .encode("utf-8"), preset=6)

    # Compressed size grows about in proportion to the documents kept: scale the count to the budget until the
    # file fits (each try compresses tens of MB, so no bisection)
    n = len(train)
    data = payload(held + train[:n])
    while len(data) > a.mb * 1e6 and n > 0:
        n = int(n * 0.98 * a.mb * 1e6 / len(data))
        data = payload(held + train[:n])
    if n == 0 or len(data) > a.mb * 1e6:
        sys.exit(f"cut_corpus.py: the held-out documents alone take {len(payload(held)) / 1e6:.2f} MB; "
                 f"no training documents fit {a.mb} MB")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "wb") as f:
        f.write(data)
    print(f"{a.out}: {len(held)} held-out and {n} of {len(train)} training documents, {len(data) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
