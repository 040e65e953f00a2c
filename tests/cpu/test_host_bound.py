"""A cgroup around each sandboxed program bounds what its own limits cannot count: memory no process maps and,
where the harness runs as root, its tasks. Real cgroups and a real sandbox; skipped only on a machine where no
cgroup can be made (the reason is the skip's)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from kernelblaster.tools.host_bound import GROUP_PREFIX, HostBound, probe_host_bound, sweep_groups
from kernelblaster.tools.sandbox import Sandbox, SandboxView

BOUND = probe_host_bound()
pytestmark = pytest.mark.skipif(isinstance(BOUND, str), reason=f"no cgroup can be made here: {BOUND}")
PYTHON = "/usr/bin/python3"  # the system's, which every sandbox sees
FILL_MEMFD = """import os
fd = os.memfd_create("fill")
for mib in range(1, 401):
    os.write(fd, b"x" * (1 << 20))
print("held MiB", mib, flush=True)
"""
START_THREADS = """import threading, time
started = 0
for _ in range(200):
    try:
        threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
    except RuntimeError:
        break
    started += 1
print("threads", started, flush=True)
"""


def _run(sandbox: Sandbox, code: str) -> subprocess.CompletedProcess[str]:
    launch = sandbox.launch([PYTHON, "-c", code], SandboxView())
    return subprocess.run(launch.argv, env=launch.env, capture_output=True, text=True, timeout=120, check=False)


def _bound() -> HostBound:
    assert isinstance(BOUND, HostBound)
    return BOUND


def test_a_program_filling_a_memfd_past_its_memory_bound_is_killed(sandbox: Sandbox) -> None:
    done = _run(replace(sandbox, host_bound=_bound(), memory_bytes=128 << 20), FILL_MEMFD)
    assert done.returncode == 137 and "held MiB" not in done.stdout, done


def test_a_program_killed_at_its_memory_bound_is_said_to_be(sandbox: Sandbox) -> None:
    bounded = replace(sandbox, host_bound=_bound(), memory_bytes=128 << 20)
    launch = bounded.launch([PYTHON, "-c", FILL_MEMFD], SandboxView())
    subprocess.run(launch.argv, env=launch.env, capture_output=True, timeout=120, check=False)
    assert launch.bound is not None
    assert "killed at the sandbox's host-memory bound of 0.1 GiB" in launch.bound.killed_note()


def test_a_program_within_its_memory_bound_is_not_said_to_be_killed(sandbox: Sandbox) -> None:
    launch = replace(sandbox, host_bound=_bound()).launch([PYTHON, "-c", "pass"], SandboxView())
    subprocess.run(launch.argv, env=launch.env, capture_output=True, timeout=120, check=True)
    assert launch.bound is not None and launch.bound.killed_note() == ""


def test_without_a_bound_the_same_program_holds_all_it_asked_for(sandbox: Sandbox) -> None:
    done = _run(replace(sandbox, host_bound=None), FILL_MEMFD)
    assert done.returncode == 0 and "held MiB 400" in done.stdout, done


def test_a_program_starts_fewer_tasks_than_its_bound_whatever_its_uid(sandbox: Sandbox) -> None:
    done = _run(replace(sandbox, host_bound=_bound(), tasks=32), START_THREADS)
    started = int(done.stdout.split()[-1])
    assert 0 < started < 32, done


def test_a_sweep_leaves_only_groups_that_still_hold_a_task(sandbox: Sandbox) -> None:
    # A finished program's group holds a task as long as its last process is a zombie nobody reaped (where
    # the machine's init does not reap orphans, bwrap's can stay so); it goes at a later sweep.
    _run(replace(sandbox, host_bound=_bound()), "pass")
    sweep_groups(_bound(), after_s=0.0)
    ours = [group for group in _groups(_bound()) if group.name.startswith(f"{GROUP_PREFIX}{os.getpid()}-")]
    assert all((group / "cgroup.procs").read_text().strip() for group in ours)


def test_a_fresh_group_of_this_process_is_kept_for_the_program_about_to_join_it(sandbox: Sandbox) -> None:
    launch = replace(sandbox, host_bound=_bound()).launch(["true"], SandboxView())
    joining = [Path(arg) for arg in launch.argv if arg.endswith("cgroup.procs")]
    sweep_groups(_bound())
    assert joining and all(path.parent.is_dir() for path in joining)
    subprocess.run(launch.argv, env=launch.env, check=True, timeout=60)


def test_groups_left_by_a_harness_that_died_are_swept() -> None:
    left = _bound().memory_parent / f"{GROUP_PREFIX}999999999-0"
    left.mkdir()
    sweep_groups(_bound())
    assert not left.exists()


def test_an_empty_group_of_another_live_harness_is_left_to_it() -> None:
    theirs = _bound().memory_parent / f"{GROUP_PREFIX}{os.getppid()}-0"
    theirs.mkdir()
    try:
        sweep_groups(_bound(), after_s=0.0)
        assert theirs.is_dir()
    finally:
        theirs.rmdir()


def _groups(bound: HostBound) -> list[Path]:
    return [group for group in bound.memory_parent.iterdir() if group.name.startswith(GROUP_PREFIX)]
