"""Choose which optimizations to try in a state: weighted sampling of k distinct ones, not an argmax.

Each optimization gets an expected gain in log-speedup: its prior blended with the measured geometric mean
(shrinking toward the prior while evidence is thin), scaled by how often attempts survive compile and
verification, minus the cost of a wasted attempt, plus an exploration bonus that fades with attempts.
k are drawn without replacement with probability proportional to exp(score / temperature) (Gumbel
top-k), reproducibly under a seed. Only techniques valid under the run's precision policy take part: an
inapplicable one (fp16 tensor cores under `strict`) is never offered, however high its prior. Nor is one
made for operations the problem does not perform (Welford statistics for a ReLU).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.precision import check_precision_policy
from kernelblaster.kb.schema import Category, Optimization, OutcomeStats, PerformanceState, Technique, Transition


@dataclass(frozen=True)
class SelectionPolicy:
    """How boldly to explore; scores and temperature are in natural-log speedup units (0.1 ~ 10%)."""

    temperature: float = 0.1
    exploration: float = 0.08
    # Beta pseudo-counts: before any attempt, a technique is taken to survive compile+verify 3 times in 4,
    # held weakly, so a few straight failures already say a lot.
    survive_pseudo: float = 1.5
    fail_pseudo: float = 0.5
    # A failed attempt wastes a rollout step that another technique could have used: more than a typical gain.
    failure_cost: float = 0.3

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.exploration < 0:
            raise ValueError("temperature and exploration must not be negative")


DEFAULT_POLICY = SelectionPolicy()


class SelectedOptimization(BaseModel):
    """An optimization chosen for a state, with what the KB predicts and knows about it.

    `expected_speedup` is the predicted speedup of a step that compiles and verifies; `survival_rate` the
    estimated chance that it does; `score` (log units) combines both with the exploration bonus.
    """

    model_config = ConfigDict(frozen=True)

    technique: str
    category: Category
    description: str
    prior_speedup: float
    expected_speedup: float
    survival_rate: float
    score: float
    first_pick_probability: float
    stats: OutcomeStats
    lessons: list[str]
    snippet: str | None = None


@dataclass(frozen=True)
class _Scored:
    optimization: Optimization
    log_gain_if_valid: float
    survival_rate: float
    score: float


def select_optimizations(
    state: PerformanceState,
    k: int,
    *,
    rng_seed: int,
    techniques: Mapping[str, Technique],
    precision: str,
    transitions: Collection[Transition] = (),
    previous_technique: str | None = None,
    exclude: Collection[str] = (),
    operations: Collection[OperationKind] | None = None,
    policy: SelectionPolicy = DEFAULT_POLICY,
) -> list[SelectedOptimization]:
    """Up to k distinct, non-deprecated optimizations of `state` valid under the precision policy `precision`
    and applicable to a problem performing `operations` (the kinds of `kb.operations`; None when not known),
    best-weighted first in draw order; ValueError for an unknown policy name."""
    if k < 0:
        raise ValueError(f"k must not be negative, got {k}")
    policy_name = check_precision_policy(precision)
    candidates = [
        opt for opt in state.optimizations
        if opt.deprecated is None and opt.technique not in exclude
        and techniques[opt.technique].valid_under(policy_name)
        and techniques[opt.technique].applies_to_problem(operations)
    ]
    followers = {t.after: t.stats for t in transitions if t.before == previous_technique}
    scored = [_score(opt, followers.get(opt.technique), policy) for opt in candidates]
    if not scored:
        return []
    first_pick = _first_pick_probabilities([item.score for item in scored], policy.temperature)
    order = _draw_order(scored, k, random.Random(rng_seed), policy.temperature)
    return [_selected(scored[i], first_pick[i], techniques) for i in order]


def _score(optimization: Optimization, after_previous: OutcomeStats | None, policy: SelectionPolicy) -> _Scored:
    stats = optimization.stats
    log_gain = _blend(math.log(optimization.prior_speedup), stats)
    if after_previous is not None:
        # Evidence for this technique right after the previous one refines the state-level estimate.
        log_gain = _blend(log_gain, after_previous)
    survival = (stats.measured + policy.survive_pseudo) / (stats.attempts + policy.survive_pseudo + policy.fail_pseudo)
    expected = survival * log_gain - (1.0 - survival) * policy.failure_cost
    bonus = policy.exploration / math.sqrt(1.0 + stats.attempts)
    return _Scored(optimization, log_gain, survival, expected + bonus)


def _blend(prior_log_gain: float, stats: OutcomeStats) -> float:
    if stats.geomean_speedup is None:
        return prior_log_gain
    return (1.0 - stats.confidence) * prior_log_gain + stats.confidence * math.log(stats.geomean_speedup)


def _draw_order(scored: list[_Scored], k: int, rng: random.Random, temperature: float) -> list[int]:
    if temperature == 0:
        keys = [item.score for item in scored]
    else:
        # Adding Gumbel noise and keeping the top k samples k without replacement ∝ exp(score / T).
        keys = [item.score / temperature + _gumbel(rng) for item in scored]
    ranked = sorted(range(len(scored)), key=lambda i: (-keys[i], scored[i].optimization.technique))
    return ranked[:k]


def _gumbel(rng: random.Random) -> float:
    # -log of an Exp(1) draw is Gumbel; the floor only guards the 2**-53 chance of drawing exactly 0.
    return -math.log(max(rng.expovariate(1.0), sys.float_info.min))


def _first_pick_probabilities(scores: list[float], temperature: float) -> list[float]:
    if temperature == 0:
        best = max(scores)
        winners = scores.count(best)
        return [1.0 / winners if score == best else 0.0 for score in scores]
    top = max(scores)
    weights = [math.exp((score - top) / temperature) for score in scores]
    total = sum(weights)
    return [weight / total for weight in weights]


def _selected(item: _Scored, first_pick: float, techniques: Mapping[str, Technique]) -> SelectedOptimization:
    optimization = item.optimization
    technique = techniques[optimization.technique]
    return SelectedOptimization(
        technique=optimization.technique,
        category=technique.category,
        description=technique.description,
        prior_speedup=optimization.prior_speedup,
        expected_speedup=round(math.exp(item.log_gain_if_valid), 4),
        survival_rate=round(item.survival_rate, 4),
        score=round(item.score, 4),
        first_pick_probability=round(first_pick, 4),
        stats=optimization.stats,
        lessons=list(optimization.lessons),
        snippet=technique.snippet,
    )
