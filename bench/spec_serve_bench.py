#!/usr/bin/env python3
"""Speculative decoding with several sequences at once (issue 18; not run by CI).

    python3 bench/spec_serve_bench.py TARGET [--draft-model DIR] [--mtp] [--streams 4]
        [-n 128] [-r 10] [-t THREADS] [--temperature 0] [--seed 1] [--ram GIB]
        [--strata BIN] [--out FILE]

One `strata serve TARGET --max-running K` per drafter (off, ngram, the draft model
with --draft-model, mtp with --mtp), all started first. Each repetition sends K
requests at once to every server in turn, the servers' order rotated from one
repetition to the next (balanced: drift hits each alike). Stream i gets the prompt
kind i mod 3 (prose, code, a chat turn: bench/spec_bench.sh's prompts) and seed
SEED + i, so the K streams decode together and their verifications share one
batched step. Aggregate tok/s of a phase = completion tokens / wall time from the
first request sent to the last answer. Prints, per drafter: the median aggregate
tok/s and its range, the median of the per-repetition ratios to drafting off and
the lowest ratio (issue 18: never below 1.0x), tokens drafted and accepted (the
responses' usage), and whether every stream's text was drafting off's (it must be).
--strata BIN: default $STRATA, else build/strata of this repository.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    ("prose", "The river rises in the hills north of the town and runs south through farmland for about forty "
              "miles. In spring the water is high and fast, and the old mill by the bridge still turns. In summer "
              "the river"),
    ("code", 'def parse_args(argv):\n    """Parse the command line into options and files."""\n    options = {}\n'
             '    files = []\n    for arg in argv:\n        if arg.startswith("--"):\n'
             '            key, _, value = arg[2:].partition("=")\n            options[key] = value\n'
             '        else:\n            files.append(arg)\n    return options, files\n\n\ndef main(argv):\n'
             '    options, files ='),
    ("chat", "<|im_start|>user\nWhat does the command man do, and how do I search the manual pages for a word?"
             "<|im_end|>\n<|im_start|>assistant\n"),
]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


class Server:
    def __init__(self, strata, target, drafter, args):
        self.drafter = drafter
        self.log = tempfile.NamedTemporaryFile(prefix="spec-serve-", suffix=".log", delete=False)
        cmd = [strata, "serve", target, "--port", "0", "--max-running", str(args.streams)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if args.ram:
            cmd += ["--ram", str(args.ram)]
        if drafter == "ngram":
            cmd += ["--draft", "ngram"]
        elif drafter == "model":
            cmd += ["--draft", args.draft_model]
        elif drafter == "mtp":
            cmd += ["--draft", "mtp"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        self.url = None
        for _ in range(1200):
            if self.proc.poll() is not None:
                sys.exit(f"strata serve ({drafter}) stopped:\n" + open(self.log.name).read())
            m = re.search(r"http://[^ \n]+", open(self.log.name).read())
            if m:
                try:
                    urllib.request.urlopen(m.group(0) + "/health", timeout=5).read()
                    self.url = m.group(0)
                    break
                except OSError:
                    pass
            time.sleep(0.2)
        if not self.url:
            sys.exit(f"strata serve ({drafter}) did not answer:\n" + open(self.log.name).read())

    def phase(self, args):
        """K requests at once: (aggregate tok/s, texts, drafted, accepted)."""
        out = [None] * args.streams

        def one(i):
            kind, prompt = PROMPTS[i % len(PROMPTS)]
            out[i] = post(self.url + "/v1/completions",
                          {"prompt": prompt, "max_tokens": args.tokens, "temperature": args.temperature,
                           "seed": args.seed + i, "ignore_eos": True})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.streams)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        if any(o is None for o in out):
            sys.exit(f"a request to the {self.drafter} server failed")
        tokens = sum(o["usage"]["completion_tokens"] for o in out)
        details = [o["usage"].get("completion_tokens_details", {}) for o in out]
        accepted = sum(d.get("accepted_prediction_tokens", 0) for d in details)
        drafted = accepted + sum(d.get("rejected_prediction_tokens", 0) for d in details)
        return tokens / wall, [o["choices"][0]["text"] for o in out], drafted, accepted

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.unlink(self.log.name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("target")
    p.add_argument("--draft-model")
    p.add_argument("--mtp", action="store_true")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("-n", "--tokens", type=int, default=128)
    p.add_argument("-r", "--runs", type=int, default=10)
    p.add_argument("-t", "--threads", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ram", type=float, default=0)
    p.add_argument("--strata", default=os.environ.get("STRATA", os.path.join(REPO, "build", "strata")))
    p.add_argument("--out")
    args = p.parse_args()
    if args.streams < 1 or args.runs < 1 or args.tokens < 1:
        sys.exit("--streams, --runs and -n must be at least 1")
    drafters = ["off", "ngram"] + (["model"] if args.draft_model else []) + (["mtp"] if args.mtp else [])
    servers = []
    try:
        for d in drafters:
            servers.append(Server(args.strata, args.target, d, args))
        rate = {d: [] for d in drafters}
        drafted = {d: 0 for d in drafters}
        accepted = {d: 0 for d in drafters}
        same = {d: True for d in drafters}
        ratios = {d: [] for d in drafters}
        for r in range(args.runs):
            order = servers[r % len(servers):] + servers[:r % len(servers)]
            if r % 2:
                order.reverse()
            got = {}
            for s in order:
                tps, texts, dr, ac = s.phase(args)
                got[s.drafter] = (tps, texts)
                rate[s.drafter].append(tps)
                drafted[s.drafter] += dr
                accepted[s.drafter] += ac
            for d in drafters:
                same[d] = same[d] and got[d][1] == got["off"][1]
                ratios[d].append(got[d][0] / got["off"][0])
            print(f"run {r + 1}: " + ", ".join(f"{d} {got[d][0]:.1f}" for d in drafters) + " tok/s aggregate",
                  flush=True)
    finally:
        for s in servers:
            s.stop()
    lines = [f"# {args.target}: {args.streams} streams at once, {args.tokens} tokens each, "
             f"temperature {args.temperature}, {args.runs} balanced repetitions, threads {args.threads or 'default'}",
             "",
             "| drafter | aggregate tok/s median (range) | ratio to off: median (lowest) | drafted | accepted | "
             "same text as off |",
             "|---|---|---|---|---|---|"]
    for d in drafters:
        lines.append(f"| {d} | {statistics.median(rate[d]):.1f} ({min(rate[d]):.1f}-{max(rate[d]):.1f}) | "
                     f"{statistics.median(ratios[d]):.2f}x ({min(ratios[d]):.2f}x) | {drafted[d]} | {accepted[d]} | "
                     f"{'yes' if same[d] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
