"""What the LLM agents read of an ncu report: each kernel in launch order with its launch configuration,
time, throughputs, occupancy, top stalls, busiest pipes and ncu's optimisation findings, within a budget
of characters.

ncu's findings are ranked across the report by what they promise for the whole call: estimates of a
kernel's overall time ("global") before estimates of one part of it ("local"), each weighted by the
kernel's share of the GPU time, findings without an estimate last. The top `WHOLE_FINDINGS` are shown in
full; the others are named with their estimate, so the advice that matters most is never cut.

The words are in `findings.txt` beside this module, one `string.Template` per section; this module
fills them in from the report and decides how much of each kernel fits (`Detail`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources

from kernelblaster.harness.profile.report import KernelProfile, NcuReport, RuleFinding
from kernelblaster.tools.text_sections import TextSections

DEFAULT_MAX_CHARS = 4000
TEXT_FILE = "findings.txt"
WHOLE_FINDINGS = 3
TOP_STALLS = 4
TOP_PIPES = 3
# Rank tiers of a finding's estimated speedup type: an estimate of the kernel's whole time first.
_ESTIMATE_TIERS = {"global": 0, "local": 1}


class Detail(Enum):
    """How much of a kernel is shown, richest first."""

    FULL = "every line, the top-ranked findings in full and the others named"
    FINDINGS_NAMED = "findings named only"
    ONE_LINE = "the kernel in one line"

    def poorer(self) -> Detail:
        return _RICHEST_FIRST[_RICHEST_FIRST.index(self) + 1]

    def richer(self) -> Detail:
        return _RICHEST_FIRST[_RICHEST_FIRST.index(self) - 1]


_RICHEST_FIRST = tuple(Detail)
# A finding by place: (kernel index in the report, index in the kernel's optimization_findings()).
FindingPlace = tuple[int, int]


@functools.cache
def findings_text() -> TextSections:
    text = resources.files("kernelblaster.harness.profile").joinpath(TEXT_FILE).read_text()
    return TextSections.parse(TEXT_FILE, text)


def ranked_findings(report: NcuReport) -> list[FindingPlace]:
    """Every optimisation finding of the report, the most promising for the whole call first (see the module
    docstring)."""
    total_ns = report.total_gpu_time_ns
    scored: list[tuple[tuple[int, float], FindingPlace]] = []
    for k, kernel in enumerate(report.kernels):
        share = (kernel.duration_ns or 0.0) / total_ns if total_ns else 1.0
        scored += [(_rank_key(rule, share), (k, f)) for f, rule in enumerate(kernel.optimization_findings())]
    return [place for _, place in sorted(scored)]


def _rank_key(rule: RuleFinding, share: float) -> tuple[int, float]:
    if rule.estimated_speedup is None:
        return len(_ESTIMATE_TIERS) + 1, 0.0
    return _ESTIMATE_TIERS.get(rule.estimated_speedup_type, len(_ESTIMATE_TIERS)), -share * rule.estimated_speedup


def render_findings(report: NcuReport, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The report as the agents read it, at most `max_chars` long.

    Kernels that take the least GPU time lose detail first (the text of their top findings, then all but one
    line); if even one line each does not fit, the shortest kernels are left out and counted in a closing
    line.
    """
    text = findings_text()
    total_ns = report.total_gpu_time_ns
    head = text.fill("header", kernel_count=str(report.kernel_count), gpu_time=_format_ns(total_ns),
                     elapsed_cycles=f"{report.total_elapsed_cycles:,.0f}")
    whole = set(ranked_findings(report)[:WHOLE_FINDINGS])
    blocks = [{detail: _kernel_block(text, kernel, index, total_ns, detail, whole) for detail in Detail}
              for index, kernel in enumerate(report.kernels)]
    layout = _Layout(head, blocks, sorted(range(len(blocks)), key=lambda i: report.kernels[i].duration_ns or 0.0),
                     functools.partial(_omitted_line, text, report))
    layout.shrink(max_chars)
    layout.regrow(max_chars)
    layout.leave_out(max_chars)
    shown = layout.text()
    return shown if len(shown) <= max_chars else shown[: max(max_chars - 1, 0)] + "…"


@dataclass
class _Layout:
    """Which detail each kernel is shown at, and which kernels are left out."""

    head: str
    blocks: list[dict[Detail, str]]
    least_important_first: list[int]  # kernel indices, least GPU time first
    omitted_line: Callable[[list[int]], str]  # the closing line that counts the kernels left out
    details: list[Detail] = field(init=False)
    omitted: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.details = [Detail.FULL] * len(self.blocks)

    @property
    def shown(self) -> list[int]:
        return [i for i in range(len(self.blocks)) if i not in self.omitted]

    def length(self) -> int:
        """The text's length, the closing line included."""
        closing = len(self.omitted_line(self.omitted)) + 1 if self.omitted else 0
        return len(self.head) + sum(len(self.blocks[i][self.details[i]]) + 1 for i in self.shown) + closing

    def shrink(self, max_chars: int) -> None:
        """Step the kernels down, the richest and least important first, until the text fits or is one line each."""
        while self.length() > max_chars and any(detail is not Detail.ONE_LINE for detail in self.details):
            richest = min(self.details, key=_RICHEST_FIRST.index)
            victim = next(i for i in self.least_important_first if self.details[i] is richest)
            self.details[victim] = richest.poorer()

    def regrow(self, max_chars: int) -> None:
        """Stepping down in turns can overshoot: give the room left back to the longest-running kernels."""
        for index in reversed(self.least_important_first):
            while self.details[index] is not Detail.FULL:
                self.details[index] = self.details[index].richer()
                if self.length() > max_chars:
                    self.details[index] = self.details[index].poorer()
                    break

    def leave_out(self, max_chars: int) -> None:
        """Leave out the least important kernels until the text, with the line counting them, fits."""
        while self.shown and self.length() > max_chars:
            self.omitted.append(self.least_important_first[len(self.omitted)])

    def text(self) -> str:
        closing = [self.omitted_line(self.omitted)] if self.omitted else []
        return "\n".join([self.head, *(self.blocks[i][self.details[i]] for i in self.shown), *closing])


