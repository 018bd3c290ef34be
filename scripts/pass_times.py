#!/usr/bin/env python3
"""A pipeline run's measured pass times, as parallel.pass_times wants them (docs/pipeline.md, "Virtual stages").

Reads RUN_DIR/timeline.jsonl (the first steps' events of every rank) and prints the median duration of each
kind of pass over the steps after the first, F, B and W relative to F: "1,1.31,0.52". Run it on a zb-h1 or zb-v
run (their backwards are split into B and W); under zb-v each pass is one chunk's, which is what the lists need.

usage: scripts/pass_times.py RUN_DIR
"""
import json
import os
import statistics
import sys


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    path = os.path.join(sys.argv[1], "timeline.jsonl")
    try:
        steps = [json.loads(line) for line in open(path)]
    except (OSError, ValueError) as e:
        print(f"pass_times: {path}: {e}", file=sys.stderr)
        return 2
    times = {"F": [], "B": [], "W": []}
    for step in steps[1:] or steps:  # the first step warms up
        for rank in step["ranks"]:
            for kind, _, t0, t1 in rank["events"]:
                if kind in times:
                    times[kind].append(t1 - t0)
    if not all(times.values()):
        missing = ", ".join(k for k, v in times.items() if not v)
        print(f"pass_times: {path}: no {missing} events (a schedule with a split backward: zb-h1 or zb-v)",
              file=sys.stderr)
        return 2
    f, b, w = (statistics.median(times[k]) for k in "FBW")
    print(f"1,{b / f:.2f},{w / f:.2f}")
    print(f"median ms: F {f:.3f}, B {b:.3f}, W {w:.3f} ({len(times['F'])} forwards)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
