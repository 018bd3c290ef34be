#!/usr/bin/env python3
"""Renders the precision peer comparison (scripts/precision_peer.sh's JSON)
as Markdown: ours in fp32 and bf16 against PyTorch fp32 and PyTorch's bf16
autocast, side by side, with the machine, the CPU's bf16 support, the
oneDNN kernel that ran and the issue's goals (docs/precision.md).

usage: precision_report.py PEER_JSON [--commit SHA] > peer.md
"""
import argparse
import json
import sys

GOALS = [("ours_fp32", 1.7, "our bf16 step at least 1.7x our fp32 step"),
         ("torch_fp32", 2.5, "at least 2.5x PyTorch fp32"),
         ("torch_bf16", 1.5, "at least 1.5x PyTorch bf16 autocast")]


def render(d, commit):
    rows = d["rows"]
    out = ["# Precision: our bf16 step against PyTorch's, side by side", ""]
    out.append(f"Machine: {d.get('cpu')}, AVX512-BF16 {'present' if d.get('cpu_bf16') else 'absent'}; "
               f"OpenBLAS kernel {d.get('blas_core')}; PyTorch {d.get('torch')}; "
               f"{d.get('rounds')} rounds of 3 timed steps, medians.")
    kernels = sorted({r.get("ours_bf16_backend", "") for r in rows})
    out.append(f"Our bf16 backend: {'; '.join(kernels)}.")
    if commit:
        out.append(f"Engine commit: {commit}.")
    out += ["", "Command: `bash scripts/precision_peer.sh` (the original configuration, batch 16 x 256, "
            "from the same initial weights).", ""]
    out.append("| threads | ours fp32 ms | ours bf16 ms | PyTorch fp32 ms | PyTorch bf16 autocast ms | "
               "ours bf16 vs ours fp32 | vs PyTorch fp32 | vs PyTorch bf16 |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        b = r["ours_bf16"]
        out.append(f"| {r['threads']} | {r['ours_fp32']:.1f} | {b:.1f} | {r['torch_fp32']:.1f} | "
                   f"{r['torch_bf16']:.1f} | {r['ours_fp32'] / b:.2f}x | {r['torch_fp32'] / b:.2f}x | "
                   f"{r['torch_bf16'] / b:.2f}x |")
    out += ["", "| goal | " + " | ".join(f"{r['threads']} thread{'s' if r['threads'] > 1 else ''}" for r in rows)
            + " |", "|---|" + "---:|" * len(rows)]
    for key, target, text in GOALS:
        cells = []
        for r in rows:
            x = r[key] / r["ours_bf16"]
            cells.append(f"{x:.2f}x {'met' if x >= target else '**not met**'}")
        out.append(f"| {text} | " + " | ".join(cells) + " |")
    if not d.get("cpu_bf16"):
        out += ["", "This CPU lacks AVX512-BF16: oneDNN converts, so the speed goals do not apply here."]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--commit", default="")
    a = ap.parse_args()
    try:
        with open(a.json) as f:
            d = json.load(f)
        sys.stdout.write(render(d, a.commit))
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"precision_report.py: {a.json}: {e}")


if __name__ == "__main__":
    main()
