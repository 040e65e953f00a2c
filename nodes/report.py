"""The run report: speedups of the best kernel (against PyTorch eager, torch.compile and the initial CUDA),
the trajectory of states and optimizations, suspicious results, learning, tokens and their cost, and why
the run ended early if it did; as JSON and Markdown.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field

from kernelblaster.graph.core.cost import Cost, ModelPrice, usage_cost
from kernelblaster.graph.core.state import BaselineSummary, KernelRef, LearningNote, StepRecord
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.harness.machine import Machine
from kernelblaster.harness.result import EvalResult
from kernelblaster.harness.stages import STAGES, Stage


class TokenTotal(BaseModel):
    """Tokens of one role at one node; `cost_usd` is None without prices (or without one for its model)."""

    role: str
    node: str
    calls: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None


class Speedups(BaseModel):
    vs_eager: float | None
    vs_compile: float | None
    vs_best_baseline: float | None
    vs_initial: float | None


class StageTotal(BaseModel):
    """One stage of evaluation over a run: how many of its evaluations ran it, and its wall seconds."""

    stage: Stage
    evaluations: int = Field(description="Evaluations (one per candidate, as far as it got) that ran the stage")
    seconds: float = Field(description="Wall seconds of the stage over those evaluations, in all")
    median_s: float = Field(description="The median of those evaluations' seconds in it")


class RunReport(BaseModel):
    problem: str
    run_id: str
    precision: str  # the precision policy every kernel and baseline was judged under
    status: Literal["optimized", "no_valid_kernel"]
    baseline: BaselineSummary | None
    initial: KernelRef | None
    best: KernelRef | None
    speedups: Speedups | None
    steps: list[StepRecord]
    suspicious: list[StepRecord]
    learning: list[LearningNote]
    tokens: list[TokenTotal]
    cost: Cost | None = None
    ended_early: str | None = None
    machine: Machine | None = Field(default=None, description="The machine that measured the best kernel (else the "
                                    "initial one): GPU, driver, CUDA runtime, nvcc and torch versions; None when "
                                    "no kernel was measured, or its result predates machine records")
    evaluation_stages: list[StageTotal] = Field(default=[], description="Where the run's evaluation time went, per "
                                                "stage (harness/stages.py), over every candidate's last result; "
                                                "empty in reports written before stage times")

    @property
    def total_tokens(self) -> int:
        return sum(total.input_tokens + total.output_tokens for total in self.tokens)


def stage_totals(results: list[EvalResult]) -> list[StageTotal]:
    """Per stage, in the order stages run, the evaluations that ran it and their seconds; stages none ran are
    left out."""
    ran = [result.stages.ran() for result in results]
    totals = []
    for stage in STAGES:
        seconds = [stages[stage] for stages in ran if stage in stages]
        if seconds:
            totals.append(StageTotal(stage=stage, evaluations=len(seconds), seconds=sum(seconds),
                                     median_s=statistics.median(seconds)))
    return totals


def token_totals(usage: list[TokenUsage], prices: Mapping[str, ModelPrice]) -> list[TokenTotal]:
    """Calls, tokens and cost per (role, node), in the order roles were first used."""
    groups: dict[tuple[str, str], list[TokenUsage]] = defaultdict(list)
    for entry in usage:
        groups[(entry.role, entry.node)].append(entry)
    return [_total(role, node, entries, prices) for (role, node), entries in groups.items()]


def _total(role: str, node: str, entries: list[TokenUsage], prices: Mapping[str, ModelPrice]) -> TokenTotal:
    cost = usage_cost(entries, prices)
    return TokenTotal(role=role, node=node, calls=len(entries),
                      input_tokens=sum(e.input_tokens for e in entries),
                      output_tokens=sum(e.output_tokens for e in entries),
                      cached_input_tokens=sum(e.cached_input_tokens for e in entries),
                      reasoning_tokens=sum(e.reasoning_tokens for e in entries),
                      cost_usd=cost.usd if cost is not None and not cost.unpriced_models else None)


def render_markdown(report: RunReport) -> str:
    lines = [f"# KernelBlaster run {report.run_id}", "", f"Problem: `{report.problem}`",
             f"Precision policy: `{report.precision}`", f"Machine: {_machine(report.machine)}", ""]
    if report.ended_early:
        lines += [f"**The run ended early:** {report.ended_early}.", ""]
    lines += [*_headline(report), "", *_steps_table(report.steps)]
    if report.suspicious:
        lines += ["", "## Suspicious results (faster than the roofline floor; never rewarded)", ""]
        lines += [f"- {s.after.label if s.after else '?'}: {s.technique}: {s.detail}" for s in report.suspicious]
    lines += ["", "## Learning", ""] + [f"- iteration {n.iteration + 1}, {n.stage}: {n.summary}"
                                        for n in report.learning]
    return "\n".join([*lines, "", *_stages_table(report.evaluation_stages), *_tokens_table(report)]) + "\n"


def _stages_table(totals: list[StageTotal]) -> list[str]:
    if not totals:
        return []
    lines = ["## Evaluation time by stage", "", "| stage | evaluations | seconds in all | median seconds |",
             "|---|---|---|---|"]
    lines += [f"| {t.stage} | {t.evaluations} | {t.seconds:.2f} | {t.median_s:.3f} |" for t in totals]
    return [*lines, ""]


def _tokens_table(report: RunReport) -> list[str]:
    cost = f", costing {report.cost.display()}" if report.cost is not None else "; no prices given"
    lines = [f"## Tokens ({report.total_tokens} in all{cost})", "",
             "| role | node | calls | input | cached input | output | reasoning | cost |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {t.role} | {t.node} | {t.calls} | {t.input_tokens} | {t.cached_input_tokens} | {t.output_tokens} | "
              f"{t.reasoning_tokens} | {_dollars(t.cost_usd)} |" for t in report.tokens]
    return lines


def _machine(machine: Machine | None) -> str:
    if machine is None:
        return "not recorded (no kernel was measured, or its result predates machine records)"
    return machine.line()


def _dollars(value: float | None) -> str:
    return f"${value:.4f}" if value is not None else "-"


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
        lines.append(f"| {s.iteration + 1} | {s.trajectory} | {s.step + 1} | {s.state_id or '-'}{new} | "
                     f"{s.technique or '-'} | {_ratio(s.predicted_speedup)} | {s.outcome} | {_ratio(s.speedup)} |")
    return lines


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"
