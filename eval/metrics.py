"""The paper's metrics over a suite's results: valid rate, geometric mean (and mean, median, min, max) of
speedups, the share faster than the baseline, fast_p, per level and against eager, compile, the faster of
the two, and the initial CUDA.

Protocol (the paper's): a problem counts as valid when a correct kernel was found; speedup statistics are
over valid problems; fast_p is over all problems of the suite (a problem without a valid kernel is never
fast), as KernelBench defines it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from kernelblaster.eval.results import ProblemRow

Baseline = Literal["baseline", "eager", "compile", "initial"]
BASELINE_FIELDS: dict[Baseline, str] = {"baseline": "vs_baseline", "eager": "vs_eager", "compile": "vs_compile",
                                        "initial": "vs_initial"}
FAST_P_POINTS = tuple(round(0.05 * step, 2) for step in range(61))  # p from 0 to 3


class SpeedupSummary(BaseModel):
    """Statistics of one group of problems against one baseline."""

    problems: int
    valid: int
    valid_rate: float | None
    geomean: float | None
    mean: float | None
    median: float | None
    minimum: float | None
    maximum: float | None
    faster_share: float | None


def speedups(rows: Sequence[ProblemRow], against: Baseline) -> list[float]:
    """The speedups of the problems with a valid kernel, in suite order."""
    field = BASELINE_FIELDS[against]
    values = [getattr(row.result, field) for row in rows if row.result and row.result.verdict == "ok"]
    return [value for value in values if value is not None]


def summarise(rows: Sequence[ProblemRow], against: Baseline) -> SpeedupSummary:
    finished = [row for row in rows if row.result is not None]
    values = speedups(finished, against)
    valid = sum(1 for row in finished if row.result and row.result.verdict == "ok")
    return SpeedupSummary(
        problems=len(finished), valid=valid, valid_rate=valid / len(finished) if finished else None,
        geomean=geomean(values), mean=statistics.fmean(values) if values else None,
        median=statistics.median(values) if values else None, minimum=min(values, default=None),
        maximum=max(values, default=None),
        faster_share=sum(1 for v in values if v > 1.0) / len(values) if values else None,
    )


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def fast_p(rows: Sequence[ProblemRow], against: Baseline, p: float) -> float | None:
    """The share of finished problems with a correct kernel more than p times faster than `against`."""
    finished = [row for row in rows if row.result is not None]
    if not finished:
        return None
    return sum(1 for value in speedups(finished, against) if value > p) / len(finished)


def fast_p_curve(rows: Sequence[ProblemRow], against: Baseline) -> list[tuple[float, float]]:
    curve = [(p, fast_p(rows, against, p)) for p in FAST_P_POINTS]
    return [(p, value) for p, value in curve if value is not None]


def by_level(rows: Sequence[ProblemRow]) -> dict[str, list[ProblemRow]]:
    """Rows grouped by level (`level 1` ...; `other` for problems outside a level), in level order."""
    groups: dict[str, list[ProblemRow]] = {}
    for row in sorted(rows, key=lambda r: (r.level is None, r.level or 0, r.position)):
        groups.setdefault(f"level {row.level}" if row.level is not None else "other", []).append(row)
    return groups
