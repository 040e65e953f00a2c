"""The report's plots, drawn with matplotlib (no display needed) as figures that `png` turns into PNG bytes.

Each plot takes the suites it compares as `Series` (a label and its rows); the numbers plotted come from
`eval.metrics`, the same functions the report's tables use. A plot with nothing to show is None, so the
report can say why instead of showing an empty frame. Every line and bar has a legend entry in its own
colour and, for lines, its own marker and dash (suites whose curves coincide stay visible and say so);
legends sit outside the data; problem names read horizontally; figures are saved with nothing cut off.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend is chosen
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kernelblaster.eval.metrics import Baseline, by_level, fast_p_curve, speedups, summarise
from kernelblaster.eval.results import KBVersionRow, ProblemRow

MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DASHES = ("-", "--", ":", "-.")
MARK_EVERY = 6  # fast_p has 61 points (p from 0 to 3 by 0.05): a marker every 0.3, shifted per suite
WIDTH_IN = 8.0
ROW_IN = 0.24  # height per problem in the per-problem bar charts, inches


@dataclass(frozen=True)
class Series:
    label: str
    rows: Sequence[ProblemRow]


def fast_p_plot(series: Sequence[Series]) -> Figure:
    figure, axes = plt.subplots(1, 2, figsize=(WIDTH_IN + 2, 4), sharey=True)
    panels: tuple[tuple[Baseline, str], ...] = (("eager", "against PyTorch eager"),
                                                ("compile", "against torch.compile"))
    for axis, (against, title) in zip(axes, panels, strict=True):
        drawn: list[tuple[list[tuple[float, float]], str]] = []
        for index, one in enumerate(series):
            curve = fast_p_curve(one.rows, against)
            same = next((label for earlier, label in drawn if earlier == curve), None)
            drawn.append((curve, one.label))
            # The later of two coinciding curves is drawn thinner on top, its markers between the other's.
            axis.step([p for p, _ in curve], [v for _, v in curve], where="post", color=_colour(index),
                      linestyle=DASHES[index % len(DASHES)], linewidth=2.2 if same is None else 1.4,
                      marker=MARKERS[index % len(MARKERS)], markersize=5,
                      markevery=(index * 2 % MARK_EVERY, MARK_EVERY),
                      label=one.label + (f" (same curve as {same})" if same else ""))
        axis.set(title=f"fast_p {title}", xlabel="p (speedup threshold)", xlim=(0, 3), ylim=(0, 1.02))
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("share of problems correct and faster than p")
    _legend_below(figure, axes[0])
    return figure


def geomean_by_level_plot(series: Sequence[Series]) -> Figure:
    return _bars_by_level(series, lambda group: summarise(group, "baseline").geomean or 0.0,
                          "Geometric-mean speedup over the faster PyTorch baseline", "speedup", baseline=1.0)


def speedup_distribution_plot(series: Sequence[Series]) -> Figure | None:
    """Histogram of the valid kernels' speedups, the suites' bars side by side in shared bins (overlaid
    translucent bars would mix into colours no legend shows); None when no suite has a valid kernel."""
    present = [(index, one, speedups(one.rows, "baseline")) for index, one in enumerate(series)]
    present = [(index, one, values) for index, one, values in present if values]
    if not present:
        return None
    figure, axis = plt.subplots(figsize=(WIDTH_IN, 4))
    axis.hist([values for _, _, values in present], bins=min(20, max(5, max(len(v) for _, _, v in present))),
              color=[_colour(index) for index, _, _ in present],
              label=[f"{one.label} ({len(values)} valid)" for _, one, values in present])
    axis.axvline(1.0, color="black", linewidth=0.8, label="speedup 1 (as fast as PyTorch)")
    axis.set(title="Speedups of the best kernels over the faster PyTorch baseline", xlabel="speedup",
             ylabel="problems")
    axis.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_below(figure, axis)
    return figure


def valid_rate_plot(series: Sequence[Series]) -> Figure:
    return _bars_by_level(series, lambda group: summarise(group, "baseline").valid_rate or 0.0,
                          "Share of problems with a valid kernel", "valid rate", top=1.02)


def _bars_by_level(series: Sequence[Series], value_of: Callable[[list[ProblemRow]], float], title: str,
                   ylabel: str, baseline: float | None = None, top: float | None = None) -> Figure:
    """One group of bars per level, one bar per suite."""
    figure, axis = plt.subplots(figsize=(WIDTH_IN, 4))
    levels = sorted({level for one in series for level in by_level(one.rows)})
    width = 0.8 / max(len(series), 1)
    for index, one in enumerate(series):
        groups = by_level(one.rows)
        values = [value_of(groups.get(level, [])) for level in levels]
        axis.bar([i + index * width for i in range(len(levels))], values, width, label=one.label,
                 color=_colour(index))
    if baseline is not None:
        axis.axhline(baseline, color="black", linewidth=0.8, label=f"{ylabel} {baseline:g}")
    axis.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(levels))], levels)
    axis.set(title=title, ylabel=ylabel, ylim=(0, top) if top else None)
    _legend_below(figure, axis)
    return figure


def tokens_plot(rows: Sequence[ProblemRow], costs: dict[int, float] | None) -> Figure | None:
    """Tokens of each finished problem, stacked by role, one horizontal bar per problem (its name reads
    level, never cut); with prices, each bar's cost written beside it. None when no problem has finished."""
    finished = [(row, row.result.tokens) for row in rows if row.result is not None]
    if not finished:
        return None
    figure, axis = plt.subplots(figsize=(WIDTH_IN, 1.6 + ROW_IN * len(finished)))
    roles = list(dict.fromkeys(t.role for _, tokens in finished for t in tokens))
    left = [0.0] * len(finished)
    for index, role in enumerate(roles):
        widths = [float(sum(t.total for t in tokens if t.role == role)) for _, tokens in finished]
        axis.barh(range(len(finished)), widths, left=left, label=role, color=_colour(index))
        left = [b + w for b, w in zip(left, widths, strict=True)]
    if costs:
        for place, ((row, _), end) in enumerate(zip(finished, left, strict=True)):
            if row.position in costs:
                axis.annotate(f" {costs[row.position]:.2f} USD", (end, place), va="center", fontsize=7)
        axis.margins(x=0.15)  # room for the cost written after the longest bar
    _problem_axis(axis, [row.problem_id for row, _ in finished])
    axis.set(title="Tokens per problem, by role" + (" (cost at the suite's prices beside each)" if costs else ""),
             xlabel="tokens")
    _legend_below(figure, axis)
    return figure


