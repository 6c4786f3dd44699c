#!/usr/bin/env bash
# Configures and builds mhcdiff (Release) in build/. Extra arguments go to cmake's configure step,
# e.g. -DMHCDIFF_CUDA=OFF or -DMHCDIFF_MPFR=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$jobs"
