"""The study's wall time counts every invocation, killed ones too (crg.outputs.InvocationClock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from crg.outputs import WALL_FILE, InvocationClock


def test_each_invocation_adds_its_seconds_beside_the_earlier_ones(tmp_path):
    (tmp_path / WALL_FILE).write_text(json.dumps({"2026-01-01T00:00:00": 100.0}))
    with InvocationClock(tmp_path, every_s=0.05) as clock:
        time.sleep(0.3)
        ticking = json.loads((tmp_path / WALL_FILE).read_text())[clock.key]
        assert 0.1 <= ticking <= 0.35  # written while it runs, not only at the end
    found = json.loads((tmp_path / WALL_FILE).read_text())
    assert found["2026-01-01T00:00:00"] == 100.0 and 0.3 <= found[clock.key] < 1.0


def test_a_killed_invocation_leaves_its_seconds(tmp_path):
    """SIGKILL: no exit handler runs; what the clock wrote while it ran remains."""
    script = ("import sys, time\nfrom crg.outputs import InvocationClock\n"
              "with InvocationClock(sys.argv[1], every_s=0.05):\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env={**os.environ})
    deadline = time.time() + 60
    while time.time() < deadline:
        path = tmp_path / WALL_FILE
        if path.exists() and next(iter(json.loads(path.read_text()).values())) >= 0.5:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    (seconds,) = json.loads((tmp_path / WALL_FILE).read_text()).values()
    assert seconds >= 0.5
