#!/usr/bin/env python3
"""Bad input to a stage program: each case must end with exit status 2 (bad
input) and exactly one line on stderr, "<stage>: error: ...", that names the
key, file or value at fault; and no existing file may be damaged (a finished run used as
--out with --overwrite, and the checkpoints the cases read, are compared byte
for byte before and after).

usage: stage_cli_test.py --stage PATH_TO_STAGE_PROGRAM
Prints one line per case and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile

from checks import HOOKS_VARIABLE, PROMPT_S, Checks, bounded_run, with_hooks

WORDS = "the cat sat on a mat . dog ran to river , and saw bird ! it was happy day".split()


def corpus(n_words):
    return " ".join(WORDS[(i * 7 + i // 5) % len(WORDS)] for i in range(n_words)) + "\n"


def digest_tree(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def memory_cap():
    """A 2 GiB address-space limit for a case's process: reading a device or a
    huge file whole would fail here instead of taking the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stage", required=True)
    args = ap.parse_args()
    stage = os.path.abspath(args.stage)
    name = os.path.basename(stage)
    work = tempfile.mkdtemp(prefix="stage_cli_test_")
    w = lambda *p: os.path.join(work, *p)

    with open(w("corpus.txt"), "w") as f:
        f.write(corpus(3000))
    with open(w("empty.txt"), "w") as f:
        f.write("  \n\n")
    with open(w("short.txt"), "w") as f:
        f.write(corpus(20))
    with open(w("other.txt"), "w") as f:
        f.write(corpus(3000) + " zebra\n")
    small = ["--data.corpus", w("corpus.txt"), "--model.block_size", "16", "--model.n_layer", "1",
             "--model.n_head", "2", "--model.n_embd", "16", "--train.batch_size", "2", "--train.seq_len", "16",
             "--train.steps", "2", "--train.threads", "1", "--train.peak_gflops", "10",
             "--generate.prompt_tokens", "8", "--generate.max_new_tokens", "4"]

    check = Checks()
    # A finished run, and the files the cases must not damage.
    done = subprocess.run([stage, "train", "--out", w("finished")] + small, capture_output=True, text=True)
    if done.returncode != 0:
        check("setup: the reference run", False, done.stderr)
        return check.finish()
    ckpt = w("finished", "checkpoint.bin")
    raw = open(ckpt, "rb").read()
    for fname, data in [("truncated.bin", raw[: len(raw) // 2]),
                        ("corrupted.bin", raw[:200] + bytes([raw[200] ^ 0x10]) + raw[201:]),
                        ("version.bin", raw[:8] + bytes([7]) + raw[9:])]:
        with open(w(fname), "wb") as f:
            f.write(data)
    with open(w("bad_key.yaml"), "w") as f:
        f.write("train:\n  batch_size: 2\n  stepz: 3\n")
    with open(w("bad_syntax.yaml"), "w") as f:
        f.write("train:\n  steps: [1, 2\n")
    with open(w("bad_type.yaml"), "w") as f:
        f.write("train:\n  steps: many\n")
    with open(w("a_file"), "w") as f:
        f.write("x")
    for fname, text in [("big_int.yaml", "train:\n  steps: 99999999999\n"),
                        ("dup_key.yaml", "train:\n  steps: 2\n  batch_size: 2\n  steps: 3\n"),
                        ("dup_section.yaml", "train:\n  steps: 2\nmodel:\n  n_layer: 1\ntrain:\n  seq_len: 16\n")]:
        with open(w(fname), "w") as f:
            f.write(text)
    os.makedirs(w("a_dir"))
    os.mkfifo(w("fifo"))
    with open(w("aliases.yaml"), "w") as f:  # nine levels of nested aliases: 9^9 nodes once expanded
        f.write("a: &a [x, x, x, x, x, x, x, x, x]\n")
        for k in "bcdefghi":
            prev = chr(ord(k) - 1)
            f.write(f"{k}: &{k} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n")
    with open(w("huge.txt"), "wb") as f:  # sparse: 1 GiB and one byte, without writing them
        f.truncate((1 << 30) + 1)
    protected = {"finished": digest_tree(w("finished"))}

    train = [stage, "train", "--out", w("finished"), "--overwrite"] + small
    cases = [
        ("missing corpus", train + ["--data.corpus", w("nope.txt")], ["data.corpus", "nope.txt", "no such file"]),
        ("empty corpus", train + ["--data.corpus", w("empty.txt")], ["data.corpus", "empty"]),
        ("corpus shorter than one batch", train + ["--data.corpus", w("short.txt")], ["too short"]),
        ("unknown key in YAML", train + ["--config", w("bad_key.yaml")],
         ["bad_key.yaml:3", "unknown key 'train.stepz'", "did you mean 'train.steps'"]),
        ("unknown key on the command line", train + ["--train.bach_size", "4"],
         ["command line", "train.bach_size", "did you mean 'train.batch_size'"]),
        ("YAML syntax error", train + ["--config", w("bad_syntax.yaml")], ["bad_syntax.yaml:", "syntax error"]),
        ("wrong type in YAML", train + ["--config", w("bad_type.yaml")],
         ["bad_type.yaml:2", "train.steps", "expected an integer", "many"]),
        ("wrong type on the command line", train + ["--train.seq_len", "1.5"], ["train.seq_len", "integer"]),
        ("zero batch", train + ["--train.batch_size", "0"], ["train.batch_size", "positive"]),
        ("negative layers", train + ["--model.n_layer", "-1"], ["model.n_layer", "positive"]),
        ("zero steps", train + ["--train.steps", "0"], ["train.steps", "positive"]),
        ("a negative gradient clip", train + ["--optimizer.grad_clip", "-1"], ["optimizer.grad_clip", "must be >= 0"]),
        ("a huge RoPE block_size", train + ["--model.position", "rope", "--model.block_size", "2000000000"],
         ["model.block_size: at most 1048576 positions"]),
        ("n_embd not divisible by n_head", train + ["--model.n_head", "3"], ["n_embd", "n_head"]),
        ("seq_len above block_size", train + ["--train.seq_len", "32"], ["train.seq_len", "block_size"]),
        ("vocab_size below the vocabulary", train + ["--model.vocab_size", "5"], ["vocab_size", "5"]),
        ("output directory not writable", [stage, "train", "--out", w("a_file", "sub")] + small[0:] ,
         ["--out", "a_file"]),
        ("output holds a finished run", [stage, "train", "--out", w("finished")] + small,
         ["already holds a finished run", "--overwrite"]),
        ("truncated checkpoint", [stage, "generate", "--checkpoint", w("truncated.bin"), "--prompt", "the cat"],
         ["truncated.bin", "truncated"]),
        ("corrupted checkpoint", [stage, "generate", "--checkpoint", w("corrupted.bin"), "--prompt", "the cat"],
         ["corrupted.bin", "checksum"]),
        ("wrong-version checkpoint", [stage, "generate", "--checkpoint", w("version.bin"), "--prompt", "the cat"],
         ["version.bin", "version 7"]),
        ("prompt outside the checkpoint's vocabulary",
         [stage, "generate", "--checkpoint", ckpt, "--prompt", "the zebra"], ["zebra", "not in the vocabulary"]),
        ("resume on a corpus with another vocabulary",
         [stage, "train", "--out", w("resumed"), "--resume", ckpt] + small + ["--train.steps", "4",
                                                                             "--data.corpus", w("other.txt")],
         ["zebra", "not in the vocabulary"]),
        ("resume with another model size",
         [stage, "train", "--out", w("resumed2"), "--resume", ckpt] + small + ["--train.steps", "4",
                                                                              "--model.n_embd", "32"],
         ["checkpoint has model.n_embd = 16", "32"]),
        ("unknown command", [stage, "fly"], ["unknown command 'fly'"]),
        ("generate without a checkpoint", [stage, "generate", "--prompt", "the cat"], ["--checkpoint"]),
        ("integer out of range in YAML", train + ["--config", w("big_int.yaml")],
         ["big_int.yaml:2", "train.steps", "out of range", "(allowed -2147483648..2147483647)"]),
        ("integer beyond 64 bits on the command line", train + ["--train.steps", "99999999999999999999"],
         ["train.steps", "out of range", "allowed"]),
        ("a directory as --config", train + ["--config", w("a_dir")], ["a_dir: is a directory, expected a YAML file"]),
        ("a directory as --checkpoint", [stage, "generate", "--checkpoint", w("a_dir"), "--prompt", "the cat"],
         ["a_dir: is a directory, expected a checkpoint file"]),
        ("a directory as --resume", [stage, "train", "--out", w("resumed3"), "--resume", w("a_dir")] + small,
         ["a_dir: is a directory, expected a checkpoint file"]),
        ("duplicate key in YAML", train + ["--config", w("dup_key.yaml")],
         ["dup_key.yaml:4: duplicate key 'train.steps' (first at line 2)"]),
        ("duplicate section in YAML", train + ["--config", w("dup_section.yaml")],
         ["dup_section.yaml:5: duplicate key 'train' (first at line 1)"]),
        ("an option where a value is expected", [stage, "train", "--out", "--overwrite"] + small,
         ["--out: missing value (got the option '--overwrite')"]),
        ("validation split leaving too little to train", train + ["--data.val_fraction", "0.999"],
         ["data.val_fraction 0.999", "for training", "held out for validation"]),
        ("a device as the corpus", train + ["--data.corpus", "/dev/zero"], ["data.corpus", "/dev/zero",
                                                                            "not a regular file"]),
        ("a FIFO as the corpus", train + ["--data.corpus", w("fifo")], ["data.corpus", "fifo", "not a regular file"]),
        ("a corpus above the size limit", train + ["--data.corpus", w("huge.txt")], ["huge.txt", "1 GiB"]),
        # Every input is refused by its kind or size before it is read: nothing blocks, nothing grows
        # (these cases run, like all, under a 2 GiB address-space limit and a PROMPT_S deadline: a refusal takes
        # well under a second here; a case still running then is taken for one that blocks).
        ("a device as --checkpoint", [stage, "generate", "--checkpoint", "/dev/zero", "--prompt", "the cat"],
         ["/dev/zero", "not a regular file (a character device), expected a checkpoint file"]),
        ("a FIFO as --checkpoint", [stage, "generate", "--checkpoint", w("fifo"), "--prompt", "the cat"],
         ["fifo", "not a regular file (a FIFO), expected a checkpoint file"]),
        ("a huge sparse file as --checkpoint", [stage, "generate", "--checkpoint", w("huge.txt"), "--prompt", "the cat"],
         ["huge.txt", "not a checkpoint (no GPT2CKPT magic)"]),
        ("a FIFO as --resume", [stage, "train", "--out", w("resumed4"), "--resume", w("fifo")] + small,
         ["fifo", "a FIFO"]),
        ("a device as --resume", [stage, "train", "--out", w("resumed5"), "--resume", "/dev/zero"] + small,
         ["/dev/zero", "a character device"]),
        ("a FIFO as --config", train + ["--config", w("fifo")], ["fifo", "a FIFO), expected a YAML file"]),
        ("a device as --config", train + ["--config", "/dev/zero"], ["/dev/zero", "expected a YAML file"]),
        ("a FIFO as --hostfile", train + ["--hostfile", w("fifo")], ["hostfile", "fifo", "a FIFO"]),
        ("a device as --hostfile", train + ["--hostfile", "/dev/zero"], ["hostfile", "/dev/zero", "a character device"]),
        ("YAML aliases in a configuration", train + ["--config", w("aliases.yaml")],
         ["aliases.yaml:2", "YAML aliases (*name) are not accepted"]),
        ("an empty prompt", [stage, "generate", "--checkpoint", ckpt, "--prompt", ""], ["--prompt: empty prompt"]),
        ("a model key given to generate", [stage, "generate", "--checkpoint", ckpt, "--prompt", "the cat",
                                           "--model.n_layer", "3"],
         ["--model.n_layer: generate takes the model from the checkpoint; this key has no effect"]),
        ("an optimizer key given to generate", [stage, "generate", "--checkpoint", ckpt, "--prompt", "the cat",
                                                "--optimizer.lr", "0.1"], ["--optimizer.lr", "no effect"]),
        # A plan refuses as a run would: the same message.
        ("plan: tensor parallelism on one process", [stage, "plan"] + small + ["--parallel.tp", "2"],
         [f"parallel.tp 2: the {name} stage runs one process"]),
        ("plan: ranks that the grid does not divide", [stage, "plan", "--stage", "mpi", "--ranks", "3"] + small +
         ["--parallel.tp", "2"], ["parallel.tp 2 does not divide the 3 ranks"]),
        ("plan: a batch the replicas do not divide", [stage, "plan", "--stage", "mpi", "--ranks", "3"] + small,
         ["train.batch_size 2 is not divisible by the 3 ranks"]),
        ("plan: microbatches that do not divide the rows", [stage, "plan", "--stage", "mpi", "--ranks", "2"] + small
         + ["--parallel.pp", "2", "--model.n_layer", "2", "--parallel.microbatches", "4"],
         ["parallel.microbatches 4 does not divide train.batch_size 2"]),
        ("plan: ZeRO-2 off the mpi stage", [stage, "plan", "--stage", "mpi_cuda", "--ranks", "2"] + small
         + ["--parallel.zero", "2"], ["parallel.zero 2: ZeRO-2 and ZeRO-3 run on the mpi stage only"]),
        ("plan: a count that is not one", [stage, "plan", "--ranks", "two"] + small, ["--ranks: 'two'"]),
        ("plan: an unknown stage", [stage, "plan", "--stage", "tpu"] + small, ["--stage: unknown stage 'tpu'"]),
        ("plan: a missing corpus", [stage, "plan"] + small + ["--data.corpus", w("nope.txt")],
         ["data.corpus", "nope.txt", "no such file"]),
    ]
    for title, cmd, needles in cases:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=PROMPT_S, preexec_fn=memory_cap)
        except subprocess.TimeoutExpired:
            check(title, False, f"still running after {PROMPT_S} s")
            continue
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        problems = []
        if r.returncode != 2:
            problems.append(f"exit status {r.returncode}, not 2 (bad input)")
        if len(lines) != 1 or not lines[0].startswith(f"{name}: error: "):
            problems.append(f"stderr is not one '{name}: error:' line: {r.stderr!r}")
        for n in needles:
            if n not in r.stderr:
                problems.append(f"message lacks {n!r}")
        for d, before in protected.items():
            if digest_tree(w(d)) != before:
                problems.append(f"{d}/ was modified")
        check(title, not problems, "; ".join(problems) + f"\n     message: {r.stderr.strip()}" if problems
              else f"exit {r.returncode}: {lines[0]}")
    if os.path.exists(w("--overwrite")):
        check("a directory named '--overwrite' was created", False)
    # The good checkpoint still generates, also given the training run's own
    # configuration file (which holds model and optimizer sections).
    for extra in ([], ["--config", w("finished", "config.yaml")]):
        g = subprocess.run([stage, "generate", "--checkpoint", ckpt, "--prompt", "the cat sat"] + extra,
                           capture_output=True, text=True, cwd=work)
        if g.returncode == 0 and g.stdout.strip():
            check(f"the original checkpoint still generates{' with ' + ' '.join(extra) if extra else ''}", True,
                  f"{g.stdout.strip()!r}")
        else:
            check(f"the original checkpoint no longer generates{' with --config' if extra else ''}", False, g.stderr)
    # --help lists every section's keys, parallel.* included; a plan is JSON.
    h = subprocess.run([stage, "train", "--help"], capture_output=True, text=True)
    keys = ("parallel.tp", "parallel.pp", "parallel.zero", "parallel.microbatches", "parallel.schedule")
    missing = [k for k in keys if k not in h.stdout]
    check("train --help lists the parallel.* keys", h.returncode == 0 and not missing,
          "lacks " + str(missing) if missing else "")
    p = subprocess.run([stage, "plan", "--stage", "mpi", "--ranks", "2"] + small + ["--parallel.zero", "1"],
                       capture_output=True, text=True)
    try:
        plan = json.loads(p.stdout)
        ranks = plan["per_rank"]
        ok = (p.returncode == 0 and plan["ok"] and plan["layout"]["dp"] == 2 and plan["layout"]["zero"] == 1
              and len(ranks) == 2 and ranks[1]["dp_rank"] == 1 and ranks[0]["memory"]["moments_bytes"] > 0
              and ranks[0]["comm"]["dp"]["calls"] == 4)
    except (ValueError, KeyError) as e:
        ok, plan = False, str(e)
    check("plan of ZeRO-1 on 2 ranks: JSON with both ranks, their shards and 4 dp calls a step", ok,
          "" if ok else f"{p.stdout[:300]} {p.stderr}")
    r = subprocess.run([stage, "plan"] + small + ["--parallel.tp", "2"], capture_output=True, text=True)
    try:
        refusal = json.loads(r.stdout)
        ok = r.returncode == 2 and refusal["ok"] is False and refusal["error"] in r.stderr
    except (ValueError, KeyError):
        ok = False
    check("a refused plan is JSON with the run's one-line error on stdout, exit 2", ok,
          "" if ok else f"{r.stdout!r} {r.stderr!r}")

    # parallel.stage_layers (issue 70): counts summing past 2^31 are refused, not wrapped (the plan crashed); auto
    # answers at once for deep pipelines (it tried every split: 64 layers on 8 stages did not end).
    r = subprocess.run([stage, "config"] + small + ["--model.n_layer", "3", "--parallel.pp", "3",
                        "--parallel.stage_layers", "2147483647,2147483647,5"], capture_output=True, text=True)
    check("stage_layers summing past 2^31 is refused naming the sum, exit 2",
          r.returncode == 2 and "sum to 4294967299" in r.stderr, r.stderr.strip()[-200:])
    r = bounded_run([stage, "plan"] + small + ["--model.n_layer", "4096", "--parallel.pp", "1024",
                                               "--parallel.stage_layers", "auto", "--ranks", "1024", "--stage", "mpi",
                                               "--train.batch_size", "1024"], PROMPT_S)
    try:  # each rank's layers [first, last)
        layers = [b - f for f, b in (x["layers"] for x in json.loads(r.stdout)["per_rank"])] if not r.timed_out else []
    except (ValueError, KeyError, TypeError):
        layers = []
    check("stage_layers auto for 4,096 layers on 1,024 stages: a plan at once (every stage at least a layer)",
          not r.timed_out and r.returncode == 0 and len(layers) == 1024 and sum(layers) == 4096 and min(layers) >= 1,
          f"{'still running' if r.timed_out else f'exit {r.returncode}'} after {r.seconds:.1f} s: {r.stderr[-200:]}")

    # A FIFO named as a model file (issue 70): refused by its type at once, never opened to read (its magic was
    # read with an ifstream, which blocked train.init_from and evaluate --model until a writer came, SIGTERM too).
    fifo = w("model.fifo")
    os.mkfifo(fifo)
    for title, cmd in (("train --train.init_from", [stage, "train", "--out", w("from_fifo")] + small
                        + ["--train.init_from", fifo]),
                       ("evaluate --model", [stage, "evaluate", "--model", fifo, "--data", w("corpus.txt")])):
        r = bounded_run(cmd, PROMPT_S)
        check(f"{title} naming a FIFO is refused at once by its type, exit 2",
              not r.timed_out and r.returncode == 2 and "FIFO" in r.stderr and "model.fifo" in r.stderr,
              f"{'still running' if r.timed_out else f'exit {r.returncode}'} after {r.seconds:.1f} s: "
              f"{r.stderr.strip()[-200:]}")

    # Test hooks are not settings (issue 69): not in --help or config.yaml; the old debug.* keys refused naming
    # the variable; the variable's bad entries refused; a run with hooks says so and fails where told.
    h = subprocess.run([stage, "train", "--help"], capture_output=True, text=True)
    cfg = subprocess.run([stage, "config"] + small, capture_output=True, text=True)
    check("no test-only key in --help or in the resolved configuration",
          h.returncode == 0 and cfg.returncode == 0 and "debug" not in h.stdout and "debug" not in cfg.stdout
          and "fail_rank" not in h.stdout, h.stderr + cfg.stderr)
    r = subprocess.run([stage, "config", "--debug.fail_rank", "0"], capture_output=True, text=True)
    check("--debug.fail_rank is refused naming GPT2_TEST_HOOKS, exit 2",
          r.returncode == 2 and "no longer a setting" in r.stderr and HOOKS_VARIABLE in r.stderr, r.stderr)
    with open(w("debug.yaml"), "w") as f:
        f.write("debug:\n  step_sleep_s: 0.1\n")
    r = subprocess.run([stage, "config", "--config", w("debug.yaml")], capture_output=True, text=True)
    check("a debug: section in a configuration file is refused naming GPT2_TEST_HOOKS, exit 2",
          r.returncode == 2 and HOOKS_VARIABLE in r.stderr and "debug.yaml" in r.stderr, r.stderr)
    for k, (text, needle) in enumerate((("bogus=1", "unknown hook 'bogus'"), ("fail_step=x", "fail_step=x"),
                                        ("step_sleep_s=-1", "step_sleep_s=-1"), ("fail_rank=1.5", "whole number"))):
        r = subprocess.run([stage, "train", "--out", w(f"badhook{k}")] + small, capture_output=True, text=True,
                           env=dict(os.environ, **{HOOKS_VARIABLE: text}))
        check(f"train with {HOOKS_VARIABLE}={text} is refused before anything is written, exit 2",
              r.returncode == 2 and needle in r.stderr and not os.path.exists(w(f"badhook{k}")), r.stderr)
    r = subprocess.run([stage, "config"] + small, capture_output=True, text=True,
                       env=dict(os.environ, **{HOOKS_VARIABLE: "bogus=1"}))
    check(f"the hooks are a training run's: config ignores {HOOKS_VARIABLE}", r.returncode == 0, r.stderr)
    r = subprocess.run([stage, "train", "--out", w("hooked")] + small + ["--train.steps", "4"], capture_output=True,
                       text=True, env=with_hooks(os.environ, {"fail_rank": 0, "fail_step": 2}))
    partial = w("hooked", "metrics.jsonl.partial")
    steps = open(partial).read().splitlines() if os.path.exists(partial) else []
    check("with fail_rank=0,fail_step=2 the run says its hooks and fails at step 2 (2 steps recorded), exit 1",
          r.returncode == 1 and "test hooks installed (GPT2_TEST_HOOKS): fail_rank=0,fail_step=2" in r.stderr
          and "injected failure at step 2" in r.stderr and sum('"event":"step"' in x for x in steps) == 2,
          r.stderr[-400:])
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
