"""What each rollout step of an iteration changed, as the three learning roles read it: the prediction and
the outcome, the lowering agent's reason for its choice and its explanation of the change, a compact
unified diff of the code, and the kernel before and after (time, speedup against PyTorch, the profile's
reading of it).

It is bounded: a diff keeps its first `DIFF_LINES` lines, and past `EVIDENCE_CHARS` the remaining steps are
shown without their diff, then as their one-line summary only.
"""

from __future__ import annotations

import difflib

from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import KernelRef, StepRecord
from kernelblaster.nodes.profile_view import profile_view

DIFF_LINES = 60
DIFF_CONTEXT_LINES = 1
EXPLANATION_CHARS = 600
EVIDENCE_CHARS = 16_000


def render_evidence(resources: RunResources, steps: list[StepRecord]) -> str:
    """Every step's evidence in order, within `EVIDENCE_CHARS`."""
    blocks: list[str] = []
    used = 0
    for step in steps:
        block = step_evidence(resources, step, with_diff=True)
        if used + len(block) > EVIDENCE_CHARS:
            block = step_evidence(resources, step, with_diff=False)
        if used + len(block) > EVIDENCE_CHARS:
            block = describe_step(step)
        blocks.append(block)
        used += len(block)
    return "\n\n".join(blocks) or "(no steps)"


def describe_step(step: StepRecord) -> str:
    """The step in one line: where it was, what was tried, predicted against what happened."""
    predicted = f"predicted {step.predicted_speedup:.2f}x" if step.predicted_speedup is not None else "no prediction"
    if step.speedup is not None:
        outcome = f"{step.outcome}, {step.speedup:.2f}x"
    else:
        outcome = f"{step.outcome}: {step.detail[:300]}"
    return (f"- iteration {step.iteration + 1}, trajectory {step.trajectory}, step {step.step + 1}: state "
            f"{step.state_id} ({step.state_name}); {step.technique or 'no code written'}: {predicted} -> {outcome} "
            f"({step.attempts} attempt(s))")


def step_evidence(resources: RunResources, step: StepRecord, *, with_diff: bool) -> str:
    lines = [describe_step(step),
             f"  before: {_kernel_metrics(resources, step.before)}",
             f"  after: {_kernel_metrics(resources, step.after) if step.after else 'not measured'}"]
    if step.choice_reason:
        lines.append(f"  why the agent chose it: {_one_paragraph(step.choice_reason)}")
    if step.explanation:
        lines.append(f"  the agent's explanation: {_one_paragraph(step.explanation)}")
    if with_diff and step.candidate_source is not None:
        diff = compact_diff(resources.files.read(step.before.source), resources.files.read(step.candidate_source))
        lines += ["  diff from the kernel before to the last attempt:", "```diff", diff, "```"]
    return "\n".join(lines)


def compact_diff(before: str, after: str) -> str:
    """A unified diff with one line of context, cut to `DIFF_LINES` lines."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "before.cu", "after.cu",
                                      n=DIFF_CONTEXT_LINES, lineterm=""))
    if not lines:
        return "(no change)"
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... ({len(lines) - DIFF_LINES} more diff lines)"]
    return "\n".join(lines)


def _kernel_metrics(resources: RunResources, kernel: KernelRef) -> str:
    versus = f", {kernel.speedup:.2f}x vs PyTorch" if kernel.speedup is not None else ""
    return f"{kernel.time_ms:.4f} ms{versus}; profile: {profile_view(resources, kernel).summary}"


def _one_paragraph(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXPLANATION_CHARS else flat[:EXPLANATION_CHARS] + " ..."
