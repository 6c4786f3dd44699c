#!/usr/bin/env bash
# One device call (SPEC §8, issue #5): build mhcdiff with the CUDA backend for Hopper, run the GPU tests
# (bit-identical to the CPU), the benchmark, the PyTorch peers (scripts/torch_peer.py) and compute-sanitizer
# on a subset. Full logs go to $OUT (default ./out); a short table is printed last.
#   usage: scripts/gpu-check.sh            (from the repository root, on a machine with an NVIDIA GPU)
#   env:   BUILD=build-gpu  JOBS=16  SKIP_SANITIZER=1  SKIP_TORCH=1  SKIP_DUMP=1  ARCHS=90-real (quicker build)
#          GTEST_FILTER=...  BENCH_ARGS="--policies exact,fp64 --shape 16384,4,4096"  (quick iterations)
#          AB="VARIABLE fwd|bwd VARIANT...": also time an experiment (docs/decisions.md): the exact forward or
#          backward with the environment variable unset and set to each variant, AB_ROUNDS=3 alternating rounds at
#          AB_SHAPES (default "16384,4,4096 4096,4,4096"), medians summarised, every shape benched with each
#          variant; AB_TEST=FILTER sanitizes the experiment's GPU tests. SKIP_SUBSET_SANITIZER=1 skips the usual
#          sanitizer subset.
#          AB_PRESET=realistic times the A/B on `mhcdiff gen`'s inputs of that preset (bench --preset).
#          Every stage is bounded (TESTS_TIMEOUT, BENCH_TIMEOUT, SANITIZER_TIMEOUT, EXPERIMENT_SANITIZER_TIMEOUT,
#          TORCH_TIMEOUT). SKIP_AB_BENCH=1 leaves out the A/B's bench of every shape per variant. SASS=PATTERN dumps
#          the machine code of the matching kernels (sass_summary.py). WAVES=1 adds a scan of the exact and fp64
#          kernels over S (whole and partial waves). NCU="exact fp64 exact:VARIABLE=VARIANT" profiles one
#          backward launch of each (Nsight Compute, stall reasons; NCU_SHAPE); NCU_SOURCE=1 adds each launch's stall
#          samples per machine instruction (scripts/ncu_source_summary.py). Machine code, source CSVs and the A/B's
#          per-variant benches come back in $OUT/extra.tar.gz (the benches' rows are in summary.log too).
set -uo pipefail
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
DUMP=$(mktemp -d)  # raw tensors for the peer check: large, so not under $OUT
stage() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.log"; }
# The device tool returns at most eight files: the machine code, the source CSVs and the per-variant benches travel
# as one archive, made on every exit (a stage that ends the call early included).
bundle_extras() {
  local extras
  extras=$(cd "$OUT" && ls sass_* source_* bench_* 2>/dev/null)
  # shellcheck disable=SC2086  # one name per word
  [[ -z "$extras" ]] || (cd "$OUT" && tar czf extra.tar.gz $extras && rm -f $extras)
}
trap bundle_extras EXIT
trap 'exit 143' TERM INT  # through the EXIT trap

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

