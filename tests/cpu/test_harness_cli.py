"""`kernelblaster eval | baseline | header` on a machine without a GPU.

The end-to-end cases run `python -m kernelblaster.graph` in a subprocess (exit status, stdout, stderr, no traceback);
argument errors and the quick one-line failures call `graph.app.cli.main` in-process, which is the same code
without the interpreter start-up. Every run uses a temporary KERNELBLASTER_CACHE, never the home directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fixtures import sanitizer_stand_in

from kernelblaster.graph.app.cli import main
from kernelblaster.harness.build import check_libraries_installed
from kernelblaster.harness.cli import exit_status
from kernelblaster.harness.result import EvalResult, Verdict
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "problems" / "elementwise_swish_scale.py"
NAIVE = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu"
COMPILE_ERROR = ROOT / "tests" / "fixtures" / "candidates" / "compile_error.cu"
BROKEN_PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "broken_forward_raises.py"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the behaviour without a GPU")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module, so the test driver is compiled once."""
    return tmp_path_factory.mktemp("kernelblaster_cache")


@pytest.fixture(autouse=True)
def isolated_cache(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    monkeypatch.setenv("KERNELBLASTER_CACHE", str(cache_dir))


def kernelblaster(*args: str | Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"KERNELBLASTER_CACHE": str(cache_dir)}
    return subprocess.run([sys.executable, "-m", "kernelblaster.graph", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_error(stderr: str, *fragments: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kernelblaster: ")
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def eval_report(cache_dir: Path) -> subprocess.CompletedProcess[str]:
    return kernelblaster("eval", PROBLEM, NAIVE, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def eval_json(cache_dir: Path, eval_report: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    return kernelblaster("eval", PROBLEM, NAIVE, "--json", cache_dir=cache_dir)


@needs_nvcc
def test_eval_compiles_and_reports_verdict_no_gpu(eval_report: subprocess.CompletedProcess[str]) -> None:
    assert eval_report.stdout.startswith("verdict: no_gpu")
    assert "PASS compile" in eval_report.stdout
    assert "swish_scale_naive" in eval_report.stdout  # the kernel's resource usage


@needs_nvcc
def test_eval_without_a_gpu_exits_with_status_5_and_a_one_line_explanation(
        eval_report: subprocess.CompletedProcess[str]) -> None:
    assert eval_report.returncode == 5
    assert_one_line_error(eval_report.stderr, "no_gpu", "no CUDA GPU")


@needs_nvcc
def test_eval_json_prints_one_object_with_the_result_fields(eval_json: subprocess.CompletedProcess[str]) -> None:
    result = json.loads(eval_json.stdout)  # the whole of stdout is one JSON value
    assert {"verdict", "compiled", "compile_log", "checks", "timing", "speedup", "profile", "roofline",
            "source_sha256"} <= result.keys()
    assert (result["verdict"], result["compiled"], result["timing"], result["speedup"]) == ("no_gpu", True, None, None)
    assert result["source_sha256"] == hashlib.sha256(NAIVE.read_bytes()).hexdigest()
    assert [c["name"] for c in result["checks"]] == ["static", "compile"]
    assert eval_json.returncode != 0


@needs_nvcc
def test_eval_of_a_compile_error_reports_the_compilers_message(cache_dir: Path) -> None:
    completed = kernelblaster("eval", PROBLEM, COMPILE_ERROR, "--json", cache_dir=cache_dir)
    result = json.loads(completed.stdout)
    assert (result["verdict"], result["compiled"]) == ("compile_error", False)
    assert "undefined_element_count" in result["compile_log"]
    detail = next(c["detail"] for c in result["checks"] if c["name"] == "compile")
    assert "undefined_element_count" in detail
    # The compiler's messages cite the user's file, not the copy the harness compiled.
    assert f"{COMPILE_ERROR}:6: error" in detail and f"{COMPILE_ERROR}(6): error" in result["compile_log"]
    assert "candidate.cu" not in completed.stdout
    assert completed.returncode != 0
    assert "Traceback" not in completed.stdout + completed.stderr


def test_eval_of_a_broken_problem_names_the_file_and_the_exception(cache_dir: Path) -> None:
    completed = kernelblaster("eval", BROKEN_PROBLEM, NAIVE, cache_dir=cache_dir)
    assert completed.returncode != 0
    assert completed.stdout == ""
    assert_one_line_error(completed.stderr, str(BROKEN_PROBLEM), "RuntimeError", "cannot be multiplied")


# ---- in-process ------------------------------------------------------------------------------------------


@needs_nvcc
def test_eval_of_a_forbidden_include_is_a_static_violation_naming_rule_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = tmp_path / "uses_cublas.cu"
    candidate.write_text(NAIVE.read_text().replace('#include "kb_problem.h"', '#include "kb_problem.h"\n'
                                                   "#include <cublas_v2.h>"))
    line = 1 + candidate.read_text().splitlines().index("#include <cublas_v2.h>")
    assert main(["eval", str(PROBLEM), str(candidate)]) != 0
    out = capsys.readouterr().out
    assert out.startswith("verdict: static_violation")
    assert f"line {line}: #include <cublas_v2.h>" in out
    assert "cuBLAS is not allowed" in out and "--allow cublas" in out


@needs_nvcc
def test_eval_profile_of_a_candidate_that_was_not_run_says_why_there_is_no_profile(
    capsys: pytest.CaptureFixture[str]
) -> None:
    main(["eval", str(PROBLEM), str(NAIVE), "--profile"])
    out = capsys.readouterr().out
    assert "profile: not taken (only a candidate that passes every check is profiled)" in out
    assert "not requested" not in out


def test_eval_of_a_missing_candidate_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(PROBLEM), str(tmp_path / "missing.cu")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line_error(captured.err, "CANDIDATE", "missing.cu", "does not exist")


def test_baseline_without_a_gpu_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baseline", str(PROBLEM)]) == 2
    assert_one_line_error(capsys.readouterr().err, "no CUDA GPU")


@pytest.mark.parametrize(
    ("verdict", "status"),
    [("ok", 0), ("incorrect", 1), ("compile_error", 1), ("suspicious", 1), ("crash", 1), ("timeout", 1),
     ("forged_result", 1), ("sandbox_violation", 1), ("sanitizer_error", 1), ("harness_error", 3), ("too_large", 4),
     ("no_gpu", 5)],
)
def test_eval_exit_status_says_whether_the_candidate_or_something_else_failed(verdict: Verdict, status: int) -> None:
    result = EvalResult(verdict=verdict, summary="", problem="p.py", problem_sha256="0", candidate="c.cu",
                        source_sha256="0", arch="sm_90", precision="strict", compiled=True)
    assert exit_status(result) == status


def _installed(library: str, cache_dir: Path, sandbox: Sandbox) -> bool:
    try:
        check_libraries_installed(frozenset({library}), "sm_90", cache_dir, sandbox)
    except UserFacingError:
        return False
    return True


@needs_nvcc
def test_allowing_a_library_that_is_not_installed_is_an_environment_error_not_a_compile_error(
    cache_dir: Path, capsys: pytest.CaptureFixture[str], sandbox: Sandbox
) -> None:
    if _installed("cudnn", cache_dir, sandbox):
        pytest.skip("cuDNN is installed here")
    assert main(["eval", str(PROBLEM), str(NAIVE), "--allow", "cudnn"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line_error(captured.err, "--allow cudnn: cuDNN is not installed", "cudnn.h")


def test_header_prints_the_problem_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["header", str(PROBLEM)]) == 0
    header = capsys.readouterr().out
    assert "#pragma once" in header
    assert "static constexpr int64_t KB_IN_X_DIM0 = 4095;" in header
    assert "static constexpr double KB_INIT_SCALE = 1.75;" in header


def test_header_never_materialises_the_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    # eval derives its spec on the meta device; header must describe the same problem the same way, even one
    # whose inputs (here 1 EiB) could never be allocated.
    assert main(["header", str(ROOT / "tests" / "fixtures" / "problems" / "huge_input.py")]) == 0
    assert "static constexpr int64_t KB_IN_X_DIM0 = 1073741824;" in capsys.readouterr().out


def test_header_of_a_broken_problem_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["header", str(BROKEN_PROBLEM)]) == 2
    assert_one_line_error(capsys.readouterr().err, str(BROKEN_PROBLEM), "RuntimeError")


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (["--seeds", "0"], "--seeds 0: input should be greater than or equal to 1"),
        (["--seeds", "many"], "--seeds many: input should be a valid integer"),
        (["--allow", "nosuchlib"], "--allow nosuchlib: unknown library 'nosuchlib'"),
        (["--precision", "bogus"], "--precision bogus: input should be 'strict', 'tf32', 'fp16' or 'pytorch-default'"),
        (["--timeout", "-1"], "--timeout -1: input should be greater than 0"),
        (["--timeout", "0"], "--timeout 0: input should be greater than 0"),
        (["--timeout", "nan"], "--timeout nan: input should be a finite number"),
        (["--timeout", "inf"], "--timeout inf: input should be a finite number"),
        (["--timeout", "1e7"], "--timeout 1e7: input should be less than or equal to 604800"),
        (["--gpu", "-1"], "--gpu -1: input should be greater than or equal to 0"),
        (["--arch", "volta"], "--arch volta: expected a GPU architecture such as sm_90"),
        (["--allow", "cublas,,"], "--allow cublas,,: item 2 is empty; separate items with single commas"),
        (["--allow", ",cublas"], "--allow ,cublas: item 1 is empty; separate items with single commas"),
        (["--sanitize", "valgrind"], "--sanitize valgrind: input should be 'memcheck', 'racecheck' or 'initcheck'"),
        (["--sanitize", ","], "--sanitize ,: name at least one checker: memcheck, racecheck, initcheck"),
        (["--sanitize", "memcheck,memcheck"], "--sanitize memcheck,memcheck: lists memcheck more than once"),
        (["--sanitize", "memcheck,,racecheck"],
         "--sanitize memcheck,,racecheck: item 2 is empty; separate items with single commas"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it_with_exit_status_2(
    flags: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(PROBLEM), str(NAIVE), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line_error(captured.err, complaint)


@needs_nvcc
def test_an_arch_nvcc_cannot_compile_for_is_a_bad_flag_not_a_compile_error(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(PROBLEM), str(NAIVE), "--arch", "sm_10"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no verdict: the candidate was never compiled
    assert_one_line_error(captured.err, "--arch sm_10: nvcc ", " cannot compile for sm_10; it supports sm_")


def test_eval_asked_to_sanitize_without_compute_sanitizer_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sanitizer_stand_in.hide(tmp_path, monkeypatch)
    assert main(["eval", str(PROBLEM), str(NAIVE), "--sanitize", "memcheck"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line_error(captured.err, "--sanitize needs compute-sanitizer: compute-sanitizer not found")


@needs_nvcc
def test_eval_names_the_machine_it_ran_on_with_none_for_the_missing_gpu(
        eval_report: subprocess.CompletedProcess[str], eval_json: subprocess.CompletedProcess[str]) -> None:
    machine = json.loads(eval_json.stdout)["machine"]
    assert (machine["source"], machine["gpu"], machine["torch"]) == ("gathered", "none", torch.__version__)
    assert machine["cuda_runtime"] == (torch.version.cuda or "none")
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    assert f"V{machine['nvcc']}" in nvcc
    assert f"machine: none, driver {machine['driver']}, CUDA runtime" in eval_report.stdout


# The README's example of eval with its flags: every flag but the optional libraries, so that it runs with a
# toolkit that has no cuBLAS (`--allow cublas` is shown apart, as needing it).
FLAGS_EXAMPLE = ["examples/problems/softmax_rows.py", "examples/candidates/softmax_rows/fast.cu", "--json", "--profile",
                 "--seeds", "5", "--precision", "strict", "--gpu", "0", "--timeout", "20", "--arch", "sm_90",
                 "--no-baseline"]


@needs_nvcc
def test_the_documented_eval_example_with_its_flags_needs_no_library_beyond_the_toolkit(cache_dir: Path) -> None:
    completed = kernelblaster("eval", *FLAGS_EXAMPLE, cache_dir=cache_dir)
    result = json.loads(completed.stdout)
    assert (result["verdict"], result["compiled"]) == ("no_gpu", True)
    assert_one_line_error(completed.stderr, "no_gpu")
