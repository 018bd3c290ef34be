#!/bin/bash
# A first measurement of tensor parallelism's block types, by hand (the
# harness experiment is not built yet): tp 1 (the standard model, one rank)
# and tp 2 on 2 ranks with all tp, all spd, all parallel and a mix, on a small
# model (L 4, NH 4, C 128, T 64, batch 16), 200 steps, 3 seeds, validation
# held out (10%). Prints one line per run: median step time (steps 1..),
# per-step tensor-parallel calls and bytes, and the final validation loss.
# usage: scripts/tp_study.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config configs/original.yaml --model.n_layer 4 --model.n_head 4 --model.n_embd 128 --model.block_size 64
        --train.batch_size 16 --train.seq_len 64 --train.steps "$steps" --train.threads 1 --train.eval_every "$steps"
        --train.eval_batches 8 --data.val_fraction 0.1 --optimizer.lr 1e-3 --train.save_checkpoint false
        --generate.max_new_tokens 0 --train.peak_gflops 50)
summarise() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
steps = [r for r in recs if r["event"] == "step"]
val = [r["val_loss"] for r in recs if r["event"] == "eval"]
ms = statistics.median(r["step_ms"] for r in steps[1:])
s = steps[-1]
print(f"{sys.argv[2]:<32} step {ms:7.2f} ms  tp {s['tp_calls']:3d} calls {s['tp_bytes']:>9d} B  "
      f"train loss {s['loss']:.4f}  val loss {val[-1]:.4f}")
PY
}
for seed in 1 2 3; do
  mpiexec -n 1 "$build/stages/mpi" train "${common[@]}" --train.seed $seed --out "$work/tp1_$seed" 2>/dev/null
  summarise "$work/tp1_$seed" "tp1 standard seed $seed"
  for types in tp,tp,tp,tp spd,spd,spd,spd parallel,parallel,parallel,parallel tp,parallel,parallel,spd; do
    mpiexec -n 2 "$build/stages/mpi" train "${common[@]}" --train.seed $seed --parallel.tp 2 \
      --parallel.block_types $types --out "$work/tp2_${types}_$seed" 2>/dev/null
    summarise "$work/tp2_${types}_$seed" "tp2 $types seed $seed"
  done
done
