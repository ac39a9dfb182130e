#!/usr/bin/env bash
# Run THERE (the device machine), from the repository root, in one `run` call:
# trains issue 18's bench-only models (train.py stages bench_draft and
# bench_ds: a 432M-parameter DeepSeek-V3-architecture target with an MTP
# layer, past the host's last-level cache, and an 8M-parameter dense draft
# model, both on the committed fixtures' tokenizer) while strata builds, then
# runs bench/spec_bench.sh on them. The target (865 MB) is too large to come
# back from the device, so it is trained and measured in the same call; a
# second call on the still-warm machine finds the models and skips training.
#
#   run(carry=[".carry/deb-prefix-slim.tar.xz", ".train/cut"], timeout_s=600,
#       command="bash tools/train_fixtures/bench_models_device.sh [SPEC_BENCH ARGS]")
#
# .train/cut/corpus.jsonl.xz (or $CORPUS): make_corpus.py's corpus, cut by
# cut_corpus.py to fit what a call carries (tools/train_fixtures/README.md,
# "Bench-only models").
# CAP_SCALE (default 1) scales the training caps (train.py --cap-scale); it
# applies only to models not trained yet (train.py skips a stage whose
# train_result.json exists: remove /root/bench_models/train/models to retrain).
# SPEC_BENCH ARGS default to: -n 192 -r 2 -t 16 --modes ram (what fits the
# call after about six minutes of training; a second call on the warm
# machine can run more). Results, the
# draft model and each model's train_result.json go to $OUT.
set -u -o pipefail
t0=$(date +%s)
out=${OUT:-/tmp/bench_models_out}
mkdir -p "$out"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-n 192 -r 2 -t 16 --modes ram)
since() { echo "$(( $(date +%s) - t0 )) s"; }

rm -rf .deb && tar -xJf .carry/deb-prefix-slim.tar.xz
strata=/root/bench_models/strata
if [ ! -x "$strata" ]; then
  (bash tools/device_build.sh . /tmp/bench_models_build -DSTRATA_BUILD_BENCH=OFF -DSTRATA_BUILD_TESTS=OFF \
     > "$out/build.log" 2>&1 && mkdir -p /root/bench_models && cp /tmp/bench_models_build/strata "$strata") &
  build=$!
fi

# The committed fixtures' tokenizer: the tokenizer stage then only encodes the corpus with it.
M=/root/bench_models/train
mkdir -p "$M/tokenizer"
T=tests/fixtures/models/trained_draft_dense
cp "$T/tokenizer.json" "$T/tokenizer_config.json" "$M/tokenizer/"
[ -f "$M/tokenizer/tokenizer_info.json" ] ||
  echo "{\"source\": \"$T (the committed trained fixtures' tokenizer)\"}" > "$M/tokenizer/tokenizer_info.json"
export PYTHONUNBUFFERED=1
stop() { [ -z "${build:-}" ] || { kill "$build" 2>/dev/null; wait "$build"; }; exit 1; }
python3 tools/train_fixtures/train.py --corpus "${CORPUS:-.train/cut/corpus.jsonl.xz}" --out "$M" \
  --stages tokenizer,bench_draft,bench_ds --cap-scale "${CAP_SCALE:-1}" 2>&1 | tee "$out/train.log" | grep -v '"step"'
[ "${PIPESTATUS[0]}" = 0 ] || { echo "training failed: $out/train.log"; stop; }
echo "trained at $(since)"
for m in bench_draft bench_ds; do cp "$M/models/$m/train_result.json" "$out/train_result_$m.json"; done
tar -cJf "$out/bench_draft.tar.xz" -C "$M/models" bench_draft
[ -z "${build:-}" ] || wait "$build" || { tail -30 "$out/build.log"; exit 1; }
echo "built at $(since)"

source tools/device_env.sh
left=$(( 590 - ($(date +%s) - t0) ))
[ "$left" -ge 60 ] || { echo "no time left for the bench ($left s): run the script again on the warm machine"; exit 1; }
STRATA=$strata timeout "$left" bash bench/spec_bench.sh "$M/models/bench_ds" \
  --draft-model "$M/models/bench_draft" --mtp "${args[@]}" --out "$out/spec_bench.txt"
echo "done at $(since)"
