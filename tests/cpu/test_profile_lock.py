"""Nsight Compute profiles one process at a time per host: every ncu run holds a host-wide lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernelblaster.harness.profile import run

_PROBE = """
import fcntl, sys
lock = open(sys.argv[1], "a")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("held")
"""


def _seen_from_another_process(lock: Path) -> str:
    return subprocess.run([sys.executable, "-c", _PROBE, str(lock)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_profiler_lock_is_held_against_other_processes_only_while_a_profile_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / "ncu.lock"
    monkeypatch.setattr(run, "PROFILER_LOCK", lock)
    with run.profiler_lock():
        during = _seen_from_another_process(lock)
    assert (during, _seen_from_another_process(lock)) == ("held", "free")
