#!/usr/bin/env bash
# One device call for kernel analysis (docs/performance.md, "how the figures were found"): build mhcdiff,
# dump the CUDA backend's SASS, and read the hardware counters (ncu) of one forward and one backward
# launch per policy at S=16384, H=4, D=4096. Logs go to $OUT (default ./out).
#   usage: scripts/gpu-profile.sh [policy ...]
#   env: BUILD=build-gpu JOBS=16 SHAPE=16384,4,4096 DIRS="forward backward" ARCHS=90-real (quicker build)
#        SOURCE=1 (also the per-instruction stall samples of each profiled kernel, as CSV)
set -uo pipefail
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
SHAPE=${SHAPE:-16384,4,4096}
mkdir -p "$OUT"
policies=("$@")
[[ ${#policies[@]} -eq 0 ]] && policies=(hf-bf16 fp32-seeded fp32-seeded-fma fp64 exact)

if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMHCDIFF_CUDA=ON ${ARCHS:+-DMHCDIFF_CUDA_ARCHITECTURES=$ARCHS} &&
       cmake --build "$BUILD" -j"$JOBS" --target mhcdiff; } >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; exit 1
fi
MHCDIFF="$BUILD/apps/mhcdiff/mhcdiff"
cuobjdump --dump-sass "$BUILD/src/kernels/cuda/libmhcdiff_cuda.a" 2>/dev/null | gzip >"$OUT/sass.txt.gz"

sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats
          --section Occupancy --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis
          --section SourceCounters
          --metrics "regex:sm__pipe_.*_cycles_active.avg.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*.sum$")
for p in "${policies[@]}"; do
  for dir in ${DIRS:-forward backward}; do
    ncu --clock-control none "${sections[@]}" -k "regex:${dir}_" --launch-skip 1 --launch-count 1 \
      "$MHCDIFF" bench --device cuda --shape "$SHAPE" --policies "$p" --reps 1 \
      >"$OUT/ncu_${p}_${dir}.txt" 2>&1
    echo "== $p $dir"
    grep -E "pipe_|Duration|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|Achieved Occupancy|Registers Per|Theoretical Occupancy|One or More Eligible|Stall|Local" \
      "$OUT/ncu_${p}_${dir}.txt" | head -60
    if [[ -n "${SOURCE:-}" ]]; then
      ncu --clock-control none --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
        -k "regex:${dir}_" --launch-skip 1 --launch-count 1 \
        "$MHCDIFF" bench --device cuda --shape "$SHAPE" --policies "$p" --reps 1 2>/dev/null | gzip >"$OUT/source_${p}_${dir}.csv.gz"
    fi
  done
done
