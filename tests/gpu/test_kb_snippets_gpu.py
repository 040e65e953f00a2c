"""GPU specification of the seed KB's snippets: each snippet, with a problem's kb_forward appended
(tests/gpu/snippet_cases.py), is a candidate the real harness accepts on that problem under the default strict
fp32 policy: it compiles, runs, and passes every verification check, special values and the roofline included."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu.snippet_cases import SNIPPET_CASES, SnippetCase

from kernelblaster.harness.evaluate import EvalOptions, evaluate_candidate

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", SNIPPET_CASES, ids=lambda case: case.id)
def test_snippet_candidate_is_accepted_under_strict_fp32(case: SnippetCase, cache_dir: Path, tmp_path: Path) -> None:
    candidate = tmp_path / f"{case.snippet}.cu"
    candidate.write_text(case.candidate_source())
    options = EvalOptions(cache_dir=cache_dir, baseline=False, precision="strict")
    result = evaluate_candidate(case.problem, candidate, options)
    assert result.verdict == "ok", result.summary
    assert all(check.passed for check in result.checks), result.summary
