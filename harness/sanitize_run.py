"""Run one call of a candidate's driver under compute-sanitizer and return what the checker found.

As under ncu (harness/profile/run.py), the sanitizer runs inside the candidate's sandbox, seeing its own
installation; it starts the driver's launcher, which confines the driver process itself. A call that fails
under the sanitizer is what a memcheck error looks like (the checker stops the faulty kernel), so a run
counts as `clean` only when the call succeeded, the whole wrapped process exited with status 0 and the
report says no errors; any other run without errors is `failed`, with the reason.

The report never passes through a file the sandbox can write: the checker writes it into a pipe this
process made and drains with a bound (tools/report_pipe.py), so no link, FIFO or flood in its place can
reach the trusted process. The candidate's process can still write into that pipe (it runs as the
checker's child, in the same sandbox, and can open the checker's descriptors through /proc); what it writes
can only come before the checker's own summary, which the checker writes after the candidate's process has
ended, so the summary that counts is the last one in the report (tools/sanitizer.py). A candidate that
kills the checker first leaves no summary of the checker's, but also a wrapped process that did not exit
with status 0: no clean report then. Findings the candidate forges only count against it.
What stays possible: the candidate runs as the checker's user in the checker's sandbox, so it can signal the
checker (stopped, it times out: `failed`) and, where the kernel lets a process write a non-child's memory
(/proc/PID/mem without Yama's ptrace restriction), rewrite the checker itself and with it its report. A
forged clean report hides only the checker's finding: the harness's own checks of the outputs still hold.

A faulty kernel can make a checker report an error for every thread (initcheck on a read of an unwritten
output, memcheck on an access past the end), and reporting millions of them takes hours: a watcher reads the
report as it grows and stops the run once it holds more errors than the agent is shown, or once it is larger
than any report the agent could use (then, without findings, the program wrote it: an error of its own).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from kernelblaster.tools.driver_process import DriverError, DriverSession, TensorSet
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.report_pipe import ReportPipe
from kernelblaster.tools.sandbox import Sandbox, SandboxView
from kernelblaster.tools.sanitizer import (
    DEFAULT_MAX_FINDINGS,
    SanitizerFinding,
    SanitizerResult,
    SanitizerTool,
    locate_sanitizer,
    parse_sanitizer_output,
    sanitizer_prefix,
)
from kernelblaster.tools.toolkit import ToolUnavailable, tool_installation

# Instrumented kernels run tens of times slower than plain ones (racecheck the most).
SANITIZER_TIMEOUT_FACTOR = 50
# How often the watcher reads the growing report; how much of its beginning (where the first errors are)
# and of its end (where the summary is) is kept; the size at which the run is stopped; how long the last
# bytes may take to arrive once the run has ended.
REPORT_POLL_S = 0.5
REPORT_HEAD_BYTES = 256 * 1024
REPORT_TAIL_BYTES = 64 * 1024
REPORT_LIMIT_BYTES = 64 << 20
REPORT_DRAIN_S = 10.0


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
    view = call.view + SandboxView(read_only=tool_installation(located))
    report = ReportPipe(REPORT_HEAD_BYTES, REPORT_TAIL_BYTES)
    failure: DriverError | None = None
    try:
        session = DriverSession(call.command, wrapper=sanitizer_prefix(located, tool, report.child_path),
                                sandbox=call.sandbox, view=view, pass_fds=(report.write_fd,))
        watcher = _ReportWatcher(session, report, tool)
        with session, watcher:
            session.setup([call.tensor_set], flush_bytes=call.flush_bytes, device=call.device,
                          timeout_s=timeout_s, mark_initialized=tool is SanitizerTool.INITCHECK)
            session.run(0, timeout_s=timeout_s)
    except DriverError as error:
        failure = error
    finally:
        report.finish(REPORT_DRAIN_S)  # the pipe and its reader end whatever happened
    flooded = watcher.flooded or report.total_bytes > REPORT_LIMIT_BYTES  # also when it ended between two looks
    return _judged(parse_sanitizer_output(report.text(), tool), failure, session.exit_status, flooded)


class _ReportWatcher:
    """While in use, interrupts the checked run once its report holds more errors than the agent is shown, or
    more bytes than REPORT_LIMIT_BYTES (`flooded`)."""

    def __init__(self, session: DriverSession, report: ReportPipe, tool: SanitizerTool) -> None:
        self._session, self._report, self._tool = session, report, tool
        self.flooded = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sanitizer-report-watcher", daemon=True)

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(REPORT_POLL_S):
            self.flooded = self._report.total_bytes > REPORT_LIMIT_BYTES
            if self.flooded or self._enough_reported():
                self._session.interrupt()
                return

    def _enough_reported(self) -> bool:
        parsed = parse_sanitizer_output(self._report.head(), self._tool, max_findings=DEFAULT_MAX_FINDINGS + 1)
        return parsed.status == "errors" and len(parsed.findings) > DEFAULT_MAX_FINDINGS


def _judged(parsed: SanitizerResult, failure: DriverError | None, exit_status: int | None,
            flooded: bool) -> SanitizerResult:
    """A report with errors stands however the call ended; a clean one only when the call succeeded and the
    wrapped process (the checker, which exits with its program's status) exited with status 0. A report
    stopped for its size with no findings in it was written by the program: an error of its own."""
    if flooded and parsed.status != "errors":
        finding = SanitizerFinding(headline=f"the report grew past {REPORT_LIMIT_BYTES >> 20} MiB with no error "
                                            "in it: the program wrote into the checker's report", details=[])
        return SanitizerResult(tool=parsed.tool, status="errors", findings=[finding],
                               reason="stopped: the report was larger than any the checker writes")
    if parsed.status == "errors":
        return parsed
    if failure is None and exit_status == 0:
        return parsed
    if failure is None:
        why = (f"the checked process exited with status {exit_status} after a successful call, so no summary in "
               "the report can be trusted to be the checker's own")
        return parsed.model_copy(update={"status": "failed", "error_count": None,
                                         "reason": f"{parsed.reason}; {why}" if parsed.reason else why})
    why = (f"the call failed under compute-sanitizer, which reported no errors: {failure}"
           if parsed.status == "clean" else f"{parsed.reason}; the call failed: {failure}")
    return parsed.model_copy(update={"status": "failed", "error_count": None, "reason": why,
                                     "output_tail": parsed.output_tail or failure.stderr_tail[-2000:]})
