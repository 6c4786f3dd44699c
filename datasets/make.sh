#!/usr/bin/env bash
# Regenerates the shipped datasets (datasets/README.md). Usage: bash datasets/make.sh [path/to/mhcdiff]
set -euo pipefail
MHCDIFF=${1:-build/apps/mhcdiff/mhcdiff}
cd "$(dirname "$0")/.."
"$MHCDIFF" gen --preset seed-example --shape 16,2,64 --seed 0 --grad --compress 9 -o datasets/seed-example.h5
"$MHCDIFF" gen --preset randn --shape 64,4,512 --seed 1 --grad --compress 9 -o datasets/randn.h5
"$MHCDIFF" gen --preset realistic --shape 64,4,512 --seed 2 --grad --compress 9 -o datasets/realistic.h5
"$MHCDIFF" gen --preset cancellation --shape 64,4,512 --seed 3 --compress 9 -o datasets/cancellation.h5
du -ch datasets/*.h5 | tail -1
