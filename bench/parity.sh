#!/usr/bin/env bash
# Greedy parity between strata and llama.cpp on one GGUF (not run by CI).
#
#   bash bench/parity.sh MODEL.gguf --llama DIR [--prompt-ids 10,100,200] [-n 32] [--threads N]
#        [--tol 1e-2] [--strata BIN] [--strata-model PATH] [--kv-type f32|f16]
#        [--flash-attn off|auto|on] [--keep DIR] [--llama-only] [--llama-model PATH]
#
# --llama DIR: the llama.cpp checkout built by bench/llama_cpp/build.sh (its
# build-parity/parity_tool runs); without it, LLAMA_DIR or PARITY_TOOL must be set.
# --strata BIN: default build/strata of this repository.
# Runs llama.cpp (bench/llama_cpp/parity_tool, built by bench/llama_cpp/build.sh) and
#   strata generate --model M --prompt-ids IDS -n N --temperature 0 --ignore-eos --json --logits
# on the same prompt ids (verbatim, no BOS) and passes when the N greedy tokens are
# identical and, at every step, the softmax probability (T=1, full vocabulary) of the
# chosen token differs by at most --tol. Also reports the largest |logit| difference.
# --strata-model gives strata a different path to the same weights (e.g. the HF
# directory the GGUF was converted from); by default strata reads the GGUF itself.
# --llama-model gives llama.cpp a different GGUF while strata still reads MODEL, e.g. the
# exact f32 dequantization of MODEL (bench/llama_cpp/dequantize_gguf.py), so strata on the
# quantized weights is compared with llama.cpp computing the same weights in f32.
# --llama-only runs just the llama.cpp half and prints its tokens and probabilities.
# llama.cpp runs with an f32 KV cache and flash attention off by default, its most
# f32-faithful setting: with flash attention on it casts K/V to f16 whatever the cache
# type, and its CPU kernel then accumulates V in f16.
#
# Environment: LLAMA_DIR (when no --llama), PARITY_TOOL (the parity_tool binary itself), STRATA.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}

usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

[ $# -ge 1 ] || usage
model=$1; shift
case "$model" in -h|--help) usage ;; esac
ids=10,100,200,300,400,500,600,700
n=32
threads=$(nproc)
tol=1e-2
strata=${STRATA:-}
strata_model=
kv=f32
fa=off
keep=
llama=
llama_only=0
llama_model=
while [ $# -gt 0 ]; do
  case "$1" in
    --prompt-ids) ids=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --threads|-t) threads=$2; shift 2 ;;
    --tol) tol=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    --strata-model) strata_model=$2; shift 2 ;;
    --kv-type) kv=$2; shift 2 ;;
    --flash-attn) fa=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --llama) llama=$2; shift 2 ;;
    --llama-only) llama_only=1; shift ;;
    --llama-model) llama_model=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "parity.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "parity.sh: $model: no such file" >&2; exit 2; }
llama_model=${llama_model:-$model}
[ -f "$llama_model" ] || { echo "parity.sh: $llama_model: no such file" >&2; exit 2; }
if [ -n "$llama" ] || [ -z "${PARITY_TOOL:-}" ]; then
  llama=${llama:-${LLAMA_DIR:-}}
  [ -n "$llama" ] || { echo "parity.sh: give --llama DIR (a llama.cpp checkout built by bench/llama_cpp/build.sh)" >&2; exit 2; }
  PARITY_TOOL=$llama/build-parity/parity_tool
fi
[ -x "$PARITY_TOOL" ] || { echo "parity.sh: $PARITY_TOOL missing; run bash bench/llama_cpp/build.sh --dir DIR" >&2; exit 2; }
[ -n "$strata" ] || strata=$repo/build/strata

out=${keep:-$(mktemp -d)}
mkdir -p "$out"
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT

"$PARITY_TOOL" -m "$llama_model" --prompt-ids "$ids" -n "$n" -t "$threads" --kv-type "$kv" \
  --flash-attn "$fa" --logits > "$out/llama.json"

if [ "$llama_only" = 1 ]; then
  "$PY" - "$out/llama.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["stats"]
