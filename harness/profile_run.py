"""Run a candidate's driver, or a PyTorch model, under Nsight Compute and return the typed profile.

Profiling is optional evidence: when ncu is missing or fails, the outcome says why and the evaluation
carries on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernelblaster.harness.profile import ProfileOutcome, ProfileUnavailable, build_profile_report
from kernelblaster.harness.timing import flush_bytes
from kernelblaster.tools.driver_process import DriverCrashed, DriverSession, DriverTimeout, TensorSet
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.ncu import check_ncu_run, export_details, locate_ncu, profile_command, profile_prefix
from kernelblaster.tools.toolkit import ToolUnavailable

PROFILE_WARMUP = 3
# ncu replays every kernel once per metric pass (about 20 for these sections), so a call costs far more.
PROFILE_TIMEOUT_FACTOR = 40


def profile_candidate(executable: Path, sets: list[TensorSet], gpu: int, workdir: Path,
                      timeout_s: float) -> ProfileOutcome:
    unavailable = _ncu_missing()
    if unavailable:
        return unavailable
    report_path = workdir / "profile"
    try:
        with DriverSession(executable, wrapper=profile_prefix(report_path)) as session:
            session.setup(sets, flush_bytes=flush_bytes(gpu), device=gpu, timeout_s=timeout_s * PROFILE_TIMEOUT_FACTOR)
            session.profile(0, warmup=PROFILE_WARMUP, timeout_s=timeout_s * PROFILE_TIMEOUT_FACTOR)
        return build_profile_report(export_details(report_path))
    except (DriverCrashed, DriverTimeout, UserFacingError) as error:
        return ProfileUnavailable(reason=f"ncu run failed: {str(error).splitlines()[0]}")


def profile_pytorch(problem_path: Path, gpu: int, precision: str, workdir: Path, timeout_s: float) -> ProfileOutcome:
    """Profile one eager call of the problem's model in a child Python process under ncu."""
    unavailable = _ncu_missing()
    if unavailable:
        return unavailable
    report_path = workdir / "baseline-profile"
    target = [sys.executable, "-m", "kernelblaster.harness.profile_target", str(problem_path), "--gpu", str(gpu),
              "--precision", precision]
    try:
        done = subprocess.run(profile_command(target, report_path), capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        check_ncu_run(done.returncode, done.stdout + done.stderr)
        return build_profile_report(export_details(report_path))
    except subprocess.TimeoutExpired:
        return ProfileUnavailable(reason=f"profiling the PyTorch model took longer than {timeout_s:g} s")
    except UserFacingError as error:
        return ProfileUnavailable(reason=f"ncu run failed: {str(error).splitlines()[0]}")


def _ncu_missing() -> ProfileUnavailable | None:
    located = locate_ncu()
    return ProfileUnavailable(reason=located.reason) if isinstance(located, ToolUnavailable) else None
