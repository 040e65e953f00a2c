"""Nsight Compute profiles one process at a time per host: every ncu run holds a host-wide lock, and the time
spent waiting for it is recorded apart (`profile_wait`)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernelblaster.harness.profile import run
from kernelblaster.harness.stages import StageClock
from kernelblaster.tools.driver_process import DriverProgram

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


class _RecordingSession:
    """Stands in for the driver under ncu (test double): records what happens, in order."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def __enter__(self) -> _RecordingSession:
        self.events.append("ncu and driver start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append("driver and ncu end")

    def setup(self, *args: object, **kwargs: object) -> None:
        self.events.append("setup")

    def profile(self, *args: object, **kwargs: object) -> None:
        self.events.append("profiled call")


def test_a_candidate_s_profile_holds_the_host_s_profiler_from_its_profiled_call_to_ncu_s_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    @contextmanager
    def recording_lock(clock: StageClock | None = None) -> Iterator[None]:
        events.append("lock taken")
        yield
        events.append("lock released")

    monkeypatch.setattr(run, "locate_ncu", lambda: tmp_path / "ncu")
    monkeypatch.setattr(run, "_ncu_installation", lambda ncu: ())
    monkeypatch.setattr(run, "profile_prefix", lambda report: ["ncu"])
    monkeypatch.setattr(run, "flush_bytes", lambda gpu: 0)
    monkeypatch.setattr(run, "DriverSession", lambda *args, **kwargs: _RecordingSession(events))
    monkeypatch.setattr(run, "profiler_lock", recording_lock)
    monkeypatch.setattr(run, "export_candidate_details", lambda report: "")
    monkeypatch.setattr(run, "build_profile_report", lambda details: events.append("report read"))
    program = DriverProgram(launcher=tmp_path / "launcher", driver=tmp_path / "driver", library=tmp_path / "c.so")
    run.profile_candidate(program, [], 0, 1.0, sandbox=None)
    assert events == ["ncu and driver start", "setup", "lock taken", "profiled call", "driver and ncu end",
                      "lock released", "report read"]
