"""`kernelblaster bench report`: a suite's results as Markdown and as one self-contained HTML page (plots
embedded), with the published numbers beside them and, with `--compare`, an ablation table.

Every number comes from the results database through `eval.metrics` (costs: at the prices the suite ran
with); the report is a list of blocks
(headings, paragraphs, tables, images) rendered twice, so the Markdown and the HTML say the same.
"""

from __future__ import annotations

import base64
import html
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from kernelblaster.eval import plots
from kernelblaster.eval.metrics import BASELINE_FIELDS, Baseline, SpeedupSummary, by_level, fast_p, summarise
from kernelblaster.eval.published import OUR_PROTOCOL, PUBLISHED
from kernelblaster.eval.results import STOPPED_BY, KBVersionRow, ProblemResult, ProblemRow
from kernelblaster.eval.suite import Suite, SuiteEnding, open_suite
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import directory_problem

FAST_P_TABLE = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
AGAINST: dict[Baseline, str] = {"baseline": "faster of eager/compile", "eager": "eager", "compile": "torch.compile",
                                "initial": "initial CUDA"}


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Image:
    name: str
    title: str
    png: bytes


Block = Heading | Paragraph | Table | Image


@dataclass(frozen=True)
class SuiteData:
    """What one suite contributes to a report."""

    label: str
    suite: Suite
    rows: list[ProblemRow]
    versions: list[KBVersionRow]
    ending: SuiteEnding | None


def write_report(suite_dir: Path, compare: Sequence[Path], out: Path) -> list[Path]:
    """Write report.md, report.html and the plots' PNG files to `out`; the files written. An `out` that cannot
    be a folder is refused in one line, with nothing written."""
    problem = directory_problem(out)
    if problem is not None:
        raise UserFacingError(f"the report folder {out} {problem}")
    main = _load(suite_dir)
    others = [_load(path) for path in compare]
    blocks = build_report(main, others)
    try:
        return _write_files(blocks, out, f"KernelBlaster suite {suite_dir.name}")
    except OSError as error:  # directory_problem cannot foresee every refusal (/proc, a full disk)
        raise UserFacingError(f"cannot write the report to {out} ({error.strerror or error})") from None


