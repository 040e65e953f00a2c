"""Summaries of a KB for people: overall counts, a one-line-per-state listing, one state in full."""

from __future__ import annotations

from pydantic import BaseModel

from kernelblaster.kb.prompt_slice import describe_evidence
from kernelblaster.kb.schema import KBDocument, PerformanceState, PruneLog, Technique


class KBStats(BaseModel):
    """The size and reach of a KB, as `kernelblaster kb stats` prints it."""

    path: str
    schema_version: int
    states: int
    optimizations: int
    techniques: int
    transitions: int
    attempts: int
    measured: int
    runs: int
    bytes: int
    arches: list[str]
    pruned: PruneLog


def kb_stats(document: KBDocument, path: str, size: int) -> KBStats:
    optimizations = [opt for state in document.states.values() for opt in state.optimizations]
    return KBStats(
        path=path,
        schema_version=document.schema_version,
        states=len(document.states),
        optimizations=len(optimizations),
        techniques=len(document.techniques),
        transitions=len(document.transitions),
        attempts=sum(opt.stats.attempts for opt in optimizations),
        measured=sum(opt.stats.measured for opt in optimizations),
        runs=len(document.applied_steps),
        bytes=size,
        arches=sorted({arch for state in document.states.values() for arch in state.arches}),
        pruned=document.pruned,
    )


def format_stats(stats: KBStats) -> str:
    return "\n".join(
        [
            f"KB {stats.path} (schema v{stats.schema_version}, {stats.bytes} bytes)",
            f"  {stats.states} states, {stats.optimizations} optimizations of {stats.techniques} techniques, "
            f"{stats.transitions} transitions",
            f"  {stats.attempts} attempts recorded, {stats.measured} measured, from {stats.runs} runs",
            f"  arches seen: {', '.join(stats.arches) or 'none yet'}",
            f"  pruned: {_describe_pruned(stats.pruned)}",
        ]
    )


def _describe_pruned(log: PruneLog) -> str:
    if log.last_pruned_at is None:
        return "nothing yet"
    counts = ", ".join(
        _counted(count, noun)
        for count, noun in ((log.optimizations, "optimization"), (log.states, "state"), (log.transitions, "transition"))
    )
    latest = f"; latest: {', '.join(log.recent[-5:])}" if log.recent else ""
    return f"{counts} so far (last {log.last_pruned_at:%Y-%m-%d %H:%M} UTC{latest})"


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def format_state_list(document: KBDocument) -> str:
    rows = [f"{'state':<32} {'opts':>4} {'tries':>5}  arches  name"]
    for state in document.states.values():
        attempts = sum(opt.stats.attempts for opt in state.optimizations)
        flag = " (deprecated)" if state.deprecated else ""
        arches = ",".join(state.arches) or "-"
        rows.append(f"{state.id:<32} {len(state.optimizations):>4} {attempts:>5}  {arches:<6}  {state.name}{flag}")
    return "\n".join(rows)


def format_state(document: KBDocument, state: PerformanceState) -> str:
    lines = [
        f"{state.name} [{state.id}]" + (f" (deprecated: {state.deprecated})" if state.deprecated else ""),
        f"  bottleneck: {state.primary_bottleneck}",
        f"  also: {', '.join(state.secondary) or '-'}",
        f"  arches: {', '.join(state.arches) or 'none yet'}",
        f"  {state.description}",
        "  optimizations:",
    ]
    for opt in sorted(state.optimizations, key=lambda o: -o.prior_speedup):
        technique = document.techniques[opt.technique]
        flag = f" (deprecated: {opt.deprecated})" if opt.deprecated else ""
        lines.append(
            f"    {opt.technique} ({technique.category}{_technique_notes(technique)}) prior {opt.prior_speedup:.2f}x; "
            f"{describe_evidence(opt.stats)}{flag}"
        )
        lines += [f"      lesson: {lesson}" for lesson in opt.lessons]
    return "\n".join(lines)


def _technique_notes(technique: Technique) -> str:
    """`; only under fp16`, `; for scan`, `; snippet tiled_sgemm`: what a person should know beside the
    category."""
    notes = []
    if technique.precision_policies is not None:
        notes.append(f"only under {', '.join(technique.precision_policies)}")
    if technique.applies_to is not None:
        notes.append(f"for {' or '.join(technique.applies_to)}")
    if technique.snippet is not None:
        notes.append(f"snippet {technique.snippet}")
    return "".join(f"; {note}" for note in notes)
