"""compute-sanitizer: run a command under one of its checkers (memcheck, racecheck, initcheck) and turn
its report into a typed result: the error count from its summary and the first few error reports.

The sanitizer writes its report to a log file, so a program that talks JSON on stdout (the test driver)
keeps a clean stdout. A machine without compute-sanitizer gets an "unavailable" result, not an exception.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kernelblaster.tools.toolkit import ToolUnavailable, find_cuda_tool

SANITIZER_ENV_VAR = "KERNELBLASTER_COMPUTE_SANITIZER"
LINE_PREFIX = "========="
DEFAULT_MAX_FINDINGS = 5
MAX_DETAIL_LINES = 8
OUTPUT_TAIL_CHARS = 2000

_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, \d+ warnings?\)")
_SUMMARY_LINE = re.compile(r"[A-Z ]+ SUMMARY:")
# Host frames say where the launch came from in the driver, which the candidate's author cannot change.
_HOST_BACKTRACE = "Saved host backtrace"


class SanitizerTool(StrEnum):
    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"
    INITCHECK = "initcheck"


class SanitizerFinding(BaseModel):
    """One reported problem: its first line ("Invalid __global__ write of size 4 bytes") and detail lines."""

    headline: str
    details: list[str]


class SanitizerResult(BaseModel):
    """What one sanitizer run found. `error_count` is the summary's count, None when there was no summary."""

    tool: SanitizerTool
    status: Literal["clean", "errors", "unavailable", "failed"]
    error_count: int | None = None
    findings: list[SanitizerFinding] = []
    reason: str = ""
    output_tail: str = ""


def locate_sanitizer() -> Path | ToolUnavailable:
    """The compute-sanitizer executable, or why there is none."""
    return find_cuda_tool("compute-sanitizer", SANITIZER_ENV_VAR)


def sanitizer_prefix(executable: Path, tool: SanitizerTool, log_path: Path) -> list[str]:
    """The argv to put in front of a program to check it with `tool`, the report going to `log_path`."""
    return [str(executable), "--tool", tool.value, "--log-file", str(log_path), "--show-backtrace", "device"]


def run_sanitizer(argv: Sequence[str], tool: SanitizerTool = SanitizerTool.MEMCHECK, *, input_text: str = "",
                  timeout_s: float = 600.0, max_findings: int = DEFAULT_MAX_FINDINGS) -> SanitizerResult:
    """Run `argv` under compute-sanitizer's `tool`, feeding it `input_text` on stdin."""
    executable = locate_sanitizer()
    if isinstance(executable, ToolUnavailable):
        return SanitizerResult(tool=tool, status="unavailable", reason=executable.reason)
    with tempfile.TemporaryDirectory(prefix="kb-sanitizer-") as scratch:
        log_path = Path(scratch) / "sanitizer.log"
        returncode, output = _run_in_own_session([*sanitizer_prefix(executable, tool, log_path), *argv],
                                                 input_text, timeout_s)
        report = log_path.read_text(errors="replace") if log_path.is_file() else ""
    if returncode is None:
        return SanitizerResult(tool=tool, status="failed", reason=f"timed out after {timeout_s:g} s",
                               output_tail=_tail(report + output))
    result = parse_sanitizer_output(report, tool, max_findings=max_findings)
    if result.status == "failed":
        return result.model_copy(update={
            "reason": f"{result.reason} (exit status {returncode})", "output_tail": _tail(report + output)})
    return result


def _run_in_own_session(argv: list[str], input_text: str, timeout_s: float) -> tuple[int | None, str]:
    """Run `argv`; on timeout kill its whole process group (the sanitizer and the program it started)."""
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", start_new_session=True)
    try:
        output, _ = process.communicate(input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # the group may already be gone
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, output
    return process.returncode, output


def parse_sanitizer_output(text: str, tool: SanitizerTool, *,
                           max_findings: int = DEFAULT_MAX_FINDINGS) -> SanitizerResult:
    """Parse a compute-sanitizer report: its summary count and the first `max_findings` error reports.

    When the text mixes the program's own output with the sanitizer's, only "=========" lines are read.
    """
    lines = _sanitizer_lines(text)
    count = _error_count(lines)
    findings = [_finding(block) for block in _blocks(lines)][:max_findings]
    if count is None:
        return SanitizerResult(tool=tool, status="failed", findings=findings, output_tail=_tail(text),
                               reason="compute-sanitizer printed no error summary")
    return SanitizerResult(tool=tool, status="errors" if count else "clean", error_count=count, findings=findings)


def _sanitizer_lines(text: str) -> list[str]:
    lines = text.splitlines()
    if not any(line.startswith(LINE_PREFIX) for line in lines):
        return lines
    # The prefix is followed by one space before the message; detail lines are indented further.
    return [line.removeprefix(LINE_PREFIX).removeprefix(" ") for line in lines if line.startswith(LINE_PREFIX)]


def _error_count(lines: list[str]) -> int | None:
    for pattern in (_ERROR_SUMMARY, _RACECHECK_SUMMARY):
        for line in lines:
            match = pattern.search(line)
            if match:
                return int(match.group(1))
    return None


def _blocks(lines: list[str]) -> list[list[str]]:
    """Reports are a headline at column 0 followed by indented details, ended by an empty line."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in lines:
        starts_report = bool(line.strip()) and not line[0].isspace()
        if starts_report and line.strip() != "COMPUTE-SANITIZER" and not _SUMMARY_LINE.match(line):
            current = [line.strip()]
            blocks.append(current)
        elif line[:1].isspace() and line.strip() and current is not None:
            current.append(line.strip())
        else:
            current = None
    return blocks


def _finding(block: list[str]) -> SanitizerFinding:
    details = block[1:]
    host_start = next((i for i, line in enumerate(details) if line.startswith(_HOST_BACKTRACE)), len(details))
    return SanitizerFinding(headline=block[0], details=details[:host_start][:MAX_DETAIL_LINES])


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL_CHARS:].strip()
