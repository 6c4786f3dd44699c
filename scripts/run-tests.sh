#!/usr/bin/env bash
# README command 2: sets everything up, builds, and runs every test (CPU tests; GPU tests report
# themselves skipped where no GPU exists).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure -j"$jobs"
