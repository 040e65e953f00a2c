"""GPU specification of the seed KB's snippets: each snippet, with a problem's kb_forward appended
(tests/gpu/snippet_cases.py), is a candidate the real harness accepts on that problem under the default strict
fp32 policy: it compiles, runs, and passes every verification check, special values and the roofline included.
A snippet offered as a first kernel's starting point is also run at KernelBench's own size, its time printed
beside PyTorch's (cuBLAS SGEMM for a matmul under strict, TF32 off)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gpu.snippet_cases import SNIPPET_CASES, SnippetCase

from kernelblaster.harness.evaluate import EvalOptions, evaluate_candidate

pytestmark = pytest.mark.gpu

SMALL_CASES = [case for case in SNIPPET_CASES if not case.at_kernelbench_size]
KERNELBENCH_CASES = [case for case in SNIPPET_CASES if case.at_kernelbench_size]


@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda case: case.id)
def test_snippet_candidate_is_accepted_under_strict_fp32(case: SnippetCase, cache_dir: Path, tmp_path: Path) -> None:
    candidate = tmp_path / f"{case.snippet}.cu"
    candidate.write_text(case.candidate_source())
    options = EvalOptions(cache_dir=cache_dir, baseline=False, precision="strict")
    result = evaluate_candidate(case.problem, candidate, options)
    assert result.verdict == "ok", result.summary
    assert all(check.passed for check in result.checks), result.summary


@pytest.mark.parametrize("case", KERNELBENCH_CASES, ids=lambda case: case.id)
def test_snippet_candidate_is_accepted_at_kernelbench_size_and_timed_against_pytorch(
        case: SnippetCase, cache_dir: Path, tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    candidate = tmp_path / f"{case.snippet}.cu"
    candidate.write_text(case.candidate_source())
    options = EvalOptions(cache_dir=cache_dir, baseline=True, compile_baseline=False, precision="strict")
    result = evaluate_candidate(case.problem, candidate, options)
    assert result.verdict == "ok", result.summary
    assert result.timing is not None and result.baseline is not None and result.speedup is not None
    figures = (f"{case.id} on {result.gpu}: {result.timing.event.median_ms:.4f} ms; PyTorch eager (strict, cuBLAS "
               f"SGEMM for a matmul) {result.baseline.eager.median_ms:.4f} ms: {result.speedup.vs_eager:.2f}x")
    record_property("timing", figures)  # kept in the JUnit XML, which the GPU runs bring back
    print("\n" + figures)
