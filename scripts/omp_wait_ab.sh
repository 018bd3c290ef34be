#!/usr/bin/env bash
# The OpenMP wait policy side by side (docs/benchmarks.md, "Contention"):
# libgomp's default (the engine's re-execution skipped by setting its marker
# GPT2_OMP_WAIT_POLICY) against the engine's GOMP_SPINCOUNT=300, alternating
# run by run, with the machine idle and with one busy process beside it.
# build/bench/train_step, small preset, batch 128 x 32, 2 threads, 20 timed
# steps per run; prints one line per run: load, setting, median ms/step.
# usage: scripts/omp_wait_ab.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE OMP_WAIT_POLICY GOMP_SPINCOUNT
out=$(mktemp)
busy=""
trap 'rm -f "$out"; [ -n "$busy" ] && kill $busy 2>/dev/null || true' EXIT

step_ms() {  # env assignments for this run, then prints its median ms/step
  env "$@" "$build/bench/train_step" --preset small --batch 128 --seq 32 --threads 2 --steps 20 --warmup 3 \
    --json "$out" >/dev/null 2>&1
  python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print(j['results'][0]['median_ms'], '|', \
j['omp_wait_policy'], '|', j['blas_core'])" "$out"
}

for load in 0 1; do
  if [ "$load" = 1 ]; then
    sh -c 'while :; do :; done' &
    busy=$!
  fi
  for _ in $(seq "$rounds"); do
    echo "busy=$load default  $(step_ms GPT2_OMP_WAIT_POLICY=libgomp-default)"
    echo "busy=$load engine   $(step_ms)"
  done
  if [ -n "$busy" ]; then kill "$busy"; busy=""; fi
done
