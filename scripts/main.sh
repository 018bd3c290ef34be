#!/usr/bin/env bash
# The main job: builds, then trains the reproduced project's configuration
# (experiments/original.yaml: L6 NH6 C384, T 256, batch 16, 50 steps) on the
# shipped corpus with the serial stage, and prints 30 generated tokens.
# Results (config.yaml, metrics.jsonl, checkpoint.bin) go to runs/main/.
# Extra arguments are passed to `serial train` (e.g. --train.steps 5).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/stages/serial train --config experiments/original.yaml --out runs/main --overwrite "$@"
