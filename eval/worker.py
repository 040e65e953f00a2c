"""One problem of a suite, optimized in the process (or Ray task) that runs it: start or resume its run
directory through the graph's API, report progress, stop at the problem's budget (or end cleanly when the
suite's runner asks, `eval.suite_tokens`), and summarise the checkpointed state as a `ProblemResult`. Any
failure of the problem becomes its result, never the suite's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from kernelblaster.eval.problems import SuiteProblem
from kernelblaster.eval.results import ProblemResult, RoleTokens, StopCause
from kernelblaster.eval.suite_tokens import SuiteStopRequest
from kernelblaster.graph.app.api import Run
from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.cost import usage_cost
from kernelblaster.graph.core.progress import Progress
from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.core.state import KernelRef
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.harness.machine import Machine, this_machine
from kernelblaster.harness.problem import ProblemError
from kernelblaster.harness.result import EvalResult
from kernelblaster.kb.safe_files import replace_as_sole_writer
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import write_text_atomically


class ProblemBudget(BaseModel):
    """The wall time one problem may take, checked after every node of its run; the run stops there with its
    best kernel so far. (Its token limit is the run's own, `RunContext.token_limit`, which ends it cleanly.)"""

    max_wall_s: float | None = Field(default=None, gt=0)

    def exceeded(self, wall_s: float) -> bool:
        return self.max_wall_s is not None and wall_s >= self.max_wall_s


class ProblemJob(BaseModel):
    """Everything a worker needs to start or resume one problem of a suite."""

    position: int
    problem: SuiteProblem
    run_dir: str
    context: RunContext
    budget: ProblemBudget = ProblemBudget()
    start_kb: bytes = Field(description="The KB the run starts from, written to `context.kb_path` if missing")
    wall_file: str = Field(description="Where the seconds the problem has run are kept across sessions")
    stop_file: str | None = Field(default=None, description="Where the runner asks the suite's runs to end "
                                  "(`eval.suite_tokens`); None if the suite has no token limit")


class ProblemEvent(BaseModel):
    """What a worker tells the suite while it runs: a progress note, the best speedup and tokens so far."""

    position: int
    slot: str
    text: str
    best_speedup: float | None = None
    tokens: int = 0


Emit = Callable[[ProblemEvent], None]


def run_problem(job: ProblemJob, services: Services, emit: Emit, slot: str) -> ProblemResult:
    """Optimize the job's problem to the end of its run or its budget; every failure is the result."""
    clock = _WallClock(Path(job.wall_file))
    suite_stop = SuiteStopRequest(Path(job.stop_file), services.token_budget) if job.stop_file else None
    if suite_stop is not None:
        services.token_budget = suite_stop  # the parent of each run budget these services make
    try:
        run = _open_or_create(job, services)
        stopped_by = _advance(run, job, emit, slot, clock)
        result = problem_result(run, slot, clock.total(), stopped_by, suite_stop)
    except ProblemError as error:
        result = ProblemResult(verdict="load_error", gpu=slot, wall_s=clock.total(), error=str(error))
    except UserFacingError as error:
        result = ProblemResult(verdict="error", gpu=slot, wall_s=clock.total(), error=str(error))
    except Exception as error:  # a failed problem is a result of the suite, which goes on
        result = ProblemResult(verdict="error", gpu=slot, wall_s=clock.total(),
                               error=f"{type(error).__name__}: {error}")
    if result.gpu_name is None:  # no kernel measured: the machine is this worker's, where the run was made
        result = with_machine(result, this_machine(job.context.gpus[0]))
    return result


def with_machine(result: ProblemResult, machine: Machine) -> ProblemResult:
    """The result naming the machine it was measured on."""
    return result.model_copy(update={"gpu_name": machine.gpu, "driver_version": machine.driver,
                                     "cuda_runtime": machine.cuda_runtime, "nvcc_version": machine.nvcc,
                                     "torch_version": machine.torch})


def _open_or_create(job: ProblemJob, services: Services) -> Run:
    files = RunFiles(job.run_dir)
    if files.record.exists():
        return Run.open(job.run_dir, services)
    assert job.context.kb_path is not None, "a suite gives each problem its working KB"
    kb_path = Path(job.context.kb_path)
    if not kb_path.exists():
        replace_as_sole_writer(kb_path, job.start_kb)
    return Run.create(job.problem.path, job.context, services=services)


def _advance(run: Run, job: ProblemJob, emit: Emit, slot: str, clock: _WallClock) -> StopCause | None:
    emit(ProblemEvent(position=job.position, slot=slot, text="started"))
    for progress in run.progress():
        clock.tick()
        emit(_event(job.position, slot, progress))
        if job.budget.exceeded(clock.total()):
            return "wall_time"
    return None


def _event(position: int, slot: str, progress: Progress) -> ProblemEvent:
    note = progress.note
    return ProblemEvent(position=position, slot=slot, text=f"{note.where()} {note.node}: {note.text}"[:300],
                        best_speedup=progress.best_speedup, tokens=progress.tokens)


def problem_result(run: Run, slot: str, wall_s: float, stopped_by: StopCause | None,
              suite_stop: SuiteStopRequest | None = None) -> ProblemResult:
    """The problem's result from its run's checkpointed state; a run that ended early counts as stopped by
    `suite_tokens` if the suite asked it to stop, else by `tokens` (its own token limit)."""
    state = run.checkpointed_state()
    ended_early = state.ended_early
    if stopped_by is None and ended_early is not None:
        stopped_by = "suite_tokens" if suite_stop is not None and ended_early == suite_stop.reason else "tokens"
    baseline, initial, best, usage = state.baseline, state.initial, state.best, state.token_usage
    measured = _measured(run.files, best)
    result = ProblemResult(
        verdict="ok" if best is not None else "no_valid_kernel", gpu=slot,
        eager_ms=baseline.eager_ms if baseline else None, compile_ms=baseline.compile_ms if baseline else None,
        initial_ms=initial.time_ms if initial else None, best_ms=best.time_ms if best else None,
        vs_eager=measured.speedup.vs_eager if measured and measured.speedup else None,
        vs_compile=measured.speedup.vs_compile if measured and measured.speedup else None,
        vs_baseline=measured.speedup.vs_best if measured and measured.speedup else None,
        vs_initial=initial.time_ms / best.time_ms if initial and best else None,
        roofline_fraction=measured.roofline.fraction_of_floor if measured and measured.roofline else None,
        wall_s=wall_s, best_sha256=best.sha256 if best else None,
        stopped_by=stopped_by,
        cost_usd=cost.usd if (cost := usage_cost(usage, run.record.context.prices)) else None,
        tokens=tokens_by_role(usage),
    )
    # The best kernel's own record: a resumed problem may have measured it on another machine than this one.
    return with_machine(result, measured.machine) if measured and measured.machine else result


def _measured(files: RunFiles, best: KernelRef | None) -> EvalResult | None:
    return EvalResult.model_validate_json(files.read(best.result)) if best is not None else None


def tokens_by_role(usage: list[TokenUsage]) -> list[RoleTokens]:
    """Calls and tokens per role, in the order roles were first used."""
    totals: dict[str, RoleTokens] = {}
    for entry in usage:
        total = totals.setdefault(entry.role, RoleTokens(role=entry.role, calls=0, input_tokens=0, output_tokens=0))
        total.calls += 1
        total.input_tokens += entry.input_tokens
        total.output_tokens += entry.output_tokens
    return list(totals.values())


class _WallClock:
    """Seconds a problem has run, over every worker session (a resumed problem adds to what it had)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._before = float(path.read_text()) if path.exists() else 0.0
        self._started = time.monotonic()

    def total(self) -> float:
        return self._before + time.monotonic() - self._started

    def tick(self) -> None:
        write_text_atomically(self._path, f"{self.total():.3f}")