# An experiment switch timed against the default in three alternating rounds (exact policy; by default the two shapes
# where SPEC §8's target and a smaller wave count are measured); each bench call is bounded and its rc logged, and the
# medians over the rounds are summarised against the default. Sanitizers of the experiments' tests come later.
#   ab_experiment NAME VARIABLE fwd|bwd VARIANT...
ab_experiment() {
  local name=$1 variable=$2 direction=$3 round variant shape rc
  shift 3
  stage "A/B $name: exact $direction, default vs $*${AB_PRESET:+ (inputs: preset $AB_PRESET)}"
  for round in $(seq "${AB_ROUNDS:-3}"); do
    for variant in default "$@"; do
      if [[ $variant == default ]]; then unset "$variable"; else export "$variable=$variant"; fi
      for shape in ${AB_SHAPES:-16384,4,4096 4096,4,4096}; do
        timeout 60 "$MHCDIFF" bench --device cuda --format csv --reps 40 --policies exact --shape "$shape" \
          ${AB_PRESET:+--preset "$AB_PRESET"} >"$OUT/ab_call.csv" 2>>"$OUT/bench.log"
        rc=$?
        [[ $rc == 0 ]] || echo "A/B $name $variant $shape round $round: bench rc=$rc" | tee -a "$OUT/summary.log"
        grep "$direction" "$OUT/ab_call.csv" | sed "s/^/$variant,round$round,/" | tee -a "$OUT/ab_$name.csv"
      done
    done
  done
  unset "$variable"
  rm -f "$OUT/ab_call.csv"
  # A variant that prints counters per launch (MHCDIFF_CUDA_BACKWARD=probe) writes them to stderr, one line per launch:
  # summarised per S/H/G (means over the launches, and the largest maxima; "tokens" are warps' shares of tokens). Its
  # A/B times include the counters' copies and a wait for the launch, so they are not comparable with the others'.
  grep -h "^probe S=" "$OUT/bench.log" 2>/dev/null | tr -d ':;(),' | awk '
    { s = $2; n[s]++; tok[s] += $8; max_tok[s] = ($10 + 0 > max_tok[s] + 0 ? $10 : max_tok[s]); fin[s] += $13
      dots[s] += $15; cyc[s] += $20; max_fin[s] = ($22 + 0 > max_fin[s] + 0 ? $22 : max_fin[s]) }
    END { for (s in n) printf "  probe %s (%d launches): %.0f cycles per token (max %d); %.1f tokens finishing, " \
          "%.1f dots, %.0f cycles per finishing token (max %d)\n", s, n[s], tok[s] / n[s], max_tok[s],
          fin[s] / n[s], dots[s] / n[s], cyc[s] / n[s], max_fin[s] }' | tee -a "$OUT/summary.log"
  # variant,round,"device",S,H,D,policy,dir,median_ms,bytes,gbps,pct_of_copy,...: median over rounds per variant/shape
  python3 - "$OUT/ab_$name.csv" <<'PY' | tee -a "$OUT/summary.log"
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) >= 12:
        rows[(f[0], f"{f[3]},{f[4]},{f[5]}")].append((float(f[8]), float(f[11])))
for shape in sorted({s for _, s in rows}):
    base = statistics.median(ms for ms, _ in rows.get(("default", shape), [(float("nan"), 0)]))
    for (variant, s), v in sorted(rows.items()):
        if s == shape:
            ms = statistics.median(m for m, _ in v)
            print(f"  {shape:>14} {variant:<20} {ms:.4f} ms  {statistics.median(p for _, p in v):5.1f} % of copy"
                  f"  {100 * (ms / base - 1):+5.1f} % vs default  ({len(v)} rounds)")
PY
}
# SASS=PATTERN: the machine code of every kernel whose mangled name contains PATTERN (cuobjdump), with a count of
# each opcode per kernel and in its hottest loop (the largest backward branch's body), for instruction budgets.
if [[ -n "${SASS:-}" ]]; then
  stage "sass ($SASS)"
  cuobjdump -sass "$MHCDIFF" 2>&1 | python3 scripts/sass_summary.py "$SASS" "$OUT/sass" | tee -a "$OUT/summary.log"
fi

# NCU="POLICY[:VARIABLE=VALUE] ...": Nsight Compute of one backward launch per entry (the bench's second, at
# NCU_SHAPE, default 16384,4,4096), with an experiment switch set where given: throughput, occupancy and the warps'
# stall reasons, to tell whether a kernel waits on memory, on a pipe or on issue. Full reports in $OUT/ncu_*.txt.
if [[ -n "${NCU:-}" ]]; then
  stage "ncu ($NCU)"
  NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for entry in $NCU; do
    policy=${entry%%:*}
    assign=$([[ $entry == *:* ]] && echo "${entry#*:}")
    report="$OUT/ncu_${entry//[^A-Za-z0-9]/_}.txt"
    timeout "${NCU_TIMEOUT:-120}" env $assign "$NCU_BIN" -k regex:backward_fast_kernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      "$MHCDIFF" bench --device cuda --reps 1 --policies "$policy" --shape "${NCU_SHAPE:-16384,4,4096}" \
      >"$report" 2>&1
    echo "ncu $entry rc=$?" | tee -a "$OUT/summary.log"
    grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issue Slots Busy|Issued Warp|No Eligible|Warp Cycles Per Issued|Registers Per|Executed Ipc A|highest-utilized|pipeline" \
      "$report" | sed 's/^ */  /' | tee -a "$OUT/summary.log"
    # The stall reasons, largest first (warps stalled per issued instruction).
    grep -E "issue_stalled_.*ratio" "$report" | awk '{print $NF, $1}' | sort -gr | head -8 | sed 's/^/  /' |
      tee -a "$OUT/summary.log"
    # NCU_SOURCE=1: the stall samples per machine instruction of the same launch (ncu's source page), summarised by
    # scripts/ncu_source_summary.py; the CSV goes into extra.tar.gz.
    if [[ -n "${NCU_SOURCE:-}" ]]; then
      source_csv="$OUT/source_${entry//[^A-Za-z0-9]/_}.csv.gz"
      timeout "${NCU_TIMEOUT:-120}" env $assign "$NCU_BIN" -k regex:backward_fast_kernel --launch-skip 1 --launch-count 1 \
        --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
        "$MHCDIFF" bench --device cuda --reps 1 --policies "$policy" --shape "${NCU_SHAPE:-16384,4,4096}" 2>&1 |
        gzip >"$source_csv"
      echo "ncu source $entry rc=${PIPESTATUS[0]}" | tee -a "$OUT/summary.log"
      python3 scripts/ncu_source_summary.py "$source_csv" 25 2>&1 | tee -a "$OUT/summary.log"
    fi
  done
