#!/usr/bin/env python3
"""scripts/source_stamp.sh: the build's commit and source hash come from the
tree being built, not from wherever it was copied.

  * In this checkout the commit is `git describe --always --dirty --abbrev=12`.
  * A tree copied without git history reports "unknown"; with a
    .source-stamp whose source hash matches the tree it reports the stamped
    commit; once a source file changes, the stale stamp is ignored and the
    hash changes with it.

usage: source_stamp_test.py --repo PATH
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from checks import Checks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    script = os.path.join(os.path.abspath(a.repo), "scripts", "source_stamp.sh")
    check = Checks()

    def stamp(root):
        return subprocess.run(["bash", script, root], capture_output=True, text=True, timeout=60).stdout.strip()

    here = stamp(a.repo)
    git = subprocess.run(["git", "-C", a.repo, "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True,
                         text=True)
    if git.returncode == 0:
        check("in the checkout: git describe of the tree", here.split("|")[0] == git.stdout.strip(), here)
    else:
        print("skip: the checkout has no git history")

    work = tempfile.mkdtemp(prefix="stamp_test_")
    os.makedirs(os.path.join(work, "core"))
    with open(os.path.join(work, "core", "a.cpp"), "w") as f:
        f.write("int a = 1;\n")
    shutil.copy(os.path.join(a.repo, "meson.build"), work)
    env_free = stamp(work)
    commit, src = env_free.split("|")
    check("a copy without git history: commit unknown, a source hash", commit == "unknown" and len(src) == 12, env_free)
    with open(os.path.join(work, ".source-stamp"), "w") as f:
        f.write(f"abc123def456 {src}\n")
    check("a copy with a matching .source-stamp: the stamped commit", stamp(work) == f"abc123def456|{src}",
          stamp(work))
    with open(os.path.join(work, "core", "a.cpp"), "w") as f:
        f.write("int a = 2;\n")
    changed = stamp(work)
    check("a source changed after stamping: the stale stamp is ignored, the hash changes",
          changed.split("|")[0] == "unknown" and changed.split("|")[1] != src, changed)
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
