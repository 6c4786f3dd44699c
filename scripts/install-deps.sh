#!/usr/bin/env bash
# Installs mhcdiff's build and test dependencies from Debian's archive, by name, and only those missing.
# Idempotent: a second run installs nothing. Needs root (or sudo) when something is missing.
# CUDA is not installed here: the CUDA backend builds where /usr/local/cuda/bin/nvcc exists.
set -euo pipefail

packages=(
  g++ make cmake pkg-config
  libhdf5-dev hdf5-tools
  libcli11-dev libspdlog-dev libfmt-dev libboost-dev libmpfr-dev libgtest-dev
  python3 python3-torch python3-numpy python3-h5py
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
