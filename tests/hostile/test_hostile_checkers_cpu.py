"""Hostile programs against the checkers' output and the reply pipe, without a GPU: compute-sanitizer is
played by its stand-in (tests/fixtures/sanitizer_stand_in.py) around the protocol double of the driver
(tests/fixtures/candidates/fake_driver_protocol.py), which attacks the report its parent writes the way a
candidate inside the sandbox can: through /proc, with the name on the checker's command line. Each attack
is caught for its own reason, and nothing of the trusted process's environment reaches the result."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from fixtures import sanitizer_stand_in
from fixtures.sanitizer_stand_in import CLEAN, MEMCHECK_OUT_OF_BOUNDS
from hostile.containment import Tripwires

from kernelblaster.harness import sanitize_run
from kernelblaster.harness.sanitize_run import SanitizedCall, sanitize_call
from kernelblaster.tools.driver_process import IpcTensor, TensorSet
from kernelblaster.tools.sandbox import Sandbox, SandboxView
from kernelblaster.tools.sanitizer import SanitizerResult, SanitizerTool

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "fake_driver_protocol.py"
RACECHECK_ONE_HAZARD = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at rowsum(const float *, float *, int)+0x1a0 in candidate.cu:21
=========     and Read access at rowsum(const float *, float *, int)+0x1f0 in candidate.cu:25 [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
# A variable of the trusted process only: the program's environment is emptied, so it can reach a result
# only if the trusted process reads one of its own files where it meant to read the report.
MARKER_VARIABLE = "KERNELBLASTER_TRUSTED_MARKER"
MARKER = "trusted-marker-5d1c0e9a"


def one_call(sandbox: Sandbox | None = None, view: SandboxView = SandboxView(), timeout_s: float = 0.05,
             ) -> SanitizedCall:
    x = IpcTensor(handle_hex="ab" * 64, offset=0, dtype=0, shape=[4, 8], strides=[8, 1])
    return SanitizedCall(command=[sys.executable, str(FAKE_DRIVER)], view=view,
                         tensor_set=TensorSet(inputs=[x], params=[], outputs=[x.model_copy(update={"offset": 512})]),
                         device=0, flush_bytes=0, timeout_s=timeout_s, sandbox=sandbox)


def attacked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, behaviour: str, report: str,
             tool: SanitizerTool = SanitizerTool.MEMCHECK) -> SanitizerResult:
    monkeypatch.setenv(MARKER_VARIABLE, MARKER)
    sanitizer_stand_in.install(tmp_path, monkeypatch, report, FAKE_DRIVER_BEHAVIOUR=behaviour)
    return sanitize_call(one_call(), tool)


def assert_nothing_trusted_in(result: SanitizerResult, tripwires: Tripwires) -> None:
    assert MARKER not in result.model_dump_json()
    tripwires.assert_untouched([result.model_dump_json()], [])


def test_a_symbolic_link_in_the_reports_place_reads_nothing_of_the_trusted_process(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tripwires: Tripwires) -> None:
    result = attacked(monkeypatch, tmp_path, "log_symlink", MEMCHECK_OUT_OF_BOUNDS)
    assert_nothing_trusted_in(result, tripwires)
    assert (result.status, result.error_count) == ("errors", 1)  # the checker's own report, as it wrote it


def test_a_fifo_in_the_reports_place_does_not_hang_the_harness(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                tripwires: Tripwires) -> None:
    started = time.monotonic()
    result = attacked(monkeypatch, tmp_path, "log_fifo", CLEAN)
    assert time.monotonic() - started < 30
    assert result.status == "clean"
    assert_nothing_trusted_in(result, tripwires)


def test_a_report_flooded_by_the_program_is_stopped_and_is_the_programs_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tripwires: Tripwires) -> None:
    monkeypatch.setattr(sanitize_run, "REPORT_LIMIT_BYTES", 16 << 20)
    started = time.monotonic()
    result = attacked(monkeypatch, tmp_path, "log_flood", CLEAN)
    assert time.monotonic() - started < 60
    assert result.status == "errors"
    assert result.findings[0].headline.startswith("the report grew past 16 MiB with no error in it")
    assert len(result.model_dump_json()) < 64 * 1024
    assert_nothing_trusted_in(result, tripwires)


@pytest.mark.parametrize(("tool", "report"), [(SanitizerTool.MEMCHECK, MEMCHECK_OUT_OF_BOUNDS),
                                              (SanitizerTool.RACECHECK, RACECHECK_ONE_HAZARD)], ids=str)
def test_a_clean_summary_forged_before_the_checkers_own_does_not_hide_its_errors(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tripwires: Tripwires, tool: SanitizerTool,
        report: str) -> None:
    result = attacked(monkeypatch, tmp_path, "log_forge", report, tool)
    assert (result.status, result.error_count) == ("errors", 1)
    assert_nothing_trusted_in(result, tripwires)


def test_a_forged_summary_left_by_a_program_that_killed_its_checker_is_no_clean_report(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tripwires: Tripwires) -> None:
    result = attacked(monkeypatch, tmp_path, "kill_checker", MEMCHECK_OUT_OF_BOUNDS)
    assert result.status == "failed"
    assert "exited with status -9 after a successful call" in result.reason
    assert_nothing_trusted_in(result, tripwires)


def test_in_the_sandbox_the_checker_gets_its_report_pipe_and_the_program_replaces_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sandbox: Sandbox, tripwires: Tripwires) -> None:
    monkeypatch.setenv(MARKER_VARIABLE, MARKER)
    sanitizer_stand_in.install(tmp_path, monkeypatch, MEMCHECK_OUT_OF_BOUNDS, FAKE_DRIVER_BEHAVIOUR="log_symlink")
    python = Path(sys.base_prefix).resolve()
    view = SandboxView(read_only=(python, FAKE_DRIVER.parent), writable=(tmp_path,), gpu=True)
    result = sanitize_call(one_call(sandbox, view, timeout_s=1.0), SanitizerTool.MEMCHECK)
    assert (result.status, result.error_count) == ("errors", 1)
    assert_nothing_trusted_in(result, tripwires)
