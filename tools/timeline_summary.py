#!/usr/bin/env python3
"""What a `strata generate --timeline FILE` run did, in figures (util/timeline.h).

    python3 tools/timeline_summary.py FILE [--gaps N] [--min-gap-ms MS]

For each phase (the prompt, the decode): its time, each drive's busy time
(the union of its reads) and reads' bytes, the time the drive sat idle while
the phase ran, and the step's time by kind (attention, experts, mlp, waits
for reads). Then the longest idle gaps of each drive, each with what the step
was doing meanwhile (the step spans that cover a tenth of the gap or more,
the innermost first): where a drive waited on compute, and on which layer.
"""
import argparse
import collections
import json
import sys


def union(spans):
    total, to = 0.0, float("-inf")
    for b, e in sorted(spans):
        if e <= to:
            continue
        total += e - max(b, to)
        to = e
    return total


def gaps(spans, start, end):
    """Intervals of [start, end) that no span covers."""
    out, at = [], start
    for b, e in sorted(spans):
        if b > at:
            out.append((at, min(b, end)))
        at = max(at, e)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return [(b, e) for b, e in out if e > b]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--gaps", type=int, default=8, help="the longest idle gaps to show per drive and phase")
    ap.add_argument("--min-gap-ms", type=float, default=0.5, help="idle gaps shorter than this are not listed")
    a = ap.parse_args()
    events = json.load(open(a.file))["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    spans = collections.defaultdict(list)  # track -> [(begin, end, name, bytes)]
    for e in events:
        if e.get("ph") != "X":
            continue
        track = tracks[e["tid"]].split(" #")[0]  # a drive's lanes ("drive 0 (vda) #2") are the drive
        spans[track].append((e["ts"], e["ts"] + e["dur"], e["name"], e.get("args", {}).get("bytes", 0)))
    drives = sorted((t for t in spans if t.startswith("drive ")), key=lambda t: int(t.split(" ")[1]))
    every = sum(n for d in drives for _, _, _, n in spans[d])
    print(f"{every} bytes read in all ({every / 1e9:.3f} GB)")
    phases = sorted(spans.get("phase", []))
    if not phases:
        sys.exit("no phase spans: a timeline from an older strata?")
    for pb, pe, pname, _ in phases:
        ms = (pe - pb) / 1e3
        print(f"== {pname}: {ms:.1f} ms")
        for d in drives:
            within = [(max(b, pb), min(e, pe)) for b, e, _, _ in spans[d] if e > pb and b < pe]
            # Bytes by the read's overlap with the phase (a read across its
            # end is shared), so GB/s while busy stays the drive's rate.
            nbytes = sum(n * (min(e, pe) - max(b, pb)) / (e - b) if e > b else (n if pb <= b < pe else 0)
                         for b, e, _, n in spans[d] if e >= pb and b < pe)
            busy = union(within) / 1e3
            print(f"   {d}: busy {busy:.1f} ms ({100 * busy / max(ms, 1e-9):.0f}%), {nbytes / 1e6:.1f} MB read "
                  f"({nbytes / 1e6 / max(busy, 1e-9):.2f} GB/s while busy), idle {ms - busy:.1f} ms")
        kinds = collections.defaultdict(float)
        for b, e, name, _ in spans.get("step", []):
            if b >= pb and e <= pe:
                kind = name.rsplit(" ", 1)[0] if name.rsplit(" ", 1)[-1].isdigit() else name  # less the layer
                kinds[kind] += (e - b) / 1e3
        if kinds:
            print("   step: " + ", ".join(f"{k} {v:.1f} ms" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
            print("         (the waits for reads are inside the experts' time)")
        for d in drives:
            idle = gaps([(b, e) for b, e, _, _ in spans[d]], pb, pe)
            idle = [g for g in idle if g[1] - g[0] >= a.min_gap_ms * 1e3]
            idle.sort(key=lambda g: g[0] - g[1])
            if idle:
                print(f"   {d}: {len(idle)} idle gaps of {a.min_gap_ms} ms or more, "
                      f"{sum(e - b for b, e in idle) / 1e3:.1f} ms; the longest:")
            for b, e in idle[: a.gaps]:
                # The step spans covering a tenth of the gap or more: the most
                # of it first, and of those the innermost (shortest).
                doing = [(min(se, e) - max(sb, b), se - sb, n) for sb, se, n, _ in spans.get("step", [])
                         if min(se, e) - max(sb, b) >= 0.1 * (e - b)]
                doing.sort(key=lambda s: (-s[0], s[1]))
                what = ", ".join(f"{n} ({over / 1e3:.2f} ms of it)" for over, _, n in doing[:3])
                print(f"     at {(b - pb) / 1e3:8.1f} ms: {(e - b) / 1e3:.2f} ms; the step: {what or 'nothing'}")


if __name__ == "__main__":
    main()
