#!/usr/bin/env python3
"""The layers of the engine (docs/architecture.md) include only downwards.

    util (beside the stack: any layer may include it; it includes none)
    kernels < model < parallel < train < app

Every #include "layer/..." in core/<layer>/ must name its own layer, a lower
one or util, and no quoted include may climb with "..". The model layer holds no YAML, files, MPI or clocks; the
kernels layer no YAML, files or MPI (it times only its SGEMM ceiling, off
the Backend interface); util no BLAS, OpenMP or MPI. The harness
(bench/harness) sits beside the stack: it includes util alone, and no BLAS,
OpenMP, MPI or CUDA (it starts the stage programs as processes). A violation
prints file:line and the rule, and the test fails.

Inside train, the rooms (core/train/<room>/, each with a README line of
what it owns) include only their own room or lower ones:

    config < data < formats < schedule < resolve < run < evaluate

and no two units of train (a .h and its .cpp are one) include each other,
directly or round a circle.

usage: layering_test.py --repo ROOT
"""
import argparse
import os
import re
import sys

ORDER = ["kernels", "model", "parallel", "train", "app"]
# System headers a layer must not include: (pattern, what it stands for).
FORBIDDEN = {
    "util": [(r"<cblas\.h>|<omp\.h>|<mpi\.h>|<cuda", "BLAS, OpenMP, MPI or CUDA")],
    "harness": [(r"<cblas\.h>|<omp\.h>|<mpi\.h>|<nccl\.h>|<cuda", "BLAS, OpenMP, MPI or CUDA")],
    "kernels": [(r"<yaml-cpp/|<mpi\.h>|<nccl\.h>", "YAML or MPI"), (r"<fstream>|<filesystem>", "files")],
    "model": [(r"<yaml-cpp/|<mpi\.h>|<nccl\.h>|<cblas\.h>|<omp\.h>", "YAML, MPI or BLAS"),
              (r"<chrono>|<fstream>|<filesystem>|<cstdio>|<thread>", "clocks or files")],
}
TRAIN_ROOMS = ["config", "data", "formats", "schedule", "resolve", "run", "evaluate"]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(rel):
    """core/<layer>/... -> layer."""
    parts = rel.split(os.sep)
    return parts[1] if len(parts) > 2 and parts[0] == "core" else None


def allowed(src, dst):
    if dst == "util":
        return True
    if src == "util":
        return False
    return ORDER.index(dst) <= ORDER.index(src)


def room_of(rel):
    """core/train/<room>/... -> room (None elsewhere; "" for a file of core/train itself)."""
    parts = rel.split(os.sep)
    if len(parts) < 3 or parts[:2] != ["core", "train"]:
        return None
    return parts[2] if len(parts) > 3 else ""


def train_circles(edges):
    """The include circles among train's units: strongly connected parts of more than one unit (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_file(path, rel, src_layer, problems, harness=False, edges=None):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            kind, name = m.groups()
            if kind == '"':
                if ".." in name.split("/"):
                    problems.append(f"{rel}:{n}: includes {name}: a relative path around the layer rule; "
                                    "name the layer (\"model/...\")")
                    continue
                head = name.split("/")[0]
                if head in ORDER or head == "util":
                    if harness and head != "util":
                        problems.append(f"{rel}:{n}: the harness includes {name}: it may include only util/")
                    elif not harness and not allowed(src_layer, head):
                        problems.append(f"{rel}:{n}: layer '{src_layer}' includes {name} from the higher layer '{head}'")
                    elif head == "train" and src_layer == "train":
                        src_room, parts = room_of(rel), name.split("/")
                        dst_room = parts[1] if len(parts) > 2 else ""
                        if src_room not in TRAIN_ROOMS:
                            problems.append(f"{rel}: not in a room of train (core/train/<{'|'.join(TRAIN_ROOMS)}>/)")
                        elif dst_room in TRAIN_ROOMS and TRAIN_ROOMS.index(dst_room) > TRAIN_ROOMS.index(src_room):
                            problems.append(f"{rel}:{n}: room '{src_room}' of train includes {name} from the higher "
                                            f"room '{dst_room}'")
                        unit = os.path.splitext(rel)[0].split(os.sep, 1)[1]
                        target = os.path.splitext(name)[0]
                        if edges is not None and target != unit:
                            edges.setdefault(unit, set()).add(target)
            else:
                for pattern, what in FORBIDDEN.get(src_layer, []):
                    if re.search(pattern, "<" + name + ">"):
                        problems.append(f"{rel}:{n}: layer '{src_layer}' includes <{name}> ({what} do not belong there)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    problems, checked, edges = [], 0, {}
    for top in ["core", os.path.join("bench", "harness")]:
        for root, _, files in os.walk(os.path.join(a.repo, top)):
            for f in files:
                if not f.endswith((".h", ".cpp", ".cu", ".cuh", ".in")):
                    continue
                path = os.path.join(root, f)
                rel = os.path.relpath(path, a.repo)
                layer = layer_of(rel)
                if top == "core" and layer not in ORDER + ["util"]:
                    problems.append(f"{rel}: not in a layer folder (core/<{'|'.join(['util'] + ORDER)}>/)")
                    continue
                harness = top != "core"
                if top == "core" and layer == "train" and room_of(rel) == "pch":
                    continue  # the precompiled header: system and library headers only
                check_file(path, rel, "harness" if harness else layer, problems, harness=harness, edges=edges)
                checked += 1
    for circle in train_circles(edges):
        problems.append(f"an include circle in train: {' <-> '.join(circle)}")
    readme = [r for r in TRAIN_ROOMS if not os.path.isfile(os.path.join(a.repo, "core", "train", r, "README.md"))]
    if readme:
        problems.append(f"core/train rooms without a README.md saying what they own: {', '.join(readme)}")
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
