#!/usr/bin/env bash
# Speculative decoding, drafting off against each drafter, side by side in one
# run (not run by CI): decode tok/s and expert bytes read per generated token,
# in RAM and streamed from a pack with an expert cache of a quarter of the
# experts, on three prompt kinds (prose continuation, code, a chat turn).
#
#   bash bench/spec_bench.sh TARGET [--draft-model DIR] [--mtp] [-n 128] [-r 3] [-t THREADS]
#                            [--temperature T --seed S] [--modes ram,stream] [--out FILE]
#                            [--strata BIN]
#
# Each repetition runs every (mode, kind) with every drafter, the drafters'
# order rotated from one repetition to the next (balanced: drift hits each
# alike). Drafters: off, ngram, the draft model (--draft-model), mtp (--mtp).
# Prints medians per (mode, kind, drafter), the ratio to drafting off, and
# whether every drafter gave the same tokens as drafting off (it must).
# --strata BIN: default $STRATA, else build/strata of this repository.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
strata=${STRATA:-$repo/build/strata}
target=$1; shift
draft_model= mtp=0 N=128 R=3 threads=$(nproc) temp=0 seed=0 modes=ram,stream out=
while [ $# -gt 0 ]; do
  case "$1" in
    --draft-model) draft_model=$2; shift 2 ;;
    --mtp) mtp=1; shift ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    -t|--threads) threads=$2; shift 2 ;;
    --temperature) temp=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "spec_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

drafters=(off ngram)
[ -n "$draft_model" ] && drafters+=(model)
[ "$mtp" = 1 ] && drafters+=(mtp)

declare -A prompt
prompt[prose]="The river rises in the hills north of the town and runs south through farmland for about forty miles. In spring the water is high and fast, and the old mill by the bridge still turns. In summer the river"
prompt[code]=$'def parse_args(argv):\n    """Parse the command line into options and files."""\n    options = {}\n    files = []\n    for arg in argv:\n        if arg.startswith("--"):\n            key, _, value = arg[2:].partition("=")\n            options[key] = value\n        else:\n            files.append(arg)\n    return options, files\n\n\ndef main(argv):\n    options, files ='
prompt[chat]=$'<|im_start|>user\nWhat does the command man do, and how do I search the manual pages for a word?<|im_end|>\n<|im_start|>assistant\n'

pack=
if [[ ,$modes, == *,stream,* ]]; then
  pack=$tmp/pack
  "$strata" pack "$target" --out "$pack" --threads "$threads" -q >/dev/null
  experts=$(python3 -c "import json; print(sum(len(l) for l in json.load(open('$pack/manifest.json'))['experts']))")
  cache=$(( experts / 4 > 0 ? experts / 4 : 1 ))
fi

run() {  # mode kind drafter rep
  local mode=$1 kind=$2 d=$3 r=$4 model=$target args=()
  [ "$mode" = stream ] && { model=$pack; args+=(--stream --cache-experts "$cache"); }
  case $d in
    ngram) args+=(--draft ngram) ;;
    model) args+=(--draft "$draft_model") ;;
    mtp) args+=(--draft mtp) ;;
  esac
  "$strata" generate "$model" --prompt "${prompt[$kind]}" -n "$N" --ignore-eos --heat none --threads "$threads" \
    --temperature "$temp" --seed "$seed" --json "${args[@]}" > "$tmp/$mode.$kind.$d.$r.json"
}

IFS=, read -r -a mode_list <<< "$modes"
for r in $(seq 1 "$R"); do
  for mode in "${mode_list[@]}"; do
    for kind in prose code chat; do
      n=${#drafters[@]}
      for i in $(seq 0 $((n - 1))); do run "$mode" "$kind" "${drafters[$(((i + r) % n))]}" "$r"; done
    done
  done
done

python3 - "$tmp" "$R" "$N" "$threads" "$modes" "${drafters[*]}" "$target" "$temp" "${cache:-0}" <<'PY' | tee ${out:+"$out"}
import json, statistics, sys
tmp, R, N, T, modes, drafters, target, temp, cache = sys.argv[1:]
R, drafters = int(R), drafters.split()
print(f"target {target}; {N} tokens, temperature {temp}, {T} threads, {R} balanced repetitions, medians"
      + (f"; streamed: expert cache of {cache} experts (a quarter)" if "stream" in modes else ""))
print(f"{'mode':6} {'kind':5} {'drafter':7} {'tok/s':>9} {'x off':>6} {'bytes/tok':>11} {'x off':>6} {'accept':>6} {'per step':>8} same")
for mode in modes.split(","):
    for kind in ("prose", "code", "chat"):
        base = None
        for d in drafters:
            runs = [json.load(open(f"{tmp}/{mode}.{kind}.{d}.{r}.json")) for r in range(1, R + 1)]
            ref = [json.load(open(f"{tmp}/{mode}.{kind}.off.{r}.json"))["tokens"] for r in range(1, R + 1)]
            same = all(x["tokens"] == y for x, y in zip(runs, ref))
            tps = statistics.median(x["stats"]["decode_tok_s"] for x in runs)
            def per_token(x):
                ex = x["stats"].get("experts", {}).get("decode", {})
                return ex.get("bytes_read", 0) / max(1, x["stats"]["generated_tokens"] - 1)
            bpt = statistics.median(per_token(x) for x in runs)
            dr = [x["stats"].get("draft", {}) for x in runs]
            acc = statistics.median(x.get("acceptance_rate", 0) for x in dr)
            per = statistics.median(x.get("mean_accepted_per_step", 0) for x in dr)
            if d == "off": base = (tps, bpt)
            print(f"{mode:6} {kind:5} {d:7} {tps:9.2f} {tps / base[0]:6.2f} {bpt:11.0f} "
                  f"{(bpt / base[1]) if base[1] else 0:6.2f} {acc:6.2f} {per:8.2f} {'yes' if same else 'NO'}")
PY
