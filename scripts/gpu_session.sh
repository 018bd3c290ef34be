#!/usr/bin/env bash
# What we run on a machine with a GPU (none is available to CI): build with
# CUDA, run the GPU suite, then the CUDA rows of Table 1 through the harness
# (table), and the CUDA kernel microbenchmarks (kernels) and tensor
# parallelism's layouts on mpi_cuda against cuda (tp), neither part of all.
# Everything it writes goes under $OUT (default: gpu-session/). The copy of
# the tree on the GPU machine has no git history: run scripts/stamp_source.sh
# in the checkout first, so its builds record the real commit. The harness
# runs with --force: a GPU session measures anew rather than reuse stored runs.
#   usage: bash scripts/gpu_session.sh [suite|table|kernels|tp|all]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-session}
mkdir -p "$OUT"
what=${1:-all}
# OpenMPI (if that is the machine's MPI) refuses root without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
if [ ! -f build-gpu/build.ninja ]; then
  meson setup build-gpu -Dcuda=enabled -Dtests=enabled >"$OUT/setup.log" 2>&1 || { tail -40 "$OUT/setup.log"; exit 1; }
fi
ninja -C build-gpu >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" -A4 "$OUT/build.log" | head -80; exit 1; }
grep -c warning "$OUT/build.log" | sed 's/^/build warnings: /'
rc=0
if [ "$what" = suite ] || [ "$what" = all ]; then
  meson test -C build-gpu --suite cuda --print-errorlogs --num-processes 1 >"$OUT/suite.log" 2>&1 || rc=1
  tail -15 "$OUT/suite.log"
  cp build-gpu/meson-logs/testlog.txt "$OUT/testlog.txt"
fi
if [ "$what" = table ] || [ "$what" = all ]; then
  build-gpu/bench/harness run experiments/table1_cuda.yaml --force >"$OUT/table.log" 2>&1 || rc=1
  tail -25 "$OUT/table.log"
  tar czf "$OUT/table1_cuda.tgz" results/table1_cuda reports 2>/dev/null
fi
if [ "$what" = kernels ]; then
  [ -x build-gpu/bench/kernel_bench_cuda ] ||
    echo "kernel_bench_cuda was not built: Google Benchmark (libbenchmark-dev) was not found at configure time"
  build-gpu/bench/harness run experiments/kernels_cuda.yaml --force >"$OUT/kernels.log" 2>&1 || rc=1
  tail -25 "$OUT/kernels.log"
  tar czf "$OUT/kernels_cuda.tgz" results/kernels_cuda reports/kernels_cuda 2>/dev/null
fi
if [ "$what" = tp ]; then
  build-gpu/bench/harness run experiments/tensor_parallel_cuda.yaml --force >"$OUT/tp.log" 2>&1 || rc=1
  tail -25 "$OUT/tp.log"
  tar czf "$OUT/tensor_parallel_cuda.tgz" results/tensor_parallel_cuda reports/tensor_parallel_cuda 2>/dev/null
fi
exit $rc
