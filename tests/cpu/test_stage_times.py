"""Stage times (harness/stages.py, issue 27): every evaluation records its seconds per named stage, absent
where a stage did not run; `eval --json` and a run's report carry them; a candidate the source rules refuse
is refused once the problem is loaded, before the problem's spec, the GPU or nvcc is asked for anything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
import torch
from fixtures.graph.fake_openai import FakeOpenAI, kernelblaster_roles, optimize_through
from fixtures.graph.recorded_evaluator import MEASURED_STAGES, VERIFIED_STAGES

from kernelblaster.harness import evaluate
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.report import render_eval
from kernelblaster.harness.result import EvalResult
from kernelblaster.harness.stages import STAGES, Stage, StageClock, StageTimes, process_age_seconds
from kernelblaster.nodes.report import stage_totals

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "problems" / "elementwise_swish_scale.py"
NAIVE = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu"
REFUSED = ROOT / "tests" / "hostile" / "candidates" / "raw_syscall_asm.cu"
NEEDS_NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="covers the no-GPU paths")


def test_the_stage_names_are_the_fields_of_stage_times_in_order() -> None:
    assert STAGES == get_args(Stage) == tuple(StageTimes.model_fields)


def test_a_stage_that_did_not_run_is_absent_from_the_json_not_zero() -> None:
    times = StageClock({"compile": 1.5, "problem_load": 0.25}).times()
    assert json.loads(times.model_dump_json()) == {"problem_load": 0.25, "compile": 1.5}
    assert list(times.ran()) == ["problem_load", "compile"]  # in the order stages run, not as recorded


def test_a_stage_recorded_twice_adds_up() -> None:
    clock = StageClock()
    clock.add("driver_start", 0.5)
    clock.add("driver_start", 0.25)
    assert clock.seconds == {"driver_start": 0.75}


def test_a_stage_that_raises_still_records_its_time() -> None:
    clock = StageClock()
    with pytest.raises(RuntimeError), clock.timing("references"):
        raise RuntimeError("out of memory")
    assert "references" in clock.seconds


def test_a_result_written_before_stage_times_still_reads_with_no_stages() -> None:
    old = json.loads(_refused_result().model_dump_json())
    del old["stages"]
    old["seconds"] = {"build": 1.2, "verify": 0.4, "time": 0.9, "score": 0.01}
    result = EvalResult.model_validate(old)
    assert result.stages.ran() == {}


def test_the_process_age_is_read_from_proc() -> None:
    age = process_age_seconds()
    assert age is not None and 0 <= age < 24 * 3600


@NO_GPU
def test_a_refused_candidate_is_refused_without_the_problems_spec(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_analysis(*_: object) -> None:
        raise AssertionError("the problem's spec was made for a candidate the source rules refuse")

    monkeypatch.setattr(evaluate, "analyse_problem", no_analysis)
    result = evaluate_candidate(PROBLEM, REFUSED, EvalOptions(cache_dir=tmp_path))
    assert result.verdict == "static_violation" and "system calls" in result.summary
    assert list(result.stages.ran()) == ["problem_load", "static_check"]


@NO_GPU
def test_an_evaluator_refuses_before_it_warms_references_or_compiles(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator = CandidateEvaluator(load_problem(PROBLEM), EvalOptions(cache_dir=tmp_path))

    def forbidden(*_: object) -> None:
        raise AssertionError("a refused candidate reached the GPU or the compiler")

    monkeypatch.setattr(evaluator, "_warm_references_in_background", forbidden)
    monkeypatch.setattr(evaluator, "_build_null_in_background", forbidden)
    monkeypatch.setattr(evaluator, "build", forbidden)
    result = evaluator.evaluate(REFUSED.read_text(), "raw_syscall_asm.cu")
    assert result.verdict == "static_violation"
    assert list(result.stages.ran()) == ["static_check"]


@NEEDS_NVCC
@NO_GPU
def test_a_built_candidate_records_its_load_spec_check_compile_and_link_and_nothing_it_did_not_run(
        tmp_path: Path) -> None:
    result = evaluate_candidate(PROBLEM, NAIVE, EvalOptions(cache_dir=tmp_path), StageClock({"process_start": 1.0}))
    assert result.verdict == "no_gpu"
    stages = result.stages.ran()
    assert list(stages) == ["process_start", "problem_load", "static_check", "problem_spec", "compile", "link"]
    assert stages["compile"] > 0 and stages["link"] > 0


@NO_GPU
def test_eval_json_carries_the_stage_times_from_the_process_start(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "kernelblaster.graph", "eval", str(PROBLEM), str(REFUSED), "--json"],
                          capture_output=True, text=True, env=os.environ | {"KERNELBLASTER_CACHE": str(tmp_path)},
                          check=False)
    assert done.returncode == 1, done.stderr
    stages = json.loads(done.stdout)["stages"]
    assert list(stages) == ["process_start", "problem_load", "static_check"]
    assert stages["process_start"] > 0


def test_a_runs_report_totals_each_stage_over_its_candidates_last_results(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles) as server:
        optimize_through(server, tmp_path, depth=2)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    totals = {total["stage"]: total for total in report["evaluation_stages"]}
    measured = VERIFIED_STAGES.model_copy(update=MEASURED_STAGES).ran()
    assert list(totals) == list(measured)  # every stage the recorded evaluations ran, and no other
    for stage, seconds in measured.items():  # a measurement carries its verification's stages: counted once
        assert totals[stage]["seconds"] == pytest.approx(seconds * totals[stage]["evaluations"])
    assert "## Evaluation time by stage" in (tmp_path / "run" / "report.md").read_text()


def test_stage_totals_leave_out_the_stages_no_evaluation_ran() -> None:
    first = _refused_result().model_copy(update={"stages": StageTimes(static_check=0.5)})
    second = _refused_result().model_copy(update={"stages": StageTimes(static_check=1.5, compile=2.0)})
    totals = stage_totals([first, second])
    assert [(t.stage, t.evaluations, t.seconds, t.median_s) for t in totals] == [
        ("static_check", 2, 2.0, 1.0), ("compile", 1, 2.0, 2.0)]


def _refused_result() -> EvalResult:
    return EvalResult(verdict="static_violation", summary="refused", problem="p.py", problem_sha256="0" * 64,
                      candidate="c.cu", source_sha256="0" * 64, arch="sm_90", precision="strict", compiled=False)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="covers a machine without a GPU")
def test_the_stage_benchmark_without_a_gpu_fails_in_one_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eval_stages.py"), "--repeats", "1"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no CUDA GPU" in done.stderr, done.stderr


def test_the_text_report_lists_the_seconds_of_the_stages_that_ran() -> None:
    result = _refused_result().model_copy(update={"stages": StageTimes(problem_load=0.25, static_check=0.004)})
    assert "seconds: problem_load 0.250, static_check 0.004" in render_eval(result).splitlines()
