"""compute-sanitizer report parsing and running (no GPU here: stand-in scripts and sample reports).

The sample reports below are hand-written from the report format in NVIDIA's Compute Sanitizer
documentation (a "=========" prefix, a headline per problem, indented details, a summary line); they
are not recordings of a real run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelblaster.tools import toolkit
from kernelblaster.tools.sanitizer import (
    SANITIZER_ENV_VAR,
    SanitizerTool,
    parse_sanitizer_output,
    run_sanitizer,
)

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

# Written from the documented racecheck format (analysis mode), which ends in a RACECHECK SUMMARY.
RACECHECK_ONE_HAZARD = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at rowsum(const float *, float *, int)+0x1a0 in candidate.cu:21
=========     and Read access at rowsum(const float *, float *, int)+0x1f0 in candidate.cu:25 [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

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


@pytest.fixture
def no_sanitizer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(SANITIZER_ENV_VAR, raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(toolkit, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")


@pytest.mark.usefixtures("no_sanitizer")
def test_missing_sanitizer_gives_an_unavailable_result() -> None:
    result = run_sanitizer(["./driver"], SanitizerTool.RACECHECK)
    assert (result.status, result.tool) == ("unavailable", SanitizerTool.RACECHECK)
    assert "compute-sanitizer not found" in result.reason


def _stand_in_sanitizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report: str) -> None:
    """A script used as compute-sanitizer: it runs the program, then writes `report` to the --log-file."""
    sample = tmp_path / "sample.log"
    sample.write_text(report)
    script = tmp_path / "compute-sanitizer"
    script.write_text(f"""#!/bin/sh
printf "%s\\n" "$@" > "{tmp_path}/args"
while [ $# -gt 0 ]; do
  case "$1" in
    --log-file) log="$2"; shift 2;;
    --tool|--show-backtrace) shift 2;;
    *) break;;
  esac
done
"$@"
status=$?
cat "{sample}" > "$log"
exit $status
""")
    script.chmod(0o755)
    monkeypatch.setenv(SANITIZER_ENV_VAR, str(script))


def test_run_reads_the_report_from_the_log_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _stand_in_sanitizer(tmp_path, monkeypatch, MEMCHECK_TWO_ERRORS)
    program = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())"]
    result = run_sanitizer(program, SanitizerTool.MEMCHECK, input_text='{"mode": "run"}')
    assert (result.status, result.error_count) == ("errors", 2)
    args = (tmp_path / "args").read_text().split("\n")
    assert args[:2] == ["--tool", "memcheck"]
    assert "--log-file" in args


def test_run_that_ends_without_a_summary_reports_exit_status(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    _stand_in_sanitizer(tmp_path, monkeypatch, CRASHED_BEFORE_SUMMARY)
    result = run_sanitizer([sys.executable, "-c", "print('driver says bye'); raise SystemExit(7)"])
    assert result.status == "failed"
    assert result.reason.endswith("(exit status 7)")
    assert "driver says bye" in result.output_tail


def test_run_that_hangs_is_killed_and_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _stand_in_sanitizer(tmp_path, monkeypatch, CLEAN_WITH_PROGRAM_OUTPUT)
    result = run_sanitizer([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    assert (result.status, result.reason) == ("failed", "timed out after 0.5 s")
