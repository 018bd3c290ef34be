#!/usr/bin/env bash
# The cost of train.sequence_pieces, side by side in one run
# (docs/determinism.md, "Sequence pieces"): the original configuration
# (L6 NH6 C384, batch 16 x 256), 6 steps, 1 thread a rank, ROUNDS rounds
# alternating: serial fast (train.deterministic false), deterministic,
# deterministic with 8 pieces (pieces of 32 rows); cp 2 fast (the ring)
# and deterministic with 8 pieces (the all-gather); the deterministic runs'
# products through GEMM (onednn, the default here, or openblas). Each run's
# median step over steps 1-5, then the median over the rounds. Prints a
# markdown table.
#   bash scripts/sequence_pieces_cost.sh [ROUNDS] [onednn|openblas]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
gemm=${2:-onednn}  # the deterministic runs' fp32 products: onednn, or openblas (train.gemm auto's choice there)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
common=(--config configs/original.yaml --train.steps 6 --generate.max_new_tokens 0 --train.save_checkpoint false
        --train.threads 1)
export OPENBLAS_NUM_THREADS=1
configs=(
  "serial|fast|build/stages/serial|--train.deterministic false"
  "serial|det|build/stages/serial|--train.deterministic true --train.gemm $gemm"
  "serial|det8|build/stages/serial|--train.deterministic true --train.sequence_pieces 8 --train.gemm $gemm"
  "cp2|fast|mpiexec -n 2 build/stages/mpi|--parallel.cp 2"
  "cp2|det8|mpiexec -n 2 build/stages/mpi|--parallel.cp 2 --train.deterministic true --train.sequence_pieces 8 --train.gemm $gemm"
)
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    IFS='|' read -r layout mode launcher opts <<<"$c"
    # shellcheck disable=SC2086
    $launcher train "${common[@]}" $opts --out "$work/$layout-$mode-r$r" >/dev/null </dev/null
  done
  echo "round $r of $rounds" >&2
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, "scripts")
from run_records import median_step_ms as step_ms  # noqa: E402
names = {"fast": "default (fast order)", "det": "deterministic", "det8": "deterministic, 8 pieces"}
print("| layout | run | median step ms | per round |")
print("|---|---|---:|---|")
for layout, modes in (("serial", ("fast", "det", "det8")), ("cp2", ("fast", "det8"))):
    for m in modes:
        per = [step_ms(os.path.join(work, f"{layout}-{m}-r{r}")) for r in range(1, rounds + 1)]
        label = "serial, 1 thread" if layout == "serial" else "cp 2 x 1 thread"
        print(f"| {label} | {names[m]} | {statistics.median(per):.1f} | {', '.join(f'{x:.1f}' for x in per)} |")
PY
