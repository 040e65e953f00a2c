"""Run one call of a candidate's driver under compute-sanitizer and return what the checker found.

As under ncu (harness/profile/run.py), the sanitizer runs inside the candidate's sandbox, seeing its own
installation and a fresh folder for its report (the only writable place besides the sandbox's /tmp); it
starts the driver's launcher, which confines the driver process itself. A call that fails under the
sanitizer is what a memcheck error looks like (the checker stops the faulty kernel), so a run counts as
`clean` only when the call succeeded and the report says no errors; any other run without errors is
`failed`, with the reason.

A faulty kernel can make a checker report an error for every thread (initcheck on a read of an unwritten
output, memcheck on an access past the end), and reporting millions of them takes hours: a watcher reads the
report as it grows and stops the run once it holds more errors than the agent is shown.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from kernelblaster.tools.driver_process import DriverError, DriverSession, TensorSet
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.sandbox import Sandbox, SandboxView
from kernelblaster.tools.sanitizer import (
    DEFAULT_MAX_FINDINGS,
    SanitizerResult,
    SanitizerTool,
    locate_sanitizer,
    parse_sanitizer_output,
    sanitizer_prefix,
)
from kernelblaster.tools.toolkit import ToolUnavailable, tool_installation

# Instrumented kernels run tens of times slower than plain ones (racecheck the most).
SANITIZER_TIMEOUT_FACTOR = 50
# How often the watcher reads the growing report, and how much of its beginning (where the first errors are)
REPORT_POLL_S = 0.5
REPORT_HEAD_BYTES = 256 * 1024


@dataclass(frozen=True)
class SanitizedCall:
    """One kb_forward call to check: how the driver starts and what it sees, the tensor set it is called on,
    the device, the L2 flush buffer's size and the plain call's timeout."""

    command: list[str]
    view: SandboxView
    tensor_set: TensorSet
    device: int
    flush_bytes: int
    timeout_s: float
    sandbox: Sandbox | None


def require_sanitizer() -> None:
    """A one-line error when compute-sanitizer is not on this machine."""
    located = locate_sanitizer()
    if isinstance(located, ToolUnavailable):
        raise UserFacingError(f"--sanitize needs compute-sanitizer: {located.reason}")


def sanitize_call(call: SanitizedCall, tool: SanitizerTool) -> SanitizerResult:
    """Start the driver under `tool`, make the call once, and read the checker's report."""
    located = locate_sanitizer()
    if isinstance(located, ToolUnavailable):
        return SanitizerResult(tool=tool, status="unavailable", reason=located.reason)
    timeout_s = call.timeout_s * SANITIZER_TIMEOUT_FACTOR
    with tempfile.TemporaryDirectory(prefix="kb-sanitizer-") as scratch:
        report_dir = Path(scratch)
        log_path = report_dir / f"{tool.value}.log"
        view = call.view + SandboxView(read_only=tool_installation(located), writable=(report_dir,))
        failure: DriverError | None = None
        try:
            with DriverSession(call.command, wrapper=sanitizer_prefix(located, tool, log_path), sandbox=call.sandbox,
                               view=view) as session, _ReportWatcher(session, log_path, tool):
                session.setup([call.tensor_set], flush_bytes=call.flush_bytes, device=call.device,
                              timeout_s=timeout_s, mark_initialized=tool is SanitizerTool.INITCHECK)
                session.run(0, timeout_s=timeout_s)
        except DriverError as error:
            failure = error
        report = log_path.read_text(errors="replace") if log_path.is_file() else ""
    return _judged(parse_sanitizer_output(report, tool), failure)


class _ReportWatcher:
    """While in use, interrupts the checked run once its report holds more errors than the agent is shown."""

    def __init__(self, session: DriverSession, log_path: Path, tool: SanitizerTool) -> None:
        self._session, self._log_path, self._tool = session, log_path, tool
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sanitizer-report-watcher", daemon=True)

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(REPORT_POLL_S):
            if self._enough_reported():
                self._session.interrupt()
                return

    def _enough_reported(self) -> bool:
        try:
            with self._log_path.open(errors="replace") as log:
                head = log.read(REPORT_HEAD_BYTES)
        except OSError:  # the checker has not opened its log yet (or it is unreadable: the timeout decides)
            return False
        parsed = parse_sanitizer_output(head, self._tool, max_findings=DEFAULT_MAX_FINDINGS + 1)
        return parsed.status == "errors" and len(parsed.findings) > DEFAULT_MAX_FINDINGS


def _judged(parsed: SanitizerResult, failure: DriverError | None) -> SanitizerResult:
    """A report with errors stands however the call ended; a clean one only when the call succeeded."""
    if parsed.status == "errors" or failure is None:
        return parsed
    why = (f"the call failed under compute-sanitizer, which reported no errors: {failure}"
           if parsed.status == "clean" else f"{parsed.reason}; the call failed: {failure}")
    return parsed.model_copy(update={"status": "failed", "error_count": None, "reason": why,
                                     "output_tail": parsed.output_tail or failure.stderr_tail[-2000:]})
