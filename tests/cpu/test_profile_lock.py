"""Nsight Compute profiles one process at a time per host: every ncu run holds a host-wide lock, and the time
spent waiting for it is recorded apart (`profile_wait`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelblaster.harness.profile import run
from kernelblaster.harness.stages import StageClock

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


_HOLDER = """
import fcntl, sys, time
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_the_wait_for_another_process_s_profile_is_recorded_as_profile_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / "ncu.lock"
    monkeypatch.setattr(run, "PROFILER_LOCK", lock)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock), "1.0"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    clock = StageClock()
    started = time.perf_counter()
    with run.profiler_lock(clock):
        inside = time.perf_counter()
    holder.wait(timeout=30)
    assert 0.5 < clock.seconds["profile_wait"] <= inside - started + 0.01
