"""What the LLM agents read of an ncu report: each kernel in launch order with its launch configuration,
time, throughputs, occupancy, top stalls, busiest pipes and ncu's optimisation findings, within a budget
of characters.

The words are in `ncu_findings.txt` beside this module, one `string.Template` per section; this module
fills them in from the report and decides how much of each kernel fits (`Detail`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from string import Template

from kernelblaster.tools.ncu_report import KernelProfile, NcuReport, RuleFinding

DEFAULT_MAX_CHARS = 4000
TEXT_FILE = "ncu_findings.txt"
RULE_SENTENCE_CHARS = 220
TOP_STALLS = 4
TOP_PIPES = 3

_SECTION_HEADER = re.compile(r"^\[([a-z ,]+)\]$", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


class Detail(Enum):
    """How much of a kernel is shown, richest first."""

    FULL = "every line, findings in full"
    FIRST_SENTENCES = "findings cut to their first sentence"
    FINDINGS_NAMED = "findings named only"
    ONE_LINE = "the kernel in one line"

    def poorer(self) -> Detail:
        return _RICHEST_FIRST[_RICHEST_FIRST.index(self) + 1]

    def richer(self) -> Detail:
        return _RICHEST_FIRST[_RICHEST_FIRST.index(self) - 1]


_RICHEST_FIRST = tuple(Detail)


@dataclass(frozen=True)
class FindingsText:
    """The sections of `ncu_findings.txt`, by name."""

    sections: dict[str, Template]

    @classmethod
    def parse(cls, text: str) -> FindingsText:
        """Sections start at a `[name]` line; anything before the first one explains the file."""
        parts = _SECTION_HEADER.split(text)[1:]
        return cls({name: Template(body.strip("\n")) for name, body in zip(parts[::2], parts[1::2], strict=True)})

    def fill(self, section: str, **fields: str | None) -> str:
        """The section with its fields filled in; a line using a field whose value is None is left out."""
        lines = []
        for line in self.sections[section].template.splitlines():
            used = {found.group("named") or found.group("braced")
                    for found in Template.pattern.finditer(line) if not found.group("escaped")}
            unknown = used - fields.keys()
            if unknown:
                raise ValueError(f"{TEXT_FILE} [{section}] uses ${{{sorted(unknown)[0]}}}, which it is not given "
                                 f"(its fields: {', '.join(sorted(fields))})")
            if all(fields[name] is not None for name in used):
                lines.append(Template(line).substitute(fields))
        return "\n".join(lines)


@functools.cache
def findings_text() -> FindingsText:
    return FindingsText.parse(resources.files("kernelblaster.tools").joinpath(TEXT_FILE).read_text())


def render_findings(report: NcuReport, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The report as the agents read it, at most `max_chars` long.

    Kernels that take the least GPU time lose detail first (rule text, then rule lines, then all but one
    line); if even one line each does not fit, the shortest kernels are left out and counted in a closing
    line.
    """
    text = findings_text()
    total_ns = report.total_gpu_time_ns
    head = text.fill("header", kernel_count=str(report.kernel_count), gpu_time=_format_ns(total_ns),
                     elapsed_cycles=f"{report.total_elapsed_cycles:,.0f}")
    blocks = [{detail: _kernel_block(text, kernel, total_ns, detail) for detail in Detail}
              for kernel in report.kernels]
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


def _omitted_line(text: FindingsText, report: NcuReport, omitted: list[int]) -> str:
    time_ns = sum(report.kernels[i].duration_ns or 0.0 for i in omitted)
    return text.fill("omitted", count=str(len(omitted)), gpu_time=_format_ns(time_ns))


def _kernel_block(text: FindingsText, kernel: KernelProfile, total_ns: float, detail: Detail) -> str:
    fields = _kernel_fields(text, kernel, total_ns)
    if detail is Detail.ONE_LINE:
        return text.fill("kernel, one line", **fields)
    findings = [_finding_line(text, rule, detail) for rule in kernel.optimization_findings()]
    return "\n".join([text.fill("kernel", **fields), *findings])


def _kernel_fields(text: FindingsText, kernel: KernelProfile, total_ns: float) -> dict[str, str | None]:
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


def _stall_fields(text: FindingsText, kernel: KernelProfile) -> dict[str, str | None]:
    stalls = kernel.stall_reasons()[:TOP_STALLS]
    per_issue = kernel.cycles_per_issued_instruction
    if not stalls or not per_issue:
        return {"cycles_per_issue": None, "stalls": None}
    listed = ", ".join(text.fill("stall", name=s.name.lower(), cycles=f"{s.cycles:.1f}",
                                 share=f"{100 * s.cycles / per_issue:.0f}") for s in stalls)
    return {"cycles_per_issue": f"{per_issue:.1f}", "stalls": listed}


def _pipes(text: FindingsText, kernel: KernelProfile) -> str | None:
    pipes = [p for p in kernel.pipe_utilization()[:TOP_PIPES] if p.percent > 0]
    return ", ".join(text.fill("pipe", name=p.name, percent=f"{p.percent:.1f}") for p in pipes) if pipes else None


def _finding_line(text: FindingsText, rule: RuleFinding, detail: Detail) -> str:
    speedup = "" if rule.estimated_speedup is None else text.fill(
        "speedup", percent=f"{rule.estimated_speedup:g}", kind=rule.estimated_speedup_type or "n/a")
    if detail is Detail.FINDINGS_NAMED:
        return text.fill("finding, named only", rule=rule.rule, speedup=speedup)
    advice = rule.description if detail is Detail.FULL else _first_sentence(rule.description)
    return text.fill("finding", rule=rule.rule, speedup=speedup, advice=advice)


def _first_sentence(text: str) -> str:
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0]
    return sentence if len(sentence) <= RULE_SENTENCE_CHARS else sentence[: RULE_SENTENCE_CHARS - 1] + "…"


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
