"""The Python tests' one way of checking: a Checks list, called once per
property, that prints a line per check and ends with the count.

    check = Checks()
    check("the serial reference run", r.returncode == 0, r.stderr[-300:])
    ...
    return check.finish()  # "N passed, M failed"; exit status 0 if all passed, else 1

A check prints "ok   title: detail" or "FAIL title: detail" (no ": detail"
when the detail is empty), flushed at once so that its line comes before
whatever a slow or hung step prints next. A script that cannot go on (its
reference run failed) records that as a failed check and returns finish().
A note that is not a check (a skipped case and why) is a plain print.
"""


class Checks:
    """The checks of one test script, in order (`results`: each one's outcome).

    passes: what a passing check prints. "detail" (the default): its title
    and detail. "short": its detail only when shorter than 160 characters
    (long ones are program outputs that explain a failure). "title": its
    title alone, for details that only explain a failure (a program's
    stderr). "silent": nothing, for many small assertions whose titles name
    what failed; finish() still counts them."""

    PASSES = ("detail", "short", "title", "silent")

    def __init__(self, passes="detail"):
        if passes not in self.PASSES:
            raise ValueError(f"Checks(passes={passes!r}): expected one of {', '.join(self.PASSES)}")
        self.passes = passes
        self.results = []

    def __call__(self, title, ok, detail=""):
        ok = bool(ok)
        self.results.append(ok)
        if ok and self.passes == "silent":
            return
        if ok and (self.passes == "title" or (self.passes == "short" and len(detail) >= 160)):
            detail = ""
        print(f"{'ok  ' if ok else 'FAIL'} {title}{': ' + detail if detail else ''}", flush=True)

    def finish(self):
        """Prints "N passed, M failed"; the exit status: 0 if every check passed, else 1."""
        passed = sum(self.results)
        print(f"{passed} passed, {len(self.results) - passed} failed")
        return 0 if all(self.results) else 1
