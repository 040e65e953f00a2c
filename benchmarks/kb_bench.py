"""Benchmark the knowledge base at 10,000 states: load, save, index build, and retrieval + selection latency.

Run: `python benchmarks/kb_bench.py [--states N] [--queries N]`. Targets (issue 3): retrieval plus
selection at most 20 ms per query; load and save at most 500 ms each.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kernelblaster.kb.edits import AddLesson, AddState
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.schema import Optimization, OutcomeStats, OutcomeStatus, PerformanceState
from kernelblaster.kb.signature_fields import SIGNATURE_LENGTH
from kernelblaster.kb.store import KnowledgeBase

OPTIMIZATIONS_PER_STATE = 8
ARCHES = ("sm_80", "sm_90", "sm_100")


@dataclass(frozen=True)
class Timing:
    """Seconds taken by repeated runs of one operation."""

    samples: list[float]

    def line(self, name: str) -> str:
        ordered = sorted(self.samples)
        quartiles = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return (
            f"{name:<28} median {1000 * statistics.median(ordered):8.2f} ms   "
            f"IQR {1000 * (quartiles[2] - quartiles[0]):7.2f} ms   p99 {1000 * p99:8.2f} ms   "
            f"min {1000 * ordered[0]:8.2f} ms   (n={len(ordered)})"
        )


def timed(operation: Callable[[], object], repeats: int) -> Timing:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = operation()
        samples.append(time.perf_counter() - start)
        # Freed only after the clock stops: dropping the previous KB is not part of loading the next one.
        del result
    return Timing(samples)


def random_signature(rng: random.Random) -> list[float]:
    return [round(rng.random(), 4) for _ in range(SIGNATURE_LENGTH)]


def random_stats(rng: random.Random, tried_fraction: float) -> OutcomeStats:
    stats = OutcomeStats()
    if rng.random() >= tried_fraction:
        return stats
    for _ in range(rng.randrange(1, 6)):
        status = rng.choice(list(OutcomeStatus))
        speedup = rng.uniform(0.6, 2.5) if status is OutcomeStatus.MEASURED else None
        stats = stats.with_outcome(status, speedup, datetime.now(UTC).replace(microsecond=0))
    return stats


def grow_kb(kb: KnowledgeBase, states: int, tried_fraction: float, rng: random.Random) -> None:
    """Add `states` learned-looking states, each offering a random subset of the catalogue's techniques,
    `tried_fraction` of them with recorded outcomes."""
    techniques = sorted(kb.document.techniques)
    for number in range(states):
        chosen = rng.sample(techniques, OPTIMIZATIONS_PER_STATE)
        kb.document.states[f"learned-{number}"] = PerformanceState(
            id=f"learned-{number}",
            name=f"Learned state {number}",
            primary_bottleneck="synthetic benchmark bottleneck",
            description="A synthetic state generated for the KB benchmark.",
            signature=random_signature(rng),
            arches=[rng.choice(ARCHES)],
            optimizations=[
                Optimization(
                    technique=name,
                    prior_speedup=round(rng.uniform(1.0, 2.0), 2),
                    stats=random_stats(rng, tried_fraction),
                )
                for name in chosen
            ],
        )


def simulate_level(kb: KnowledgeBase, rng: random.Random) -> None:
    """A level's worth of learning: 100 problems x 3 iterations x 4 trajectories x 3 steps of outcomes,
    picked by the real selection from a home state (30% of steps drift to another), 20 new states and 80
    lessons written by the learning step."""
    seed_states = list(kb.document.states.values())
    kb.apply_edits([AddState(state=learned_state(n, rng.choice(seed_states), rng)) for n in range(20)])
    states = list(kb.document.states.values())
    for problem in range(100):
        home = rng.choice(states)
        kb.record_outcomes(
            [event for trajectory in range(12) for event in rollout(problem, trajectory, home, states, kb, rng)]
        )
    lesson = "only paid off once the loads were already coalesced and the tile fit in shared memory."
    kb.apply_edits(
        [
            AddLesson(
                state_id=state.id, technique=rng.choice(state.optimizations).technique, lesson=f"Lesson {n}: {lesson}"
            )
            for n, state in enumerate(rng.choices(states, k=80))
        ]
    )


def learned_state(number: int, like: PerformanceState, rng: random.Random) -> PerformanceState:
    return like.model_copy(
        update={
            "id": f"learned_{number}",
            "arches": ["sm_90"],
            "signature": [min(1.0, value + rng.uniform(0, 0.1)) for value in like.signature],
            "optimizations": [
                Optimization(technique=o.technique, prior_speedup=o.prior_speedup) for o in like.optimizations[:8]
            ],
        }
    )


def rollout(
    problem: int,
    trajectory: int,
    home: PerformanceState,
    states: list[PerformanceState],
    kb: KnowledgeBase,
    rng: random.Random,
) -> list[OutcomeEvent]:
    events, previous, state = [], None, home
    for step in range(3):
        state = rng.choice(states) if rng.random() < 0.3 else state
        [choice] = kb.select_optimizations(state, 1, rng_seed=rng.randrange(1 << 30), precision="strict",
                                           previous_technique=previous)
        status = rng.choice(
            [OutcomeStatus.MEASURED] * 3
            + [OutcomeStatus.COMPILE_FAILED, OutcomeStatus.VERIFY_FAILED, OutcomeStatus.SUSPICIOUS]
        )
        events.append(
            OutcomeEvent(
                event_id=EventId(
                    run_id=f"level-problem-{problem:03d}",
                    iteration=trajectory // 4,
                    trajectory=trajectory % 4,
                    step=step,
                ),
                state_id=state.id,
                technique=choice.technique,
                status=status,
                speedup=rng.uniform(0.7, 2.0) if status is OutcomeStatus.MEASURED else None,
                previous_technique=previous,
            )
        )
        previous = choice.technique
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--tried-fraction",
        type=float,
        default=0.25,
        help="share of optimizations with recorded outcomes (a learned state is tried on a few techniques)",
    )
    args = parser.parse_args()
    rng = random.Random(0)

    with tempfile.TemporaryDirectory() as directory:
        level_kb = KnowledgeBase.load(Path(directory) / "level.json")
        seed_size = level_kb.size_bytes()
        simulate_level(level_kb, rng)
        print(
            f"seed KB {seed_size / 1e3:.1f} kB; after a simulated level of learning "
            f"{level_kb.size_bytes() / 1e3:.1f} kB"
        )

        path = Path(directory) / "kb.json"
        kb = KnowledgeBase.load(path)
        grow_kb(kb, args.states, args.tried_fraction, rng)
        kb.save()
        print(
            f"KB: {len(kb.document.states)} states x {OPTIMIZATIONS_PER_STATE} optimizations, "
            f"{args.tried_fraction:.0%} tried; {path.stat().st_size / 1e6:.1f} MB on disk"
        )

        print(timed(lambda: KnowledgeBase.load(path), 7).line("load"))
        print(timed(kb.save, 7).line("save"))
        print(timed(lambda: kb.nearest_states(random_signature(rng), "sm_90", 1), 1).line("index build (first query)"))

        def retrieve_and_select() -> None:
            [best, *_] = kb.nearest_states(random_signature(rng), rng.choice(ARCHES), 3)
            kb.select_optimizations(best.state, 4, rng_seed=rng.randrange(1 << 30), precision="strict")

        timed(retrieve_and_select, args.warmup)
        print(timed(retrieve_and_select, args.queries).line("retrieval + selection"))
        print(timed(lambda: kb.nearest_states(random_signature(rng), "sm_90", 3), args.queries).line("retrieval only"))


if __name__ == "__main__":
    main()
