"""Hostile programs against the checkers' output and the reply pipe, without a GPU: compute-sanitizer is
played by its stand-in (tests/fixtures/sanitizer_stand_in.py) around the protocol double of the driver
(tests/fixtures/candidates/fake_driver_protocol.py), which attacks the report its parent writes the way a
candidate inside the sandbox can: through /proc, with the name on the checker's command line. Each attack
is caught for its own reason, and nothing of the trusted process's environment reaches the result."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures import sanitizer_stand_in
from fixtures.sanitizer_stand_in import CLEAN, MEMCHECK_OUT_OF_BOUNDS, RACECHECK_ONE_HAZARD
from hostile.containment import Tripwires

from kernelblaster.harness.sanitize_run import REPORT_LIMIT_BYTES
from kernelblaster.tools.sandbox import Sandbox
from kernelblaster.tools.sanitizer import SanitizerResult, SanitizerTool

TRUSTED_PROCESS = Path(__file__).resolve().parent / "trusted_process.py"
FAKE_DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "fake_driver_protocol.py"
# A variable the trusted process starts with: the program's environment is emptied, so the marker can reach
# a result only if the trusted process reads one of its own files where it meant to read the report.
MARKER_VARIABLE = "KERNELBLASTER_TRUSTED_MARKER"
MARKER = "trusted-marker-5d1c0e9a"


def attacked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, behaviour: str, report: str,
             tool: SanitizerTool = SanitizerTool.MEMCHECK, *, limit: int = REPORT_LIMIT_BYTES,
             sandbox: Sandbox | None = None) -> SanitizerResult:
    """The result of one call of the protocol double, behaving as `behaviour` under the stand-in writing
    `report`, sanitized in a trusted process started with the marker in its environment."""
    sanitizer_stand_in.install(tmp_path, monkeypatch, report, FAKE_DRIVER_BEHAVIOUR=behaviour)
    view = [str(Path(sys.base_prefix).resolve()), str(FAKE_DRIVER.parent), str(tmp_path)] if sandbox else []
    done = subprocess.run([sys.executable, str(TRUSTED_PROCESS), tool.value, "1.0" if sandbox else "0.05",
                           str(limit), *view], env=os.environ | {MARKER_VARIABLE: MARKER}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return SanitizerResult.model_validate_json(done.stdout)


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
    started = time.monotonic()
    result = attacked(monkeypatch, tmp_path, "log_flood", CLEAN, limit=16 << 20)
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
    result = attacked(monkeypatch, tmp_path, "log_symlink", MEMCHECK_OUT_OF_BOUNDS, sandbox=sandbox)
    assert (result.status, result.error_count) == ("errors", 1)
    assert_nothing_trusted_in(result, tripwires)
