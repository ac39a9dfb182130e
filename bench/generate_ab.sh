#!/usr/bin/env bash
# A/B speed of two strata binaries on one model: R interleaved `generate` runs
# each (128-token prompt, 48 sampled tokens), medians of prefill time and
# decode rate. For refactors that must not change speed. Not run by CI.
#   bash bench/generate_ab.sh OLD_STRATA NEW_STRATA MODEL ROUNDS [generate flags...]
set -euo pipefail
old=$1 new=$2 model=$3 rounds=$4; shift 4
ids=$(python3 -c "print(','.join(str(i*7%3000+1) for i in range(128)))")
for r in $(seq $rounds); do
  for b in "$old" "$new"; do
    $b generate --model $model --prompt-ids $ids -n 48 --ignore-eos --temperature 1 --seed 5 --json --heat none "$@" 2>/dev/null \
      | python3 -c "import json,sys; d=json.load(sys.stdin)['stats']; print('$b'.replace(' ', '_'), d['prefill_s'], d['decode_tok_s'])"
  done
done | python3 -c "
import sys, statistics as st
rows={}
for l in sys.stdin:
    b,p,d=l.split(); rows.setdefault(b,[]).append((float(p),float(d)))
for b,v in rows.items():
    print(b.ljust(40), 'prefill median %.3f s (128 tokens)'%st.median(x[0] for x in v), ' decode median %.2f tok/s'%st.median(x[1] for x in v), ' n=%d'%len(v))
"
