#!/usr/bin/env bash
# Builds everything and runs the whole test suite (unit tests, gradient
# checks, the PyTorch cross-check). Installs what it needs; safe to rerun.
#   scripts/test.sh            the whole suite (what CI runs)
#   scripts/test.sh --quick    the quick tier: every layer once (meson suite
#                              'quick', docs/testing.md), a few minutes once built
# Other arguments go to meson test (a test's name, --suite NAME, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
for a in "$@"; do
  if [[ "$a" == "--quick" ]]; then args+=(--suite quick); else args+=("$a"); fi
done
scripts/setup.sh --tests
status=0
meson test -C build --print-errorlogs ${args[@]+"${args[@]}"} || status=$?
# One plain summary line from Meson's own log.
/usr/bin/python3 - <<'PY'
import json
counts = {"OK": 0, "FAIL": 0, "SKIP": 0, "TIMEOUT": 0, "ERROR": 0}
with open("build/meson-logs/testlog.json") as f:
    for line in f:
        t = json.loads(line)
        r = t.get("result", "ERROR")
        counts[r if r in counts else "ERROR"] += 1
        if r == "SKIP":  # the test's own reason, e.g. the GPU suite without a GPU
            why = [l for l in t.get("stdout", "").splitlines() if l.startswith("SKIP")]
            print(f"skipped {t.get('name')}: {why[-1] if why else 'no reason given'}")
failed = counts["FAIL"] + counts["TIMEOUT"] + counts["ERROR"]
print(f"{counts['OK']} passed, {failed} failed, {counts['SKIP']} skipped")
PY
exit $status
