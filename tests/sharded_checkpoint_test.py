#!/usr/bin/env python3
"""Sharded checkpoints on real ranks (issue 44): written by every rank at once,
resumed on other layouts, merged and split, asynchronous, refused when they lie.

  * Layouts save sharded at step 5 of 10 under train.deterministic (serial,
    dp 4 ZeRO-3, tp 2 x pp 2, dp 2 ZeRO-1, dp 2 ZeRO-2, tp 2, pp 2); each
    checkpoint resumes on another layout (serial -> dp 4 ZeRO-3, dp 4 ZeRO-3
    -> tp 2, tp 2 x pp 2 -> dp 2 ZeRO-1, and each saver on the next of the
    list) and the resumed run's final parameters and Adam moments equal the
    uninterrupted serial run's bit for bit. A vocabulary-parallel tp 4 run's
    checkpoint (not an exact layout) resumes on serial with the uninterrupted
    curve within 1e-5.
  * Each saver's final sharded checkpoint, merged (`checkpoint --merge`),
    holds serial's final state bit for bit; `checkpoint --split` of serial's
    file into 3 rank files and `--merge` back gives the same file byte for
    byte, and the split folder resumes on dp 2 ZeRO-1 with serial's bits.
  * Asynchronous saves (train.async_checkpoint, with the writer slowed by
    the checkpoint_delay_s test hook so that later steps run during the write): the
    rank files' arrays equal the synchronous run's of the same step byte for
    byte, on serial and on dp 2 ZeRO-2; the log says which steps ran during
    the write.
  * The plan states the bytes each rank writes and reads; they equal the
    rank files written.
  * Bad input: a checksum mismatch, a missing rank file, a rank file of
    another run, a manifest whose sizes lie: one error line naming the file,
    exit 2, nothing trained (no metrics written); the same from
    `checkpoint --merge`. (tests/sharded_checkpoint_test.cpp checks every
    lie against the reader itself.)

usage: sharded_checkpoint_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import glob
import json
import os
import shutil
import struct

from layout_checks import LayoutTest, common_args, compare, floats, load, records  # noqa: E402

SHARDED = ["--train.checkpoint_format", "sharded"]
EXACT = ["--train.deterministic", "true"]

# (title, ranks, args): the layouts that save; None ranks: the serial program.
SAVERS = [
    ("serial", None, []),
    ("dp 4 ZeRO-3", 4, ["--parallel.zero", "3"]),
    ("tp 2 x pp 2", 4, ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "4"]),
    ("dp 2 ZeRO-1", 2, ["--parallel.zero", "1"]),
    ("dp 2 ZeRO-2", 2, ["--parallel.zero", "2"]),
    ("tp 2", 2, ["--parallel.tp", "2"]),
    ("pp 2", 2, ["--parallel.pp", "2", "--parallel.microbatches", "4"]),
]
LAYOUT = {title: (n, args) for title, n, args in SAVERS}
# The pairs, then each saver on the next of the list (no pair twice).
RESUMES = [("serial", "dp 4 ZeRO-3"), ("dp 4 ZeRO-3", "tp 2"), ("tp 2 x pp 2", "dp 2 ZeRO-1")]
RESUMES += [p for p in ((SAVERS[i][0], SAVERS[(i + 1) % len(SAVERS)][0]) for i in range(len(SAVERS))) if p not in RESUMES]


def step_dir(run, step):
    return os.path.join(run, "checkpoints", f"step-{step:08d}")


def rank_arrays(path):
    """A rank file's arrays (the bytes after its header, before its checksum)."""
    with open(path, "rb") as f:
        b = f.read()
    run_id_len = struct.unpack_from("<I", b, 32)[0]
    return b[36 + run_id_len:-8]


