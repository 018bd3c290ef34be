#!/usr/bin/env python3
"""model.init original: the reproduced project's initialisation, checked
against an independent computation, and the same on every stage.

  * The expected values are computed here from DESIGN.md's statement of their
    scheme alone, with the C library's own srand/rand (through ctypes), libm's
    logf/cosf/sqrtf and float32 arithmetic (numpy). They are compared with the
    weights `serial init` writes, element for element, bit for bit:
      - the first values of wte (the first draws);
      - block 0's key weights of head 1, which follow wte, wpe and head 0's
        key, query and value;
      - the first values of lm_head, which follow every block.
  * `mpi init` on 2 ranks (and `cuda init` where a GPU is present) writes the
    same bytes as serial.
  * A run records the choice: the checkpoint's header has model.init.
  * The default stays philox, and an unknown name is refused.

usage: init_original_test.py --serial PATH --mpi PATH --mpiexec PATH [--cuda PATH]
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import ctypes
import ctypes.util
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checkpoint_file import load  # noqa: E402
from checks import Checks  # noqa: E402

V_TEXT = "the cat sat on the mat . the dog ran to the park , and the cat ran home . 1 2 3 4\n"


class TheirDraws:
    """Their draws in order: srand(seed), then per element mean + stddev * z with
    z = sqrtf(-2 logf(u1)) * cosf(2 pi u2), u = ((float)rand() + 1) / ((float)RAND_MAX + 2)."""

    def __init__(self, seed):
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libm = ctypes.CDLL(ctypes.util.find_library("m"))
        for name in ("logf", "cosf", "sqrtf"):
            f = getattr(libm, name)
            f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
            setattr(self, name, f)
        self.libc.srand(ctypes.c_uint(seed))
        self.rand_max = np.float32(2147483647)  # glibc's RAND_MAX
        self.pi = np.float32(3.14159265358979323846)

    def u(self):
        return (np.float32(self.libc.rand()) + np.float32(1)) / (self.rand_max + np.float32(2))

    def draw(self):
        u1 = self.u()
        u2 = self.u()
        z = np.float32(self.sqrtf(np.float32(-2) * np.float32(self.logf(u1)))) * \
            np.float32(self.cosf(np.float32(2) * self.pi * u2))
        return np.float32(np.float32(0) + np.float32(0.02) * z)

    def skip(self, n):
        for _ in range(2 * n):
            self.libc.rand()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("serial", "mpi", "mpiexec"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--cuda", default="")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="init_test_")
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(V_TEXT * 20)
    T, L, NH, C = 16, 2, 4, 32
    HS = C // NH
    common = ["--data.corpus", corpus, "--model.block_size", str(T), "--model.n_layer", str(L), "--model.n_head",
              str(NH), "--model.n_embd", str(C), "--train.seq_len", str(T), "--train.threads", "1"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    check = Checks()

    def run(cmd):
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    def init(cmd, name, *extra):
        path = os.path.join(work, name)
        r = run([*cmd, "init", *common, "--model.init", "original", "--train.seed", "1234", *extra, "--out", path])
        return path, r

    serial_path, r = init([a.serial], "serial.bin")
    check("serial init writes the original initialisation", r.returncode == 0, r.stderr.strip()[-300:])
    if r.returncode != 0:
        return check.finish()
    ck = load(serial_path)
    V = int(ck.header["model.vocab_size"])
    w = np.frombuffer(ck.params, dtype="<f4")
    check("the checkpoint records model.init original", ck.header.get("model.init") == "original",
          str(ck.header.get("model.init")))

    # Our layout (model/params.h): wte (V,C), wpe (T,C), per layer ln1_w, ln1_b, qkv_w (3C,C),
    # attn_proj_w (C,C), attn_proj_b, ln2_w, ln2_b, fc_w (4C,C), fc_b, fc_proj_w (C,4C), fc_proj_b,
    # then lnf_w, lnf_b, lm_head (V,C).
    per_layer = 2 * C + 3 * C * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    off_qkv0 = V * C + T * C + 2 * C
    off_lm = V * C + T * C + L * per_layer + 2 * C
    n = 8
    ours_wte = w[:n]
    # Head 1's key (C, HS), their element [i][j] = our qkv_w row C + HS + j, column i; drawn row-major (i, j).
    ours_key1 = [w[off_qkv0 + (C + HS + j) * C + i] for i in range(2) for j in range(HS)][:n]
    # lm_head (C, V) theirs: element [i][j] = our lm_head[j][i]; the first draws are row i = 0.
    ours_lm = [w[off_lm + j * C + 0] for j in range(n)]

    d = TheirDraws(1234)
    want_wte = [d.draw() for _ in range(n)]
    d = TheirDraws(1234)
    d.skip(V * C + T * C + 3 * C * HS)  # wte, wpe, head 0's key, query, value
    want_key1 = [d.draw() for _ in range(2 * HS)][:n]
    d = TheirDraws(1234)
    d.skip(V * C + T * C + L * (3 * C * C + C * C + 4 * C * C + 4 * C * C))
    want_lm = [d.draw() for _ in range(n)]
    for title, ours, want in (("wte's first values", ours_wte, want_wte),
                              ("block 0's key weights of head 1", ours_key1, want_key1),
                              ("lm_head's first values", ours_lm, want_lm)):
        same = all(np.float32(x).tobytes() == np.float32(y).tobytes() for x, y in zip(ours, want))
        check(f"{title} equal srand/rand from the C library, bit for bit", same and len(ours) == n,
              f"ours {[float(x) for x in ours[:3]]}, independent {[float(x) for x in want[:3]]}")
    biases = [w[V * C + T * C + C + k] for k in range(C)]  # ln1_b of block 0
    gains = [w[V * C + T * C + k] for k in range(C)]      # ln1_w of block 0
    check("biases 0 and LayerNorm gains 1 draw nothing", all(b == 0 for b in biases) and all(g == 1 for g in gains))

    mpi_path, r = init([a.mpiexec, "-n", "2", a.mpi], "mpi.bin")
    same = r.returncode == 0 and open(mpi_path, "rb").read() == open(serial_path, "rb").read()
    check("mpi init on 2 ranks writes serial's bytes", same, r.stderr.strip()[-300:])
    if a.cuda:
        cuda_path, r = init([a.cuda], "cuda.bin")
        if r.returncode != 0 and "CUDA" in r.stderr:
            print(f"skip cuda init: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
        else:
            same = r.returncode == 0 and open(cuda_path, "rb").read() == open(serial_path, "rb").read()
            check("cuda init writes serial's bytes (computed on the host, read back from the device)", same,
                  r.stderr.strip()[-300:])

    default_path = os.path.join(work, "default.bin")
    r = run([a.serial, "init", *common, "--out", default_path])
    check("the default initialisation is philox", r.returncode == 0 and load(default_path).header.get("model.init")
          == "philox", r.stderr.strip()[-300:])
    r = run([a.serial, "init", *common, "--model.init", "glorot", "--out", os.path.join(work, "bad.bin")])
    check("an unknown model.init is refused", r.returncode == 2 and "unknown initialisation 'glorot'" in r.stderr,
          r.stderr.strip()[-300:])

    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
