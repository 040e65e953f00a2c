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

from kb.schema import Optimization, OutcomeStats, OutcomeStatus, PerformanceState
from kb.signature_fields import SIGNATURE_LENGTH
from kb.store import KnowledgeBase

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
            kb.select_optimizations(best.state, 4, rng_seed=rng.randrange(1 << 30))

        timed(retrieve_and_select, args.warmup)
        print(timed(retrieve_and_select, args.queries).line("retrieval + selection"))
        print(timed(lambda: kb.nearest_states(random_signature(rng), "sm_90", 3), args.queries).line("retrieval only"))


if __name__ == "__main__":
    main()
