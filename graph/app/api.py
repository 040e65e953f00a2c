"""The Python API: optimize a problem, watch its progress, resume it, answer its questions.

    from kernelblaster.graph.app.api import optimize
    from kernelblaster.graph.core.context import RunContext

    outcome = optimize("examples/problems/elementwise_swish_scale.py", RunContext(iterations=1))
    print(outcome.best_source, outcome.best_speedup)

`optimize`, `resume` and `answer` run until the run finishes or waits for a person's answer (`--llm human`),
calling `on_progress` with each `Progress`; `Run` gives the same as a stream. Everything a run needs to
continue is in its run directory: `run.json` (problem and configuration) and `checkpoints.sqlite`.
A new run is checked in full (`graph.core.preflight`) before its directory is created; a run that fails
writes `report.md` saying why; one process at a time advances a run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from langgraph.types import Command, StreamMode
from pydantic import BaseModel

from kernelblaster.graph.app.checkpoint import (
    DURABILITY,
    check_checkpoints_readable,
    checkpoints_presence,
    create_checkpoints,
    open_checkpointer,
    thread_config,
)
from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.cost import ModelPrice, usage_cost
from kernelblaster.graph.core.preflight import check_new_run
from kernelblaster.graph.core.progress import Progress, ProgressNote
from kernelblaster.graph.core.run_files import (
    RunFiles,
    RunRecord,
    RunStatus,
    RunStatusName,
    run_id_for,
)
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.core.state import KernelRef, OptimizationInput, OptimizationState
from kernelblaster.graph.graph import RunGraph, compile_graph
from kernelblaster.graph.llm.human import HumanQuestion
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.kb.paths import chosen_kb_path
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import write_text_atomically

_RUN_STATE_FIELDS = tuple(field.name for field in fields(OptimizationState))


class PendingQuestion(BaseModel):
    """A prompt waiting for a person's answer (`--llm human`)."""

    id: str
    question: HumanQuestion


RunOutcomeStatus = Literal["finished", "waiting_for_answer", "stopped"]


class RunOutcome(BaseModel):
    """Where a run stands. `stopped`: it ended before finishing (a crash, a kill, Ctrl-C); resume it. A finished
    run that `ended_early` (its token budget spent) says why."""

    run_dir: Path
    status: RunOutcomeStatus
    best_source: Path | None
    best_speedup: float | None
    report: Path | None
    questions: list[PendingQuestion]
    ended_early: str | None = None


ProgressCallback = Callable[[Progress], None]

# Node updates give the tokens and the best speedup; the custom stream carries the nodes' progress notes.
STREAM_MODES: list[StreamMode] = ["updates", "custom"]
StreamItem = tuple[tuple[str, ...], StreamMode, Any]


