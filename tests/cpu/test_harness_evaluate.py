"""harness/evaluate.py without a GPU: the build stage, verdicts that need no GPU, and bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import ProblemError, load_problem
from kernelblaster.tools.errors import UserFacingError

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "problems" / "elementwise_swish_scale.py"
CANDIDATES = ROOT / "examples" / "candidates" / "elementwise_swish_scale"

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="covers the no-GPU paths"),
]


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> CandidateEvaluator:
    options = EvalOptions(cache_dir=tmp_path_factory.mktemp("kb_cache"))
    return CandidateEvaluator(load_problem(PROBLEM), options)


def test_a_built_candidate_without_a_gpu_is_verdict_no_gpu(evaluator: CandidateEvaluator) -> None:
    source = (CANDIDATES / "naive.cu").read_text()
    result = evaluator.evaluate(source, "naive.cu")
    assert result.verdict == "no_gpu"
    assert result.compiled
    assert [(c.name, c.passed) for c in result.checks] == [("static", True), ("compile", True)]
    assert result.timing is None and result.speedup is None and result.roofline is None


def test_two_builds_keep_their_own_sources_and_driver_libraries(evaluator: CandidateEvaluator) -> None:
    # The stages are separate so that an agent can build several candidates and verify them later:
    # building the second must not overwrite the first one's files.
    naive, fast = ((CANDIDATES / name).read_text() for name in ("naive.cu", "fast.cu"))
    first = evaluator.build(naive, "naive.cu")
    second = evaluator.build(fast, "fast.cu")
    assert first.ok and second.ok
    assert first.program is not None and second.program is not None
    assert first.program.library != second.program.library
    assert first.build.source_path.read_text() == naive
    assert second.build.source_path.read_text() == fast
    assert first.program.library.exists()


def test_a_compile_error_is_a_verdict_not_an_exception(evaluator: CandidateEvaluator) -> None:
    source = (CANDIDATES / "naive.cu").read_text().replace("const float sigmoid", "const float sigmoid = ;")
    result = evaluator.evaluate(source, "broken.cu")
    assert result.verdict == "compile_error"
    assert not result.compiled
    assert "error" in result.compile_log
    assert "compile error" in result.summary


def test_a_source_holding_a_lone_surrogate_is_refused_with_a_result_that_can_be_written(
        evaluator: CandidateEvaluator) -> None:
    # An agent's code, decoded from a JSON escape, can hold one: hashing or writing it failed in this process.
    source = (CANDIDATES / "naive.cu").read_text() + "// \ud800\n"
    result = evaluator.evaluate(source, "surrogate.cu")
    assert result.verdict == "static_violation" and "lone surrogate (U+D800)" in result.summary
    result.model_dump_json()


def test_a_static_violation_is_a_verdict_naming_the_rule_and_line(evaluator: CandidateEvaluator) -> None:
    source = "#include <cublas_v2.h>\n" + (CANDIDATES / "naive.cu").read_text()
    result = evaluator.evaluate(source, "cublas.cu")
    assert result.verdict == "static_violation"
    assert [(c.name, c.passed) for c in result.checks] == [("static", False)]
    assert "line 1" in result.summary and "cuBLAS" in result.summary


def test_a_missing_candidate_is_a_user_facing_error(tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match=r"missing\.cu: cannot read the candidate"):
        evaluate_candidate(PROBLEM, tmp_path / "missing.cu", EvalOptions(cache_dir=tmp_path))


def test_a_broken_problem_is_a_problem_error(tmp_path: Path) -> None:
    broken = ROOT / "tests" / "fixtures" / "problems" / "broken_forward_raises.py"
    with pytest.raises(ProblemError, match=r"broken_forward_raises\.py"):
        evaluate_candidate(broken, CANDIDATES / "naive.cu", EvalOptions(cache_dir=tmp_path))


def test_steps_that_need_a_gpu_say_so(evaluator: CandidateEvaluator) -> None:
    with pytest.raises(UserFacingError, match="no CUDA GPU"):
        evaluator.baseline()


def test_the_problems_operation_kinds_need_no_gpu(evaluator: CandidateEvaluator) -> None:
    assert evaluator.operation_kinds() == ["several_operations"]  # swish and scale: elementwise operators
