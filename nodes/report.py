"""The run report: speedups of the best kernel (against PyTorch eager, torch.compile and the initial CUDA),
the trajectory of states and optimizations, suspicious results, learning and tokens; as JSON and Markdown.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

from pydantic import BaseModel

from kernelblaster.graph.state import BaselineSummary, KernelRef, LearningNote, StepRecord, TokenUsage


class TokenTotal(BaseModel):
    role: str
    node: str
    calls: int
    input_tokens: int
    output_tokens: int


class Speedups(BaseModel):
    vs_eager: float | None
    vs_compile: float | None
    vs_best_baseline: float | None
    vs_initial: float | None


class RunReport(BaseModel):
    problem: str
    run_id: str
    status: Literal["optimized", "no_valid_kernel"]
    baseline: BaselineSummary | None
    initial: KernelRef | None
    best: KernelRef | None
    speedups: Speedups | None
    steps: list[StepRecord]
    suspicious: list[StepRecord]
    learning: list[LearningNote]
    tokens: list[TokenTotal]

    @property
    def total_tokens(self) -> int:
        return sum(total.input_tokens + total.output_tokens for total in self.tokens)


def token_totals(usage: list[TokenUsage]) -> list[TokenTotal]:
    """Calls and tokens per (role, node), in the order roles were first used."""
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for entry in usage:
        total = totals[(entry.role, entry.node)]
        total[0] += 1
        total[1] += entry.input_tokens
        total[2] += entry.output_tokens
    return [TokenTotal(role=role, node=node, calls=calls, input_tokens=inputs, output_tokens=outputs)
            for (role, node), (calls, inputs, outputs) in totals.items()]


def render_markdown(report: RunReport) -> str:
    lines = [f"# KernelBlaster run {report.run_id}", "", f"Problem: `{report.problem}`", ""]
    lines += [*_headline(report), "", *_steps_table(report.steps)]
    if report.suspicious:
        lines += ["", "## Suspicious results (faster than the roofline floor; never rewarded)", ""]
        lines += [f"- {s.after.label if s.after else '?'}: {s.technique}: {s.detail}" for s in report.suspicious]
    lines += ["", "## Learning", ""] + [f"- iteration {n.iteration + 1}, {n.stage}: {n.summary}"
                                        for n in report.learning]
    lines += ["", f"## Tokens ({report.total_tokens} in all)", "", "| role | node | calls | input | output |",
              "|---|---|---|---|---|"]
    lines += [f"| {t.role} | {t.node} | {t.calls} | {t.input_tokens} | {t.output_tokens} |" for t in report.tokens]
    return "\n".join(lines) + "\n"


def _headline(report: RunReport) -> list[str]:
    if report.best is None or report.speedups is None:
        return ["No correct CUDA kernel was found: see the initial attempts under results/."]
    speedups = report.speedups
    lines = [f"Best kernel: `best.cu` ({report.best.label}), {report.best.time_ms:.4f} ms per call.", ""]
    against = (("PyTorch eager", speedups.vs_eager), ("torch.compile", speedups.vs_compile),
               ("the faster of the two", speedups.vs_best_baseline), ("the initial CUDA", speedups.vs_initial))
    lines += [f"- {_ratio(value)} vs {name}" for name, value in against]
    return lines


def _steps_table(steps: list[StepRecord]) -> list[str]:
    lines = ["## Trajectories", "", "| iter | traj | step | state | technique | predicted | outcome | speedup |",
             "|---|---|---|---|---|---|---|---|"]
    for s in sorted(steps, key=lambda s: (s.iteration, s.trajectory, s.step)):
        new = " (new)" if s.discovered_state else ""
        lines.append(f"| {s.iteration + 1} | {s.trajectory} | {s.step + 1} | {s.state_id}{new} | "
                     f"{s.technique or '-'} | {_ratio(s.predicted_speedup)} | {s.outcome} | {_ratio(s.speedup)} |")
    return lines


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"
