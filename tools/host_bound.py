"""Cgroups around the sandboxed programs, for what their own limits cannot count: host memory that no process
maps (memfd files, System V segments: charged to the cgroup, counted in no resident size, so the OOM killer
would pick the harness) and, where the harness runs as root, tasks (the kernel exempts uid 0 from
RLIMIT_NPROC).

Below the harness's own cgroup (cgroup v1's memory and pids hierarchies, or v2 where the harness's cgroup
delegates both controllers), three levels:
- `kernelblaster`, shared by the harness processes that share a cgroup (a suite's workers): all their
  programs together hold at most half the machine's memory and `HOST_TASKS` tasks, so a suite's drivers on
  many GPUs cannot fill the host (bounded once, by the harness that makes it);
- one group per program, with the program's own bounds;
- its `run` child, which the program's first process (a shell) joins before it becomes bwrap. bwrap's cgroup
  namespace is rooted there, so a program that mounts the cgroup file system sees `run`, which has no
  bounds to lift, and never its parent's.
Where no cgroup can be made here (a read-only cgroupfs, no delegation: on cgroup v2 the harness must run in
a cgroup that delegates memory and pids to cgroups below it), `probe_host_bound` says why and the sandbox
runs without this bound.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HOST_GROUP = "kernelblaster"
HOST_TASKS = 8192
_TOKEN = secrets.token_hex(6)  # names this process's groups apart from other harnesses', in any PID namespace
_PROGRAM = re.compile(r"^(?P<token>[0-9a-f]{12})-\d+$")
# An empty program group is removed once it is this old: a younger one may belong to a program about to join
# it (a group no task has joined yet is empty too), in this harness or another.
SWEEP_AFTER_S = 60.0
_CONTROLLERS = ("memory", "pids")
# The joining shell writes its own PID to each cgroup.procs file before it becomes the program: nothing the
# program starts can run outside the group. A group it cannot join stops the launch, saying so.
_JOIN = ('while [ "$1" != -- ]; do echo $$ > "$1" || { echo "kernelblaster-sandbox: could not join the '
         'cgroup $1" >&2; exit 125; }; shift; done; shift; exec "$@"')


@dataclass(frozen=True)
class HostBound:
    """Where this process makes its programs' cgroups: a folder per controller hierarchy (one on cgroup v2,
    or where v1 mounts both controllers together), and the memory bound of all programs of the shared group."""

    memory_parent: Path
    pids_parent: Path
    version: int
    host_memory_bytes: int

    def enter(self, argv: Sequence[str], memory_bytes: int, tasks: int) -> tuple[list[str], Path]:
        """`argv`, run inside a new cgroup of at most `memory_bytes` (swap included) and `tasks` tasks, and
        the group's memory folder (where `oom_kills` reads what the bound killed)."""
        groups = self._new_group(memory_bytes, tasks)
        procs = [group / "run" / "cgroup.procs" for group in groups]
        return ["/bin/sh", "-c", _JOIN, "kernelblaster-cgroup", *map(str, procs), "--", *argv], groups[0]

    def parents(self) -> list[Path]:
        return list(dict.fromkeys((self.memory_parent, self.pids_parent)))

    def _new_group(self, memory_bytes: int, tasks: int) -> list[Path]:
        """The program's group in each hierarchy (the memory one first), with its `run` child."""
        _sweep_now_and_then(self)
        name = f"{_TOKEN}-{next(_serial)}"
        groups = []
        for parent in self.parents():
            host = parent / HOST_GROUP
            with contextlib.suppress(FileExistsError):  # made once, by the first harness here, and kept
                host.mkdir()
                self._bound(host, parent, self.host_memory_bytes, HOST_TASKS)
            group = host / name
            group.mkdir()
            self._bound(group, parent, memory_bytes, tasks)
            (group / "run").mkdir()
            groups.append(group)
        return groups

    def _bound(self, group: Path, parent: Path, memory_bytes: int, tasks: int) -> None:
        """Bound a new `group` in the controllers `parent`'s hierarchy has."""
        if self.version == 2:
            # v2 lets a group's children be bounded only in the controllers the group hands down.
            _write(group / "cgroup.subtree_control", "+memory +pids")
            _write(group / "memory.max", memory_bytes)
            _write_if_present(group / "memory.swap.max", 0)  # swapped-out memfd pages would escape the bound
            _write(group / "pids.max", tasks)
            return
        if parent == self.memory_parent:
            # Before Linux 5.11 a group counted its children's memory only with this (settable while childless).
            _write_if_present(group / "memory.use_hierarchy", 1)
            _write(group / "memory.limit_in_bytes", memory_bytes)
            _write_if_present(group / "memory.memsw.limit_in_bytes", memory_bytes)  # with swap accounting
        if parent == self.pids_parent:
            _write(group / "pids.max", tasks)


