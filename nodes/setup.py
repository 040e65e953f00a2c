"""`setup`: open the run directory, load the problem, time and profile the PyTorch baselines, and gather
the facts every prompt shows (`RunFacts`: the GPU, the baselines, the roofline floor, PyTorch's top kernels,
the rows the problem's softmaxes, norms, reductions and losses reduce).

The run first checks that it has what it needs (as `kernelblaster optimize` does, so a run started from
Studio fails with the same one-line reason), then keeps its own copy of the problem file (and of an
`--init` kernel) under `inputs/`, so the run directory stays self-contained. The baselines are what every
speedup is measured against; their profile is kept beside them for the report, and the run's facts in
`baseline/facts.json`. The problem's generated `kb_problem.h` is written to the run directory, as the agents
see it. A replay keeps the recorded run's operation kinds, which decided the optimizations it was offered.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from langgraph.runtime import Runtime
from pydantic import BaseModel

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.preflight import analysis_gpu, check_started_run
from kernelblaster.graph.core.progress import ProgressNote, write_note
from kernelblaster.graph.core.run_files import RunFiles, default_run_dir, run_id_for
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.core.state import BaselineSummary, OptimizationState, RunFacts, RunUpdate
from kernelblaster.harness.analysis import reduced_rows
from kernelblaster.harness.profile.outcome import ProfileReport, top_kernels
from kernelblaster.kb.operations import OperationKind
from kernelblaster.tools.files import write_text_atomically

PYTORCH_KERNELS_SHOWN = 3


def setup(state: OptimizationState, runtime: Runtime[RunContext], *, services: Services) -> RunUpdate:
    thread = runtime.execution_info.thread_id if runtime.execution_info else None
    run_dir = str(Path(runtime.context.run_dir or default_run_dir(state.problem_path, thread)).resolve())
    check_started_run(Path(state.problem_path), Path(state.init_kernel) if state.init_kernel else None,
                      Path(run_dir), runtime.context, services, thread)
    files = RunFiles(run_dir)
    problem_path = keep_input(files, state.problem_path)
    init_kernel = keep_input(files, state.init_kernel) if state.init_kernel else None
    resources = services.for_run(runtime.context, problem_path, run_dir)
    write_text_atomically(files.header, resources.header)
    with resources.pool.acquire() as evaluator:
        baseline = evaluator.baseline()
        profile = evaluator.profile_baseline() if runtime.context.profile else None
        gpu, roofline, operations = evaluator.gpu_facts(), evaluator.roofline_floor(), evaluator.operation_kinds()
        precision = evaluator.precision_facts()
    files.save(files.BASELINE_TIMING, baseline)
    if profile is not None:
        files.save(files.BASELINE_PROFILE, profile)
    summary = BaselineSummary(eager_ms=baseline.eager.median_ms,
                              compile_ms=baseline.compiled.median_ms if baseline.compiled else None,
                              best_ms=baseline.best_ms)
    kernels = top_kernels(profile, PYTORCH_KERNELS_SHOWN) if isinstance(profile, ProfileReport) else None
    facts = RunFacts(gpu=gpu, baseline=summary, roofline=roofline, pytorch_kernels=kernels,
                     operations=_operations_to_offer_for(runtime.context, operations), precision=precision,
                     rows=reduced_rows(resources.problem, analysis_gpu(runtime.context)))
    files.save(files.FACTS, facts)
    compiled = f", torch.compile {summary.compile_ms:.4f} ms" if summary.compile_ms is not None else ""
    write_note(runtime, ProgressNote(node="setup", text=f"PyTorch eager {summary.eager_ms:.4f} ms{compiled} "
                                                        f"on {gpu.name}"))
    return {"run_dir": run_dir, "run_id": unique_run_id(run_dir), "baseline": summary, "facts": facts,
            "problem_path": problem_path, "init_kernel": init_kernel}


def keep_input(files: RunFiles, given: str) -> str:
    """Copy a file the run was given (absolute, or relative to the working directory) into the run
    directory; the copy's path, relative to it."""
    original = Path(given)
    copy = files.input_copy(original)
    write_text_atomically(files.path(copy), original.read_text())
    return copy


def unique_run_id(run_dir: str) -> str:
    """The run's id in KB event ids and snapshot names: its directory's name and a random suffix.

    The KB remembers the events of every run for good, so a new run in a directory of the same name
    (another suite's, or a rerun after deleting the old one) must not look like a resume of the old run,
    whose steps it would find already counted. Drawn once, in `setup`, and checkpointed with the state.
    """
    return f"{run_id_for(run_dir)[:119]}-{secrets.token_hex(4)}"


class _RecordedOperations(BaseModel):
    """The one field of a recorded run's facts a replay takes over (the rest may be of another version)."""

    operations: list[OperationKind] | None = None


def _operations_to_offer_for(context: RunContext, measured: list[OperationKind] | None) -> list[OperationKind] | None:
    """The problem's operation kinds for the KB's offers; in a replay, the recorded run's (None, offering
    everything, where it kept none: it ran before they were kept), so the replay is offered what it was."""
    if context.replay_from is None:
        return measured
    try:
        recorded = RunFiles(context.replay_from).read(RunFiles.FACTS)
        return _RecordedOperations.model_validate_json(recorded).operations
    except (OSError, ValueError):  # unreadable, not text, or not the facts (ValidationError is a ValueError)
        return None
