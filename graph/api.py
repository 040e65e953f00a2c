"""The Python API: optimize a problem, watch its progress, resume it, answer its questions.

    from kernelblaster.graph.api import optimize
    from kernelblaster.graph.context import RunContext

    outcome = optimize("examples/problems/elementwise_swish_scale.py", RunContext(iterations=1))
    print(outcome.best_source, outcome.best_speedup)

`optimize`, `resume` and `answer` run until the run finishes or waits for a person's answer (`--llm human`),
calling `on_progress` with each `Progress`; `Run` gives the same as a stream. Everything a run needs to
continue is in its run directory: `run.json` (problem and configuration) and `checkpoints.sqlite`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from pydantic import BaseModel

from kernelblaster.graph.checkpoint import DURABILITY, open_checkpointer, thread_config
from kernelblaster.graph.context import RunContext
from kernelblaster.graph.cost import ModelPrice, usage_cost
from kernelblaster.graph.graph import compile_graph
from kernelblaster.graph.human import HumanQuestion
from kernelblaster.graph.progress import Progress, ProgressNote
from kernelblaster.graph.run_files import RUNS_DIRECTORY, RunFiles, RunRecord, run_id_for
from kernelblaster.graph.services import Services
from kernelblaster.graph.state import KernelRef, OptimizationInput, TokenUsage
from kernelblaster.harness.problem import load_problem
from kernelblaster.kb.paths import resolve_kb_path
from kernelblaster.tools.errors import UserFacingError


class PendingQuestion(BaseModel):
    """A prompt waiting for a person's answer (`--llm human`)."""

    id: str
    question: HumanQuestion


class RunOutcome(BaseModel):
    """Where a run stands. `stopped`: it ended before finishing (a crash, a kill, Ctrl-C); resume it. A finished
    run that `ended_early` (its token budget spent) says why."""

    run_dir: Path
    status: Literal["finished", "waiting_for_answer", "stopped"]
    best_source: Path | None
    best_speedup: float | None
    report: Path | None
    questions: list[PendingQuestion]
    ended_early: str | None = None


ProgressCallback = Callable[[Progress], None]


class Run:
    """One run directory and the graph that advances it."""

    def __init__(self, files: RunFiles, record: RunRecord, services: Services) -> None:
        self.files = files
        self.record = record
        self.services = services

    @classmethod
    def create(cls, problem: Path | str, context: RunContext, *, init: Path | str | None = None,
               services: Services | None = None) -> Run:
        """A new run directory for `problem`, checked before anything is written or run on a GPU."""
        services = services or Services()
        services.check(context)
        problem_path = Path(problem).resolve()
        load_problem(problem_path)
        if init is not None and not Path(init).is_file():
            raise UserFacingError(f"{init}: the --init CUDA file does not exist")
        run_dir = Path(context.run_dir or RUNS_DIRECTORY / f"{problem_path.stem}-{datetime.now():%Y%m%d-%H%M%S}")
        files = RunFiles(run_dir.resolve())
        if files.record.exists():
            raise UserFacingError(f"{run_dir} already holds a run: continue it with `kernelblaster resume {run_dir}`")
        replay_from = str(Path(context.replay_from).resolve()) if context.replay_from else None
        context = context.model_copy(update={"run_dir": str(files.root), "replay_from": replay_from,
                                             "kb_path": str(resolve_kb_path(context.kb_path).resolve())})
        record = RunRecord(run_id=run_id_for(str(files.root)), problem_path=str(problem_path),
                           init_kernel=str(Path(init).resolve()) if init else None, context=context)
        files.write_record(record)
        return cls(files, record, services)

    @classmethod
    def open(cls, run_dir: Path | str, services: Services | None = None) -> Run:
        files = RunFiles(Path(run_dir).resolve())
        if not files.record.exists():
            raise UserFacingError(f"{run_dir}: not a run directory (no run.json)")
        record = files.read_record()
        services = services or Services()
        services.check(record.context)
        return cls(files, record, services)

    def progress(self, answers: dict[str, str] | None = None) -> Iterator[Progress]:
        """Start or continue the run (with answers to pending questions, by id) until it finishes or waits.

        When it stops being advanced (finished, waiting for an answer, failed, or no longer read), the run's
        resources in this process are given back (`Services.release`)."""
        try:
            with open_checkpointer(self.files) as checkpointer:
                graph = compile_graph(self.services, checkpointer)
                tracker = _Tracker.from_state(graph.get_state(thread_config(self.record.run_id)).values,
                                              self.record.context.prices)
                stream = graph.stream(self._graph_input(graph, answers), thread_config(self.record.run_id),
                                      context=self.record.context, stream_mode=["updates", "custom"],
                                      subgraphs=True, durability=DURABILITY)
                # Closed before the checkpointer: an exception here (Ctrl-C) must let running nodes finish
                # with the database still open.
                with closing(stream):
                    for namespace, mode, data in stream:
                        progress = tracker.update(namespace, mode, data)
                        if progress is not None:
                            yield progress
        finally:
            # Only now: closing the stream waited for every node still running.
            self.services.release(self.files.root)

    def advance(self, on_progress: ProgressCallback | None = None) -> RunOutcome:
        """Start or continue the run until it finishes or waits for an answer."""
        return self._drive(None, on_progress)

    def answer(self, text: str, question_id: str | None = None,
               on_progress: ProgressCallback | None = None) -> RunOutcome:
        """Answer a pending question (the first one, or `question_id`) and continue the run."""
        pending = self.outcome().questions
        if not pending:
            raise UserFacingError(f"{self.files.root}: no question is waiting for an answer")
        chosen = next((q for q in pending if q.id == question_id), None) if question_id else pending[0]
        if chosen is None:
            raise UserFacingError(f"{self.files.root}: no pending question {question_id} (waiting: "
                                  f"{', '.join(q.id for q in pending)})")
        return self._drive({chosen.id: text}, on_progress)

    def outcome(self) -> RunOutcome:
        """Where the run stands: finished (with its best kernel and report) or waiting for answers."""
        with open_checkpointer(self.files) as checkpointer:
            snapshot = compile_graph(self.services, checkpointer).get_state(thread_config(self.record.run_id))
        questions = [PendingQuestion(id=item.id, question=HumanQuestion.model_validate(item.value))
                     for item in snapshot.interrupts]
        best: KernelRef | None = snapshot.values.get("best")
        report = snapshot.values.get("report")
        status = "waiting_for_answer" if questions else "finished" if report else "stopped"
        return RunOutcome(run_dir=self.files.root, status=status,
                          best_source=self.files.best_source if report and best else None,
                          best_speedup=best.speedup if best else None, report=Path(report) if report else None,
                          questions=questions, ended_early=snapshot.values.get("ended_early"))

    def _drive(self, answers: dict[str, str] | None, on_progress: ProgressCallback | None) -> RunOutcome:
        for progress in self.progress(answers):
            if on_progress is not None:
                on_progress(progress)
        return self.outcome()

    def _graph_input(self, graph: CompiledStateGraph, answers: dict[str, str] | None) -> Any:
        if answers is not None:
            return Command(resume=answers)
        if graph.get_state(thread_config(self.record.run_id)).values:
            return None  # resume from the last checkpoint
        return OptimizationInput(problem_path=self.record.problem_path, init_kernel=self.record.init_kernel)


