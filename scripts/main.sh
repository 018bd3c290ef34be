#!/usr/bin/env bash
# The main job: builds, then reproduces the runtime table (the paper's
# Table 1) with the harness: experiments/table1.yaml runs every stage on the
# reproduced project's configuration (L6 NH6 C384, T 256, batch 16, 50 steps,
# then 30 generated tokens), 3 repetitions each; stages this machine cannot
# run are recorded as skipped with the reason. Completed runs are reused, so a
# second invocation only rebuilds the reports. Takes about 10 minutes on a
# bare 2-core machine (README). Prints where the reports are.
# Extra arguments go to `harness run` (e.g. --force to rerun everything).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
build/bench/harness run experiments/table1.yaml "$@"
