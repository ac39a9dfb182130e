#!/usr/bin/env bash
# A streaming install of a Kimi-K3-shaped model through a local, rate-limited
# hub, then decoding: tokens/s and expert bytes fetched per token on a first
# run and on a run after `strata warm`, beside the same model read locally
# (not run by CI).
#
#   bash bench/fetch_bench.sh [--size GB] [--experts E] [--rate MB/s] [--ram GiB] [--runs R]
#        [--tokens N] [--prompt-len P] [--warm-budget GB] [--block-kib K] [--threads T] [--out DIR]
#        [--models DIR] [--strata BIN]
#
#   --size GB        the synthesized model (default 2): strata synth --preset kimi-k3 --size GB
#                    --experts E --vocab 16384 --quant mxfp4 --seed 1, kept in --models DIR
#   --experts E      routed experts per layer (default 128)
#   --rate MB/s      nginx's limit_rate per connection (default 25): the "network"
#   --ram GiB        strata's --ram for every decoding run (default 2)
#   --runs R         rounds (default 3); a round runs each row once on fresh copies
#   --tokens N       tokens generated per run (default 32), sampled (temperature 1,
#                    seed = round) so that routing varies as in real text
#   --prompt-len P   prompt ids (1000 + 37·i + 101·seed) mod 16000, i < P (default 64)
#   --warm-budget GB strata warm's --budget (default: a quarter of the experts' bytes)
#   --block-kib K    the block size of the "sums" row's published block sums (default 1024,
#                    strata checksums' own)
#   --threads T      (default: all cores)
#   --out DIR        results (default: a new folder under $TMPDIR or /tmp)
#   --models DIR     where the synthesized model is kept between runs
#                    (default ${XDG_CACHE_HOME:-~/.cache}/strata/bench-models, or $MODELS when set)
#   --strata BIN     the strata binary (default build/strata of this repository)
#
# Setup: nginx (Debian) on 127.0.0.1 serves the model in a hub's layout
# ({root}/org/k3/resolve/{commit}/..., X-Repo-Commit on every answer) at --rate per
# connection; `strata pull hf://org/k3 --streaming` installs it once (timed); each
# round copies that install (sparse) for each row:
#   cold    strata generate COPY --prompt-ids IDS -n N --temperature 1 --seed S --ignore-eos
#             --ram RAM --heat none --threads T --json
#   warm    strata warm COPY --from TRACES --budget B (timed, not in the row's tok/s), then
#           the same generate. TRACES: router traces of two other prompts (seeds S+100,
#           S+200) decoded from the local model first, unmeasured (--trace is never on in a
#           measured run) - the "recorded routing" warm-up works from
#   sums    as cold, from a second repository of the same files that also publishes their
#           block sums (strata checksums --block-kib K): every fetched range is checked, whole
#           blocks are fetched - what the checks cost
#   local   the same generate on the synthesized folder itself (no network): the ceiling
# Every row of a round must give the same tokens. Figures from generate's JSON stats:
# decode tok/s, and over prefill + decode: bytes from the "remote ..." drive per generated
# token, the share of expert reads served from the drive, the mean wait of a fetched read.
# Output: setup.txt, commands.txt, runs.jsonl, logs/, summary.md (medians and ranges).
#
# Environment: STRATA (when no --strata), MODELS (when no --models), NGINX (default nginx
# on PATH, else /usr/sbin/nginx), PYTHON.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
MODELS=${MODELS:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/strata/bench-models}
STRATA=${STRATA:-$repo/build/strata}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}

usage() { sed -n '2,49p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

size=2; experts=128; rate=25; ram=2; runs=3; tokens=32; plen=64; budget=; block_kib=1024; threads=$(nproc); out=
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --experts) experts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ram) ram=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --prompt-len) plen=$2; shift 2 ;;
    --warm-budget) budget=$2; shift 2 ;;
    --block-kib) block_kib=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --strata) STRATA=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[ -x "$STRATA" ] || { echo "no strata binary at $STRATA (build first, or --strata BIN)" >&2; exit 2; }
