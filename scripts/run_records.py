"""What the measurement scripts read from a run folder (its metrics.jsonl)."""
import json
import os
import statistics


def median_step_ms(run_dir):
    """The run's median step time in ms over its steps but the first (start-up, choices timed)."""
    steps = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))
             if '"event":"step"' in l.replace(" ", "")]
    return statistics.median(s["step_ms"] for s in steps[1:])
