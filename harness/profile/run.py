"""Run a candidate's driver, or a PyTorch model, under Nsight Compute and return the typed profile.

Profiling is optional evidence: when ncu is missing or fails, the outcome says why and the evaluation
carries on. A candidate's driver is profiled inside the same sandbox as its other runs, with ncu's own
files visible and a fresh report folder as the only writable place; ncu starts the driver's launcher,
which confines the driver process itself. The PyTorch model is the user's own code and runs unconfined.

Nsight Compute profiles one process at a time per host: a second ncu run while one collects (on any GPU
of the host) fails with "a driver resource was unavailable". So every ncu run here holds a host-wide lock
(`profiler_lock`) while it collects, and the runs of a suite spread over several GPUs wait for each other
instead of failing. A candidate's run holds it from its profiled call to ncu's end, so that its start and
setup overlap another run's collection; the PyTorch model's run, a Python process with no such steps apart,
holds it throughout.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from kernelblaster.harness.cuda_device import device_name
from kernelblaster.harness.profile.outcome import (
    ProfileOutcome,
    ProfileReport,
    ProfileUnavailable,
    build_profile_report,
)
from kernelblaster.harness.stages import StageClock
from kernelblaster.harness.timing import flush_bytes
from kernelblaster.tools.driver_process import DriverError, DriverProgram, DriverSession, TensorSet
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import read_measurement, write_atomically
from kernelblaster.tools.ncu import (
    candidate_report_folder,
    check_ncu_run,
    export_candidate_details,
    export_details,
    locate_ncu,
    ncu_version,
    profile_command,
    profile_prefix,
)
from kernelblaster.tools.sandbox import Sandbox, SandboxView
from kernelblaster.tools.toolkit import ToolUnavailable, tool_installation

PROFILE_WARMUP = 3
# ncu replays every kernel once per metric pass (about 20 for these sections), so a call costs far more.
PROFILE_TIMEOUT_FACTOR = 40
NSIGHT_COMPUTE_HOME = Path("/opt/nvidia/nsight-compute")
PROFILER_LOCK = Path(tempfile.gettempdir()) / "kernelblaster-ncu.lock"


@contextmanager
def profiler_lock(clock: StageClock | None = None) -> Iterator[None]:
    """Hold the host's profiler for the block (waiting for any other process of this tool that holds it); the
    wait is recorded in `clock` as `profile_wait`."""
    with open(PROFILER_LOCK, "a") as lock:
        with (clock or StageClock()).timing("profile_wait"):
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def profile_candidate(program: DriverProgram, sets: list[TensorSet], gpu: int, timeout_s: float,
                      sandbox: Sandbox | None, clock: StageClock | None = None) -> ProfileOutcome:
    """Profile one call of the candidate under ncu in its sandbox (the wait for the host's profiler recorded in
    `clock`). ncu writes its report in a private folder the sandbox can write, so the report is
    taken out of it (no link followed, a regular file within a size bound) and only that copy is read
    (`tools.ncu.export_candidate_details`)."""
    located = locate_ncu()
    if isinstance(located, ToolUnavailable):
        return ProfileUnavailable(reason=located.reason)
    timeout = timeout_s * PROFILE_TIMEOUT_FACTOR
    try:
        with candidate_report_folder() as report_dir:
            report_path = report_dir / "profile"
            view = program.view() + SandboxView(read_only=_ncu_installation(located), writable=(report_dir,))
            # The host's profiler is held from the profiled call until ncu has ended (the driver exits, ncu
            # writes its report): ncu's start, the driver's and its setup run beside another profile.
            with contextlib.ExitStack() as profiler_held, DriverSession(
                    program.command(filtered=sandbox is not None), wrapper=profile_prefix(report_path),
                    sandbox=sandbox, view=view) as session:
                session.setup(sets, flush_bytes=flush_bytes(gpu), device=gpu, timeout_s=timeout)
                profiler_held.enter_context(profiler_lock(clock))  # released after the session has ended
                session.profile(0, warmup=PROFILE_WARMUP, timeout_s=timeout)
            return build_profile_report(export_candidate_details(report_path))
    except (DriverError, UserFacingError) as error:
        return ProfileUnavailable(reason=f"ncu run failed: {str(error).splitlines()[0]}")


def profile_pytorch(problem_path: Path, gpu: int, precision: str, workdir: Path, timeout_s: float) -> ProfileOutcome:
    """Profile one eager call of the problem's model in a child Python process under ncu."""
    unavailable = _ncu_missing()
    if unavailable:
        return unavailable
    report_path = workdir / "baseline-profile"
    target = [sys.executable, "-m", "kernelblaster.harness.profile.baseline_target", str(problem_path),
              "--gpu", str(gpu), "--precision", precision]
    try:
        with profiler_lock():
            done = subprocess.run(profile_command(target, report_path), capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        check_ncu_run(done.returncode, done.stdout + done.stderr)
        return build_profile_report(export_details(report_path))
    except subprocess.TimeoutExpired:
        return ProfileUnavailable(reason=f"profiling the PyTorch model took longer than {timeout_s:g} s")
    except UserFacingError as error:
        return ProfileUnavailable(reason=f"ncu run failed: {str(error).splitlines()[0]}")


def cached_pytorch_profile(problem_path: Path, gpu: int, precision: str, workdir: Path,
                           timeout_s: float) -> ProfileOutcome:
    """`profile_pytorch`'s profile, kept in `workdir` (the problem's cache folder) for later runs with the same
    GPU kind, precision, PyTorch, Nsight Compute and sections: every run of a suite profiles its problem's model,
    and ncu profiles one process per host at a time. A failure is not kept."""
    located = locate_ncu()
    if isinstance(located, ToolUnavailable):
        return ProfileUnavailable(reason=located.reason)
    identity = [device_name(gpu), precision, torch.__version__, ncu_version(located), *profile_prefix(Path("p"))]
    digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]
    kept = workdir / f"profile-{digest}.json"
    cached = read_measurement(kept, ProfileReport)
    if cached is not None:
        return cached
    outcome = profile_pytorch(problem_path, gpu, precision, workdir, timeout_s)
    if isinstance(outcome, ProfileReport):
        write_atomically(kept, outcome.model_dump_json().encode())
    return outcome


def _ncu_installation(ncu: Path) -> tuple[Path, ...]:
    """ncu, the folder it is installed in (its toolkit, when it sits in a toolkit's bin/), and where a
    toolkit's `ncu`, a launcher script, finds Nsight Compute itself: beside the toolkit, or NVIDIA's
    default install folder (on the GPU machine: /opt/nvidia/nsight-compute/2025.3.1)."""
    installed = tool_installation(ncu)
    bundled = [path.resolve() for path in sorted(installed[-1].glob("nsight-compute*"))]
    default = [NSIGHT_COMPUTE_HOME] if NSIGHT_COMPUTE_HOME.is_dir() else []
    return (*installed, *bundled, *default)


def _ncu_missing() -> ProfileUnavailable | None:
    located = locate_ncu()
    return ProfileUnavailable(reason=located.reason) if isinstance(located, ToolUnavailable) else None