class Run:
    """One run directory and the graph that advances it."""

    def __init__(self, files: RunFiles, record: RunRecord, services: Services) -> None:
        self.files = files
        self.record = record
        self.context = record.context_in(files.root)
        self.services = services

    @classmethod
    def create(cls, problem: Path | str, context: RunContext, *, init: Path | str | None = None,
               services: Services | None = None) -> Run:
        """A new run directory for `problem`, checked in full before anything is written (the problem's model
        runs once there, on shapes alone where it can)."""
        services = services or Services()
        checked = check_new_run(problem, context, init, services)
        files = RunFiles(checked.run_dir)
        try:
            files.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserFacingError(f"cannot create the run directory {files.root}: {error.strerror or error}") from None
        if not checked.kb_path.exists():
            KnowledgeBase.create(checked.kb_path)  # the default KB, on first use, once the run has its directory
        kb_path = _relative_if_inside(checked.kb_path, files.root)
        replay_from = str(Path(context.replay_from).resolve()) if context.replay_from else None
        stored = context.model_copy(update={"run_dir": None, "kb_path": kb_path, "replay_from": replay_from})
        record = RunRecord(run_id=run_id_for(str(files.root)), problem_path=str(checked.problem),
                           init_kernel=str(checked.init) if checked.init else None, created=_now(), context=stored)
        with files.exclusive():
            if files.record.exists():
                raise UserFacingError(f"{files.root} already holds a run: continue it with "
                                      f"`kernelblaster resume {files.root}`")
            create_checkpoints(files)
            files.write_record(record)
            files.write_status(RunStatus(status="created", updated=_now()))
        return cls(files, record, services)

    @classmethod
    def open(cls, run_dir: Path | str, services: Services | None = None, *, restart: bool = False) -> Run:
        """An existing run, checked before anything is written: its files are readable, its KB is there,
        nothing it needs is missing (a finished run needs no endpoint or GPU: nothing is left to run). A run
        whose checkpoints were deleted or emptied starts over only with `restart`."""
        files = RunFiles(Path(run_dir).resolve())
        record = files.read_record()
        lost = _checkpoints_lost(files, record, restart)
        chosen_kb_path(record.context_in(files.root).kb_path)
        run = cls(files, record, services or Services())
        if not lost and run.outcome().status == "finished":
            return run
        run.services.check(record.context_in(files.root))
        if lost:
            files.checkpoints.unlink(missing_ok=True)  # empty: nothing in it to lose
            create_checkpoints(files)
        return run

    def progress(self, answers: dict[str, str] | None = None) -> Generator[Progress]:
        """Start or continue the run (with answers to pending questions, by id) until it finishes or waits.

        At the end the run's `status.json` says where it stands (and `question.md` holds the questions it
        waits on); a run stopped by an error writes `report.md` saying why. When it stops being advanced
        (finished, waiting for an answer, failed, or no longer read), the run's resources in this process
        are given back (`Services.release`)."""
        try:
            yield from self._advance_exclusively(answers)
        finally:
            self.services.release(self.files.root)

    def _advance_exclusively(self, answers: dict[str, str] | None) -> Generator[Progress]:
        with self.files.exclusive():
            try:
                yield from self._stream(answers)
            except (KeyboardInterrupt, GeneratorExit):
                self._set_status("stopped", None, "interrupted")
                raise
            except UserFacingError as error:
                self._fail(str(error))
                raise
            except Exception as error:
                self._fail(f"an unexpected {type(error).__name__}: {error}")
                raise
            outcome = self.outcome()
            if outcome.questions:
                write_questions(self.files, outcome.questions)
            self._set_status(outcome.status, outcome.best_speedup)

    def advance(self, on_progress: ProgressCallback | None = None) -> RunOutcome:
        """Start or continue the run until it finishes or waits for an answer."""
        return self._drive(None, on_progress)

    def answer(self, text: str, question_id: str | None = None,
               on_progress: ProgressCallback | None = None) -> RunOutcome:
        """Answer a pending question (the first one, or `question_id`) and continue the run."""
        outcome = self.outcome()
        pending = outcome.questions
        if outcome.status == "finished":
            raise UserFacingError(f"{self.files.root}: the run is finished, so no question is waiting for an answer "
                                  f"(its report: {outcome.report})")
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
        state = self._as_state(snapshot.values)
        best, report = state.best, state.report
        status: RunOutcomeStatus = "waiting_for_answer" if questions else "finished" if report else "stopped"
        return RunOutcome(run_dir=self.files.root, status=status,
                          best_source=self.files.best_source if report and best else None,
                          best_speedup=best.speedup if best else None, report=Path(report) if report else None,
                          questions=questions, ended_early=state.ended_early)

    def checkpointed_state(self) -> OptimizationState:
        """The run's state as last checkpointed: baseline, initial and best kernels, steps, token usage ..."""
        with open_checkpointer(self.files) as checkpointer:
            snapshot = compile_graph(self.services, checkpointer).get_state(thread_config(self.record.run_id))
        return self._as_state(snapshot.values)

    def _as_state(self, values: dict[str, Any]) -> OptimizationState:
        # A checkpoint holds the channels ever written, the state's defaults stand for the others: a run
        # created but never advanced has none, not even its problem.
        written = {name: values[name] for name in _RUN_STATE_FIELDS if name in values}
        return OptimizationState(**{"problem_path": self.record.problem_path, **written})

    def _drive(self, answers: dict[str, str] | None, on_progress: ProgressCallback | None) -> RunOutcome:
        # Closed at once if `on_progress` raises (Ctrl-C), so the run's status is written and its lock freed.
        with closing(self.progress(answers)) as stream:
            for progress in stream:
                if on_progress is not None:
                    on_progress(progress)
        return self.outcome()

    def _stream(self, answers: dict[str, str] | None) -> Generator[Progress]:
        with open_checkpointer(self.files) as checkpointer:
            graph = compile_graph(self.services, checkpointer)
            tracker = _Tracker.from_state(self._as_state(graph.get_state(thread_config(self.record.run_id)).values),
                                          self.context.prices)
            self._set_status("running", tracker.best_speedup)
            # `Pregel.stream` is typed as an iterator of any item; with several modes and subgraphs it is
            # a generator of (namespace, mode, data) triples.
            stream = cast(Generator[StreamItem], graph.stream(
                self._graph_input(graph, answers), thread_config(self.record.run_id), context=self.context,
                stream_mode=STREAM_MODES, subgraphs=True, durability=DURABILITY))
            # Closed before the checkpointer: an exception here (Ctrl-C) must let running nodes finish
            # with the database still open.
            with closing(stream):
                for namespace, mode, data in stream:
                    progress = tracker.update(namespace, mode, data)
                    if progress is not None:
                        yield progress

    def _fail(self, reason: str) -> None:
        """Say in `report.md` (and `status.json`) why the run stopped; `resume` continues it once fixed."""
        write_text_atomically(self.files.report_markdown, failure_report(self.record, self.files, reason))
        self._set_status("failed", None, reason)

    def _set_status(self, status: RunStatusName, best_speedup: float | None, reason: str | None = None) -> None:
        previous = self.files.read_status()
        best = best_speedup if best_speedup is not None else previous.best_speedup if previous else None
        self.files.write_status(RunStatus(status=status, updated=_now(), best_speedup=best, reason=reason,
                                          pid=os.getpid() if status == "running" else None))

    def _graph_input(self, graph: RunGraph, answers: dict[str, str] | None) -> Any:
        if answers is not None:
            return Command(resume=answers)
        if graph.get_state(thread_config(self.record.run_id)).values:
            return None  # resume from the last checkpoint
        return OptimizationInput(problem_path=self.record.problem_path, init_kernel=self.record.init_kernel)


