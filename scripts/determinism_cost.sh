#!/usr/bin/env bash
# The cost of train.deterministic, side by side in one run (docs/determinism.md):
# the original configuration (L6 NH6 C384, batch 16 x 256), 6 steps with
# train.deterministic false (train.gemm auto: each shape's faster provider),
# true (train.gemm auto: OpenBLAS) and true with train.gemm onednn,
# alternating, for serial at 1 and 2 threads, dp 2 and tp 2 (2 ranks x 1
# thread), ROUNDS rounds; each run's median step over steps 1-5, then the
# median over the rounds. OpenBLAS picks its own kernel (the variables that
# pin it here are unset), as the other peer comparisons do. Prints a
# markdown table.
#   bash scripts/determinism_cost.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
common=(--config configs/original.yaml --train.steps 6 --generate.max_new_tokens 0 --train.save_checkpoint false)
run() {  # name mode launcher [options...]: the launcher is word-split ("mpiexec -n 2 build/stages/mpi")
  local name=$1 mode=$2 launcher=$3; shift 3
  local det=true gemm=auto
  if [[ $mode == false ]]; then det=false; fi
  if [[ $mode == onednn ]]; then gemm=onednn; fi
  # shellcheck disable=SC2086
  $launcher train "${common[@]}" "$@" --train.deterministic "$det" --train.gemm "$gemm" --out "$work/$name-$mode-r$r" >/dev/null
}
export OPENBLAS_NUM_THREADS=1  # our threads split the products (the stages set it too)
for r in $(seq 1 "$rounds"); do
  for det in false true onednn; do
    run serial_t1 "$det" build/stages/serial --train.threads 1
    run serial_t2 "$det" build/stages/serial --train.threads 2
    run dp2 "$det" "mpiexec -n 2 build/stages/mpi" --train.threads 1
    run tp2 "$det" "mpiexec -n 2 build/stages/mpi" --train.threads 1 --parallel.tp 2
  done
  echo "round $r done" >&2
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import os, statistics, sys
sys.path.insert(0, "scripts")
from run_records import median_step_ms as step_ms
work, rounds = sys.argv[1], int(sys.argv[2])
print("| layout | default ms | deterministic ms | cost | deterministic, oneDNN ms | cost | rounds (default / deterministic / oneDNN) |")
print("|---|---:|---:|---:|---:|---:|---|")
for name, label in (("serial_t1", "serial, 1 thread"), ("serial_t2", "serial, 2 threads"),
                    ("dp2", "dp 2 x 1 thread"), ("tp2", "tp 2 x 1 thread")):
    per = {det: [step_ms(os.path.join(work, f"{name}-{det}-r{r}")) for r in range(1, rounds + 1)]
           for det in ("false", "true", "onednn")}
    a, b, c = (statistics.median(per[k]) for k in ("false", "true", "onednn"))
    rr = ", ".join(f"{x:.1f}/{y:.1f}/{z:.1f}" for x, y, z in zip(per["false"], per["true"], per["onednn"]))
    print(f"| {label} | {a:.1f} | {b:.1f} | {100 * (b / a - 1):+.1f}% | {c:.1f} | {100 * (c / a - 1):+.1f}% | {rr} |")
PY
