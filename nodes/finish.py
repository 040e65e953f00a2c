"""`finish`: write `best.cu` and the report (`report.json`, `report.md`) into the run directory; a run that
ended early (its token budget spent) says why there."""

from __future__ import annotations

from pathlib import Path

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.cost import usage_cost
from kernelblaster.graph.core.progress import ProgressNote, write_note
from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import OptimizationState, RunUpdate
from kernelblaster.harness.machine import Machine
from kernelblaster.harness.result import EvalResult
from kernelblaster.nodes.kernels import read_result
from kernelblaster.nodes.report import RunReport, Speedups, render_markdown, stage_totals, token_totals
from kernelblaster.tools.files import write_text_atomically

NODE = "finish"


def finish(state: OptimizationState, runtime: Runtime[RunContext], *, resources: RunResources) -> RunUpdate:
    files = resources.files
    report = build_report(state, files, runtime.context, resources.stop_reason())
    if state.best is not None:
        write_text_atomically(files.best_source, files.read(state.best.source))
    write_text_atomically(files.report_json, report.model_dump_json(indent=1))
    write_text_atomically(files.report_markdown, render_markdown(report))
    ended = f" (ended early: {report.ended_early})" if report.ended_early else ""
    write_note(runtime, ProgressNote(node=NODE, text=f"{report.status}{ended}; report in {files.report_markdown}"))
    return {"report": str(files.report_markdown), "ended_early": report.ended_early}


def build_report(state: OptimizationState, files: RunFiles, context: RunContext,
                 ended_early: str | None) -> RunReport:
    return RunReport(
        problem=state.problem_path, run_id=state.run_id, precision=context.precision,
        status="optimized" if state.best is not None else "no_valid_kernel",
        baseline=state.baseline, initial=state.initial, best=state.best,
        speedups=_speedups(state, files), steps=state.steps,
        suspicious=[step for step in state.steps if step.outcome == "suspicious"],
        learning=state.learning, tokens=token_totals(state.token_usage, context.prices),
        cost=usage_cost(state.token_usage, context.prices), ended_early=ended_early,
        machine=_machine(state, files), evaluation_stages=stage_totals(last_results(files)),
    )


# A candidate's results as far as it got: a measurement carries its verification's stages, a verification its
# build's (results/<label>.<stage>.json).
_RESULT_ORDER = ("measure", "verify", "build")


def last_results(files: RunFiles) -> list[EvalResult]:
    """Each candidate's last evaluation result in the run directory (unreadable ones left out)."""
    found: dict[str, tuple[int, Path]] = {}
    for path in sorted(files.path("results").glob("*.json")):
        label, _, stage = path.name.removesuffix(".json").rpartition(".")
        if stage in _RESULT_ORDER:
            rank = _RESULT_ORDER.index(stage)
            if label not in found or rank < found[label][0]:
                found[label] = (rank, path)
    results = []
    for _, path in found.values():
        try:
            results.append(EvalResult.model_validate_json(path.read_bytes()))
        except (OSError, ValueError):
            continue  # a report is written however the run ended; a damaged result costs its row only
    return results


def _machine(state: OptimizationState, files: RunFiles) -> Machine | None:
    """The machine that measured the best kernel, else the initial kernel (the run's speedups are its)."""
    measured = state.best or state.initial
    return read_result(files, measured.result).machine if measured is not None else None


def _speedups(state: OptimizationState, files: RunFiles) -> Speedups | None:
    if state.best is None or state.initial is None:
        return None
    measured = read_result(files, state.best.result).speedup
    return Speedups(vs_eager=measured.vs_eager if measured else None,
                    vs_compile=measured.vs_compile if measured else None,
                    vs_best_baseline=measured.vs_best if measured else None,
                    vs_initial=state.initial.time_ms / state.best.time_ms)
