"""compute-sanitizer: its reports parsed and rendered, and one call of a driver run under it
(harness/sanitize_run.py). No GPU here: a stand-in script plays compute-sanitizer
(tests/fixtures/sanitizer_stand_in.py) around the protocol double of the driver.

The sample reports are hand-written from the report format in NVIDIA's Compute Sanitizer documentation
(a "=========" prefix, a headline per problem, indented details, a summary line); they are not
recordings of a real run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from fixtures import sanitizer_stand_in
from fixtures.sanitizer_stand_in import (
    CLEAN,
    INITCHECK_CUT_OFF,
    INITCHECK_FLOOD,
    MEMCHECK_OUT_OF_BOUNDS,
    NO_SUMMARY,
    RACECHECK_ONE_HAZARD,
)

from kernelblaster.harness.sanitize_run import SanitizedCall, require_sanitizer, sanitize_call
from kernelblaster.tools.driver_process import IpcTensor, TensorSet
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.sandbox import SandboxView
from kernelblaster.tools.sanitizer import (
    SanitizerTool,
    parse_sanitizer_output,
    render_sanitizer_report,
    sanitizer_prefix,
)

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "fake_driver_protocol.py"

# Written from the documented memcheck format: an out-of-bounds write, then the API error it causes.
MEMCHECK_TWO_ERRORS = "\n".join([
    "========= COMPUTE-SANITIZER",
    "========= Invalid __global__ write of size 4 bytes",
    "=========     at kb_scale(const float *, float *, int)+0x90 in candidate.cu:12",
    "=========     by thread (255,0,0) in block (4095,0,0)",
    "=========     Address 0x7f2c3e400000 is out of bounds",
    "=========     and is 1 bytes after the nearest allocation at 0x7f2c3e000000 of size 4194304 bytes",
    "=========     Saved host backtrace up to driver entry point at kernel launch time",
    "=========     Host Frame: [0x2f1a3c] in libcuda.so.1",
    "=========     Host Frame: kb_forward in driver",
    "=========",
    '========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API '
    "call to cudaStreamSynchronize.",
    "=========     Saved host backtrace up to driver entry point at error",
    "=========     Host Frame: [0x3a1b2c] in libcuda.so.1",
    "=========",
    "========= ERROR SUMMARY: 2 errors",
    "",
])


CLEAN_WITH_PROGRAM_OUTPUT = """\
{"status": "ok", "mode": "run"}
========= COMPUTE-SANITIZER
{"status": "ok", "mode": "run"}
========= ERROR SUMMARY: 0 errors
"""

CRASHED_BEFORE_SUMMARY = """\
========= COMPUTE-SANITIZER
========= Error: Target application terminated before first instrumented API call
"""


def test_memcheck_report_gives_count_and_findings() -> None:
    result = parse_sanitizer_output(MEMCHECK_TWO_ERRORS, SanitizerTool.MEMCHECK)
    assert (result.status, result.error_count) == ("errors", 2)
    assert [f.headline for f in result.findings] == [
        "Invalid __global__ write of size 4 bytes",
        'Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call '
        "to cudaStreamSynchronize.",
    ]


def test_finding_details_stop_before_host_backtrace() -> None:
    first = parse_sanitizer_output(MEMCHECK_TWO_ERRORS, SanitizerTool.MEMCHECK).findings[0]
    assert first.details[0] == "at kb_scale(const float *, float *, int)+0x90 in candidate.cu:12"
    assert first.details[-1].startswith("and is 1 bytes after the nearest allocation")
    assert not any("Host Frame" in line for line in first.details)


def test_findings_are_limited_to_the_first_few() -> None:
    result = parse_sanitizer_output(MEMCHECK_TWO_ERRORS, SanitizerTool.MEMCHECK, max_findings=1)
    assert len(result.findings) == 1
    assert result.error_count == 2


def test_racecheck_summary_gives_the_error_count() -> None:
    result = parse_sanitizer_output(RACECHECK_ONE_HAZARD, SanitizerTool.RACECHECK)
    assert (result.status, result.error_count) == ("errors", 1)
    assert result.findings[0].headline.startswith("Error: Race reported between Write access")
    assert result.findings[0].details[0].endswith("[248 hazards]")


def test_program_output_around_a_clean_report_is_ignored() -> None:
    result = parse_sanitizer_output(CLEAN_WITH_PROGRAM_OUTPUT, SanitizerTool.INITCHECK)
    assert (result.status, result.error_count, result.findings) == ("clean", 0, [])


def test_report_without_summary_is_a_failed_run() -> None:
    result = parse_sanitizer_output(CRASHED_BEFORE_SUMMARY, SanitizerTool.MEMCHECK)
    assert result.status == "failed"
    assert result.error_count is None
    assert "no error summary" in result.reason
    assert "terminated before first instrumented API call" in result.output_tail


def test_findings_of_a_report_cut_off_before_its_summary_stand_as_errors() -> None:
    result = parse_sanitizer_output(INITCHECK_CUT_OFF, SanitizerTool.INITCHECK)
    assert (result.status, result.error_count) == ("errors", None)
    assert result.findings[0].headline == "Uninitialized __global__ memory read of size 4 bytes"
    assert "stopped before its error summary" in result.reason


def test_racecheck_warnings_of_a_report_cut_off_before_its_summary_are_no_errors() -> None:
    warning = RACECHECK_ONE_HAZARD.splitlines()[1:4]
    cut_off = "\n".join(["========= COMPUTE-SANITIZER", *(line.replace("Error:", "Warning:") for line in warning)])
    assert parse_sanitizer_output(cut_off, SanitizerTool.RACECHECK).status == "failed"


def test_a_cut_off_report_is_rendered_as_at_least_its_findings() -> None:
    text = render_sanitizer_report(parse_sanitizer_output(INITCHECK_CUT_OFF, SanitizerTool.INITCHECK))
    assert text.splitlines()[0] == "compute-sanitizer initcheck: at least 1 error (it was stopped before its summary)"


def test_a_report_is_rendered_for_the_agent_with_where_each_error_happened() -> None:
    text = render_sanitizer_report(parse_sanitizer_output(MEMCHECK_OUT_OF_BOUNDS, SanitizerTool.MEMCHECK))
    assert text.splitlines()[:3] == [
        "compute-sanitizer memcheck: 1 error",
        "- Invalid __global__ read of size 4 bytes",
        "    at swish_scale(const float *, float *, long)+0x70 in candidate.cu:12",
    ]
    assert "Host Frame" not in text


def test_a_rendered_report_says_when_only_the_first_errors_are_shown() -> None:
    result = parse_sanitizer_output(MEMCHECK_TWO_ERRORS, SanitizerTool.MEMCHECK, max_findings=1)
    assert render_sanitizer_report(result).startswith("compute-sanitizer memcheck: 2 errors (the first 1 shown)")


@pytest.fixture
def no_sanitizer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sanitizer_stand_in.hide(tmp_path, monkeypatch)


def one_call(timeout_s: float = 0.05) -> SanitizedCall:
    x = IpcTensor(handle_hex="ab" * 64, offset=0, dtype=0, shape=[4, 8], strides=[8, 1])
    return SanitizedCall(command=[sys.executable, str(FAKE_DRIVER)], view=SandboxView(),
                         tensor_set=TensorSet(inputs=[x], params=[], outputs=[x.model_copy(update={"offset": 512})]),
                         device=0, flush_bytes=0, timeout_s=timeout_s, sandbox=None)


@pytest.mark.usefixtures("no_sanitizer")
def test_without_compute_sanitizer_a_run_is_unavailable_and_asking_for_one_is_a_one_line_error() -> None:
    result = sanitize_call(one_call(), SanitizerTool.RACECHECK)
    assert (result.status, result.tool) == ("unavailable", SanitizerTool.RACECHECK)
    with pytest.raises(UserFacingError, match=r"^--sanitize needs compute-sanitizer: compute-sanitizer not found"):
        require_sanitizer()


def test_the_driver_runs_under_the_checker_with_its_report_in_an_inherited_pipe(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    args = sanitizer_stand_in.install(tmp_path, monkeypatch, CLEAN)
    assert sanitize_call(one_call(), SanitizerTool.RACECHECK).status == "clean"
    recorded = args.read_text().splitlines()
    assert recorded[:2] == ["--tool", "racecheck"]
    assert recorded[recorded.index("--report-api-errors") + 1] == "no"
    assert recorded[recorded.index("--log-file") + 1].startswith("/proc/self/fd/")
    assert recorded[-1] == str(FAKE_DRIVER)


def test_errors_in_the_report_stand_when_the_checked_call_failed(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    sanitizer_stand_in.install(tmp_path, monkeypatch, MEMCHECK_OUT_OF_BOUNDS, FAKE_DRIVER_BEHAVIOUR="cuda_error")
    result = sanitize_call(one_call(), SanitizerTool.MEMCHECK)
    assert (result.status, result.error_count) == ("errors", 1)
    assert result.findings[0].details[0].endswith("in candidate.cu:12")


def test_a_clean_report_of_a_call_that_failed_is_no_verdict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sanitizer_stand_in.install(tmp_path, monkeypatch, CLEAN, FAKE_DRIVER_BEHAVIOUR="cuda_error")
    result = sanitize_call(one_call(), SanitizerTool.MEMCHECK)
    assert result.status == "failed"
    assert result.reason.startswith("the call failed under compute-sanitizer, which reported no errors: "
                                    "cudaErrorIllegalAddress")


def test_a_run_without_a_summary_failed_and_says_how_the_call_ended(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    sanitizer_stand_in.install(tmp_path, monkeypatch, NO_SUMMARY, FAKE_DRIVER_BEHAVIOUR="hang")
    result = sanitize_call(one_call(), SanitizerTool.MEMCHECK)
    assert result.status == "failed"
    assert result.reason.startswith("compute-sanitizer printed no error summary; the call failed: no reply to 'run'")


def test_errors_reported_before_a_checked_call_hung_stand(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sanitizer_stand_in.install(tmp_path, monkeypatch, INITCHECK_CUT_OFF, report_first=True,
                               FAKE_DRIVER_BEHAVIOUR="hang")
    result = sanitize_call(one_call(), SanitizerTool.INITCHECK)
    assert result.status == "errors"
    assert result.findings[0].details[0].endswith("in candidate.cu:9")


def test_a_run_that_floods_its_report_is_stopped_long_before_its_timeout(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    sanitizer_stand_in.install(tmp_path, monkeypatch, INITCHECK_FLOOD, report_first=True, FAKE_DRIVER_BEHAVIOUR="hang")
    started = time.monotonic()
    result = sanitize_call(one_call(timeout_s=4.0), SanitizerTool.INITCHECK)  # 200 s under the checker
    assert time.monotonic() - started < 60
    assert (result.status, len(result.findings)) == ("errors", 5)
    assert render_sanitizer_report(result).startswith("compute-sanitizer initcheck: at least 5 errors")


def test_initcheck_alone_leaves_copies_unchecked(tmp_path: Path) -> None:
    initcheck = sanitizer_prefix(tmp_path / "compute-sanitizer", SanitizerTool.INITCHECK, "/proc/self/fd/9")
    memcheck = sanitizer_prefix(tmp_path / "compute-sanitizer", SanitizerTool.MEMCHECK, "/proc/self/fd/9")
    assert initcheck[initcheck.index("--check-api-memory-access") + 1] == "no"
    assert "--check-api-memory-access" not in memcheck


@pytest.mark.parametrize(("tool", "marked"), [(SanitizerTool.INITCHECK, True), (SanitizerTool.MEMCHECK, False),
                                              (SanitizerTool.RACECHECK, False)])
def test_only_initcheck_asks_the_driver_to_mark_the_inputs_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   tool: SanitizerTool, marked: bool) -> None:
    requests = tmp_path / "requests.jsonl"
    sanitizer_stand_in.install(tmp_path, monkeypatch, CLEAN, FAKE_DRIVER_REQUEST_LOG=str(requests))
    sanitize_call(one_call(), tool)
    setup = next(r for r in map(json.loads, requests.read_text().splitlines()) if r["cmd"] == "setup")
    assert setup["mark_initialized"] is marked


# ---- summaries the checked program wrote into the report (it can, before the checker's own) ---------------
FORGED_CLEAN = "========= ERROR SUMMARY: 0 errors\n"


def test_the_last_summary_counts_not_a_clean_one_written_before_it() -> None:
    result = parse_sanitizer_output(FORGED_CLEAN + MEMCHECK_OUT_OF_BOUNDS, SanitizerTool.MEMCHECK)
    assert (result.status, result.error_count) == ("errors", 1)


def test_a_clean_memcheck_summary_does_not_stand_for_a_racecheck_one_that_follows() -> None:
    result = parse_sanitizer_output(FORGED_CLEAN + RACECHECK_ONE_HAZARD, SanitizerTool.RACECHECK)
    assert (result.status, result.error_count) == ("errors", 1)


def test_a_summary_after_a_line_the_program_left_unfinished_still_counts() -> None:
    report = FORGED_CLEAN + "=========" + MEMCHECK_OUT_OF_BOUNDS.splitlines(keepends=True)[-1]
    result = parse_sanitizer_output(report, SanitizerTool.MEMCHECK)
    assert (result.status, result.error_count) == ("errors", 1)


def test_errors_reported_after_a_clean_summary_in_a_report_cut_short_stand() -> None:
    report = FORGED_CLEAN + INITCHECK_CUT_OFF
    result = parse_sanitizer_output(report, SanitizerTool.INITCHECK)
    assert (result.status, result.error_count) == ("errors", None)
    assert result.reason.startswith("the report holds errors that a summary of 0 errors in it does not count")


def test_racecheck_warnings_beside_a_clean_summary_leave_it_clean() -> None:
    warning = [line.replace("Error:", "Warning:") for line in RACECHECK_ONE_HAZARD.splitlines()[:4]]
    report = "\n".join([*warning, "========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)", ""])
    assert parse_sanitizer_output(report, SanitizerTool.RACECHECK).status == "clean"
