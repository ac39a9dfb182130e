#!/usr/bin/env bash
# Builds strata and its tests with AddressSanitizer + UndefinedBehaviorSanitizer
# into ./build-asan and runs the suite there (every report fails its test).
# The two LongContext tests are left out: under the sanitizers they take longer
# than CI has, and the memory they touch is the same code paths the short
# reference-model tests run. The layering tests only compile, so they too.
# The two node-driven server tests are left out as well: server_hostile
# asserts CPU-time and latency bounds that the sanitizers' own cost breaks,
# and server_e2e has not yet been run under them (the request parser's and
# the scheduler's unit tests, and the openai_request fuzz target, are).
# Three synth tests that build and run many sizes of models (the synth
# and model code they reach is what the other synth and fixture tests run
# under the sanitizers too) are left to the plain build for time.
# hostile_inputs runs the CLI under a 8 GiB address-space limit, which an
# ASan binary's shadow memory cannot start within.
# Of the Vulkan backend's tests, the model-level ones on every fixture take
# CI's lavapipe several seconds each under the sanitizers (its shader
# compiler allocates through ASan's malloc); they run in the plain build.
# Here: every op and attention kernel (a few formats' products), and two
# fixtures streamed through the device's expert cache (the host code they
# add to the CPU path's: staging, the VRAM cache, the KV cache in VRAM).
# The tests run a suite to a process (tools/gtest_groups.py: a start of the
# sanitized test binary takes seconds, more than most tests).
#   bash tools/sanitize_tests.sh [extra ctest args, e.g. -R Streaming]
# (the extra arguments apply to the main selection; the few model and Vulkan
# tests always run)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${STRATA_ASAN_BUILD:-build-asan}
# -O1, not Release's -O3, and the tests' own sources at -O0: with the
# sanitizers' checks GCC takes several times longer the more it optimizes
# (one test file: 112 s at -O2, 47 s at -O1, 22 s at -O0; a CLI command: 74 s
# at -O2, 27 s at -O1; the whole build at -O2 took 36 minutes of a 2-core
# machine), for code that runs under them about as fast. Linked as fixed
# executables (-no-pie): a position-independent one spends a fifth of each
# of its starts relocating itself.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -DSTRATA_SANITIZE=ON \
  -DSTRATA_BUILD_BENCH=OFF -DSTRATA_TEST_CXX_FLAGS=-O0 -DCMAKE_EXE_LINKER_FLAGS=-no-pie ${STRATA_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
# halt_on_error for UBSan comes from -fno-sanitize-recover; leaks are reports too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0:handle_sigbus=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
vulkan_few='^Vulkan(Ops|Attention|Interleaved|ExpertCache)\.|^All/VulkanFormats\.ProductsAgree.*/(Q8_0|Q4_K|MXFP4_gguf|BF16)( |$)|^ComputeDevice\.|Streaming\.StreamedFromTheCheckpointIsBitIdentical/(k3_bf16|ds_mtp)_vulkan( |$)'
# The model-level suites run on every fixture in the plain build; here every
# fixture's forward once (its prompt's logits against transformers) and the
# rest on five that between them take each code path the others do: GQA,
# MLA with q-LoRA and an MTP layer, Kimi K3 (KDA, gated NoPE MLA, AttnRes,
# the latent MoE), gpt-oss (sinks, windows, MXFP4), compressed-tensors int4;
# and four of the synthesized architectures.
model_suites='^Fixtures/(ReferenceModel|BatchInvariance|Streaming|Speculative|StepStateTest)\.|^Archs/'
model_few='^Fixtures/(ReferenceModel|BatchInvariance|Streaming|Speculative|StepStateTest)\..*/(qwen_gqa|ds_mtp|k3_bf16|gptoss_mxfp4|ds_int4_ct)(_cpu)?( |$)|^Fixtures/ReferenceModel\.PromptLogitsMatchTransformers/.*_cpu( |$)|^Archs/SynthTiny\.LoadsAndRuns/(kimi_k3_st_mxfp4|deepseek_v3_gguf_q8_0_mxfp4|qwen3_235b_a22b_gguf_q4_k|gpt_oss_20b_st_bf16)( |$)'
python3 tools/gtest_groups.py "$build" \
  -E "LongContext|^Layering\.|^server_|^hostile_inputs$|[Vv]ulkan|^ComputeDevice\.|^Synth\.(SizeScaling|PinnedAxes)|DemoSizes\.|$model_suites" "$@" \
  -- -R "$model_few" -- -R "$vulkan_few"
