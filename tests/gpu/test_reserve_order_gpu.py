"""The trusted reserve on a GPU, in the graph's order (verify, then measure: no references computed in the
background): every reference case the evaluator keeps exists before the reserve is taken, so none is carved out
of it (harness/gpu_reserve.py, harness/memory_plan.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from gpu.cases import SWISH

from kernelblaster.harness import evaluate
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions
from kernelblaster.harness.gpu_reserve import reserved_for_trusted
from kernelblaster.harness.problem import load_problem

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
FAST = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "fast.cu"


def test_verification_in_the_graphs_order_keeps_no_reference_case_made_inside_the_reserve(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False,
                                                                    precision="strict"))
    kept_at_reserve: list[set[str]] = []

    @contextmanager
    def recording(gpu: int, nbytes: int, leave_bytes: int) -> Iterator[None]:
        kept_at_reserve.append(set(evaluator.references._cases))
        with reserved_for_trusted(gpu, nbytes, leave_bytes):
            yield

    monkeypatch.setattr(evaluate, "reserved_for_trusted", recording)
    built = evaluator.build(FAST.read_text(), "fast.cu")
    verified = evaluator.verify(built)
    assert verified.verdict == "ok", verified.summary
    assert evaluator.plan.references == "cached"
    assert kept_at_reserve == [set(evaluator.references._cases)]
    measured = evaluator.measure(built, verified, profile=False)
    assert measured.verdict == "ok", measured.summary
    assert kept_at_reserve[-1] == set(evaluator.references._cases)