def kb_growth_plot(versions: Sequence[KBVersionRow]) -> Figure:
    figure, axis = plt.subplots(figsize=(WIDTH_IN, 4))
    numbers = [version.version for version in versions]
    for index, (label, values) in enumerate((("states", [v.states for v in versions]),
                                             ("optimizations", [v.optimizations for v in versions]),
                                             ("measured outcomes", [v.measured for v in versions]))):
        axis.plot(numbers, values, marker=MARKERS[index], linestyle=DASHES[index % len(DASHES)],
                  color=_colour(index), label=label)
    size_axis = axis.twinx()
    size_axis.plot(numbers, [v.bytes / 1000 for v in versions], color="black", linestyle="--",
                   label="size (kB, right axis)")
    size_axis.set_ylabel("size (kB)")
    axis.set(title="The suite's KB after each problem", xlabel="problems learned from", ylabel="count")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_below(figure, axis, size_axis)
    return figure


def roofline_plot(rows: Sequence[ProblemRow]) -> Figure | None:
    """The best kernels' fraction of the roofline floor, one horizontal bar per problem that has one; None
    when none has."""
    measured = [(row.problem_id, row.result.roofline_fraction) for row in rows
                if row.result is not None and row.result.roofline_fraction is not None]
    if not measured:
        return None
    figure, axis = plt.subplots(figsize=(WIDTH_IN, 1.6 + ROW_IN * len(measured)))
    axis.barh(range(len(measured)), [fraction for _, fraction in measured], color=_colour(0))
    _problem_axis(axis, [name for name, _ in measured])
    axis.set(title="Best kernels: roofline floor / measured time (1 = at the floor)", xlabel="fraction of the floor",
             xlim=(0, 1.02))
    return figure


def _colour(index: int) -> str:
    return f"C{index % 10}"


def _problem_axis(axis: Axes, names: Sequence[str]) -> None:
    """Problem names down the side, first at the top."""
    axis.set_yticks(range(len(names)), names, fontsize=7)
    axis.set_ylim(len(names) - 0.5, -0.5)


def _legend_below(figure: Figure, axis: Axes, *others: Axes) -> None:
    """One legend under the plot for the lines and bars of `axis` and any twin axes, so it covers no data and
    every artist drawn in a colour is named."""
    handles, labels = axis.get_legend_handles_labels()
    for other in others:
        more_handles, more_labels = other.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    if handles:
        columns = min(3, len(handles))
        figure.legend(handles, labels, loc="lower center", ncol=columns, fontsize=8, frameon=False,
                      bbox_to_anchor=(0.5, 0.0))
        legend_in = 0.15 + 0.22 * -(-len(handles) // columns)  # its rows of text, in inches
        figure.tight_layout(rect=(0, legend_in / figure.get_figheight(), 1, 1))
    else:
        figure.tight_layout()


def png(figure: Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    # bbox_inches="tight": long tick labels and the legend widen the saved image rather than being cut off.
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(figure)
    return buffer.getvalue()
