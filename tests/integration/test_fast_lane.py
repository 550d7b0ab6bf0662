"""make test-fast stays runnable: the plugin that guards it (tests/support/fast_lane.py) refuses
a run whose tests/lib or tests/unit hold a test that uses the database; make test (CI) collects
that lane the same way, so a test put in the wrong tier fails here, not only on a laptop."""

from __future__ import annotations

import subprocess
import sys

from tests.support.processes import ROOT


def test_the_fast_lane_collects_with_its_guard():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.support.fast_lane", "tests/lib", "tests/unit"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(collected) > 4000
