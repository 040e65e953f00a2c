"""Benchmark the knowledge base as a KernelBench suite grows it, and at 10,000 states.

Run: `python benchmarks/kb_bench.py [--problems 250] [--iterations 10 --trajectories 8 --depth 4]
[--repeats 15] [--stress-states 10000]`. The suite part simulates what `bench run` over all three levels
does to one KB: per problem, iterations x trajectories x depth rollout steps whose optimizations the real
selection picks (outcomes written once per iteration; the graph writes once per step), discovered states,
and each iteration's learning update (lessons, priors, deprecations, merges; pruning follows each one)
and KB snapshot (kept compressed and bounded, `kb.snapshots`).
It then times load, save, and retrieval + selection on the grown KB, and replays an early run to check
that nothing counts twice. Targets: load under 0.5 s after 250 problems (issue 11); at 10,000 states,
load and save at most 0.5 s and retrieval + selection at most 20 ms (issue 3).

Times are wall-clock medians with their spread over repeats; the CPU time of the same repeats is printed
beside them, since on a shared machine other processes stretch wall-clock time but not CPU time.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kernelblaster.kb.edits import AddLesson, AddOptimization, AddState, Deprecate, KBEdit, MergeStates, SetPrior
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.paths import snapshot_folder_for
from kernelblaster.kb.schema import Category, Optimization, OutcomeStats, OutcomeStatus, PerformanceState
from kernelblaster.kb.signature_fields import SIGNATURE_LENGTH
from kernelblaster.kb.store import KnowledgeBase

ARCHES = ("sm_80", "sm_90", "sm_100")
STRESS_OPTIMIZATIONS_PER_STATE = 8
# How a rollout step ends, as weights: most steps measure, about a third fail to compile or verify, a few
# crash, look suspicious, or write no code (no outcome event, a gap in the run's step bitmask).
STEP_ENDINGS = {
    OutcomeStatus.MEASURED: 55,
    OutcomeStatus.COMPILE_FAILED: 18,
    OutcomeStatus.VERIFY_FAILED: 14,
    OutcomeStatus.CRASHED: 3,
    OutcomeStatus.SUSPICIOUS: 2,
    None: 8,
}
LESSON = "paid off only once loads were coalesced and the tile fit in shared memory at the chosen occupancy."


@dataclass(frozen=True)
class SuiteShape:
    """The simulated suite: problems, the search shape of each run, and how often the KB learns structure."""

    problems: int
    iterations: int
    trajectories: int
    depth: int
    discovery_rate: float = 0.35
    new_technique_rate: float = 0.1
    drift_rate: float = 0.3
    merge_rate: float = 0.03
    retire_state_rate: float = 0.01


@dataclass
class SuiteRecord:
    """What the simulation did to the KB."""

    events: int = 0
    discovered: int = 0
    edits_applied: int = 0
    snapshot_bytes: int = 0
    runs: list[list[OutcomeEvent]] = field(default_factory=list)


@dataclass(frozen=True)
class Timing:
    """Wall-clock and CPU seconds of repeated runs of one operation."""

    wall: list[float]
    cpu: list[float]

    def line(self, name: str) -> str:
        quartiles = statistics.quantiles(self.wall, n=4) if len(self.wall) > 1 else [self.wall[0]] * 3
        return (
            f"{name:<26} median {_ms(statistics.median(self.wall))}  IQR {_ms(quartiles[2] - quartiles[0])}  "
            f"min {_ms(min(self.wall))}  max {_ms(max(self.wall))}  "
            f"(CPU median {_ms(statistics.median(self.cpu))}; n={len(self.wall)})"
        )


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:8.2f} ms"


def timed(operation: Callable[[], object], repeats: int) -> Timing:
    wall, cpu = [], []
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        result = operation()
        cpu.append(time.process_time() - cpu_start)
        wall.append(time.perf_counter() - wall_start)
        # Freed only after the clock stops: dropping the previous KB is not part of loading the next one.
        del result
    return Timing(wall, cpu)


def random_signature(rng: random.Random) -> list[float]:
    return [round(rng.random(), 4) for _ in range(SIGNATURE_LENGTH)]


def live_states(kb: KnowledgeBase) -> list[PerformanceState]:
    return [state for state in kb.document.states.values() if state.deprecated is None]


def simulate_suite(kb: KnowledgeBase, shape: SuiteShape, rng: random.Random) -> SuiteRecord:
    record = SuiteRecord()
    for problem in range(shape.problems):
        home = discover_state(kb, problem, shape, rng, record) if rng.random() < shape.discovery_rate else None
        run_events = simulate_run(kb, f"suite-problem-{problem:03d}", home, shape, rng, record)
        record.runs.append(run_events)
        record.events += len(run_events)
        if rng.random() < shape.merge_rate:
            record.edits_applied += applied(kb, merge_two_discovered(kb, rng))
        if rng.random() < shape.retire_state_rate:
            record.edits_applied += applied(kb, retire_a_state(kb, rng))
    return record


def applied(kb: KnowledgeBase, edits: list[KBEdit]) -> int:
    return sum(result.applied for result in kb.apply_edits(edits)) if edits else 0


def discover_state(
    kb: KnowledgeBase, problem: int, shape: SuiteShape, rng: random.Random, record: SuiteRecord
) -> PerformanceState:
    """What match_state does when the matcher names a new state: near a known one, 6-10 techniques."""
    like = rng.choice(live_states(kb))
    techniques = rng.sample(sorted(kb.document.techniques), rng.randint(6, 10))
    state = PerformanceState(
        id=f"discovered_{problem:03d}",
        name=f"{like.name}, variant {problem}",
        primary_bottleneck=like.primary_bottleneck,
        secondary=like.secondary[:3],
        description=f"{like.description[:300]} Seen on problem {problem}.",
        signature=[min(1.0, value + rng.uniform(0.0, 0.15)) for value in like.signature],
        arches=[rng.choice(ARCHES)],
        optimizations=[
            Optimization(technique=name, prior_speedup=round(rng.uniform(1.05, 2.0), 2)) for name in techniques
        ],
    )
    edits: list[KBEdit] = [AddState(state=state)]
    if rng.random() < shape.new_technique_rate:
        edits.append(
            AddOptimization(
                state_id=state.id,
                technique=f"invented_technique_{problem:03d}",
                prior_speedup=1.3,
                category=rng.choice(list(Category)),
                description="A technique the state matcher proposed for this problem, new to the catalogue.",
            )
        )
    record.discovered += 1
    record.edits_applied += applied(kb, edits)
    return kb.document.states[state.id]


def simulate_run(
    kb: KnowledgeBase,
    run_id: str,
    home: PerformanceState | None,
    shape: SuiteShape,
    rng: random.Random,
    record: SuiteRecord,
) -> list[OutcomeEvent]:
    home = home or rng.choice(live_states(kb))
    run_events = []
    for iteration in range(shape.iterations):
        events = [
            event
            for trajectory in range(shape.trajectories)
            for event in rollout(kb, EventId(run_id=run_id, iteration=iteration, trajectory=trajectory, step=0),
                                 home, shape, rng)
        ]
        kb.record_outcomes(events)
        run_events += events
        touched = [state for state_id in {e.state_id for e in events} if (state := kb.document.resolve_state(state_id))]
        record.edits_applied += applied(kb, learning_update(run_id, iteration, touched, rng))
        kb.write_snapshot(run_id, iteration)
        record.snapshot_bytes += kb.size_bytes()
    return run_events


def rollout(
    kb: KnowledgeBase, first: EventId, home: PerformanceState, shape: SuiteShape, rng: random.Random
) -> list[OutcomeEvent]:
    events: list[OutcomeEvent] = []
    previous, state = None, home
    for step in range(shape.depth):
        if rng.random() < shape.drift_rate:
            state = rng.choice(live_states(kb))
        state = kb.document.resolve_state(state.id) or rng.choice(live_states(kb))
        choices = kb.select_optimizations(
            state, 1, rng_seed=rng.randrange(1 << 30), precision="strict", previous_technique=previous
        )
        [status] = rng.choices(list(STEP_ENDINGS), weights=list(STEP_ENDINGS.values()))
        if not choices or status is None:
            continue
        technique = choices[0].technique
        speedup = min(5.0, max(0.3, math.exp(rng.gauss(0.04, 0.25)))) if status is OutcomeStatus.MEASURED else None
        events.append(
            OutcomeEvent(
                event_id=first.model_copy(update={"step": step}),
                state_id=state.id,
                technique=technique,
                status=status,
                speedup=speedup,
                previous_technique=previous,
            )
        )
        previous = technique
    return events


def learning_update(run_id: str, iteration: int, touched: list[PerformanceState], rng: random.Random) -> list[KBEdit]:
    """A ParameterUpdate answer: two lessons, a prior moved toward the evidence, sometimes a retirement."""
    tried = [(state, opt) for state in touched for opt in state.optimizations if opt.stats.attempts]
    if not tried:
        return []
    edits: list[KBEdit] = [
        AddLesson(state_id=state.id, technique=opt.technique, lesson=f"{run_id} i{iteration}: {opt.technique} {LESSON}")
        for state, opt in rng.sample(tried, min(2, len(tried)))
    ]
    state, opt = rng.choice(tried)
    if opt.stats.geomean_speedup is not None:
        prior = min(10.0, max(0.05, round((opt.prior_speedup + opt.stats.geomean_speedup) / 2, 2)))
        edits.append(SetPrior(state_id=state.id, technique=opt.technique, prior_speedup=prior))
    failing = [(s, o) for s, o in tried if o.deprecated is None and o.stats.attempts >= 4 and not o.stats.wins]
    if failing and rng.random() < 0.5:
        state, opt = rng.choice(failing)
        edits.append(Deprecate(state_id=state.id, technique=opt.technique, reason="fails here every time it is tried"))
    return edits


def merge_two_discovered(kb: KnowledgeBase, rng: random.Random) -> list[KBEdit]:
    discovered = [state.id for state in live_states(kb) if state.id.startswith("discovered_")]
    if len(discovered) < 2:
        return []
    keep, merge = rng.sample(discovered, 2)
    return [MergeStates(keep=keep, merge=merge)]


def retire_a_state(kb: KnowledgeBase, rng: random.Random) -> list[KBEdit]:
    discovered = [state.id for state in live_states(kb) if state.id.startswith("discovered_")]
    if not discovered:
        return []
    return [Deprecate(state_id=rng.choice(discovered), reason="a profile artefact, not a real state")]


def replayed_counts(kb: KnowledgeBase, events: list[OutcomeEvent]) -> int:
    """Apply a finished run's events again (a resume of an old run); how many counted a second time."""
    return sum(kb.record_outcomes(events))