def many_rank_files(check, a, programs, out, common, same_state, five):
    """Issue 70: a sharded checkpoint of 2,048 rank files merges and resumes under `ulimit -n 1024` (its files are
    not all held open); a split over an earlier one leaves none of its rank files behind."""
    if not os.path.exists(five):
        check("the step-5 checkpoint to split", False, five)
        return
    many = out("split2048")
    r = programs.run([a.serial, "checkpoint", "--split", five, "--ranks", "2048", "--out", many])
    if r.returncode != 0:
        check("checkpoint --split --ranks 2048", False, r.stderr.strip()[-300:])
        return
    limit = ["bash", "-c", 'ulimit -n 1024 && exec "$@"', "limited"]
    back = out("back2048.bin")
    r = programs.run([*limit, a.serial, "checkpoint", "--merge", many, "--out", back])
    check("2,048 rank files merge under ulimit -n 1024 into the split file, byte for byte",
          r.returncode == 0 and open(back, "rb").read() == open(five, "rb").read(), r.stderr.strip()[-300:])
    d = out("resumed2048")
    r = programs.run([*limit, a.serial, "train", *common, *EXACT, "--resume", many, "--out", d])
    if r.returncode != 0:
        check("2,048 rank files resume under ulimit -n 1024", False, r.stderr.strip()[-300:])
    else:
        same_state("2,048 rank files resume under ulimit -n 1024 with serial's bits",
                   load(os.path.join(d, "checkpoint.bin")))
    r = programs.run([a.serial, "checkpoint", "--split", five, "--ranks", "5", "--out", many, "--overwrite"])
    ranks = sorted(n for n in os.listdir(many) if n.startswith("rank-"))
    check("--split --ranks 5 over a 2,048-rank split: its 5 rank files and no stale ones",
          r.returncode == 0 and ranks == [f"rank-{i:05d}.bin" for i in range(5)],
          f"{len(ranks)} rank files; {r.stderr.strip()[-200:]}")


