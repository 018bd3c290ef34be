#!/usr/bin/env bash
# Installs the Debian 12 packages the build needs (only those missing),
# configures the Meson build in build/ (once) and builds it. Safe to run
# again: a second run installs nothing and rebuilds only what changed.
#   scripts/setup.sh [--tests]    --tests also installs what the tests use
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(git g++ meson ninja-build pkg-config libfmt-dev libyaml-cpp-dev nlohmann-json3-dev libopenblas-dev
          libbenchmark-dev libgtest-dev mpich libmpich-dev gnuplot-nox libdnnl-dev)
if [[ "${1:-}" == "--tests" ]]; then
  # The PyTorch cross-check runs in Debian's own python3 with Debian's torch.
  packages+=(python3 python3-numpy python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [[ ! -f build/build.ninja ]]; then
  meson setup build
elif ((${#missing[@]})); then
  meson setup --reconfigure build  # newly installed packages turn on optional parts (MPI, tests)
fi
ninja -C build
