#!/usr/bin/env bash
# The fp32 products' providers (issue 45, docs/benchmarks.md "GEMM providers"),
# side by side in one run: the original configuration's training step (L6 NH6
# C384, batch 16 x 256) with train.gemm openblas (every product OpenBLAS: the
# engine before issue 45, call for call) and auto (each shape's faster
# provider), stepped in turn inside one train_step process, and PyTorch's fp32
# step from the same weights; at 1 and 2 threads, with OPENBLAS_CORETYPE=Haswell
# (the pin some environments set) and with it unset, the same treatment on both
# sides; ROUNDS rounds of 3 timed steps after 1 warm-up, the median of each,
# then over the rounds. Then GPT-2 124M (2 x 1024 tokens, 2 threads, unset pin):
# ours (openblas and auto) against PyTorch's step on the same model.
# The auto choices come from the user's cache (gemm_choices.json), made in the
# warm-up step where a shape is new. Needs Debian's python3-torch. Writes
# reports/gemm/providers.json and providers.md and prints the table.
#   bash scripts/gemm_providers.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
unset OPENBLAS_L2_SIZE
build/bench/train_step --save-init "$work/init.bin"
build/bench/train_step --preset gpt2-124m --save-init "$work/init124.bin"
with_pin() {  # pin command...: runs the command with OPENBLAS_CORETYPE set to pin, or unset for "unset"
  local pin=$1; shift
  if [[ $pin == unset ]]; then env -u OPENBLAS_CORETYPE "$@"; else OPENBLAS_CORETYPE=$pin "$@"; fi
}
for r in $(seq 1 "$rounds"); do
  for pin in Haswell unset; do
    for t in 1 2; do
      with_pin "$pin" build/bench/train_step --threads "$t" --steps 3 --gemm openblas,auto \
        --json "$work/ours_${pin}_t${t}_r${r}.json" >/dev/null
      with_pin "$pin" env OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" /usr/bin/python3 bench/peers/torch_gpt2.py \
        --init "$work/init.bin" --threads "$t" --steps 3 --json "$work/torch_${pin}_t${t}_r${r}.json" >/dev/null
      echo "round $r, OPENBLAS_CORETYPE $pin, $t threads done" >&2
    done
  done
  with_pin unset build/bench/train_step --preset gpt2-124m --batch 2 --seq 1024 --threads 2 --steps 2 \
    --gemm openblas,auto --json "$work/ours_124m_r${r}.json" >/dev/null
  with_pin unset env OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/peers/torch_gpt2.py \
    --init "$work/init124.bin" --threads 2 --batch 2 --seq 1024 --steps 2 --json "$work/torch_124m_r${r}.json" >/dev/null
  echo "round $r, GPT-2 124M done" >&2
done
mkdir -p reports/gemm
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    return json.load(open(os.path.join(work, name)))
def ours(name, gemm):
    return next(x for x in load(name)["results"] if x["gemm"] == gemm)
med = statistics.median
first = load("ours_unset_t1_r1.json")
out = {"rounds": rounds, "cpu": first["cpu"], "date": first["date"], "git_commit": first["git_commit"],
       "torch": load("torch_unset_t1_r1.json").get("torch"), "rows": []}
lines = ["| OPENBLAS_CORETYPE | kernel | threads | before: openblas ms | after: auto ms | after / before speed-up | "
         "PyTorch fp32 ms | ours (auto) vs PyTorch | auto's share of the best ceiling | ceilings OpenBLAS / oneDNN GFLOP/s |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
for pin in ("Haswell", "unset"):
    for t in (1, 2):
        names = [f"ours_{pin}_t{t}_r{r}.json" for r in range(1, rounds + 1)]
        before = med(ours(n, "openblas")["median_ms"] for n in names)
        after = med(ours(n, "auto")["median_ms"] for n in names)
        share = med(ours(n, "auto")["fraction_of_best_ceiling"] for n in names)
        ob = med(ours(n, "auto")["sgemm_ceiling_gflops"] for n in names)
        dn = med(ours(n, "auto")["onednn_ceiling_gflops"] for n in names)
        torch = med(load(f"torch_{pin}_t{t}_r{r}.json")["median_ms"] for r in range(1, rounds + 1))
        kernel = load(names[0])["blas_core"]
        choices = ours(names[-1], "auto")["gemm_choices"]
        onednn = sum(1 for v in choices.values() if v == "onednn")
        out["rows"].append({"pin": pin, "kernel": kernel, "threads": t, "openblas_ms": before, "auto_ms": after,
                            "torch_ms": torch, "share_of_best_ceiling": share, "openblas_ceiling": ob,
                            "onednn_ceiling": dn, "auto_onednn_shapes": onednn, "auto_shapes": len(choices)})
        lines.append(f"| {pin} | {kernel} | {t} | {before:.0f} | {after:.0f} | {before / after:.2f}x | {torch:.0f} | "
                     f"{torch / after:.2f}x | {100 * share:.1f}% | {ob:.1f} / {dn:.1f} |")
names = [f"ours_124m_r{r}.json" for r in range(1, rounds + 1)]
b124 = med(ours(n, "openblas")["median_ms"] for n in names)
a124 = med(ours(n, "auto")["median_ms"] for n in names)
t124 = med(load(f"torch_124m_r{r}.json")["median_ms"] for r in range(1, rounds + 1))
out["gpt2_124m"] = {"threads": 2, "B": 2, "T": 1024, "openblas_ms": b124, "auto_ms": a124, "torch_ms": t124}
lines += ["", "| GPT-2 124M, 2 x 1024 tokens, 2 threads (pin unset) | ms/step |", "|---|---:|",
          f"| ours, openblas | {b124:.0f} |", f"| ours, auto | {a124:.0f} |", f"| PyTorch fp32 | {t124:.0f} |",
          f"| PyTorch / ours (auto) | {t124 / a124:.2f}x |"]
head = (f"{out['cpu']}, {out['date']}, commit {out['git_commit']}, torch {out['torch']}, {rounds} rounds "
        f"(medians of 3 timed steps, then over rounds); auto chose oneDNN for "
        f"{out['rows'][-1]['auto_onednn_shapes']} of {out['rows'][-1]['auto_shapes']} timed shapes at 2 threads, pin unset")
text = head + "\n\n" + "\n".join(lines) + "\n"
json.dump(out, open("reports/gemm/providers.json", "w"), indent=1)
open("reports/gemm/providers.md", "w").write(text)
print(text)
PY
