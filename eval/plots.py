"""The report's plots, drawn with matplotlib (no display needed) and returned as PNG bytes.

Each plot takes the suites it compares as `Series` (a label and its rows); the numbers plotted come from
`eval.metrics`, the same functions the report's tables use.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend is chosen
from matplotlib.figure import Figure

from kernelblaster.eval.metrics import Baseline, by_level, fast_p_curve, speedups, summarise
from kernelblaster.eval.results import KBVersionRow, ProblemRow


@dataclass(frozen=True)
class Series:
    label: str
    rows: Sequence[ProblemRow]


def fast_p_plot(series: Sequence[Series]) -> bytes:
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    panels: tuple[tuple[Baseline, str], ...] = (("eager", "against PyTorch eager"),
                                                ("compile", "against torch.compile"))
    for axis, (against, title) in zip(axes, panels, strict=True):
        for one in series:
            curve = fast_p_curve(one.rows, against)
            axis.step([p for p, _ in curve], [v for _, v in curve], where="post", label=one.label)
        axis.set(title=f"fast_p {title}", xlabel="p (speedup threshold)", xlim=(0, 3), ylim=(0, 1.02))
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("share of problems correct and faster than p")
    axes[0].legend()
    return _png(figure)


def geomean_by_level_plot(series: Sequence[Series]) -> bytes:
    return _bars_by_level(series, lambda group: summarise(group, "baseline").geomean or 0.0,
                          "Geometric-mean speedup over the faster PyTorch baseline", "speedup", baseline=1.0)


def speedup_distribution_plot(series: Sequence[Series]) -> bytes:
    figure, axis = plt.subplots(figsize=(7, 4))
    for one in series:
        values = speedups(one.rows, "baseline")
        if values:
            axis.hist(values, bins=20, alpha=0.6, label=f"{one.label} ({len(values)} valid)")
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set(title="Speedups of the best kernels over the faster PyTorch baseline", xlabel="speedup",
             ylabel="problems")
    axis.legend()
    return _png(figure)


def valid_rate_plot(series: Sequence[Series]) -> bytes:
    return _bars_by_level(series, lambda group: summarise(group, "baseline").valid_rate or 0.0,
                          "Share of problems with a valid kernel", "valid rate", top=1.02)


def _bars_by_level(series: Sequence[Series], value_of: Callable[[list[ProblemRow]], float], title: str,
                   ylabel: str, baseline: float | None = None, top: float | None = None) -> bytes:
    """One group of bars per level, one bar per suite."""
    figure, axis = plt.subplots(figsize=(7, 4))
    levels = sorted({level for one in series for level in by_level(one.rows)})
    width = 0.8 / max(len(series), 1)
    for index, one in enumerate(series):
        groups = by_level(one.rows)
        values = [value_of(groups.get(level, [])) for level in levels]
        axis.bar([i + index * width for i in range(len(levels))], values, width, label=one.label)
    if baseline is not None:
        axis.axhline(baseline, color="black", linewidth=0.8)
    axis.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(levels))], levels)
    axis.set(title=title, ylabel=ylabel, ylim=(0, top) if top else None)
    axis.legend()
    return _png(figure)


def tokens_plot(rows: Sequence[ProblemRow], costs: dict[int, float] | None) -> bytes:
    """Tokens of each problem, stacked by role; with prices, the cost on a second axis."""
    figure, axis = plt.subplots(figsize=(max(7, 0.35 * len(rows)), 4))
    finished = [(row, row.result.tokens) for row in rows if row.result is not None]
    roles = list(dict.fromkeys(t.role for _, tokens in finished for t in tokens))
    bottom = [0.0] * len(finished)
    for role in roles:
        heights = [float(sum(t.total for t in tokens if t.role == role)) for _, tokens in finished]
        axis.bar(range(len(finished)), heights, bottom=bottom, label=role)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axis.set_xticks(range(len(finished)), [row.problem_id for row, _ in finished], rotation=75, fontsize=7)
    axis.set(title="Tokens per problem, by role", ylabel="tokens")
    if costs:
        cost_axis = axis.twinx()
        cost_axis.plot(range(len(finished)), [costs.get(row.position, 0.0) for row, _ in finished], "k.",
                       label="cost (USD)")
        cost_axis.set_ylabel("cost (USD)")
    axis.legend(fontsize=7)
    return _png(figure)


def kb_growth_plot(versions: Sequence[KBVersionRow]) -> bytes:
    figure, axis = plt.subplots(figsize=(7, 4))
    numbers = [version.version for version in versions]
    axis.plot(numbers, [v.states for v in versions], marker="o", label="states")
    axis.plot(numbers, [v.optimizations for v in versions], marker="o", label="optimizations")
    axis.plot(numbers, [v.measured for v in versions], marker="o", label="measured outcomes")
    size_axis = axis.twinx()
    size_axis.plot(numbers, [v.bytes / 1000 for v in versions], "k--", label="size (kB)")
    size_axis.set_ylabel("size (kB)")
    axis.set(title="The suite's KB after each problem", xlabel="problems learned from", ylabel="count")
    axis.legend(loc="upper left")
    return _png(figure)


def roofline_plot(rows: Sequence[ProblemRow]) -> bytes:
    figure, axis = plt.subplots(figsize=(max(7, 0.35 * len(rows)), 4))
    measured = [row for row in rows if row.result and row.result.roofline_fraction is not None]
    axis.bar(range(len(measured)), [row.result.roofline_fraction or 0.0 for row in measured if row.result])
    axis.set_xticks(range(len(measured)), [row.problem_id for row in measured], rotation=75, fontsize=7)
    axis.set(title="Best kernels: roofline floor / measured time (1 = at the floor)", ylabel="fraction of the floor",
             ylim=(0, 1.02))
    return _png(figure)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()