def main():
    t = LayoutTest(__doc__, "sharded_test_")
    a, check, programs, out = t.a, t.check, t.programs, t.out
    B, T, C, L, NH = 8, 32, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    ref = out("serial")
    if t.serial([*common, *EXACT]).returncode != 0:
        return check.finish()
    ref_ck = load(os.path.join(ref, "checkpoint.bin"))

    def train(n, args, run_dir, timeout=300, hooks=None):
        if n is None:
            return programs.run([a.serial, "train", *args, "--out", run_dir], timeout, hooks=hooks)
        return programs.mpi(n, [*args, "--out", run_dir], timeout, hooks=hooks)

    def same_state(title, ck):
        check(title, ck.params == ref_ck.params and ck.m == ref_ck.m and ck.v == ref_ck.v,
              f"params {ck.params == ref_ck.params}, m {ck.m == ref_ck.m}, v {ck.v == ref_ck.v}")

    # ---- Every saver writes sharded; merged, its final state is serial's ----
    saved = {}
    for title, n, args in SAVERS:
        d = out("save_" + title.replace(" ", "_"))
        r = train(n, [*common, *EXACT, *args, *SHARDED, "--train.checkpoint_every", "5"], d)
        if r.returncode != 0:
            check(f"{title} saves sharded", False, r.stderr.strip()[-300:])
            continue
        files = sorted(os.listdir(step_dir(d, 10)))
        ranks = n or 1
        want = sorted(["COMPLETE", "manifest.json", "vocabulary.bin"] + [f"rank-{i:05d}.bin" for i in range(ranks)])
        check(f"{title}: a step folder holds one file per rank, the manifest, the vocabulary and the marker",
              files == want and not os.path.exists(os.path.join(d, "checkpoint.bin")), " ".join(files))
        merged = out(f"merged_{len(saved)}.bin")
        r = programs.run([a.serial, "checkpoint", "--merge", step_dir(d, 10), "--out", merged])
        if r.returncode != 0:
            check(f"{title}: --merge", False, r.stderr.strip()[-300:])
            continue
        same_state(f"{title}: the final sharded checkpoint, merged, holds serial's state bit for bit", load(merged))
        saved[title] = d

    # ---- Each checkpoint resumes on another layout with serial's bits ----
    for src, dst in RESUMES:
        if src not in saved:
            continue
        n, args = LAYOUT[dst]
        d = out(f"resume_{len(check.results)}")
        r = train(n, [*common, *EXACT, *args, "--resume", step_dir(saved[src], 5)], d)
        if r.returncode != 0:
            check(f"{src} -> {dst}", False, r.stderr.strip()[-300:])
            continue
        same_state(f"saved on {src} at step 5, resumed on {dst}: the final state equals serial's bit for bit",
                   load(os.path.join(d, "checkpoint.bin")))
        got = [s["loss"] for s in records(d, "step")]
        want = [s["loss"] for s in records(ref, "step")][5:]
        check(f"{src} -> {dst}: steps 6 to 10 continue the curve exactly", got == want, f"{got} against {want}")

    # A vocabulary-parallel layout (not exact): the curve within 1e-5.
    ref_nd, vtp = out("serial_nd"), out("vtp4")
    r1 = train(None, common, ref_nd)
    r2 = train(4, [*common, "--parallel.tp", "4", "--parallel.vocab_parallel", "true", *SHARDED,
                   "--train.checkpoint_every", "5"], vtp)
    if r1.returncode == 0 and r2.returncode == 0:
        d = out("vtp4_to_serial")
        r = train(None, [*common, "--resume", step_dir(vtp, 5)], d)
        if r.returncode != 0:
            check("vocabulary-parallel tp 4 -> serial", False, r.stderr.strip()[-300:])
        else:
            compare(check, "saved on vocabulary-parallel tp 4 at step 5, resumed on serial: the uninterrupted curve",
                    ref_nd, d, first=5)
    else:
        check("vocabulary-parallel tp 4 saves sharded", False, (r1.stderr + r2.stderr).strip()[-300:])

    # ---- Split and merge ----
    split, back = out("split3"), out("back.bin")
    r = programs.run([a.serial, "checkpoint", "--split", os.path.join(ref, "checkpoint.bin"), "--ranks", "3",
                      "--out", split])
    r2 = programs.run([a.serial, "checkpoint", "--merge", split, "--out", back]) if r.returncode == 0 else r
    if r2.returncode != 0:
        check("checkpoint --split then --merge", False, r2.stderr.strip()[-300:])
    else:
        with open(os.path.join(ref, "checkpoint.bin"), "rb") as f1, open(back, "rb") as f2:
            check("--split into 3 rank files, then --merge: the same file byte for byte", f1.read() == f2.read(),
                  r.stdout.strip() + "; " + r2.stdout.strip())
    # Nothing written into the folder read, nor a folder holding the file read (issue 70, cause 1), --overwrite
    # or not: the folder stays byte-identical.
    if os.path.isdir(split):
        def snapshot(folder):
            return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}
        before = snapshot(split)
        for name in ("manifest.json", "rank-00000.bin", "merged.bin"):
            r = programs.run([a.serial, "checkpoint", "--merge", split, "--out", os.path.join(split, name),
                              "--overwrite"])
            check(f"checkpoint --merge into its own folder ({name}, --overwrite): exit 2",
                  r.returncode == 2 and "lies in this command's input folder" in r.stderr,
                  f"exit {r.returncode}: {r.stderr.strip()[-200:]}")
        check("the refused merges left the sharded folder byte-identical", snapshot(split) == before)
        inside = out("holds_input")
        os.makedirs(inside)
        shutil.copyfile(os.path.join(ref, "checkpoint.bin"), os.path.join(inside, "manifest.json"))
        r = programs.run([a.serial, "checkpoint", "--split", os.path.join(inside, "manifest.json"), "--out", inside,
                          "--overwrite"])
        check("checkpoint --split into the folder holding its input (--overwrite): exit 2",
              r.returncode == 2 and "holds this command's input" in r.stderr,
              f"exit {r.returncode}: {r.stderr.strip()[-200:]}")
    # A split folder resumes (the run's step 10 is its last: re-split serial's step-5 state).
    five = out("five.bin")
    ck5 = out("serial5")
    r = train(None, [*common, *EXACT, "--train.checkpoint_every", "5", "--train.keep_checkpoints", "2"], ck5)
    if r.returncode == 0:
        shutil.copyfile(os.path.join(step_dir(ck5, 5), "checkpoint.bin"), five)
        split5 = out("split5")
        programs.run([a.serial, "checkpoint", "--split", five, "--ranks", "3", "--out", split5])
        d = out("split5_resumed")
        n, args = LAYOUT["dp 2 ZeRO-1"]
        r = train(n, [*common, *EXACT, *args, "--resume", split5], d)
        if r.returncode != 0:
            check("a split folder resumes on dp 2 ZeRO-1", False, r.stderr.strip()[-300:])
        else:
            same_state("a --split folder (3 ranks) resumes on dp 2 ZeRO-1 with serial's bits",
                       load(os.path.join(d, "checkpoint.bin")))
    many_rank_files(check, a, programs, out, common, same_state, five)
    # Refusals of the command itself.
    for title, args, needle in (
            ("--merge of a file", ["--merge", os.path.join(ref, "checkpoint.bin"), "--out", out("x.bin")],
             "not a sharded checkpoint folder"),
            ("--split into an existing --out", ["--split", os.path.join(ref, "checkpoint.bin"),
                                                                     "--out", split], "--out"),
            ("both --merge and --split", ["--merge", split, "--split", five, "--out", out("y")], "one of"),
            ("--ranks 0", ["--split", five, "--ranks", "0", "--out", out("z")], "--ranks")):
        r = programs.run([a.serial, "checkpoint", *args])
        lines = [l for l in r.stderr.splitlines() if "error" in l]
        check(f"checkpoint {title}: one line, exit 2", r.returncode == 2 and len(lines) == 1 and needle in lines[0],
              f"exit {r.returncode}: {r.stderr.strip()[-200:]}")

    # ---- Asynchronous saves equal synchronous ones ----
    for title, n, args in (("serial", None, []), ("dp 2 ZeRO-2", 2, ["--parallel.zero", "2"])):
        runs = {}
        for mode, extra, hooks in (("sync", [], None),
                                   ("async", ["--train.async_checkpoint", "true"], {"checkpoint_delay_s": 0.6})):
            d = out(f"{mode}_{title.replace(' ', '_')}")
            r = train(n, [*common, *EXACT, *args, *SHARDED, "--train.checkpoint_every", "2",
                          "--train.keep_checkpoints", "5", *extra], d, hooks=hooks)
            if r.returncode != 0:
                check(f"{title} {mode} saves", False, r.stderr.strip()[-300:])
            else:
                runs[mode] = (d, r.stdout + r.stderr)
        if len(runs) != 2:
            continue
        (ds, _), (da, log) = runs["sync"], runs["async"]
        diffs = []
        for step in (2, 4, 6, 8, 10):
            for f in sorted(glob.glob(os.path.join(step_dir(ds, step), "rank-*.bin"))):
                g = os.path.join(step_dir(da, step), os.path.basename(f))
                if not os.path.exists(g) or rank_arrays(f) != rank_arrays(g):
                    diffs.append(f"step {step} {os.path.basename(f)}")
        background = [l for l in log.splitlines() if "written in the background while steps" in l]
        # The saves at steps 2, 4, 6, 8 complete at the next save (two steps later), the last at the run's end.
        check(f"{title}: asynchronous rank files equal the synchronous ones byte for byte (5 saves)",
              not diffs and os.path.exists(os.path.join(step_dir(da, 10), "COMPLETE")), ", ".join(diffs[:4]))
        check(f"{title}: asynchronous saves were written while later steps ran", len(background) >= 4,
              background[0].split("] ")[-1] if background else log[-300:])
        merged = out(f"async_{len(check.results)}.bin")
        r = programs.run([a.serial, "checkpoint", "--merge", step_dir(da, 10), "--out", merged])
        if r.returncode != 0:
            check(f"{title}: --merge of the asynchronous run's last save", False, r.stderr.strip()[-300:])
        else:
            same_state(f"{title}: the asynchronous run's last save, merged, holds serial's final state", load(merged))

    # ---- The plan states each rank's bytes ----
    if "dp 4 ZeRO-3" in saved:
        n, args = LAYOUT["dp 4 ZeRO-3"]
        r = programs.mpi(1, [*common, *EXACT, *args, *SHARDED, "--ranks", "4"], command="plan")
        if r.returncode != 0:
            check("plan of dp 4 ZeRO-3 sharded", False, r.stderr.strip()[-300:])
        else:
            plan = json.loads(r.stdout)
            got = [p["checkpoint"]["write_bytes"] for p in plan["per_rank"]]
            have = [os.path.getsize(os.path.join(step_dir(saved["dp 4 ZeRO-3"], 10), f"rank-{i:05d}.bin"))
                    for i in range(4)]
            reads = [p["checkpoint"]["read_bytes"] for p in plan["per_rank"]]
            check("the plan's bytes each rank writes equal its rank file's size (dp 4 ZeRO-3)", got == have,
                  f"planned {got}, written {have}; reads {reads}")

    # ---- Bad input: one line naming the file, exit 2, nothing trained ----
    if "dp 2 ZeRO-1" in saved:
        src = step_dir(saved["dp 2 ZeRO-1"], 5)

        def bad(title, damage, needle):
            d = out(f"bad_{len(check.results)}")
            shutil.copytree(src, d + "_ck")
            damage(d + "_ck")
            r = train(None, [*common, *EXACT, "--resume", d + "_ck"], d)
            lines = [l for l in r.stderr.splitlines() if "error" in l]
            trained = os.path.exists(os.path.join(d, "metrics.jsonl")) or os.path.exists(
                os.path.join(d, "metrics.jsonl.partial"))
            check(f"--resume of a sharded checkpoint with {title}: one line naming the file, exit 2, nothing trained",
                  r.returncode == 2 and len(lines) == 1 and needle in lines[0] and not trained,
                  f"exit {r.returncode}: {lines[0] if lines else r.stderr.strip()[-200:]}")
            r = programs.run([a.serial, "checkpoint", "--merge", d + "_ck", "--out", d + ".bin"])
            check(f"checkpoint --merge of it: exit 2 naming the file", r.returncode == 2 and needle in r.stderr,
                  f"exit {r.returncode}: {r.stderr.strip()[-200:]}")

        def flip(ck):
            with open(os.path.join(ck, "rank-00001.bin"), "r+b") as f:
                f.seek(200)
                byte = f.read(1)
                f.seek(200)
                f.write(bytes([byte[0] ^ 1]))

        def lie_size(ck):
            m = json.load(open(os.path.join(ck, "manifest.json")))
            m["files"][0]["bytes"] += 8
            json.dump(m, open(os.path.join(ck, "manifest.json"), "w"))

        def other_run(ck):
            shutil.copyfile(os.path.join(step_dir(saved["dp 2 ZeRO-1"], 10), "rank-00000.bin"),
                            os.path.join(ck, "rank-00000.bin"))

        bad("a checksum mismatch", flip, "rank-00001.bin: corrupted rank file")
        bad("a missing rank file", lambda ck: os.remove(os.path.join(ck, "rank-00001.bin")),
            "rank-00001.bin: missing rank file")
        bad("a rank file of another save", other_run, "rank-00000.bin: its header is not this checkpoint's")
        bad("a manifest whose sizes lie", lie_size, "rank-00000.bin: \"bytes\"")

        # Issue 70 (WEAK): a manifest nested 100000 deep is bad input (exit 2), not a failure (it was exit 1);
        # a manifest's file name is quoted briefly and escaped.
        def deep(ck):
            with open(os.path.join(ck, "manifest.json"), "w") as f:
                f.write('{"a": ' + "[" * 100000 + "]" * 100000 + "}")
        bad("a manifest nested 100000 deep", deep, "nested deeper than 512")

        def long_name(ck):
            path = os.path.join(ck, "manifest.json")
            m = json.load(open(path))
            m["files"][0]["file"] = "\x1b[2J" + "r" * (1 << 20)
            json.dump(m, open(path, "w"))
        bad("a 1 MB rank file name of escape bytes", long_name, "\\x1b[2Jrrrr")
    return check.finish()


if __name__ == "__main__":
    raise SystemExit(main())
