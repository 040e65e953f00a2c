"""compute-sanitizer: the argv that runs a program under one of its checkers (memcheck, racecheck,
initcheck), its report as a typed result (the error count from its summary and the first few error
reports), and that result as the text the lowering agent reads. The harness runs the test driver under it
(harness/sanitize_run.py).

The sanitizer writes its report to a log (a pipe the harness hands it: harness/sanitize_run.py), so a
program that talks JSON on stdout (the test driver) keeps a clean stdout. The checked program can write
into that log too, but only before the checker's own summary, which comes after the program has ended:
the summary that counts is the last one in the report, wherever it stands in a line.
Failed CUDA API calls are not reported (`--report-api-errors no`): the test driver makes some that it
expects to fail (an L2 reset a MIG slice refuses), and a candidate's own failed calls reach the harness
through their return codes anyway; what the checkers find in kernels is what is reported.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from kernelblaster.tools.toolkit import ToolUnavailable, find_cuda_tool

SANITIZER_ENV_VAR = "KERNELBLASTER_COMPUTE_SANITIZER"
LINE_PREFIX = "========="
DEFAULT_MAX_FINDINGS = 5
MAX_DETAIL_LINES = 8
OUTPUT_TAIL_CHARS = 2000

_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<errors>\d+) errors?"
                      r"|RACECHECK SUMMARY: \d+ hazards? displayed \((?P<races>\d+) errors?, \d+ warnings?\)")
_SUMMARY_LINE = re.compile(r"[A-Z ]+ SUMMARY:")
# Host frames say where the launch came from in the driver, which the candidate's author cannot change.
_HOST_BACKTRACE = "Saved host backtrace"


class SanitizerTool(StrEnum):
    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"
    INITCHECK = "initcheck"


class SanitizerFinding(BaseModel):
    """One reported problem: its first line ("Invalid __global__ write of size 4 bytes") and detail lines."""

    headline: str = Field(description="The report's first line: what went wrong")
    details: list[str] = Field(description="Where: the kernel and source line, the thread and block, the "
                                           "address; host backtraces left out")


class SanitizerResult(BaseModel):
    """What one sanitizer run found."""

    tool: SanitizerTool = Field(description="The checker: memcheck, racecheck or initcheck")
    status: Literal["clean", "errors", "unavailable", "failed"] = Field(
        description="clean: no errors; errors: see findings; unavailable: no compute-sanitizer here; failed: "
                    "the run ended without a report (reason says why)")
    error_count: int | None = Field(default=None, description="The summary's error count; None without a summary")
    findings: list[SanitizerFinding] = Field(default=[], description="The first few errors reported")
    reason: str = Field(default="", description="Why the run was unavailable or failed")
    output_tail: str = Field(default="", description="The end of the sanitizer's and the program's output, when "
                                                     "the run failed")


def locate_sanitizer() -> Path | ToolUnavailable:
    """The compute-sanitizer executable, or why there is none."""
    return find_cuda_tool("compute-sanitizer", SANITIZER_ENV_VAR)


def sanitizer_prefix(executable: Path, tool: SanitizerTool, log_file: str) -> list[str]:
    """The argv to put in front of a program to check it with `tool`, the report going to `log_file` (as the
    harness runs it, /proc/self/fd/N of a pipe the checker inherits)."""
    # initcheck also reports copies out of memory it has not seen written: the driver's copy of the IPC-mapped
    # inputs through host memory, which is what makes them count as written (harness/driver/kb_driver.cu).
    api_checks = ["--check-api-memory-access", "no"] if tool is SanitizerTool.INITCHECK else []
    return [str(executable), "--tool", tool.value, "--log-file", log_file, "--show-backtrace", "device",
            "--report-api-errors", "no", *api_checks]


def render_sanitizer_report(result: SanitizerResult) -> str:
    """The result as the lowering agent reads it: the count, then each finding with where it happened."""
    if result.status in ("unavailable", "failed"):
        return f"compute-sanitizer {result.tool.value} gave no report: {result.reason}"
    if result.status == "clean":
        return f"compute-sanitizer {result.tool.value}: no errors"
    count = result.error_count if result.error_count is not None else len(result.findings)
    errors = f"{count} error{'s' if count != 1 else ''}"
    if result.error_count is None:
        stopped = result.reason.startswith("compute-sanitizer was stopped")
        errors = f"at least {errors} ({'it was stopped before its summary' if stopped else result.reason})"
    elif count > len(result.findings):
        errors += f" (the first {len(result.findings)} shown)"
    lines = [f"compute-sanitizer {result.tool.value}: {errors}"]
    for finding in result.findings:
        lines += [f"- {finding.headline}", *(f"    {detail}" for detail in finding.details)]
    return "\n".join(lines)


def parse_sanitizer_output(text: str, tool: SanitizerTool, *,
                           max_findings: int = DEFAULT_MAX_FINDINGS) -> SanitizerResult:
    """Parse a compute-sanitizer report: its summary count and the first `max_findings` error reports.

    When the text mixes the program's own output with the sanitizer's, only "=========" lines are read.
    """
    lines = _sanitizer_lines(text)
    count = _error_count(text)
    blocks = [_finding(block) for block in _blocks(lines)]
    findings = blocks[:max_findings]
    if count:
        return SanitizerResult(tool=tool, status="errors", error_count=count, findings=findings)
    # Errors reported in kernels stand without a summary (the run was stopped, a timeout or the watcher) and
    # against a summary of none (written into the report by the program, ahead of findings of the checker's).
    if any(_is_error(finding) for finding in blocks):
        why = ("compute-sanitizer was stopped before its error summary" if count is None else
               "the report holds errors that a summary of 0 errors in it does not count (a summary the program "
               "wrote)")
        return SanitizerResult(tool=tool, status="errors", findings=findings, reason=why)
    if count is None:
        return SanitizerResult(tool=tool, status="failed", output_tail=_tail(text),
                               reason="compute-sanitizer printed no error summary")
    return SanitizerResult(tool=tool, status="clean", error_count=0, findings=findings)


def _is_error(finding: SanitizerFinding) -> bool:
    """A report that says where it happened; the tool's own complaints ("Target application terminated ...")
    say not, and racecheck's warnings (and notes) are not errors."""
    return bool(finding.details) and not finding.headline.startswith(("Warning", "Note"))


def _sanitizer_lines(text: str) -> list[str]:
    lines = text.splitlines()
    if not any(line.startswith(LINE_PREFIX) for line in lines):
        return lines
    # The prefix is followed by one space before the message; detail lines are indented further.
    return [line.removeprefix(LINE_PREFIX).removeprefix(" ") for line in lines if line.startswith(LINE_PREFIX)]


def _error_count(text: str) -> int | None:
    """The count of the report's last summary (the checker's own, written after its program ended); searched
    in the whole text, so a line the program left unfinished cannot hide the summary that follows it."""
    summaries = list(_SUMMARY.finditer(text))
    if not summaries:
        return None
    last = summaries[-1]
    return int(last["errors"] if last["errors"] is not None else last["races"])


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
