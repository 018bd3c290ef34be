#!/usr/bin/env bash
# tp 2 with and without Megatron's sequence parallelism, side by side
# (docs/tensor_parallel.md, "Sequence parallelism"): the original
# configuration (L6 NH6 C384, batch 16 x 256), 10 steps on 2 ranks x 1
# thread, the two alternated, ROUNDS rounds; per run the median step over
# steps 1-9, then the median over the rounds; the activations per rank and
# the counted tensor-parallel traffic of a step.
#   bash scripts/sequence_parallel_ab.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for ((r = 1; r <= rounds; ++r)); do
  for sp in false true; do
    mpiexec -n 2 build/stages/mpi train --config configs/original.yaml --train.steps 10 --train.threads 1 \
      --parallel.tp 2 --parallel.sequence_parallel "$sp" --generate.max_new_tokens 0 --train.save_checkpoint false \
      --out "$work/${sp}_$r" > "$work/${sp}_$r.log" 2>&1 || { cat "$work/${sp}_$r.log"; exit 1; }
  done
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
print("| tp 2 | median step (ms) | per round | comm (ms) | activations / rank (MB) | of them layers | tp calls, MB a step | final loss |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for sp in ("false", "true"):
    ms, comm = [], []
    for r in range(1, rounds + 1):
        recs = [json.loads(l) for l in open(f"{work}/{sp}_{r}/metrics.jsonl")]
        steps = [x for x in recs if x["event"] == "step"][1:]
        ms.append(statistics.median(x["step_ms"] for x in steps))
        comm.append(statistics.median(x["comm_ms"] for x in steps))
        m = [x for x in recs if x["event"] == "summary"][0]["provenance"]["memory"][0]
    print(f"| sequence_parallel {sp} | {statistics.median(ms):.0f} | {', '.join(f'{x:.0f}' for x in ms)} | "
          f"{statistics.median(comm):.0f} | {m['activations_bytes'] / 1e6:.1f} | {m['arena_layers_bytes'] / 1e6:.1f} | "
          f"{steps[0]['tp_calls']}, {steps[0]['tp_bytes'] / 1e6:.1f} | {steps[-1]['loss']} |")
PY