def optimize(problem: Path | str, context: RunContext | None = None, *, init: Path | str | None = None,
             services: Services | None = None, on_progress: ProgressCallback | None = None) -> RunOutcome:
    """Optimize `problem` from scratch (or from the CUDA in `init`) in a new run directory."""
    return Run.create(problem, context or RunContext(), init=init, services=services).advance(on_progress)


def resume(run_dir: Path | str, *, services: Services | None = None, on_progress: ProgressCallback | None = None,
           restart: bool = False) -> RunOutcome:
    """Continue a run after a crash, a kill or Ctrl-C, without redoing its finished steps (`restart`: start
    over a run whose checkpoints were deleted or emptied)."""
    return Run.open(run_dir, services, restart=restart).advance(on_progress)


def answer(run_dir: Path | str, text: str, *, question_id: str | None = None, services: Services | None = None,
           on_progress: ProgressCallback | None = None) -> RunOutcome:
    """Answer a pending question of a `--llm human` run (the first one, or `question_id`) and continue it."""
    return Run.open(run_dir, services).answer(text, question_id, on_progress)


def write_questions(files: RunFiles, questions: list[PendingQuestion]) -> Path:
    """Write the pending prompts to `question.md`, first to be answered first."""
    parts = []
    for pending in questions:
        question = pending.question
        problem = (f"\n**Your previous answer could not be used:** {question.previous_answer_problem}\n"
                   if question.previous_answer_problem else "")
        parts.append(f"# Question {pending.id} ({question.role}, node {question.node})\n{problem}\n"
                     f"## Instructions\n\n{question.instructions}\n\n## Prompt\n\n{question.prompt}\n\n"
                     f"## Answer format\n\n{question.answer_format}\n")
    write_text_atomically(files.question, "\n\n".join(parts))
    return files.question


def failure_report(record: RunRecord, files: RunFiles, reason: str) -> str:
    """`report.md` of a run that stopped on an error: why, and how to go on."""
    return (f"# KernelBlaster run {record.run_id}: failed\n\nProblem: `{record.problem_path}`\n\n"
            f"The run stopped on this error:\n\n    {reason}\n\nEverything it did so far is kept in "
            f"this directory. Fix the cause, then continue with `kernelblaster resume {files.root}`.\n")


def _checkpoints_lost(files: RunFiles, record: RunRecord, restart: bool) -> bool:
    """Whether the run's checkpoints were deleted or emptied (allowed only with `restart`); an error if they
    are damaged, or intact and `restart` was asked for."""
    presence = checkpoints_presence(files, record.problem_path)
    if presence == "present":
        if restart:
            raise UserFacingError(f"--restart: the checkpoints of {files.root} are intact; resume it without "
                                  "--restart")
        check_checkpoints_readable(files, record.run_id, record.problem_path)
        return False
    if not restart:
        raise UserFacingError(
            f"{files.checkpoints} is {presence}: the run's progress is lost and it would start over from the "
            f"beginning; to do that, run `kernelblaster resume {files.root} --restart` (its kernels and "
            "results stay)")
    return True


def _relative_if_inside(path: Path, root: Path) -> str:
    """`path` relative to `root` if it is inside it (so the run directory stays movable), else absolute."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class _Tracker:
    """Follows the stream: the notes nodes write, the best speedup and the tokens in the state updates."""

    def __init__(self, best_speedup: float | None, usage: list[TokenUsage], prices: dict[str, ModelPrice]) -> None:
        self.best_speedup = best_speedup
        self.usage = list(usage)
        self.prices = prices

    @classmethod
    def from_state(cls, state: OptimizationState, prices: dict[str, ModelPrice]) -> _Tracker:
        return cls(state.best.speedup if state.best else None, state.token_usage, prices)

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