def _omitted_line(text: TextSections, report: NcuReport, omitted: list[int]) -> str:
    time_ns = sum(report.kernels[i].duration_ns or 0.0 for i in omitted)
    return text.fill("omitted", count=str(len(omitted)), gpu_time=_format_ns(time_ns))


def _kernel_block(text: TextSections, kernel: KernelProfile, index: int, total_ns: float, detail: Detail,
                  whole: set[FindingPlace]) -> str:
    fields = _kernel_fields(text, kernel, total_ns)
    if detail is Detail.ONE_LINE:
        return text.fill("kernel, one line", **fields)
    findings = [_finding_line(text, rule, detail is Detail.FULL and (index, number) in whole)
                for number, rule in enumerate(kernel.optimization_findings())]
    return "\n".join([text.fill("kernel", **fields), *findings])


def _kernel_fields(text: TextSections, kernel: KernelProfile, total_ns: float) -> dict[str, str | None]:
    duration = kernel.duration_ns
    cycles = kernel.elapsed_cycles
    spill = kernel.local_spill_overhead_pct
    share = text.fill("share", percent=f"{100 * duration / total_ns:.0f}") if duration and total_ns else ""
    title = text.fill("title", id=str(kernel.id), name=kernel.short_name, duration=_format_ns(duration), share=share,
                      cycles=text.fill("cycles", cycles=f"{cycles:,.0f}") if cycles is not None else "")
    registers = kernel.registers_per_thread
    shared = kernel.shared_memory_bytes
    return {
        "title": title, "grid": _dim3(kernel.grid_size), "block": _dim3(kernel.block_size),
        "registers": "? regs" if registers is None else f"{registers} regs/thread",
        "shared_memory": "? B" if shared is None else f"{shared:,} B",
        "sm": _pct(kernel.sm_throughput_pct), "memory": _pct(kernel.memory_throughput_pct),
        "dram": _pct(kernel.dram_throughput_pct), "l2": _pct(kernel.l2_throughput_pct),
        "l1": _pct(kernel.l1_throughput_pct), "l1_hit": _pct(kernel.l1_hit_rate_pct),
        "l2_hit": _pct(kernel.l2_hit_rate_pct), "achieved_occupancy": _pct(kernel.achieved_occupancy_pct),
        "theoretical_occupancy": _pct(kernel.theoretical_occupancy_pct), "eligible": _pct(kernel.eligible_cycles_pct),
        "ipc": "?" if kernel.executed_ipc is None else f"{kernel.executed_ipc:.2f}",
        "spill": text.fill("spill", percent=f"{spill:.1f}") if spill else "",
        **_stall_fields(text, kernel), "pipes": _pipes(text, kernel),
    }


def _stall_fields(text: TextSections, kernel: KernelProfile) -> dict[str, str | None]:
    stalls = kernel.stall_reasons()[:TOP_STALLS]
    per_issue = kernel.cycles_per_issued_instruction
    if not stalls or not per_issue:
        return {"cycles_per_issue": None, "stalls": None}
    listed = ", ".join(text.fill("stall", name=s.name.lower(), cycles=f"{s.cycles:.1f}",
                                 share=f"{100 * s.cycles / per_issue:.0f}") for s in stalls)
    return {"cycles_per_issue": f"{per_issue:.1f}", "stalls": listed}


def _pipes(text: TextSections, kernel: KernelProfile) -> str | None:
    pipes = [p for p in kernel.pipe_utilization()[:TOP_PIPES] if p.percent > 0]
    return ", ".join(text.fill("pipe", name=p.name, percent=f"{p.percent:.1f}") for p in pipes) if pipes else None


def _finding_line(text: TextSections, rule: RuleFinding, in_full: bool) -> str:
    speedup = "" if rule.estimated_speedup is None else text.fill(
        "speedup", percent=f"{rule.estimated_speedup:g}", kind=rule.estimated_speedup_type or "n/a")
    if not in_full:
        return text.fill("finding, named only", rule=rule.rule, speedup=speedup)
    return text.fill("finding", rule=rule.rule, speedup=speedup, advice=rule.description)


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}%"


def _dim3(dims: tuple[int, int, int]) -> str:
    return "(" + ",".join(str(d) for d in dims) + ")"


def _format_ns(ns: float | None) -> str:
    if ns is None or math.isnan(ns):
        return "? us"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} us" if ns >= 1e3 else f"{ns:.0f} ns"
