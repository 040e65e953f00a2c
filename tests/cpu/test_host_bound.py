"""A cgroup around each sandboxed program bounds what its own limits cannot count: memory no process maps and,
where the harness runs as root, its tasks. Real cgroups and a real sandbox; skipped only on a machine where no
cgroup can be made (the reason is the skip's)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from kernelblaster.tools.host_bound import HOST_GROUP, HostBound, sweep_groups
from kernelblaster.tools.sandbox import Sandbox, SandboxView, probe_sandbox

PROBED = probe_sandbox()
BOUND = None if isinstance(PROBED, str) else PROBED.host_bound
WHY_NOT = PROBED if isinstance(PROBED, str) else PROBED.host_bound_reason
pytestmark = pytest.mark.skipif(BOUND is None, reason=f"no cgroup bound here: {WHY_NOT}")
PAGE = 4096  # the kernel keeps a memory bound in whole pages
PYTHON = "/usr/bin/python3"  # the system's, which every sandbox sees
FILL_MEMFD = """import os
fd = os.memfd_create("fill")
for mib in range(1, 401):
    os.write(fd, b"x" * (1 << 20))
print("held MiB", mib, flush=True)
"""
LIFT_BOUNDS_THEN_FILL = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.unshare(0x10000000 | 0x20000 | 0x02000000)  # CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP
os.makedirs("/tmp/cg", exist_ok=True)
v1 = libc.mount(b"none", b"/tmp/cg", b"cgroup", 0, b"memory") == 0
if v1 or libc.mount(b"none", b"/tmp/cg", b"cgroup2", 0, None) == 0:
    print("mounted", flush=True)
    for name, value in (("memory.memsw.limit_in_bytes", "-1"), ("memory.limit_in_bytes", "-1"),
                        ("memory.max", "max")):
        try:
            open("/tmp/cg/" + name, "w").write(value)
        except OSError:
            pass
""" + FILL_MEMFD
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


def _run(sandbox: Sandbox, code: str, gpu: bool = False) -> subprocess.CompletedProcess[str]:
    launch = sandbox.launch([PYTHON, "-c", code], SandboxView(gpu=gpu))
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


def test_a_sweep_removes_this_harnesss_finished_groups_or_leaves_them_holding_a_task(sandbox: Sandbox) -> None:
    # A finished program's group holds a task as long as its last process is a zombie nobody reaped (where
    # the machine's init does not reap orphans, bwrap's can stay so); it goes at a later sweep.
    launch = replace(sandbox, host_bound=_bound()).launch([PYTHON, "-c", "pass"], SandboxView())
    subprocess.run(launch.argv, env=launch.env, check=True, timeout=60)
    assert launch.bound is not None
    sweep_groups(_bound(), after_s=0.0, only_own=True)
    assert not launch.bound.group.exists() or (launch.bound.group / "run" / "cgroup.procs").read_text().strip()


def test_a_young_empty_group_is_kept_for_the_program_about_to_join_it(sandbox: Sandbox) -> None:
    launch = replace(sandbox, host_bound=_bound()).launch(["true"], SandboxView())
    sweep_groups(_bound())
    assert launch.bound is not None and (launch.bound.group / "run").is_dir()
    subprocess.run(launch.argv, env=launch.env, check=True, timeout=60)


def test_an_old_empty_group_of_any_harness_is_swept() -> None:
    left = _bound().memory_parent / HOST_GROUP / "0123456789ab-0"
    (left / "run").mkdir(parents=True)
    os.utime(left, (0, 0))
    sweep_groups(_bound())
    assert not left.exists()


def test_a_gpu_program_that_mounts_the_cgroup_file_system_and_lifts_the_bounds_it_sees_is_still_bounded(
        sandbox: Sandbox) -> None:
    # A GPU program may make namespaces as far as bwrap goes (the driver's launcher refuses them itself): with
    # a new user, mount and cgroup namespace it mounts the hierarchy, but bwrap rooted its cgroup namespace at
    # `run`, which has no bound to lift, so what it writes there changes nothing.
    done = _run(replace(sandbox, host_bound=_bound(), memory_bytes=128 << 20), LIFT_BOUNDS_THEN_FILL, gpu=True)
    assert "mounted" in done.stdout and done.returncode == 137 and "held MiB" not in done.stdout, done


def test_any_other_program_cannot_make_the_user_namespace_that_mounting_needs(sandbox: Sandbox) -> None:
    done = _run(replace(sandbox, host_bound=_bound()), LIFT_BOUNDS_THEN_FILL)
    assert "mounted" not in done.stdout and "held MiB 400" in done.stdout, done


def test_groups_a_program_made_below_its_own_are_swept_with_it(sandbox: Sandbox) -> None:
    launch = replace(sandbox, host_bound=_bound()).launch(["true"], SandboxView())
    assert launch.bound is not None
    (launch.bound.group / "run" / "made" / "by" / "it").mkdir(parents=True)
    os.utime(launch.bound.group, (0, 0))
    sweep_groups(_bound())
    assert not launch.bound.group.exists()


def test_a_harness_of_another_memory_size_leaves_the_shared_bound_as_the_first_one_set_it(
        sandbox: Sandbox) -> None:
    host = _bound().memory_parent / HOST_GROUP
    limit = host / ("memory.max" if _bound().version == 2 else "memory.limit_in_bytes")
    before = limit.read_text()
    other = replace(_bound(), host_memory_bytes=_bound().host_memory_bytes // 3)
    launch = replace(sandbox, host_bound=other).launch(["true"], SandboxView())
    subprocess.run(launch.argv, env=launch.env, check=True, timeout=60)
    assert limit.read_text() == before


def test_every_program_of_the_host_shares_one_memory_bound_of_half_the_machine(sandbox: Sandbox) -> None:
    host = _bound().memory_parent / HOST_GROUP
    limit = host / ("memory.max" if _bound().version == 2 else "memory.limit_in_bytes")
    assert int(limit.read_text()) == _bound().host_memory_bytes // PAGE * PAGE