print(f"llama.cpp: {r['desc']}  vocab {r['n_vocab']}  prompt {len(r['prompt_ids'])} tokens  "
      f"prefill {s['prefill_s']*1e3:.1f} ms  decode {s['decode_tok_s']:.1f} tok/s  "
      f"threads {s['threads']}  kv {s['kv_type']}  fa {s['flash_attn']}")
print("tokens    ", r["tokens"])
print("top1_prob ", [round(p, 4) for p in r["top1_prob"]])
EOF
  exit 0
fi

if [ -z "$strata" ] || [ ! -x "$strata" ]; then
  echo "parity.sh: no strata binary (build it or pass --strata / STRATA=)" >&2
  exit 2
fi
"$strata" generate --model "${strata_model:-$model}" --prompt-ids "$ids" -n "$n" --temperature 0 \
  --ignore-eos --threads "$threads" --json --logits > "$out/strata.json"

"$PY" - "$out/llama.json" "$out/strata.json" "$tol" <<'EOF'
import json, math, sys
import numpy as np

ll = json.load(open(sys.argv[1]))
st = json.load(open(sys.argv[2]))
tol = float(sys.argv[3])

def softmax_p(row, tok):
    x = np.asarray(row, dtype=np.float64)
    m = x.max()
    return float(1.0 / np.exp(x - m).sum() * math.exp(row[tok] - m))

lt, stt = ll["tokens"], st["tokens"]
lrows, srows = ll["logits"], st.get("logits")
if srows is None:
    sys.exit("parity.sh: strata output has no logits (needs --json --logits)")
n = min(len(lt), len(stt))
if len(srows) != len(stt):
    sys.exit(f"parity.sh: strata printed {len(srows)} logits rows for {len(stt)} tokens")
if len(srows[0]) != ll["n_vocab"]:
    sys.exit(f"parity.sh: vocab differs: llama.cpp {ll['n_vocab']}, strata {len(srows[0])}")

first_diff = None
max_dp = 0.0
max_dl = 0.0
print(f"{'step':>4} {'llama':>7} {'strata':>7} {'p_llama':>9} {'p_strata':>9} {'|dp|':>9} {'max|dlogit|':>11}")
for i in range(n):
    pl = ll["top1_prob"][i]
    ps = softmax_p(srows[i], stt[i])
    # compare the same token's probability even if the choice differs
    dp = abs(pl - softmax_p(srows[i], lt[i]))
    dl = float(np.max(np.abs(np.asarray(lrows[i], dtype=np.float64) - np.asarray(srows[i], dtype=np.float64))))
    mark = "" if lt[i] == stt[i] else "  <-- differs"
    print(f"{i:>4} {lt[i]:>7} {stt[i]:>7} {pl:>9.5f} {ps:>9.5f} {dp:>9.2e} {dl:>11.3e}{mark}")
    if first_diff is None:
        max_dp = max(max_dp, dp)
        max_dl = max(max_dl, dl)
    if lt[i] != stt[i] and first_diff is None:
        first_diff = i
        break  # later steps see different contexts

ok_tokens = first_diff is None and len(lt) == len(stt)
ok_prob = max_dp <= tol
s_ll, s_st = ll["stats"], st.get("stats", {})
print(f"llama.cpp: prefill {s_ll['prefill_s']*1e3:.1f} ms, decode {s_ll['decode_tok_s']:.1f} tok/s "
      f"(kv {s_ll['kv_type']}, fa {s_ll['flash_attn']}, {s_ll['threads']} threads)")
if s_st:
    print(f"strata:    prefill {s_st.get('prefill_s', 0)*1e3:.1f} ms, decode {s_st.get('decode_tok_s', 0):.1f} tok/s")
print(f"tokens: {'identical for ' + str(n) + ' steps' if ok_tokens else 'first difference at step ' + str(first_diff)}; "
      f"max |dp(top1)| = {max_dp:.3e} (tol {tol:g}); max |dlogit| = {max_dl:.3e}")
print("PASS" if ok_tokens and ok_prob else "FAIL")
sys.exit(0 if ok_tokens and ok_prob else 1)
EOF
