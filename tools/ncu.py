"""Nsight Compute (`ncu`): find it, build the command that profiles a program under it, check how that
run went, and export a finished report's "Details" page as CSV.

Running the profiled program is the driver runner's job (it takes the wrapper argv built here); this
module only ever runs `ncu --import` on a report that already exists. Reading the CSV is
`harness.profile.report`'s job, and writing what the agents read of it `harness.profile.findings`'.

A candidate is profiled with ncu inside its sandbox, so the folder ncu writes its report in is one the
candidate can write too. The trusted process never resolves a name there: `candidate_report_folder` is a
fresh private folder outside every run and build folder (removed afterwards, links in it unlinked, never
followed), and `export_candidate_details` first takes the report out of it (`take_report`: opened relative
to the folder without following a link, only a regular file of one link and a bounded size, copied into a
folder only this process writes) and has ncu import that copy. What stays the candidate's: ncu writes the
report after the candidate's process has ended, but a candidate can leave a file of its own where ncu then
fails to write, and ncu's importer then parses a file the candidate wrote. A profile is evidence for the
agents, never part of a verdict.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
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
# A report of the default sections for one profiled call is a few MiB; a larger file is not ncu's.
MAX_REPORT_BYTES = 256 << 20
_COPY_CHUNK = 1 << 20


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


@functools.cache
def ncu_version(ncu: Path) -> str:
    """What `ncu --version` prints (the Nsight Compute a toolkit's `ncu` script starts); empty if it fails."""
    try:
        done = subprocess.run([str(ncu), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


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


@contextlib.contextmanager
def candidate_report_folder() -> Iterator[Path]:
    """A fresh folder, private to this user and outside every run and build folder, for ncu in a candidate's
    sandbox to write its report in (the sandbox's only writable place besides its own /tmp); removed on
    exit without following any link the candidate left in it."""
    folder = Path(tempfile.mkdtemp(prefix="kb-ncu-report-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def take_report(report_path: Path, into: Path) -> Path:
    """Copy the report ncu wrote for `report_path`, in a folder a sandbox could write, into `into` (a folder
    only this process writes); the copy's path. Nothing there is resolved: the report is opened relative to
    its folder, neither of them through a link, without blocking (a FIFO), and taken only as a regular file
    with one link (no hard link to another file) of at most MAX_REPORT_BYTES, read within that bound."""
    report = report_file(report_path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder = os.open(report.parent, flags | os.O_DIRECTORY)
    except OSError as error:
        raise NcuFailedError(f"ncu's report folder {report.parent} cannot be opened as a folder: {error.strerror}"
                             ) from None
    try:
        source = os.open(report.name, flags | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=folder)
    except FileNotFoundError:
        raise UserFacingError(f"ncu report {report} does not exist") from None
    except OSError as error:  # ELOOP: a symbolic link
        raise NcuFailedError(f"ncu report {report} is not a file ncu wrote: {error.strerror}") from None
    finally:
        os.close(folder)
    with os.fdopen(source, "rb") as reader:
        _check_taken(os.fstat(source), report)
        copy = into / report.name
        with open(copy, "xb") as writer:
            copied = 0
            while chunk := reader.read(_COPY_CHUNK):
                copied += len(chunk)
                if copied > MAX_REPORT_BYTES:
                    raise NcuFailedError(f"ncu report {report} grew past {MAX_REPORT_BYTES >> 20} MiB while it was "
                                         "read")
                writer.write(chunk)
    return copy


def _check_taken(info: os.stat_result, report: Path) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise NcuFailedError(f"ncu report {report} is not a regular file")
    if info.st_nlink != 1:
        raise NcuFailedError(f"ncu report {report} has {info.st_nlink} links: not a file ncu wrote")
    if info.st_size > MAX_REPORT_BYTES:
        raise NcuFailedError(f"ncu report {report} is {info.st_size} bytes, more than the {MAX_REPORT_BYTES >> 20} "
                             "MiB ncu writes for one call")


def export_candidate_details(report_path: Path, *, timeout_s: float = 120.0) -> str:
    """`export_details` of a report ncu wrote in a candidate's sandbox (in a `candidate_report_folder`): of
    a copy taken with `take_report`, never of the file in the folder the candidate could write."""
    with tempfile.TemporaryDirectory(prefix="kb-ncu-taken-") as private:
        return export_details(take_report(report_path, Path(private)), timeout_s=timeout_s)
