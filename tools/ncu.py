"""Nsight Compute (`ncu`): find it, build the command that profiles a program under it, check how that
run went, and export a finished report's "Details" page as CSV.

Running the profiled program is the driver runner's job (it takes the wrapper argv built here); this
module only ever runs `ncu --import` on a report that already exists. Reading the CSV is
`harness.profile.report`'s job, and writing what the agents read of it `harness.profile.findings`'.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.toolkit import ToolUnavailable, find_cuda_tool

NCU_ENV_VAR = "KERNELBLASTER_NCU"

# The sections a GPU engineer reads first; together they feed every field of the state signature.
DEFAULT_SECTIONS: tuple[str, ...] = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
    "Occupancy",
    "LaunchStats",
    "SchedulerStats",
    "WarpStateStats",
    "InstructionStats",
)

REPORT_SUFFIX = ".ncu-rep"
OUTPUT_TAIL_CHARS = 2000


class NcuUnavailableError(UserFacingError):
    """Raised by the functions that must run ncu when it cannot be found."""

    def __init__(self, unavailable: ToolUnavailable) -> None:
        super().__init__(unavailable.reason)
        self.unavailable = unavailable


class NcuFailedError(UserFacingError):
    """ncu ran and failed; the message carries its error lines and the tail of its output."""


def locate_ncu() -> Path | ToolUnavailable:
    """The ncu executable, or why there is none."""
    return find_cuda_tool("ncu", NCU_ENV_VAR)


def _require_ncu() -> Path:
    located = locate_ncu()
    if isinstance(located, ToolUnavailable):
        raise NcuUnavailableError(located)
    return located


def report_file(report_path: Path) -> Path:
    """The file ncu actually writes for `report_path` (it appends `.ncu-rep` when that suffix is missing)."""
    return report_path if report_path.name.endswith(REPORT_SUFFIX) else report_path.with_name(
        report_path.name + REPORT_SUFFIX)


def profile_prefix(report_path: Path, *, sections: Sequence[str] = DEFAULT_SECTIONS) -> list[str]:
    """The ncu argv to put in front of a program so that it is profiled into `report_path`.

    The program brackets the work to profile with cudaProfilerStart/Stop (`--profile-from-start off`);
    clocks are left unlocked so the profile sees the clocks the timing sees.
    """
    argv = [str(_require_ncu()), "--target-processes", "all", "--profile-from-start", "off",
            "--clock-control", "none"]
    for section in sections:
        argv += ["--section", section]
    return [*argv, "--export", str(report_file(report_path)), "-f"]


def profile_command(argv: Sequence[str], report_path: Path, *,
                    sections: Sequence[str] = DEFAULT_SECTIONS) -> list[str]:
    """The full command that runs `argv` under ncu, writing the report to `report_path`."""
    return [*profile_prefix(report_path, sections=sections), *argv]


def check_ncu_run(returncode: int, output: str) -> None:
    """Raise NcuFailedError if a profiling run under ncu failed or profiled nothing."""
    _raise_on_ncu_errors(returncode, output)
    if "No kernels were profiled" in output:
        raise NcuFailedError(_failure_message("ncu profiled no kernels (was cudaProfilerStart reached?)",
                                              [], output))


def _raise_on_ncu_errors(returncode: int, output: str) -> None:
    error_lines = [line for line in output.splitlines() if line.startswith("==ERROR==")]
    if returncode != 0 or error_lines:
        raise NcuFailedError(_failure_message(f"ncu exited with status {returncode}", error_lines, output))


def _failure_message(headline: str, error_lines: list[str], output: str) -> str:
    errors = "; ".join(line.removeprefix("==ERROR==").strip() for line in error_lines)
    tail = output[-OUTPUT_TAIL_CHARS:].strip()
    return headline + (f": {errors}" if errors else "") + (f"\n--- output tail ---\n{tail}" if tail else "")


def export_details(report_path: Path, *, timeout_s: float = 120.0) -> str:
    """The report's details page (every metric and rule finding of every kernel) as CSV text."""
    report = report_file(report_path)
    if not report.is_file():
        raise UserFacingError(f"ncu report {report} does not exist")
    argv = [str(_require_ncu()), "--import", str(report), "--csv", "--page", "details", "--print-units", "base",
            "--print-details", "all", "--print-rule-details"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NcuFailedError(f"ncu --import {report} took longer than {timeout_s:g} s") from exc
    _raise_on_ncu_errors(done.returncode, done.stderr + "\n" + done.stdout)
    return done.stdout