[ -x "$NGINX" ] || { echo "no nginx at $NGINX (apt-get install nginx-light)" >&2; exit 2; }
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/fetch_bench.XXXXXX")}
mkdir -p "$out/logs" "$MODELS"
commit=0123456789abcdef0123456789abcdef01234567

model=$MODELS/fetch_k3_${size}g_${experts}e
if [ ! -f "$model/config.json" ]; then
  "$STRATA" synth --preset kimi-k3 --size "$size" --experts "$experts" --vocab 16384 --quant mxfp4 --seed 1 \
    --out "$model" --force >"$out/logs/synth.log" 2>&1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-bench.XXXXXX")
trap 'kill $(cat "$work/nginx.pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/root/org/k3/resolve" "$work/home"
ln -s "$model" "$work/root/org/k3/resolve/$commit"
ln -s "$model" "$work/root/org/k3/resolve/main"
# The same files under org/k3s, with their block sums beside them.
mkdir -p "$work/root/org/k3s/resolve/$commit"
for f in "$model"/*; do ln -s "$f" "$work/root/org/k3s/resolve/$commit/"; done
"$STRATA" checksums "$work/root/org/k3s/resolve/$commit" --block-kib "$block_kib" >"$out/logs/checksums.log" 2>&1
port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx.err warn;
events { worker_connections 256; }
http {
  access_log off;
  default_type application/octet-stream;
  client_body_temp_path $work/tmp; proxy_temp_path $work/tmp; fastcgi_temp_path $work/tmp;
  uwsgi_temp_path $work/tmp; scgi_temp_path $work/tmp;
  server {
    listen 127.0.0.1:$port;
    root $work/root;
    limit_rate ${rate}m;
    location /org/ { add_header X-Repo-Commit $commit; }
  }
}
EOF
mkdir -p "$work/tmp"
"$NGINX" -c "$work/nginx.conf" -p "$work" >"$out/logs/nginx.log" 2>&1 &
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
export HF_ENDPOINT=http://127.0.0.1:$port HOME=$work/home STRATA_HOME=$work/home XDG_CACHE_HOME=$work/home/cache
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN

ids() {  # prompt ids for a seed
  $PY -c "import sys; p,s=int(sys.argv[1]),int(sys.argv[2]); print(','.join(str((1000+37*i+101*s)%16000) for i in range(p)))" "$plen" "$1"
}
gen() {  # MODEL SEED LOG [extra...]
  local m=$1 seed=$2 log=$3; shift 3
  "$STRATA" generate "$m" --prompt-ids "$(ids "$seed")" -n "$tokens" --temperature 1 --seed "$seed" --ignore-eos \
    --ram "$ram" --heat none --threads "$threads" --json "$@" 2>"$log.err" >"$log.json"
}

{
  echo "date: $(date -u +%FT%TZ)"; echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null)"
  echo "machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB"; echo "model: $model ($(du -sh --apparent-size "$model" | cut -f1))"
  echo "rate per connection: ${rate} MB/s; ram: ${ram} GiB; tokens: $tokens; prompt: $plen; threads: $threads; runs: $runs"
} >"$out/setup.txt"

start=$(date +%s.%N)
"$STRATA" pull hf://org/k3 --streaming --json -q --out "$work/base" >"$out/logs/pull.json" 2>"$out/logs/pull.err"
echo "install: $(echo "$(date +%s.%N) - $start" | bc) s, $(du -sh "$work/base" | cut -f1) on disk" >>"$out/setup.txt"
start=$(date +%s.%N)
"$STRATA" pull hf://org/k3s@$commit --streaming --json -q --out "$work/base-sums" >"$out/logs/pull-sums.json" \
  2>"$out/logs/pull-sums.err"
echo "install with block sums of ${block_kib} KiB: $(echo "$(date +%s.%N) - $start" | bc) s, $(du -sh "$work/base-sums" | cut -f1) on disk" >>"$out/setup.txt"
if [ -z "$budget" ]; then
  budget=$(du -sb --apparent-size "$model" | awk '{printf "%.3f", $1/4/1e9}')
fi
echo "warm budget: $budget GB" >>"$out/setup.txt"

: >"$out/runs.jsonl"
: >"$out/commands.txt"
for r in $(seq 1 "$runs"); do
  for row in cold sums warm local; do
    log=$out/logs/$row-$r
    case $row in
      cold) cp -a --sparse=always "$work/base" "$work/c$r"; target=$work/c$r; warm_s=0 ;;
      sums) cp -a --sparse=always "$work/base-sums" "$work/s$r"; target=$work/s$r; warm_s=0 ;;
      warm)
        cp -a --sparse=always "$work/base" "$work/w$r"; target=$work/w$r
        gen "$model" $((r + 100)) "$log-trace1" --trace "$work/t$r-1.jsonl"
        gen "$model" $((r + 200)) "$log-trace2" --trace "$work/t$r-2.jsonl"
        t0=$(date +%s.%N)
        "$STRATA" warm "$target" --from "$work/t$r-1.jsonl" "$work/t$r-2.jsonl" --budget "$budget" --json \
          >"$log-warm.json" 2>"$log-warm.err"
        warm_s=$(echo "$(date +%s.%N) - $t0" | bc) ;;
      local) target=$model; warm_s=0 ;;
    esac
    echo "$row round $r: generate $target --prompt-ids <seed $r> -n $tokens --temperature 1 --seed $r --ignore-eos --ram $ram --heat none --threads $threads --json" >>"$out/commands.txt"
    gen "$target" "$r" "$log"
    $PY - "$row" "$r" "$log.json" "$warm_s" "$log-warm.json" >>"$out/runs.jsonl" <<'EOF'
import json, sys
row, r, path, warm_s, warm_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5]
j = json.load(open(path))
st = j["stats"]
remote = {"bytes": 0, "fetched_reads": 0, "local_reads": 0, "fetch_wait_s": 0.0}
for phase in ("prefill", "decode"):
    for d in st["experts"].get(phase, {}).get("drives", []):
        if d["name"].startswith("remote "):
            for k in remote:
                remote[k] += d.get(k, 0)
reads = remote["fetched_reads"] + remote["local_reads"]
out = {"row": row, "round": r, "tokens": j["tokens"], "decode_tok_s": st.get("decode_tok_s"),
       "ttft_s": st.get("ttft_s"), "remote_bytes": remote["bytes"],
       "remote_bytes_per_token": remote["bytes"] / max(1, len(j["tokens"])),
       "local_share": (remote["local_reads"] / reads) if reads else None,
       "mean_fetch_wait_ms": (remote["fetch_wait_s"] * 1e3 / remote["fetched_reads"]) if remote["fetched_reads"] else None,
       "warm_s": warm_s}
if row == "warm":
    w = json.load(open(warm_path))
    out["warm_fetched_bytes"] = w["fetched_bytes"]
    out["warm_experts"] = w["warmed"]
print(json.dumps(out))
EOF
    [ "$row" = local ] || rm -rf "$target"
  done
done

$PY - "$out/runs.jsonl" >"$out/summary.md" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rounds = sorted({x["round"] for x in runs})
same = all(len({json.dumps(x["tokens"]) for x in runs if x["round"] == r}) == 1 for r in rounds)
def col(row, key):
    v = [x[key] for x in runs if x["row"] == row and x.get(key) is not None]
    if not v: return "-"
    return f"{statistics.median(v):.3g} ({min(v):.3g}-{max(v):.3g})"
print("| row | decode tok/s | TTFT s | remote bytes/token | local share of expert reads | mean fetch wait ms | warm-up s | warm-up MB |")
print("|---|---|---|---|---|---|---|---|")
for row in ("cold", "sums", "warm", "local"):
    wm = [x["warm_fetched_bytes"] / 1e6 for x in runs if x["row"] == row and "warm_fetched_bytes" in x]
    print(f"| {row} | {col(row,'decode_tok_s')} | {col(row,'ttft_s')} | {col(row,'remote_bytes_per_token')} | "
          f"{col(row,'local_share')} | {col(row,'mean_fetch_wait_ms')} | {col(row,'warm_s')} | "
          f"{(f'{statistics.median(wm):.3g}') if wm else '-'} |")
print()
print(f"medians (ranges) over {len(rounds)} rounds; every row of a round gave the same tokens: {same}")
EOF
cat "$out/setup.txt" "$out/summary.md"
echo "results in $out" >&2
