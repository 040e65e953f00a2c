"""harness/evaluate.py's GPU-only paths on CPU stand-ins: the evaluator is told it has GPU 0, its references are
computed on the CPU, and what needs a device (the trusted reserve, the candidate's driver, the checks through it)
is replaced by recorders. What they show: every kept reference case exists before the reserve is taken, and the
background references of an evaluation end with it."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import cast

import pytest
import torch

from kernelblaster.harness import evaluate
from kernelblaster.harness.build import BuildResult
from kernelblaster.harness.evaluate import CandidateBuild, CandidateEvaluator, EvalOptions, _Warming
from kernelblaster.harness.memory_plan import GIB, MIB, GpuMemory, ProblemSizes, plan_memory
from kernelblaster.harness.problem import instantiate, load_problem
from kernelblaster.harness.references import ReferenceCache, ReferenceCase, compute_case
from kernelblaster.harness.result import EvalResult
from kernelblaster.harness.verdict import Findings

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "gemm_divide_sum_scale_small.py"
HONEST = (ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu").read_text()
H100 = GpuMemory(name="NVIDIA H100 80GB HBM3", free_bytes=int(79.1 * GIB), l2_bytes=50 * MIB)
SEEDS = 3


class CpuReferences(ReferenceCache):
    """The harness's references, computed on the CPU instead of `cuda:{gpu}`."""

    def _compute(self, seed: int, special: tuple[str, Callable[[torch.Tensor], object]] | None) -> ReferenceCase:
        return compute_case(instantiate(self.problem, seed, "cpu"), special, self.float64)


@pytest.fixture(autouse=True)
def collected() -> Iterator[None]:
    """The evaluators and references a test made are collected after it (they sit in reference cycles): a later
    test that counts the live tensors of the same problem must not find them."""
    yield
    gc.collect()


def on_gpu_zero(tmp_path: Path, float64: bool = False) -> tuple[CandidateEvaluator, CpuReferences]:
    """An evaluator that believes it has GPU 0, with a plan that keeps references and CPU references."""
    problem = load_problem(PROBLEM)
    evaluator = CandidateEvaluator(problem, EvalOptions(cache_dir=tmp_path, seeds=SEEDS, precision="strict"))
    evaluator.gpu = 0
    sizes = ProblemSizes.of(evaluator.spec, evaluator.analysis.footprint.peak_bytes)
    evaluator.__dict__["plan"] = plan = plan_memory(sizes, H100, SEEDS)
    assert plan.fits and plan.references == "cached"
    references = CpuReferences(problem, 0, list(range(SEEDS)), "cached", True, float64=float64)
    evaluator.__dict__["references"] = references
    return evaluator, references


