#!/usr/bin/env bash
# README command 1: sets everything up, builds (Release), and runs the main job on a shipped dataset:
# every policy, forward and backward, then each policy compared with the exact truth.
# Results land in out/ (ignored by git). Pass another input file as $1 to run on it instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bin=build/apps/mhcdiff/mhcdiff
input=${1:-datasets/realistic.h5}
mkdir -p out
"$bin" info "$input"
"$bin" run "$input" -o out/results.h5 --policies all --backward
for policy in hf-bf16 fp32-seeded fp32-seeded-fma fp32-mixfirst fp64; do
  echo
  echo "=== $policy vs exact ==="
  # Exit code 1 (a gate failed) is information here, not an error of the job.
  "$bin" compare "out/results.h5:/results/$policy" "out/results.h5:/results/exact" --inputs "$input" || [ $? -eq 1 ]
done
