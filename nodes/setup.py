"""`setup`: open the run directory, load the problem, time and profile the PyTorch baselines.

The baselines are what every speedup is measured against; their profile is kept beside them for the
report. The problem's generated `kb_problem.h` is written to the run directory, as the agents see it.
"""

from __future__ import annotations

import secrets

from langgraph.runtime import Runtime

from kernelblaster.graph.context import RunContext
from kernelblaster.graph.progress import ProgressNote, write_note
from kernelblaster.graph.run_files import run_id_for, write_text_atomically
from kernelblaster.graph.services import RunResources
from kernelblaster.graph.state import BaselineSummary, OptimizationState


def setup(state: OptimizationState, runtime: Runtime[RunContext], *, resources: RunResources) -> dict[str, object]:
    files = resources.files
    write_text_atomically(files.header, resources.header)
    with resources.pool.acquire() as evaluator:
        baseline = evaluator.baseline()
        profile = evaluator.profile_baseline() if runtime.context.profile else None
    files.save("baseline/timing.json", baseline)
    if profile is not None:
        files.save("baseline/profile.json", profile)
    summary = BaselineSummary(eager_ms=baseline.eager.median_ms,
                              compile_ms=baseline.compiled.median_ms if baseline.compiled else None,
                              best_ms=baseline.best_ms)
    compiled = f", torch.compile {summary.compile_ms:.4f} ms" if summary.compile_ms is not None else ""
    write_note(runtime, ProgressNote(node="setup", text=f"PyTorch eager {summary.eager_ms:.4f} ms{compiled}"))
    return {"run_dir": str(files.root), "run_id": unique_run_id(str(files.root)), "baseline": summary}


def unique_run_id(run_dir: str) -> str:
    """The run's id in KB event ids and snapshot names: its directory's name and a random suffix.

    The KB remembers the events of every run for good, so a new run in a directory of the same name
    (another suite's, or a rerun after deleting the old one) must not look like a resume of the old run,
    whose steps it would find already counted. Drawn once, in `setup`, and checkpointed with the state.
    """
    return f"{run_id_for(run_dir)[:119]}-{secrets.token_hex(4)}"