fi

# ONLY_SANITIZERS=1: build, then only the sanitizer stages (a second device call after one with SKIP_SANITIZER=1,
# when both do not fit one call's time limit).
tests_rc=0
if [[ -z "${ONLY_SANITIZERS:-}" ]]; then
  stage "gpu tests"
  # Bounded: a kernel that hangs (the experiments have never run on a GPU) must not take the whole device call.
  timeout "${TESTS_TIMEOUT:-240}" "$GPU_TESTS" --gtest_filter="${GTEST_FILTER:-*}" >"$OUT/gpu_tests.log" 2>&1
  tests_rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|differ" "$OUT/gpu_tests.log" | head -40 | tee -a "$OUT/summary.log"
  echo "gpu tests rc=$tests_rc$([[ $tests_rc == 124 ]] && echo ' (timed out)')" | tee -a "$OUT/summary.log"

  if [[ -z "${SKIP_DUMP:-}" ]]; then
    stage "bench dump for the SPEC §9 counts (S=4096,H=4,D=4096: 67 M outputs)"
    "$MHCDIFF" bench --device cuda --shape 4096,4,4096 --policies hf-bf16,fp32-seeded,fp32-seeded-fma --reps 3 \
      --dump "$DUMP" --format csv >"$OUT/bench_dump.csv" 2>>"$OUT/bench.log"
  fi

  stage "bench"
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
  timeout "${BENCH_TIMEOUT:-120}" "$MHCDIFF" bench --device cuda --format csv --reps 40 ${BENCH_ARGS:-} >"$OUT/bench.csv" \
    2>>"$OUT/bench.log"
  echo "bench rc=$?" | tee -a "$OUT/summary.log"

  if [[ -n "${WAVES:-}" ]]; then
    # The exact and fp64 backward (and forward) over whole and partial waves of the compact exact backward's warps
    # until session 30 (132 multiprocessors x 12 on the H100 / H200; the register kernels since then take 8 per
    # multiprocessor): whether the time per token is the same at every S, or part of it is a fixed or per-wave cost
    # (16384 tokens are 10.34 such waves of 12, 4096 are 2.59).
    stage "wave scan"
    shapes=()
    for s in 1584 3168 4096 4752 6336 7920 9504 11088 12672 14256 15840 16384 17424; do shapes+=(--shape "$s,4,4096"); done
    timeout "${BENCH_TIMEOUT:-120}" "$MHCDIFF" bench --device cuda --format csv --reps 40 --policies exact,fp64 "${shapes[@]}" \
      >"$OUT/waves.csv" 2>>"$OUT/bench.log"
    echo "wave scan rc=$?" | tee -a "$OUT/summary.log"
    # "device",S,H,D,policy,dir,median_ms,...: ms per 1000 tokens between neighbouring S, per policy and direction
    python3 - "$OUT/waves.csv" <<'PY' | tee -a "$OUT/summary.log"
import collections, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) >= 7 and f[1].isdigit():
        rows[(f[4], f[5])].append((int(f[1]), float(f[6])))
for (policy, direction), v in sorted(rows.items()):
    v.sort()
    steps = "  ".join(f"{s}:{ms:.4f}" + (f" ({1000 * (ms - v[i - 1][1]) / (s - v[i - 1][0]):.4f}/1k)" if i else "")
                      for i, (s, ms) in enumerate(v))
    print(f"  {policy} {direction}: {steps}")
