"""Selecting optimizations: k distinct, seeded, weighted by expected gain, exploring, failures sinking."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from datetime import UTC, datetime
from typing import TypedDict, Unpack

import pytest

from kernelblaster.kb.schema import (
    Category,
    Optimization,
    OutcomeStats,
    OutcomeStatus,
    PerformanceState,
    Technique,
    Transition,
)
from kernelblaster.kb.selection import SelectedOptimization, SelectionPolicy, select_optimizations

SIGNATURE = [0.5] * 24
DRAWS = 2000


def state_with(*optimizations: Optimization) -> PerformanceState:
    return PerformanceState(
        id="test_state",
        name="Test state",
        primary_bottleneck="whatever the test needs",
        description="A state built for selection tests.",
        signature=SIGNATURE,
        optimizations=list(optimizations),
    )


def catalogue(state: PerformanceState) -> dict[str, Technique]:
    return {
        opt.technique: Technique(category=Category.MEMORY, description=f"The {opt.technique} technique.")
        for opt in state.optimizations
    }


def stats_after(*outcomes: tuple[OutcomeStatus, float | None]) -> OutcomeStats:
    stats = OutcomeStats()
    for status, speedup in outcomes:
        stats = stats.with_outcome(status, speedup, datetime.now(UTC))
    return stats


def select(state: PerformanceState, k: int, rng_seed: int) -> list[SelectedOptimization]:
    return select_optimizations(state, k, rng_seed=rng_seed, techniques=catalogue(state), precision="strict")


class PickOptions(TypedDict, total=False):
    transitions: Collection[Transition]
    previous_technique: str
    exclude: Collection[str]
    policy: SelectionPolicy


def first_picks(state: PerformanceState, draws: int = DRAWS, **options: Unpack[PickOptions]) -> Counter[str]:
    techniques = catalogue(state)
    return Counter(
        select_optimizations(state, 1, rng_seed=seed, techniques=techniques, precision="strict", **options)[0].technique
        for seed in range(draws)
    )


def test_selects_k_distinct_optimizations() -> None:
    state = state_with(*(Optimization(technique=f"t{i}", prior_speedup=1.1 + i / 10) for i in range(8)))
    for seed in range(50):
        chosen = select(state, 5, rng_seed=seed)
        assert len({item.technique for item in chosen}) == 5


def test_k_larger_than_the_candidates_returns_each_once() -> None:
    state = state_with(Optimization(technique="a", prior_speedup=1.2), Optimization(technique="b", prior_speedup=1.1))
    chosen = select(state, 5, rng_seed=0)
    assert sorted(item.technique for item in chosen) == ["a", "b"]


def test_same_seed_gives_the_same_selection() -> None:
    state = state_with(*(Optimization(technique=f"t{i}", prior_speedup=1.2) for i in range(8)))
    runs = [select(state, 3, rng_seed=42) for _ in range(2)]
    assert runs[0] == runs[1]


def test_different_seeds_give_different_selections() -> None:
    state = state_with(*(Optimization(technique=f"t{i}", prior_speedup=1.2) for i in range(8)))
    selections = {
        tuple(item.technique for item in select(state, 3, rng_seed=seed))
        for seed in range(20)
    }
    assert len(selections) > 10


def test_draw_frequencies_follow_the_announced_first_pick_probabilities() -> None:
    state = state_with(
        Optimization(technique="big", prior_speedup=1.5),
        Optimization(technique="mid", prior_speedup=1.25),
        Optimization(technique="small", prior_speedup=1.05),
    )
    announced = {
        item.technique: item.first_pick_probability
        for item in select(state, 3, rng_seed=0)
    }
    counts = first_picks(state)
    for technique, probability in announced.items():
        assert counts[technique] / DRAWS == pytest.approx(probability, abs=0.035)
    assert counts["big"] > counts["mid"] > counts["small"]


def test_low_prior_untried_technique_is_still_explored() -> None:
    state = state_with(
        Optimization(technique="favourite", prior_speedup=1.3), Optimization(technique="long_shot", prior_speedup=1.1)
    )
    assert first_picks(state)["long_shot"] > 20


def test_exploration_bonus_raises_the_share_of_the_untried_technique() -> None:
    proven = stats_after(*[(OutcomeStatus.MEASURED, 1.2)] * 10)
    state = state_with(
        Optimization(technique="tried", prior_speedup=1.2, stats=proven),
        Optimization(technique="untried", prior_speedup=1.2),
    )
    without_bonus = first_picks(state, policy=SelectionPolicy(exploration=0))["untried"]
    assert first_picks(state)["untried"] > without_bonus + DRAWS // 10


def test_technique_that_keeps_failing_to_compile_sinks() -> None:
    failing = stats_after(*[(OutcomeStatus.COMPILE_FAILED, None)] * 6)
    state = state_with(
        Optimization(technique="fails", prior_speedup=1.6, stats=failing),
        Optimization(technique="modest", prior_speedup=1.1),
    )
    counts = first_picks(state)
    assert counts["fails"] < counts["modest"] / 5


def only_selection(optimization: Optimization) -> SelectedOptimization:
    state = state_with(optimization)
    return select(state, 1, rng_seed=0)[0]


def test_suspicious_outcomes_lower_the_score_and_never_reward() -> None:
    suspicious = stats_after(*[(OutcomeStatus.SUSPICIOUS, None)] * 4)
    untried = only_selection(Optimization(technique="t", prior_speedup=1.3))
    flagged = only_selection(Optimization(technique="t", prior_speedup=1.3, stats=suspicious))
    assert flagged.expected_speedup == untried.expected_speedup
    assert flagged.score < untried.score


def test_expected_gain_stays_near_the_prior_when_evidence_is_thin() -> None:
    one_bad = stats_after((OutcomeStatus.MEASURED, 0.8))
    many_bad = stats_after(*[(OutcomeStatus.MEASURED, 0.8)] * 30)
    thin = only_selection(Optimization(technique="t", prior_speedup=1.5, stats=one_bad))
    thick = only_selection(Optimization(technique="t", prior_speedup=1.5, stats=many_bad))
    assert thin.expected_speedup > 1.2
    assert thick.expected_speedup < 0.9


def test_zero_temperature_always_picks_the_highest_expected_gain() -> None:
    state = state_with(
        Optimization(technique="best", prior_speedup=1.5), Optimization(technique="other", prior_speedup=1.4)
    )
    assert first_picks(state, draws=50, policy=SelectionPolicy(temperature=0))["best"] == 50


def test_deprecated_and_excluded_techniques_are_never_selected() -> None:
    state = state_with(
        Optimization(technique="old", prior_speedup=2.0, deprecated="replaced by a better one"),
        Optimization(technique="done", prior_speedup=2.0),
        Optimization(technique="left", prior_speedup=1.1),
    )
    counts = first_picks(state, draws=200, exclude={"done"})
    assert set(counts) == {"left"}


def test_evidence_after_the_previous_technique_shifts_the_choice() -> None:
    state = state_with(Optimization(technique="a", prior_speedup=1.3), Optimization(technique="b", prior_speedup=1.3))
    a_after_b_hurts = Transition(before="b", after="a", stats=stats_after(*[(OutcomeStatus.MEASURED, 0.7)] * 8))
    counts = first_picks(state, transitions=[a_after_b_hurts], previous_technique="b")
    assert counts["b"] > 3 * counts["a"]
