#!/usr/bin/env bash
# The main job: builds, then trains the original configuration (L6 NH6 C384,
# T 256, batch 16) for a few steps on the CPU and reports its speed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/bench/train_step --threads "$(nproc)" --steps 3 "$@"
