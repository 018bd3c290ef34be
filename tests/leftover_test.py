"""Last in the suite (issue 53): no process that any test started is still
alive. Every Python test tags its environment (tests/checks.py, TEST_TAG),
and every program it starts inherits the tag, mpiexec's proxies and ranks
included; meson runs this test alone, after the others (priority, not
parallel). A process left is named and ended, and the test fails. Only this
suite's processes count (GPT2_SUITE: the build folder), so another suite
running beside it is left alone."""
import os
import sys

from checks import SUITE, TEST_TAG, Checks, end_processes, tagged_processes, wait_gone


def main():
    check = Checks()
    # A test's processes may take a moment to go after it ended (a rank's
    # MPI_Finalize watchdog, a harness guardian's grace): checks.GONE_S, within
    # this test's own limit of 60 s.
    left = wait_gone(others)
    check("no process of the suite's tests is alive after them", not left,
          "; ".join(f"pid {pid} (test {tag}): {cmd}" for pid, cmd, tag in left))
    end_processes(left)
    return check.finish()


def others():
    """This suite's tagged processes (the same build folder's) but this test's own."""
    return [x for x in tagged_processes(TEST_TAG) if x[2].startswith(SUITE + ":") and x[2] != os.environ[TEST_TAG]]


if __name__ == "__main__":
    sys.exit(main())
