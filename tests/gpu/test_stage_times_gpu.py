"""Stage times on a GPU (issue 27): a full evaluation records every stage it runs, and only those; a candidate
the source rules refuse is refused within a second of its problem's load, spending nothing on the GPU; a later
evaluation of the same problem reads its analysis back from the cache, and background work ends with its
evaluation."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from gpu.cases import SWISH

from kernelblaster.harness import analysis
from kernelblaster.harness.analysis import ProblemAnalysis, forget_analyses
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import Problem, load_problem

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
FAST = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "fast.cu"
REFUSED = ROOT / "tests" / "hostile" / "candidates" / "raw_syscall_asm.cu"


def test_a_full_evaluation_records_each_stage_it_ran_in_order(cache_dir: Path) -> None:
    result = evaluate_candidate(SWISH, FAST, EvalOptions(cache_dir=cache_dir, baseline=False))
    assert result.verdict == "ok", result.summary
    stages = result.stages.ran()
    expected = ["problem_load", "static_check", "problem_spec", "compile", "link", "references", "driver_start",
                "verification", "special_values", "event_timing", "trusted_batches", "score", "teardown"]
    assert [stage for stage in stages if stage in expected] == expected, stages
    assert "sanitizer" not in stages and "profile" not in stages  # not asked for: absent, not zero
    assert all(seconds >= 0 for seconds in stages.values())


def test_a_second_evaluation_by_one_evaluator_plans_and_calibrates_no_more(cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False))
    first = evaluator.evaluate(FAST.read_text(), "fast.cu").stages.ran()
    second = evaluator.evaluate(FAST.read_text(), "fast.cu").stages.ran()
    assert "memory_plan" in first and "calibration" in first
    assert "memory_plan" not in second and "calibration" not in second


def test_a_refused_candidate_is_refused_within_a_second_of_its_problems_load(cache_dir: Path) -> None:
    started = time.perf_counter()
    result = evaluate_candidate(SWISH, REFUSED, EvalOptions(cache_dir=cache_dir))
    after_load = time.perf_counter() - started - result.stages.ran()["problem_load"]
    assert result.verdict == "static_violation", result.summary
    assert list(result.stages.ran()) == ["problem_load", "static_check"]
    assert result.memory is None  # no memory plan, so no GPU memory
    assert after_load < 1.0, f"{after_load:.2f} s from the problem's load to the refusal"


def test_after_a_candidate_that_does_not_build_the_next_evaluation_still_has_every_reference(cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False))
    broken = evaluator.evaluate(FAST.read_text() + "\n#error a compile error\n", "broken.cu")
    assert broken.verdict == "compile_error", broken.summary
    result = evaluator.evaluate(FAST.read_text(), "fast.cu")
    assert result.verdict == "ok", result.summary


def test_a_later_eval_of_the_same_problem_reads_its_analysis_back_and_still_verifies_and_times(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    passes: list[str] = []
    anew = analysis._analyse_anew

    def counted(problem: Problem, gpu: int | None) -> ProblemAnalysis:
        passes.append(problem.name)
        return anew(problem, gpu)

    monkeypatch.setattr(analysis, "_analyse_anew", counted)
    forget_analyses()  # as a fresh `eval` process
    first = evaluate_candidate(SWISH, FAST, EvalOptions(cache_dir=cache_dir, baseline=False))
    passes_before = len(passes)  # one, or none where an earlier test on this cache analysed the problem
    later_source = tmp_path / "later.cu"
    later_source.write_text(FAST.read_text() + "\n// a later candidate: compiled anew\n")
    forget_analyses()
    later = evaluate_candidate(SWISH, later_source, EvalOptions(cache_dir=cache_dir, baseline=False))
    assert (first.verdict, later.verdict) == ("ok", "ok"), (first.summary, later.summary)
    assert len(passes) == passes_before  # the later "process" read the analysis back
    assert "calibration" in first.stages.ran() and "calibration" in later.stages.ran()
    assert later.timing is not None and later.timing.trusted is not None


def test_a_candidate_that_does_not_compile_leaves_no_background_thread_on_a_gpu(cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False))
    broken = evaluator.evaluate(FAST.read_text() + "\n#error a compile error\n", "broken.cu")
    assert broken.verdict == "compile_error", broken.summary
    assert not [t.name for t in threading.enumerate() if t.name in ("warm-references", "build-null-candidate")]