def report_suite(kb: KnowledgeBase, shape: SuiteShape, record: SuiteRecord, seed_bytes: int) -> None:
    document = kb.document
    optimizations = [opt for state in document.states.values() for opt in state.optimizations]
    tried = sum(1 for opt in optimizations if opt.stats.attempts)
    pruned = document.pruned
    print(
        f"suite: {shape.problems} problems x {shape.iterations} iterations x {shape.trajectories} trajectories x "
        f"{shape.depth} steps; {record.events} outcome events, {record.discovered} states discovered, "
        f"{record.edits_applied} learning edits applied"
    )
    print(
        f"KB: {len(document.states)} states, {len(optimizations)} optimizations ({tried} tried) of "
        f"{len(document.techniques)} techniques, {len(document.transitions)} transitions, "
        f"{len(document.applied_steps)} runs remembered; {kb.size_bytes() / 1e3:.1f} kB on disk "
        f"(seed {seed_bytes / 1e3:.1f} kB)"
    )
    print(
        f"pruned along the way: {pruned.optimizations} optimizations, {pruned.states} states, "
        f"{pruned.transitions} transitions"
    )
    kept = [path for path in snapshot_folder_for(kb.path).rglob("iteration-*") if path.is_file()]
    print(f"snapshots: {len(kept)} kept, {sum(path.stat().st_size for path in kept) / 1e6:.1f} MB on disk "
          f"(one uncompressed per iteration, if all were kept: {record.snapshot_bytes / 1e6:.1f} MB)")