_serial = itertools.count()
_last_sweep = [float("-inf")]  # when this process last swept (time.monotonic)


def _sweep_now_and_then(bound: HostBound) -> None:
    """Sweep at most every `SWEEP_AFTER_S / 4` seconds: not every compile and driver start needs to read
    every group, and nothing younger than `SWEEP_AFTER_S` is removed anyway."""
    now = time.monotonic()
    if now - _last_sweep[0] >= SWEEP_AFTER_S / 4:
        _last_sweep[0] = now
        sweep_groups(bound)


def _write(path: Path, value: int | str) -> None:
    path.write_text(f"{value}\n")


def _write_if_present(path: Path, value: int) -> None:
    if path.exists():
        _write(path, value)


def oom_kills(memory_group: Path) -> int:
    """How many of the program's tasks the kernel killed at a memory bound (0 where the kernel does not say).
    They ran in `run` or below it, and cgroup v1 counts a kill only in the victim's own group."""
    run = memory_group / "run"
    counts = (re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
              for text in map(_read_or_empty, [*run.rglob("memory.oom_control"), run / "memory.events"]))
    return sum(int(found[1]) for found in counts if found)


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def sweep_groups(bound: HostBound, after_s: float = SWEEP_AFTER_S, only_own: bool = False) -> None:
    """Remove the program groups that hold no task any more and are older than `after_s` (this harness's and
    those of harnesses that died without removing theirs); a group with a task in it cannot be removed, and
    stays. `only_own`: this harness's alone (at its exit, when another's young group may be about to start)."""
    now = time.time()
    for parent in bound.parents():
        for group in (parent / HOST_GROUP).glob("*-*"):
            found = _PROGRAM.match(group.name)
            if found is None or (only_own and found["token"] != _TOKEN):
                continue
            with contextlib.suppress(OSError):
                if now - group.stat().st_mtime >= after_s:
                    _remove_tree(group)


def _remove_tree(group: Path) -> None:
    """Remove `group` and the groups below it (a program may have made some), deepest first; OSError where
    one still holds a task."""
    for child in (entry for entry in group.iterdir() if entry.is_dir()):
        _remove_tree(child)
    group.rmdir()


@functools.cache
def probe_host_bound(host_memory_bytes: int) -> HostBound | str:
    """Where this process can bound its programs' memory and tasks, or why it cannot (checked once)."""
    found = _v1_parents() or _v2_parent()
    if isinstance(found, str):
        return found
    bound = HostBound(*found, host_memory_bytes=host_memory_bytes)
    try:
        run = bound._new_group(64 << 20, 8)[0] / "run"
    except OSError as error:
        return f"no cgroup can be made below {found[0]} ({error.strerror or error})"
    if _read_or_empty(run / "memory.use_hierarchy").strip() == "0":
        return f"memory cgroups below {found[0]} do not count their children's memory (memory.use_hierarchy 0)"
    atexit.register(sweep_groups, bound, 0.0, True)
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
                f"below it (cgroup.subtree_control: {' '.join(sorted(delegated)) or 'none'}); run it in one "
                "that does")
    return folder, folder, 2
