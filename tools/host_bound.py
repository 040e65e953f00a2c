"""A cgroup around each sandboxed program, for what its own limits cannot count: host memory that no process
maps (memfd files, System V segments: charged to the cgroup, counted in no resident size, so the OOM killer
would pick the harness) and, where the harness runs as root, its number of tasks (the kernel exempts uid 0
from RLIMIT_NPROC).

The harness makes one cgroup per sandboxed program below its own (cgroup v1's memory and pids hierarchies, or
v2 where its cgroup delegates both controllers), and the program's first process joins it before it starts
bwrap, so everything the program ever runs is inside. Where no cgroup can be made here (a read-only cgroupfs,
no delegation), `probe_host_bound` says why and the sandbox runs without this bound, as it did before.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GROUP_PREFIX = "kernelblaster-"
_GROUP = re.compile(rf"^{GROUP_PREFIX}(?P<pid>\d+)-\d+$")
# A group this process made is removed once it is empty and this old: a younger one may belong to a program
# another thread is about to start (a group no task has joined yet is empty too).
SWEEP_AFTER_S = 60.0
_CONTROLLERS = ("memory", "pids")
# The joining shell writes its own PID to each cgroup.procs file before it becomes the program: nothing the
# program starts can run outside the group. A group it cannot join stops the launch (exit status 125).
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class HostBound:
    """Where this process makes its programs' cgroups: a folder per controller hierarchy (one on cgroup v2)."""

    memory_parent: Path
    pids_parent: Path
    version: int

    def enter(self, argv: Sequence[str], memory_bytes: int, tasks: int) -> tuple[list[str], Path]:
        """`argv`, run inside a new cgroup of at most `memory_bytes` (swap included) and `tasks` tasks, and
        the group's memory folder (where `oom_kills` reads what the bound killed)."""
        procs = self._new_group(memory_bytes, tasks)
        return ["/bin/sh", "-c", _JOIN, "kernelblaster-cgroup", *map(str, procs), "--", *argv], procs[0].parent

    def _new_group(self, memory_bytes: int, tasks: int) -> list[Path]:
        sweep_groups(self)
        name = f"{GROUP_PREFIX}{os.getpid()}-{next(_serial)}"
        with _made_lock:
            _made[name] = time.monotonic()
        if self.version == 2:
            group = self.memory_parent / name
            group.mkdir()
            _write(group / "memory.max", memory_bytes)
            _write(group / "memory.swap.max", 0)
            _write(group / "pids.max", tasks)
            return [group / "cgroup.procs"]
        memory, pids = self.memory_parent / name, self.pids_parent / name
        memory.mkdir()
        pids.mkdir()
        _write(memory / "memory.limit_in_bytes", memory_bytes)
        if (memory / "memory.memsw.limit_in_bytes").exists():  # with swap accounting, swapped-out pages count too
            _write(memory / "memory.memsw.limit_in_bytes", memory_bytes)
        _write(pids / "pids.max", tasks)
        return [memory / "cgroup.procs", pids / "cgroup.procs"]


_serial = itertools.count()
_made: dict[str, float] = {}  # this process's groups: when each was made
_made_lock = threading.Lock()


def _write(path: Path, value: int) -> None:
    path.write_text(f"{value}\n")


def oom_kills(memory_group: Path) -> int:
    """How many of the group's tasks the kernel killed at its memory bound (0 where the kernel does not say)."""
    for name in ("memory.events", "memory.oom_control"):  # cgroup v2, v1
        try:
            text = (memory_group / name).read_text()
        except OSError:
            continue
        found = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if found:
            return int(found[1])
    return 0


def sweep_groups(bound: HostBound, after_s: float = SWEEP_AFTER_S) -> None:
    """Remove the programs' cgroups that hold no task any more: this process's older than `after_s`, and all
    of harnesses that died without removing theirs. Another live harness's are its own to remove; a cgroup
    with a task in it cannot be removed, and stays."""
    now = time.monotonic()
    for parent in dict.fromkeys((bound.memory_parent, bound.pids_parent)):
        for group in parent.glob(f"{GROUP_PREFIX}*"):
            found = _GROUP.match(group.name)
            if found is None:
                continue
            pid = int(found["pid"])
            if pid == os.getpid() and now - _made.get(group.name, 0.0) < after_s:
                continue
            if pid != os.getpid() and _alive(pid):
                continue
            with contextlib.suppress(OSError):
                group.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def probe_host_bound() -> HostBound | str:
    """Where this process can bound its programs' memory and tasks, or why it cannot (checked once)."""
    found = _v1_parents() or _v2_parent()
    if isinstance(found, str):
        return found
    try:
        HostBound(*found)._new_group(64 << 20, 8)
    except OSError as error:
        return f"no cgroup can be made below {found[0]} ({error.strerror or error})"
    bound = HostBound(*found)
    atexit.register(sweep_groups, bound, 0.0)
    return bound


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per controller ("" for cgroup v2's unified hierarchy)."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _mounts(fstype: str) -> list[tuple[Path, str, set[str]]]:
    """(mount point, root within the hierarchy, super options) of each mounted cgroup file system."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        parts, tail_parts = fields.split(), tail.split()
        if tail_parts and tail_parts[0] == fstype:
            found.append((Path(parts[4]), parts[3], set(tail_parts[2].split(","))))
    return found


def _inside(mount: Path, root: str, path: str) -> Path | None:
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    return mount / path[len(root):].lstrip("/")


def _v1_parents() -> tuple[Path, Path, int] | None:
    own = _own_cgroups()
    parents = []
    for controller in _CONTROLLERS:
        mount = next((m for m in _mounts("cgroup") if controller in m[2]), None)
        folder = _inside(mount[0], mount[1], own[controller]) if mount and controller in own else None
        if folder is None or not folder.is_dir():
            return None
        parents.append(folder)
    return parents[0], parents[1], 1


def _v2_parent() -> tuple[Path, Path, int] | str:
    own = _own_cgroups().get("")
    mount = next(iter(_mounts("cgroup2")), None)
    folder = _inside(mount[0], mount[1], own) if mount and own is not None else None
    if folder is None or not folder.is_dir():
        return "no cgroup file system with the memory and pids controllers is mounted here"
    delegated = set((folder / "cgroup.subtree_control").read_text().split())
    if not set(_CONTROLLERS) <= delegated:
        return (f"the harness's cgroup ({folder}) does not delegate the memory and pids controllers to cgroups "
                f"below it (cgroup.subtree_control: {' '.join(sorted(delegated)) or 'none'})")
    return folder, folder, 2