def time_kb(kb: KnowledgeBase, repeats: int, queries: int, rng: random.Random) -> None:
    print(timed(lambda: KnowledgeBase.load(kb.path), repeats).line("load"))
    print(timed(lambda: kb.replace_document(kb.document), repeats).line("save"))
    print(timed(lambda: kb.nearest_states(random_signature(rng), "sm_90", 1), 1).line("index build (first query)"))

    def retrieve_and_select() -> None:
        [best, *_] = kb.nearest_states(random_signature(rng), rng.choice(ARCHES), 3)
        kb.select_optimizations(best.state, 4, rng_seed=rng.randrange(1 << 30), precision="strict")

    timed(retrieve_and_select, min(50, queries))
    print(timed(retrieve_and_select, queries).line("retrieval + selection"))


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
                for name in rng.sample(techniques, STRESS_OPTIMIZATIONS_PER_STATE)
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=250, help="KernelBench problems in the suite (all levels: 250)")
    parser.add_argument("--iterations", type=int, default=10, help="learning iterations per problem (paper: 10)")
    parser.add_argument("--trajectories", type=int, default=8, help="trajectories per iteration (paper: about 8)")
    parser.add_argument("--depth", type=int, default=4, help="steps per trajectory (paper: 4-8)")
    parser.add_argument("--repeats", type=int, default=15, help="repeats of each load and save timing")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--stress-states", type=int, default=10_000, help="states of the stress KB (0: skip it)")
    parser.add_argument("--save-kb", type=Path, help="also write the suite's grown KB here, to read it")
    parser.add_argument(
        "--tried-fraction",
        type=float,
        default=1.0,
        help="share of the stress KB's optimizations with recorded outcomes (1.0: the worst case)",
    )
    args = parser.parse_args()
    rng = random.Random(0)
    shape = SuiteShape(args.problems, args.iterations, args.trajectories, args.depth)

    with tempfile.TemporaryDirectory() as directory:
        kb = KnowledgeBase.load(Path(directory) / "suite.json")
        seed_bytes = kb.size_bytes()
        started = time.perf_counter()
        record = simulate_suite(kb, shape, rng)
        report_suite(kb, shape, record, seed_bytes)
        print(f"simulated in {time.perf_counter() - started:.0f} s")
        if args.save_kb:
            args.save_kb.write_bytes(kb.path.read_bytes())
        counted = replayed_counts(kb, record.runs[0])
        print(f"replaying run 1 of {len(record.runs)} ({len(record.runs[0])} events): {counted} counted again")
        time_kb(kb, args.repeats, args.queries, rng)

        if args.stress_states:
            stress = KnowledgeBase.load(Path(directory) / "stress.json")
            grow_kb(stress, args.stress_states, args.tried_fraction, rng)
            stress.replace_document(stress.document)
            print(
                f"\nstress KB: {len(stress.document.states)} states x {STRESS_OPTIMIZATIONS_PER_STATE} optimizations, "
                f"{args.tried_fraction:.0%} tried; {stress.size_bytes() / 1e6:.1f} MB on disk"
            )
            time_kb(stress, args.repeats, args.queries, rng)


if __name__ == "__main__":
    main()
