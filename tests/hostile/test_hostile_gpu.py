"""The hostile suite on a GPU: every candidate goes through the real evaluation, in the sandbox, gets its
expected verdict, and nothing escapes; so does each candidate the rules refuse when the rules are switched off
(the sandbox and the harness alone). One pytest run of a few minutes (`pytest -m gpu tests/hostile`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile.containment import Tripwires
from hostile.hostile_cases import HOSTILE_CASES, HostileCase
from hostile.unchecked import rules_switched_off

from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions
from kernelblaster.harness.problem import load_problem

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-gpu-cache")


class Evaluators:
    """One evaluator per problem the hostile cases are evaluated on, made when first needed."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self._made: dict[Path, CandidateEvaluator] = {}

    def of(self, problem: Path) -> CandidateEvaluator:
        if problem not in self._made:
            self._made[problem] = CandidateEvaluator(load_problem(problem),
                                                     EvalOptions(cache_dir=self.cache_dir, baseline=False))
        return self._made[problem]

    def close(self) -> None:
        for evaluator in self._made.values():
            evaluator.close()


@pytest.fixture(scope="module")
def evaluators(cache_dir: Path) -> Iterator[Evaluators]:
    made = Evaluators(cache_dir)
    yield made
    made.close()


@pytest.mark.parametrize("case", HOSTILE_CASES, ids=lambda c: c.name)
def test_a_hostile_candidate_is_contained_and_gets_its_verdict(case: HostileCase, evaluators: Evaluators,
                                                                cache_dir: Path, tripwires: Tripwires) -> None:
    result = evaluators.of(case.problem).evaluate(case.candidate_source(), case.name)
    assert result.verdict in case.verdicts, f"{case.what_it_tries}\n{result.verdict}: {result.summary}"
    if result.verdict == "ok" and case.honest_min_ms is not None:  # a forgery that did not reach the reply
        assert result.time_ms is not None and result.time_ms >= case.honest_min_ms, \
            f"a forged time was accepted: {result.summary}"
    if case.reason is not None:
        assert case.reason in result.summary, f"caught for another reason: {result.summary}"
    if result.verdict == "sandbox_violation":
        assert "the sandbox blocked" in result.summary
        assert case.blocked_call is None or f"blocked {case.blocked_call} " in result.summary, result.summary
    builds = [path for path in (cache_dir / "builds").iterdir() if path.is_dir()]
    tripwires.assert_untouched([result.model_dump_json()], builds)


@pytest.mark.parametrize("case", [c for c in HOSTILE_CASES if c.unchecked_verdicts], ids=lambda c: c.name)
def test_a_refused_candidate_built_without_the_rules_is_still_contained(case: HostileCase,
                                                                        evaluators: Evaluators,
                                                                        cache_dir: Path, tripwires: Tripwires) -> None:
    with rules_switched_off():
        result = evaluators.of(case.problem).evaluate(case.candidate_source(), f"{case.name}-unchecked")
    assert result.verdict in case.unchecked_verdicts, f"{case.what_it_tries}\n{result.verdict}: {result.summary}"
    if result.verdict == "ok" and case.honest_min_ms is not None:  # a forgery that did not reach the reply
        assert result.time_ms is not None and result.time_ms >= case.honest_min_ms, \
            f"a forged time was accepted: {result.summary}"
    if result.verdict == "sandbox_violation":
        assert case.blocked_call is None or f"blocked {case.blocked_call} " in result.summary, result.summary
    builds = [path for path in (cache_dir / "builds").iterdir() if path.is_dir()]
    tripwires.assert_untouched([result.model_dump_json()], builds)