def test_every_kept_reference_case_is_computed_before_the_reserve_is_taken(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # As the graph runs it (verify, then measure: no references computed in the background), under `strict`.
    # A kept case computed after the reserve is taken comes out of the reserve, and stays.
    evaluator, references = on_gpu_zero(tmp_path)
    kept_at_reserve: list[set[str]] = []

    @contextmanager
    def reserve(gpu: int, nbytes: int, leave_bytes: int) -> Iterator[None]:
        kept_at_reserve.append(set(references._cases))
        yield

    @contextmanager
    def driver(*_: object) -> Iterator[object]:
        yield object()

    monkeypatch.setattr(evaluate, "reserved_for_trusted", reserve)
    monkeypatch.setattr(evaluate, "noting_out_of_memory", lambda gpu: nullcontext())
    monkeypatch.setattr(evaluator, "_driver", driver)
    monkeypatch.setattr(evaluator, "_check_in", lambda *_, **__: None)
    evaluator._in_driver(cast(CandidateBuild, None), [], Findings(checks=[]), verify=True, measure=False)
    expected = {f"seed {seed}" for seed in range(SEEDS)} | set(references.special_labels(strict=True))
    assert kept_at_reserve == [expected]


def test_a_build_that_raises_leaves_no_background_reference_thread_running(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # A thread left running would seed torch's process-wide generators while the next evaluation fills its sets.
    evaluator, _ = on_gpu_zero(tmp_path)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(30.0,), daemon=True)

    def warming(clock: object, compiling: object) -> _Warming:
        thread.start()
        return _Warming(thread, stop)

    def build(source: str, label: str, **_: object) -> CandidateBuild:
        raise RuntimeError("the sandbox could not start")

    monkeypatch.setattr(evaluator, "_warm_references_in_background", warming)
    monkeypatch.setattr(evaluator, "build", build)
    with pytest.raises(RuntimeError, match="sandbox"):
        evaluator.evaluate(HONEST, "naive.cu")
    assert stop.is_set() and not thread.is_alive()


def test_the_float64_seconds_of_a_candidate_that_did_not_build_are_not_the_next_evaluations(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator, references = on_gpu_zero(tmp_path, float64=True)
    failed = cast(EvalResult, "the compile error's verdict")
    computed, compute = threading.Event(), references._compute

    def computing(seed: int, special: tuple[str, Callable[[torch.Tensor], object]] | None) -> ReferenceCase:
        case = compute(seed, special)
        computed.set()
        return case

    def build(source: str, label: str, on_compile: Callable[[], None] | None = None) -> CandidateBuild:
        if on_compile is not None:
            on_compile()  # nvcc runs: the background work begins
        assert computed.wait(30.0)  # the compile outlasts the first case computed in the background
        return CandidateBuild(label, source, cast(BuildResult, None), failed)

    references._compute = computing  # type: ignore[method-assign]

    monkeypatch.setattr(evaluator, "build", build)
    assert evaluator.evaluate(HONEST, "broken.cu") is failed
    assert references.take_float64_seconds() == 0.0


# What a build that got through reads as, for the stand-ins below (its files are never read).
BUILT = BuildResult(stage="ok", violations=[], compile=None, link=None, source_path=Path("candidate.cu"),
                    header_path=Path("kb_problem.h"), program=None)


class NullBuilds:
    """A stand-in for `CandidateEvaluator.build`: the candidate's build gives `candidate`; the null candidate's
    takes `null_seconds` (a compile), is counted, and gives an ok build (or raises `null_error`)."""

    def __init__(self, candidate: EvalResult | None, null_seconds: float = 0.0,
                 null_error: Exception | None = None) -> None:
        self.candidate, self.null_seconds, self.null_error = candidate, null_seconds, null_error
        self.null_builds: list[CandidateBuild] = []
        self.null_finished = threading.Event()

    def __call__(self, source: str, label: str, **_: object) -> CandidateBuild:
        if label != "trusted-null-candidate":
            return CandidateBuild(label, source, BUILT, self.candidate)
        threading.Event().wait(self.null_seconds)
        self.null_finished.set()
        if self.null_error is not None:
            raise self.null_error
        built = CandidateBuild(label, source, cast(BuildResult, None), None)
        self.null_builds.append(built)
        return built


def test_a_candidate_that_does_not_build_returns_only_once_the_null_candidates_build_has_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator, _ = on_gpu_zero(tmp_path)
    failed = cast(EvalResult, "the compile error's verdict")
    builds = NullBuilds(failed, null_seconds=0.5)
    monkeypatch.setattr(evaluator, "_warm_references_in_background", lambda *_: None)
    monkeypatch.setattr(evaluator, "build", builds)
    assert evaluator.evaluate(HONEST, "broken.cu") is failed
    assert builds.null_finished.is_set()
    assert not any(thread.name == "build-null-candidate" for thread in threading.enumerate())


def test_the_null_candidate_built_beside_the_compile_is_the_one_calibration_uses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator, _ = on_gpu_zero(tmp_path)
    builds = NullBuilds(None)
    used: list[CandidateBuild] = []
    done = cast(EvalResult, "the verdict")

    def run(built: CandidateBuild, findings: Findings, **_: object) -> EvalResult:
        used.extend([evaluator._null_candidate(), evaluator._null_candidate()])  # calibration, batches beside
        assert "calibration" in findings.stages.seconds  # the background build's seconds, merged
        return done

    monkeypatch.setattr(evaluator, "_warm_references_in_background", lambda *_: None)
    monkeypatch.setattr(evaluator, "build", builds)
    monkeypatch.setattr(evaluator, "_run", run)
    assert evaluator.evaluate(HONEST, "naive.cu") is done
    assert len(builds.null_builds) == 1 and used == [builds.null_builds[0]] * 2


def test_a_null_candidate_that_fails_in_the_background_fails_again_where_calibration_asks_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator, _ = on_gpu_zero(tmp_path)
    builds = NullBuilds(None, null_error=RuntimeError("the harness's null candidate did not build"))
    raised: list[str] = []

    def run(built: CandidateBuild, findings: Findings, **_: object) -> EvalResult:
        with pytest.raises(RuntimeError, match="null candidate did not build") as error:
            evaluator._null_candidate()
        raised.append(str(error.value))
        return cast(EvalResult, "the verdict")

    monkeypatch.setattr(evaluator, "_warm_references_in_background", lambda *_: None)
    monkeypatch.setattr(evaluator, "build", builds)
    monkeypatch.setattr(evaluator, "_run", run)
    evaluator.evaluate(HONEST, "naive.cu")
    assert builds.null_finished.is_set() and raised  # tried in the background, then again in the foreground


def test_a_memory_plan_that_fails_in_the_background_is_raised_once_the_build_is_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA starts with the plan, beside the compile: its failure is raised as it was when the plan came first.
    evaluator, _ = on_gpu_zero(tmp_path)
    builds = NullBuilds(None)
    built: list[str] = []

    def planned(clock: object) -> object:
        raise RuntimeError("CUDA error: initialization error")

    def build(source: str, label: str, **_: object) -> CandidateBuild:
        built.append(label)
        return builds(source, label)

    monkeypatch.setattr(evaluator, "_planned", planned)
    monkeypatch.setattr(evaluator, "build", build)
    with pytest.raises(RuntimeError, match="initialization error"):
        evaluator.evaluate(HONEST, "naive.cu")
    assert "naive.cu" in built
    assert not any(t.name in ("warm-references", "build-null-candidate") for t in threading.enumerate())


def test_cuda_starts_in_the_background_only_once_nvcc_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA's start holds the interpreter's lock: begun first, it would hold up the compile it is meant to overlap.
    evaluator, _ = on_gpu_zero(tmp_path)
    order: list[str] = []
    plan, planned = evaluator.plan, threading.Event()

    def planning(clock: object) -> object:
        order.append("plan")
        planned.set()
        return plan

    def build(source: str, label: str, on_compile: Callable[[], None] | None = None) -> CandidateBuild:
        if on_compile is None:  # the null candidate's
            return NullBuilds(None)(source, label)
        threading.Event().wait(0.2)
        order.append("nvcc runs")
        on_compile()
        assert planned.wait(30.0)
        return CandidateBuild(label, source, BUILT, cast(EvalResult, "a compile error's verdict"))

    monkeypatch.setattr(evaluator, "_planned", planning)
    monkeypatch.setattr(evaluator, "build", build)
    evaluator.evaluate(HONEST, "naive.cu")
    assert order == ["nvcc runs", "plan"]


def test_a_build_refused_before_nvcc_runs_starts_no_cuda_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator, _ = on_gpu_zero(tmp_path)
    refused = cast(EvalResult, "the refused build's verdict")

    def planning(clock: object) -> object:
        raise AssertionError("the memory plan was made for a build that was refused")

    def build(source: str, label: str, **_: object) -> CandidateBuild:
        if label == "trusted-null-candidate":
            return NullBuilds(None)(source, label)
        return CandidateBuild(label, source, BUILT, refused)

    monkeypatch.setattr(evaluator, "_planned", planning)
    monkeypatch.setattr(evaluator, "build", build)
    assert evaluator.evaluate(HONEST, "naive.cu") is refused
    assert not any(t.name in ("warm-references", "build-null-candidate") for t in threading.enumerate())