def optimize(problem: Path | str, context: RunContext | None = None, *, init: Path | str | None = None,
             services: Services | None = None, on_progress: ProgressCallback | None = None) -> RunOutcome:
    """Optimize `problem` from scratch (or from the CUDA in `init`) in a new run directory."""
    return Run.create(problem, context or RunContext(), init=init, services=services).advance(on_progress)


def resume(run_dir: Path | str, *, services: Services | None = None,
           on_progress: ProgressCallback | None = None) -> RunOutcome:
    """Continue a run after a crash, a kill or Ctrl-C, without redoing its finished steps."""
    return Run.open(run_dir, services).advance(on_progress)


def answer(run_dir: Path | str, text: str, *, question_id: str | None = None, services: Services | None = None,
           on_progress: ProgressCallback | None = None) -> RunOutcome:
    """Answer a pending question of a `--llm human` run (the first one, or `question_id`) and continue it."""
    return Run.open(run_dir, services).answer(text, question_id, on_progress)


class _Tracker:
    """Follows the stream: the notes nodes write, the best speedup and the tokens in the state updates."""

    def __init__(self, best_speedup: float | None, usage: list[TokenUsage], prices: dict[str, ModelPrice]) -> None:
        self.best_speedup = best_speedup
        self.usage = list(usage)
        self.prices = prices

    @classmethod
    def from_state(cls, values: dict[str, Any], prices: dict[str, ModelPrice]) -> _Tracker:
        best: KernelRef | None = values.get("best")
        return cls(best.speedup if best else None, values.get("token_usage", []), prices)

    def update(self, namespace: tuple[str, ...], mode: str, data: Any) -> Progress | None:
        if mode == "custom" and isinstance(data, ProgressNote):
            return Progress(note=data, best_speedup=self.best_speedup, tokens=sum(u.total for u in self.usage),
                            cost=usage_cost(self.usage, self.prices))
        if mode == "updates":
            for node, update in data.items():
                # A finished trajectory hands its tokens to the run again; they were counted inside it.
                if isinstance(update, dict) and not (namespace == () and node == "trajectory"):
                    self._count(update)
        return None

    def _count(self, update: dict[str, Any]) -> None:
        self.usage += update.get("token_usage") or []
        best: KernelRef | None = update.get("best")
        if best is not None and best.speedup is not None:
            self.best_speedup = max(best.speedup, self.best_speedup or 0.0)
