#!/usr/bin/env bash
# One device call (SPEC §8, issue #5): build mhcdiff with the CUDA backend for Hopper, run the GPU tests
# (bit-identical to the CPU), the benchmark, the PyTorch peers (scripts/torch_peer.py) and compute-sanitizer
# on a subset. Full logs go to $OUT (default ./out); a short table is printed last.
#   usage: scripts/gpu-check.sh            (from the repository root, on a machine with an NVIDIA GPU)
#   env:   BUILD=build-gpu  JOBS=16  SKIP_SANITIZER=1  SKIP_TORCH=1  SKIP_DUMP=1  ARCHS=90-real (quicker build)
#          GTEST_FILTER=...  BENCH_ARGS="--policies exact,fp64 --shape 16384,4,4096"  (quick iterations)
#          AB_STREAM32=1: also time the exact backward with MHCDIFF_CUDA_BACKWARD unset, =stream32 and
#          =stream32-deferred (three alternating rounds, docs/performance.md "What is still open") and sanitize
#          their GPU test; AB_PREFETCH=1: the same for the exact forward and MHCDIFF_CUDA_FORWARD=prefetch-l2 /
#          prefetch-registers
set -uo pipefail
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
DUMP=$(mktemp -d)  # raw tensors for the peer check: large, so not under $OUT
stage() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.log"; }

stage "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee -a "$OUT/summary.log"

stage "build ($BUILD, -j$JOBS)"
if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMHCDIFF_CUDA=ON ${ARCHS:+-DMHCDIFF_CUDA_ARCHITECTURES=$ARCHS} &&
       cmake --build "$BUILD" -j"$JOBS" --target mhcdiff_gpu_tests mhcdiff; } >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "build failed (full log: $OUT/build.log)"
  exit 1
fi
GPU_TESTS="$BUILD/tests/gpu/mhcdiff_gpu_tests"
MHCDIFF="$BUILD/apps/mhcdiff/mhcdiff"

stage "gpu tests"
"$GPU_TESTS" --gtest_filter="${GTEST_FILTER:-*}" >"$OUT/gpu_tests.log" 2>&1
tests_rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|differ" "$OUT/gpu_tests.log" | head -40 | tee -a "$OUT/summary.log"

if [[ -z "${SKIP_DUMP:-}" ]]; then
  stage "bench dump for the SPEC §9 counts (S=4096,H=4,D=4096: 67 M outputs)"
  "$MHCDIFF" bench --device cuda --shape 4096,4,4096 --policies hf-bf16,fp32-seeded,fp32-seeded-fma --reps 3 \
    --dump "$DUMP" --format csv >"$OUT/bench_dump.csv" 2>>"$OUT/bench.log"
fi

stage "bench"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of options
"$MHCDIFF" bench --device cuda --format csv --reps 40 ${BENCH_ARGS:-} >"$OUT/bench.csv" 2>>"$OUT/bench.log"
echo "bench rc=$?" | tee -a "$OUT/summary.log"

# An experiment switch timed against the default in three alternating rounds (exact policy, the two shapes where
# SPEC §8's target and a smaller wave count are measured), then its GPU test sanitized.
#   ab_experiment NAME VARIABLE fwd|bwd GTEST_NAME VARIANT...
ab_experiment() {
  local name=$1 variable=$2 direction=$3 test=$4
  shift 4
  stage "A/B $name: exact $direction, default vs $*"
  for round in 1 2 3; do
    for variant in default "$@"; do
      if [[ $variant == default ]]; then unset "$variable"; else export "$variable=$variant"; fi
      for shape in 16384,4,4096 4096,4,4096; do
        "$MHCDIFF" bench --device cuda --format csv --reps 40 --policies exact --shape "$shape" 2>>"$OUT/bench.log" |
          grep "$direction" | sed "s/^/$variant,round$round,/" | tee -a "$OUT/ab_$name.csv"
      done
    done
  done
  unset "$variable"
  grep -c . "$OUT/ab_$name.csv" | sed "s/^/ab $name rows: /" | tee -a "$OUT/summary.log"
  if [[ -z "${SKIP_SANITIZER:-}" ]]; then
    timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 99 "$GPU_TESTS" \
      --gtest_filter="CudaOperator.$test" >"$OUT/sanitizer_$name.log" 2>&1
    echo "$name memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer_$name.log" | tail -1)" | tee -a "$OUT/summary.log"
    timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool racecheck --error-exitcode 99 "$GPU_TESTS" \
      --gtest_filter="CudaOperator.$test" >>"$OUT/sanitizer_$name.log" 2>&1
    echo "$name racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/sanitizer_$name.log" | tail -1)" |
      tee -a "$OUT/summary.log"
  fi
}
if [[ -n "${AB_PREFETCH:-}" ]]; then
  ab_experiment prefetch MHCDIFF_CUDA_FORWARD fwd PrefetchForwardExperimentMatchesCpu prefetch-l2 prefetch-registers
fi
if [[ -n "${AB_STREAM32:-}" ]]; then
  ab_experiment stream32 MHCDIFF_CUDA_BACKWARD bwd Stream32BackwardExperimentMatchesCpu stream32 stream32-deferred
fi

if [[ -z "${SKIP_TORCH:-}" ]]; then
  stage "torch peers"
  PYTHONUNBUFFERED=1 timeout "${TORCH_TIMEOUT:-300}" python3 scripts/torch_peer.py --dump "$DUMP" --bench "$OUT/bench.csv" --reps 40 \
    >"$OUT/torch_peer.log" 2>&1
  echo "torch_peer rc=$?" | tee -a "$OUT/summary.log"
fi
rm -rf "$DUMP"

# Last: the slowest stage, so that a time limit cuts it rather than the figures.
if [[ -z "${SKIP_SANITIZER:-}" ]]; then
  stage "compute-sanitizer (memcheck + racecheck on a subset)"
  subset='SpecShapes/EveryPresetMatchesCpu.*/H4_D2053:SpecShapes/EveryPresetMatchesCpu.*/H3_D264:CudaOperator.UncertifiedExactElementsAreFinishedOnTheHost:CudaOperator.ExactWithoutBinary64TwinsMatchesCpu:CudaOperator.LongTokenLoopsMatchCpu'
  timeout "${SANITIZER_TIMEOUT:-200}" compute-sanitizer --tool memcheck --error-exitcode 99 "$GPU_TESTS" --gtest_filter="$subset" >"$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)" | tee -a "$OUT/summary.log"
  timeout "${SANITIZER_TIMEOUT:-200}" compute-sanitizer --tool racecheck --error-exitcode 99 "$GPU_TESTS" \
    --gtest_filter='SpecShapes/EveryPresetMatchesCpu.*/H3_D264:SpecShapes/EveryPresetMatchesCpu.*/H4_D4096' >>"$OUT/sanitizer.log" 2>&1
  echo "racecheck rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log" | tail -1)" | tee -a "$OUT/summary.log"
fi

stage "done"
echo
cut -d, -f2- "$OUT/bench.csv" | tr , '\t'
[[ -f "$OUT/torch_peer.log" ]] && grep -v "^W\|^I\|warn" "$OUT/torch_peer.log" | tail -60
echo "gpu tests rc=$tests_rc"
exit $tests_rc
