"""tools/sandbox.py: what a program started in the real bubblewrap sandbox can see and do, and the refusal
to run candidates where the sandbox cannot start."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.sandbox import (
    BWRAP_ENV_VAR,
    SHM_BYTES,
    Sandbox,
    SandboxView,
    probe_sandbox,
    require_sandbox,
    sandbox_environment,
)

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "problems" / "elementwise_swish_scale.py"
CANDIDATE = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu"


def run_inside(sandbox: Sandbox, script: str, view: SandboxView | None = None) -> subprocess.CompletedProcess[str]:
    launch = sandbox.launch(["/bin/sh", "-c", script], view or SandboxView())
    return subprocess.run(launch.argv, env=launch.env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)


def test_the_environment_inside_holds_nothing_of_the_harness(sandbox: Sandbox,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    names = {line.split("=", 1)[0] for line in run_inside(sandbox, "env").stdout.splitlines()}
    assert names <= {"PATH", "HOME", "TMPDIR", "LANG", "PWD", "SHLVL", "_", "CUDA_VISIBLE_DEVICES"}
    assert "CUDA_VISIBLE_DEVICES" in names and "OPENAI_API_KEY" not in names


def test_only_the_system_and_the_view_are_visible(sandbox: Sandbox, tmp_path: Path) -> None:
    shown, hidden = tmp_path / "shown", tmp_path / "hidden"
    shown.mkdir()
    hidden.mkdir()
    (hidden / "secret").write_text("secret")
    listing = run_inside(sandbox, f"ls / {shown}; cat /etc/passwd {hidden}/secret", SandboxView(read_only=(shown,)))
    assert set(listing.stdout.split("\n\n")[0].split()[1:]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "sbin",
                                                               "tmp", "usr", tmp_path.parts[1]}
    assert "secret" not in listing.stdout and "root:" not in listing.stdout
    assert listing.returncode != 0


def test_only_the_writable_view_and_a_private_tmp_take_writes(sandbox: Sandbox, tmp_path: Path) -> None:
    read_only, writable = tmp_path / "ro", tmp_path / "rw"
    read_only.mkdir()
    writable.mkdir()
    marker = f"kernelblaster-sandbox-test-{os.getpid()}"
    script = (f"echo x > {read_only}/a; echo x > {writable}/b; echo x > /tmp/{marker}; echo x > /{marker}; "
              f"ls /tmp/{marker}")
    done = run_inside(sandbox, script, SandboxView(read_only=(read_only,), writable=(writable,)))
    assert (writable / "b").exists() and not (read_only / "a").exists()
    assert done.stdout.strip() == f"/tmp/{marker}" and not Path("/tmp", marker).exists()
    assert "Read-only file system" in done.stderr


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    yield server
    server.close()


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="uses the system's python3 inside the sandbox")
def test_there_is_no_network_inside(sandbox: Sandbox, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}))"
    done = run_inside(sandbox, f'/usr/bin/python3 -c "{connect}"')
    assert done.returncode != 0 and "Connection refused" in done.stderr  # its own loopback, where nothing listens
    with pytest.raises(BlockingIOError):
        listener.accept()


def test_no_signal_reaches_a_process_outside(sandbox: Sandbox) -> None:
    received: list[int] = []
    previous = signal.signal(signal.SIGWINCH, lambda signum, frame: received.append(signum))
    try:
        done = run_inside(sandbox, f"kill -WINCH {os.getpid()}; kill -WINCH -1; echo pid $$")
    finally:
        signal.signal(signal.SIGWINCH, previous)
    assert received == []
    assert "No such process" in done.stderr and done.stdout.strip() == "pid 2"  # its own PID namespace


def test_a_gpu_view_gets_its_own_proc_a_device_directory_and_read_only_sys(sandbox: Sandbox) -> None:
    argv = sandbox.launch(["true"], SandboxView(gpu=True)).argv
    pairs = set(itertools.pairwise(argv))
    assert {("--proc", "/proc"), ("--dev", "/dev"), ("--ro-bind", "/sys")} <= pairs
    assert ("--dev-bind", "/dev/null") not in pairs


def test_a_gpu_views_dev_takes_no_files_while_its_device_nodes_still_take_writes(sandbox: Sandbox) -> None:
    done = run_inside(sandbox, "echo x > /dev/kb-file; echo x > /dev/null && echo null-written", SandboxView(gpu=True))
    assert "Read-only file system" in done.stderr and done.stdout.strip() == "null-written"


def test_a_gpu_views_dev_shm_holds_at_most_its_size(sandbox: Sandbox) -> None:
    mib = SHM_BYTES >> 20
    done = run_inside(sandbox, f"dd if=/dev/zero of=/dev/shm/fill bs=1M count={mib + 16} 2>&1; "
                               "du -m /dev/shm/fill", SandboxView(gpu=True))
    assert "No space left on device" in done.stdout
    assert int(done.stdout.split()[-2]) <= mib


def test_a_compile_view_gets_only_dev_null(sandbox: Sandbox) -> None:
    listing = run_inside(sandbox, "ls /dev; ls /proc")
    assert listing.stdout.split() == ["null"]


# ---------------------------------------------------------------------------------------------------
# Where the sandbox cannot start
# ---------------------------------------------------------------------------------------------------
@pytest.fixture
def broken_sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A bwrap that fails as one does where user namespaces are off."""
    monkeypatch.setenv(BWRAP_ENV_VAR, shutil.which("false") or "/bin/false")
    probe_sandbox.cache_clear()
    yield
    probe_sandbox.cache_clear()


@pytest.mark.usefixtures("broken_sandbox")
def test_candidates_are_refused_where_the_sandbox_cannot_start() -> None:
    with pytest.raises(UserFacingError, match=r"refusing to compile and run candidates.*--unsafe-no-sandbox"):
        require_sandbox(unsafe_no_sandbox=False)


@pytest.mark.usefixtures("broken_sandbox")
def test_the_user_may_choose_to_run_them_without_it() -> None:
    assert require_sandbox(unsafe_no_sandbox=True) is None


def kernelblaster(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelblaster.graph", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600, check=False)


def test_eval_refuses_in_one_line_and_runs_with_the_unsafe_flag(tmp_path: Path) -> None:
    env = {**os.environ, BWRAP_ENV_VAR: shutil.which("false") or "/bin/false", "KERNELBLASTER_CACHE": str(tmp_path)}
    refused = kernelblaster("eval", PROBLEM, CANDIDATE, env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--unsafe-no-sandbox" in refused.stderr
    unconfined = kernelblaster("eval", PROBLEM, CANDIDATE, "--unsafe-no-sandbox", "--json", env=env)
    assert '"compiled": true' in unconfined.stdout, unconfined.stderr


def test_optimize_refuses_before_it_creates_a_run(tmp_path: Path) -> None:
    env = {**os.environ, BWRAP_ENV_VAR: shutil.which("false") or "/bin/false", "KERNELBLASTER_CACHE": str(tmp_path)}
    refused = kernelblaster("optimize", PROBLEM, "--llm", "human", "--run-dir", tmp_path / "run", env=env)
    assert refused.returncode == 2 and "--unsafe-no-sandbox" in refused.stderr
    assert not (tmp_path / "run").exists()


def test_the_environment_outside_a_sandbox_is_emptied_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary")
    assert "OPENAI_API_KEY" not in sandbox_environment()
