#!/usr/bin/env bash
# Our training step in fp32 and bf16 against PyTorch's in fp32 and bf16
# autocast, side by side in one run (docs/precision.md): the original
# configuration (L6 NH6 C384, batch 16 x 256), from the same initial weights,
# at 1 and 2 threads, the four alternating for 3 rounds of 3 timed steps
# (after 1 warm-up) each; the median of each round, then over the rounds.
# OpenBLAS picks its own kernel on both sides (the variables that pin it
# here are unset), as experiments/peer.yaml does. Needs Debian's
# python3-torch. Writes reports/precision/peer.json and peer.md and prints the table.
#   bash scripts/precision_peer.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
build/bench/train_step --save-init "$work/init.bin"
for r in $(seq 1 "$rounds"); do
  for t in 1 2; do
    for p in fp32 bf16; do
      build/bench/train_step --threads "$t" --steps 3 --precision "$p" --json "$work/ours_${p}_t${t}_r${r}.json" >/dev/null
    done
    OMP_NUM_THREADS=$t /usr/bin/python3 bench/peers/torch_gpt2.py --init "$work/init.bin" --threads "$t" --steps 3 \
      --json "$work/torch_fp32_t${t}_r${r}.json" >/dev/null
    OMP_NUM_THREADS=$t /usr/bin/python3 bench/peers/torch_gpt2.py --init "$work/init.bin" --threads "$t" --steps 3 \
      --bf16 --json "$work/torch_bf16_t${t}_r${r}.json" >/dev/null
    echo "round $r, $t threads done" >&2
  done
done
mkdir -p reports/precision
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import glob, json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def row(f):  # ours: {..., "results": [one per thread count]}; the peer's: the row itself
    d = json.load(open(f))
    return d["results"][0] if "results" in d else d
def median_ms(f):
    return row(f)["median_ms"]
first = json.load(open(os.path.join(work, "ours_fp32_t1_r1.json")))
out = {"rounds": rounds, "cpu_bf16": "avx512_bf16" in open("/proc/cpuinfo").read(), "cpu": first.get("cpu"),
       "blas_core": first.get("blas_core"), "torch": row(os.path.join(work, "torch_fp32_t1_r1.json")).get("torch"),
       "rows": []}
print("| threads | ours fp32 ms | ours bf16 ms | PyTorch fp32 ms | PyTorch bf16 autocast ms | ours bf16 vs ours fp32 | vs PyTorch fp32 | vs PyTorch bf16 |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in (1, 2):
    m = {k: statistics.median(median_ms(f) for f in sorted(glob.glob(os.path.join(work, f"{k}_t{t}_r*.json"))))
         for k in ("ours_fp32", "ours_bf16", "torch_fp32", "torch_bf16")}
    out["rows"].append({"threads": t, **{k: round(v, 1) for k, v in m.items()},
                        "ours_bf16_backend": row(os.path.join(work, f"ours_bf16_t{t}_r1.json")).get("backend")})
    print(f"| {t} | {m['ours_fp32']:.1f} | {m['ours_bf16']:.1f} | {m['torch_fp32']:.1f} | {m['torch_bf16']:.1f} | "
          f"{m['ours_fp32'] / m['ours_bf16']:.2f}x | {m['torch_fp32'] / m['ours_bf16']:.2f}x | "
          f"{m['torch_bf16'] / m['ours_bf16']:.2f}x |")
with open("reports/precision/peer.json", "w") as f:
    json.dump(out, f, indent=1)
PY
/usr/bin/python3 bench/peers/precision_report.py reports/precision/peer.json --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  > reports/precision/peer.md
echo "reports/precision/peer.json, reports/precision/peer.md" >&2