def _write_files(blocks: Sequence[Block], out: Path, title: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for block in blocks:
        if isinstance(block, Image):
            (out / block.name).write_bytes(block.png)
            written.append(out / block.name)
    (out / "report.md").write_text(render_markdown(blocks))
    (out / "report.html").write_text(render_html(blocks, title))
    return [out / "report.md", out / "report.html", *written]


def build_report(main: SuiteData, others: Sequence[SuiteData]) -> list[Block]:
    everyone = [main, *others]
    series = [plots.Series(data.label, data.rows) for data in everyone]
    costs = {row.position: row.result.cost_usd for row in main.rows if row.result and row.result.cost_usd is not None}
    blocks: list[Block] = [Heading(f"KernelBlaster suite: {main.label}", 1), *_setup(main)]
    blocks += [Heading("Results by level"), _level_table(main.rows)]
    blocks += [Heading("fast_p"), _fast_p_table(main.rows),
               *_figure("fast_p.png", "fast_p against eager and torch.compile", plots.fast_p_plot(series))]
    blocks += [Heading("Published results"), Paragraph(f"This suite's protocol: {OUR_PROTOCOL}"),
               _published_table(main.rows)]
    if others:
        blocks += [Heading("Ablations side by side"), _ablation_table(everyone)]
    blocks += [
        *_figure("geomean_by_level.png", "Geometric mean per level", plots.geomean_by_level_plot(series)),
        *_figure("speedups.png", "Distribution of speedups", plots.speedup_distribution_plot(series),
                 "No suite has a valid kernel, so there are no speedups to show."),
        *_figure("valid_rate.png", "Valid-kernel rate", plots.valid_rate_plot(series)),
        Heading("Tokens and cost"), Paragraph(_token_line(main.rows, costs)),
        *_figure("tokens.png", "Tokens per problem", plots.tokens_plot(main.rows, costs),
                 "No problem has finished, so there are no tokens per problem to show."),
        Heading("The knowledge base along the suite"), Paragraph(_kb_line(main.versions)),
        *_figure("kb_growth.png", "KB growth", plots.kb_growth_plot(main.versions)),
        Heading("Roofline of the best kernels"), Paragraph(_roofline_line(main.rows)),
        *_figure("roofline.png", "Roofline fraction", plots.roofline_plot(main.rows)),
        Heading("Problems"), Paragraph("Times and speedups of each problem's best kernel:"),
        _problem_table(main.rows),
        Paragraph("What each problem cost, and the suite KB's version before and after it:"),
        _problem_cost_table(main.rows, costs),
    ]
    return blocks


def render_markdown(blocks: Sequence[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Paragraph):
            lines += [block.text, ""]
        elif isinstance(block, Table):
            lines += ["| " + " | ".join(block.header) + " |", "|" + "---|" * len(block.header)]
            lines += ["| " + " | ".join(row) + " |" for row in block.rows] + [""]
        else:
            lines += [f"![{block.title}]({block.name})", ""]
    return "\n".join(lines)


# Tables fit the page: numbers and short cells never break; longer text breaks between words and after the
# slashes and underscores of problem names and paths; a table still wider than a narrow window scrolls
# inside its own box instead of widening the page.
_STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.35;"
          "overflow-wrap:break-word}.table{overflow-x:auto;max-width:100%}"
          "table{border-collapse:collapse;font-size:13px;margin:.3em 0 1em}"
          "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td.text,th.text{text-align:left}"
          "td.short{white-space:nowrap}th{background:#f4f4f4}figure{margin:1em 0}"
          "img{max-width:100%;height:auto}figcaption{color:#555;font-size:13px}")
_NUMBER = re.compile(r"-|[-+]?[0-9][0-9.,]*(x|%)?")
_TEXT = " class='text'"
_BREAK_AFTER = re.compile(r"([/_])")
_WBR = r"\1<wbr>"
_SHORT = 16  # characters: a cell this long or shorter stays on one line


def render_html(blocks: Sequence[Block], title: str) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             "<meta name='viewport' content='width=device-width, initial-scale=1'>"
             f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Table):
            parts.append(_html_table(block))
        else:
            encoded = base64.b64encode(block.png).decode()
            parts.append(f"<figure><img alt='{html.escape(block.title)}' data-name='{block.name}' "
                         f"src='data:image/png;base64,{encoded}'><figcaption>{html.escape(block.title)}"
                         "</figcaption></figure>")
    return "".join(parts) + "</body></html>\n"


def _html_table(table: Table) -> str:
    """Numbers right-aligned, words left-aligned: a column is text if any of its cells is not a number."""
    text = [any(not _NUMBER.fullmatch(row[column]) for row in table.rows) for column in range(len(table.header))]

    def cell(value: str, column: int) -> str:
        short = len(value) <= _SHORT
        classes = (["text"] if text[column] else []) + (["short"] if short else [])
        kind = f" class='{' '.join(classes)}'" if classes else ""
        escaped = html.escape(value)
        return f"<td{kind}>{escaped if short else _BREAK_AFTER.sub(_WBR, escaped)}</td>"

    head = "".join(f"<th{_TEXT if text[column] else ''}>{html.escape(value)}</th>"
                   for column, value in enumerate(table.header))
    body = "".join("<tr>" + "".join(cell(value, column) for column, value in enumerate(row)) + "</tr>"
                   for row in table.rows)
    return f"<div class='table'><table><tr>{head}</tr>{body}</table></div>"


def ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def milliseconds(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"


def share(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def _load(path: Path) -> SuiteData:
    suite = open_suite(path)
    try:
        return SuiteData(label=f"{path.name} ({suite.config.ablation})", suite=suite, rows=suite.db.problems(),
                         versions=suite.db.versions(), ending=suite.ending())
    finally:
        suite.db.close()


def _setup(data: SuiteData) -> list[Block]:
    config = data.suite.config
    context = config.context
    counts = {status: sum(1 for row in data.rows if row.status == status)
              for status in ("done", "failed", "running", "pending")}
    return [Paragraph(
        f"Source {config.source} ({config.selection}, order {config.order}); {len(data.rows)} problems: "
        f"{counts['done']} done, {counts['failed']} failed, {counts['running']} interrupted, "
        f"{counts['pending']} not started. {_count(context.iterations, 'iteration')} of "
        f"{_count(context.trajectories, 'trajectory', 'trajectories')} of depth {context.depth}, top-k "
        f"{context.top_k}, model {context.model}, precision {context.precision}. "
        f"Method: {config.ablation}; KB version 0 from {config.start_kb}; {config.window} problem(s) at once. "
        f"{_ending_line(data.ending, config.token_limit)}"), Paragraph(_machines_line(data.rows))]


def _count(number: int, one: str, many: str | None = None) -> str:
    return f"{number} {one if number == 1 else many or one + 's'}"


def _machines_line(rows: Sequence[ProblemRow]) -> str:
    """The machines the problems ran on, with how many problems each; numbers from different ones differ."""
    machines = Counter(
        f"{r.gpu_name}, driver {r.driver_version}, CUDA runtime {r.cuda_runtime}, nvcc {r.nvcc_version}, "
        f"torch {r.torch_version}" for row in rows if (r := row.result) is not None and r.gpu_name is not None)
    if not machines:
        return "Machine: not recorded (the results were written before machines were recorded)."
    listed = "; ".join(f"{machine} ({count} problem{'s' * (count != 1)})" for machine, count in machines.items())
    warning = " The times of problems on different machines are not comparable." if len(machines) > 1 else ""
    return f"Measured on: {listed}.{warning}"


def _ending_line(ending: SuiteEnding | None, token_limit: int | None) -> str:
    """Why the suite's last session ended, and its token limit if it has one."""
    limit = f" (suite token limit: {token_limit} tokens)" if token_limit else ""
    if ending is None:
        return f"The suite has not finished: it is running, or was stopped (`kernelblaster bench resume`){limit}."
    if ending.reason == "token_limit":
        return (f"The suite ended early: {ending.detail}; {ending.left} problem(s) were not run "
                "(`kernelblaster bench resume --suite-token-limit N` goes on).")
    return f"The suite ended when every problem had run, having spent {ending.tokens} tokens{limit}."


def _summary_cells(summary: SpeedupSummary) -> list[str]:
    return [ratio(summary.geomean), ratio(summary.mean), ratio(summary.median), ratio(summary.minimum),
            ratio(summary.maximum), share(summary.faster_share)]


def _level_table(rows: Sequence[ProblemRow]) -> Table:
    lines = []
    for level, group in [*by_level(rows).items(), ("all", list(rows))]:
        main = summarise(group, "baseline")
        others = [ratio(summarise(group, against).geomean) for against in ("eager", "compile", "initial")]
        lines.append([level, str(main.problems), str(main.valid), share(main.valid_rate),
                      *_summary_cells(main), *others])
    return Table(["level", "problems", "valid", "valid rate", "geomean", "mean", "median", "min", "max",
                  "% faster", "geomean vs eager", "geomean vs compile", "geomean vs initial"], lines)


def _fast_p_table(rows: Sequence[ProblemRow]) -> Table:
    lines = [[AGAINST[against], *[share(fast_p(rows, against, p)) for p in FAST_P_TABLE]]
             for against in ("eager", "compile", "baseline")]
    return Table(["against", *[f"fast_{p:g}" for p in FAST_P_TABLE]], lines)


def _published_table(rows: Sequence[ProblemRow]) -> Table:
    groups = by_level(rows)
    lines = [[p.system, p.against, *[ratio(p.level_geomeans.get(level)) for level in (1, 2, 3)], p.source,
              p.protocol] for p in PUBLISHED]
    for against in ("baseline", "eager", "compile"):
        mine = [ratio(summarise(groups.get(f"level {level}", []), against).geomean) for level in (1, 2, 3)]
        lines.append(["this suite", AGAINST[against], *mine, "results.sqlite", "above"])
    return Table(["system", "against", "level 1", "level 2", "level 3", "source", "protocol"], lines)


def _ablation_table(everyone: Sequence[SuiteData]) -> Table:
    lines = []
    for data in everyone:
        main = summarise(data.rows, "baseline")
        levels = by_level(data.rows)
        per_level = [ratio(summarise(levels.get(f"level {level}", []), "baseline").geomean) for level in (1, 2, 3)]
        tokens = sum(row.result.total_tokens for row in data.rows if row.result)
        lines.append([data.label, str(main.problems), share(main.valid_rate), ratio(main.geomean),
                      ratio(summarise(data.rows, "eager").geomean), ratio(summarise(data.rows, "compile").geomean),
                      share(fast_p(data.rows, "baseline", 1.0)), *per_level, str(tokens)])
    return Table(["suite", "problems", "valid rate", "geomean", "vs eager", "vs compile", "fast_1", "level 1",
                  "level 2", "level 3", "tokens"], lines)


def _cell(row: ProblemRow, name: str, form: Callable[[float | None], str]) -> str:
    return form(getattr(row.result, name)) if row.result else "-"


def _problem_table(rows: Sequence[ProblemRow]) -> Table:
    lines = [[str(row.position), row.problem_id, row.result.verdict if row.result else row.status,
              *[_cell(row, name, milliseconds) for name in ("eager_ms", "compile_ms", "initial_ms", "best_ms")],
              *[_cell(row, BASELINE_FIELDS[a], ratio) for a in ("eager", "compile", "baseline", "initial")],
              _cell(row, "roofline_fraction", share)] for row in rows]
    return Table(["#", "problem", "verdict", "eager ms", "compile ms", "initial ms", "best ms", "vs eager",
                  "vs compile", "vs baseline", "vs initial", "roofline"], lines)


def _problem_cost_table(rows: Sequence[ProblemRow], costs: dict[int, float]) -> Table:
    lines = [[str(row.position), row.problem_id, str(row.result.total_tokens) if row.result else "-",
              f"{costs[row.position]:.2f}" if row.position in costs else "-",
              _cell(row, "wall_s", lambda v: f"{v:.0f}" if v is not None else "-"),
              f"{_version(row.kb_version_before)} -> {_version(row.kb_version_after)}",
              _note(row.result) if row.result else ""] for row in rows]
    return Table(["#", "problem", "tokens", "cost USD", "wall s", "KB", "note"], lines)


def _note(result: ProblemResult) -> str:
    return result.error or (f"stopped at {STOPPED_BY[result.stopped_by]}" if result.stopped_by else "")


def _figure(name: str, title: str, figure: Figure | None, missing: str | None = None) -> list[Block]:
    """The plot, or (when it has nothing to show) the sentence that says why, never an empty frame."""
    if figure is not None:
        return [Image(name, title, plots.png(figure))]
    return [Paragraph(missing)] if missing else []


def _roofline_line(rows: Sequence[ProblemRow]) -> str:
    valid = [row for row in rows if row.result and row.result.verdict == "ok"]
    measured = [row for row in valid if row.result and row.result.roofline_fraction is not None]
    why = ("the harness records one where it could work out the problem's roofline floor: its compulsory bytes "
           "and FLOPs against the GPU's measured peaks")
    if not valid:
        return "No problem has a valid kernel, so no best kernel has a roofline fraction."
    if not measured:
        return f"None of the {len(valid)} best kernels has a roofline fraction ({why}), so there is no plot."
    left_out = f"; the other {len(valid) - len(measured)} have none ({why})" if len(measured) < len(valid) else ""
    return (f"How close each best kernel comes to the fastest any kernel could be on this GPU; {len(measured)} of "
            f"the {len(valid)} best kernels have a roofline fraction{left_out}.")


def _version(version: int | None) -> str:
    return f"v{version}" if version is not None else "-"


def _token_line(rows: Sequence[ProblemRow], costs: dict[int, float]) -> str:
    finished = [row for row in rows if row.result]
    tokens = sum(row.result.total_tokens for row in finished if row.result)
    per_problem = f", {tokens / len(finished):.0f} per problem" if finished else ""
    cost = f"; cost {sum(costs.values()):.2f} USD for the {len(costs)} problems with prices" if costs else \
        "; cost unknown (run the suite with --price or --prices)"
    return f"{tokens} tokens in all{per_problem}{cost}."


def _kb_line(versions: Sequence[KBVersionRow]) -> str:
    first, last = versions[0], versions[-1]
    rejected = sum(version.rejected for version in versions)
    return (f"Version 0: {first.states} states, {first.optimizations} optimizations, {first.bytes} bytes; "
            f"version {last.version}: {last.states} states, {last.optimizations} optimizations, "
            f"{last.measured} measured outcomes, {last.bytes} bytes. {rejected} journaled change(s) could not be "
            "applied to the suite's KB.")