PY
  fi

  if [[ -n "${AB:-}" ]]; then
    read -r -a ab <<<"$AB"
    ab_experiment experiment "${ab[@]}"
    # Every benchmarked shape with each variant, for the table if one is adopted (SKIP_AB_BENCH=1: not yet).
    for variant in $([[ -z "${SKIP_AB_BENCH:-}" ]] && echo "${ab[@]:2}"); do
      env "${ab[0]}=$variant" timeout 60 "$MHCDIFF" bench --device cuda --format csv --reps 40 --policies exact \
        ${AB_PRESET:+--preset "$AB_PRESET"} >"$OUT/bench_$variant.csv" 2>>"$OUT/bench.log"
      echo "bench $variant rc=$?" | tee -a "$OUT/summary.log"
      grep -v '^device' "$OUT/bench_$variant.csv" | sed "s/^/  $variant,/" >>"$OUT/summary.log"
    done
  fi
fi

if [[ -z "${SKIP_TORCH:-}" && -z "${ONLY_SANITIZERS:-}" ]]; then
  stage "torch peers"
  # shellcheck disable=SC2046  # --dump only where the dump stage ran
  PYTHONUNBUFFERED=1 timeout "${TORCH_TIMEOUT:-300}" python3 scripts/torch_peer.py $([[ -z "${SKIP_DUMP:-}" ]] && echo --dump "$DUMP") \
    --bench "$OUT/bench.csv" --reps 40 >"$OUT/torch_peer.log" 2>&1
  echo "torch_peer rc=$?" | tee -a "$OUT/summary.log"
fi
rm -rf "$DUMP"

# Last: the slowest stages, so that a time limit cuts them rather than the figures. First the experiments' GPU tests.
sanitize() {  # sanitize NAME TOOL GTEST_FILTER
  timeout "${EXPERIMENT_SANITIZER_TIMEOUT:-90}" compute-sanitizer --tool "$2" --error-exitcode 99 "$GPU_TESTS" \
    --gtest_filter="$3" >>"$OUT/sanitizer_$1.log" 2>&1
  echo "$1 $2 rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/sanitizer_$1.log" | tail -1)" | tee -a "$OUT/summary.log"
}
if [[ -z "${SKIP_SANITIZER:-}" ]]; then
  for tool in memcheck racecheck; do
    [[ -n "${AB_TEST:-}" ]] && sanitize experiment $tool "$AB_TEST"
  done
fi
if [[ -z "${SKIP_SANITIZER:-}" && -z "${SKIP_SUBSET_SANITIZER:-}" ]]; then
  stage "compute-sanitizer (memcheck + racecheck on a subset)"
  subset='SpecShapes/EveryPresetMatchesCpu.*/H4_D2053:SpecShapes/EveryPresetMatchesCpu.*/H3_D264:CudaOperator.UncertifiedExactElementsAreFinishedOnTheHost:CudaOperator.ExactWithoutBinary64TwinsMatchesCpu:CudaOperator.LongTokenLoopsMatchCpu:CudaOperator.ExactForwardTokenLoopsMatchCpu:CudaOperator.ExactBackwardAtH4MatchesCpuAtExtremes'
  timeout "${SANITIZER_TIMEOUT:-200}" compute-sanitizer --tool memcheck --error-exitcode 99 "$GPU_TESTS" --gtest_filter="$subset" >"$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)" | tee -a "$OUT/summary.log"
  timeout "${SANITIZER_TIMEOUT:-200}" compute-sanitizer --tool racecheck --error-exitcode 99 "$GPU_TESTS" \
    --gtest_filter='SpecShapes/EveryPresetMatchesCpu.*/H3_D264:SpecShapes/EveryPresetMatchesCpu.*/H4_D4096' >>"$OUT/sanitizer.log" 2>&1
  echo "racecheck rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log" | tail -1)" | tee -a "$OUT/summary.log"
fi

stage "done"
echo
[[ -f "$OUT/bench.csv" ]] && cut -d, -f2- "$OUT/bench.csv" | tr , '\t'
[[ -f "$OUT/torch_peer.log" ]] && grep -v "^W\|^I\|warn" "$OUT/torch_peer.log" | tail -60
echo "gpu tests rc=$tests_rc"
exit $tests_rc
