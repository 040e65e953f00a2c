"""The suite runner: starts each problem when a GPU is free and the KB version it must start from exists,
records each result as it arrives, and hands each problem's KB journal to the one KB writer, which applies
them in suite order. The same loop drives this host's GPUs (`LocalLauncher`) or a Ray cluster.

`start_suite` creates a suite directory and runs it; `resume_suite` continues one after a crash or a kill:
finished problems are kept, interrupted ones resume from their checkpoints, and no KB change counts twice.
A suite with a token limit stops starting problems once its problems have spent it, and asks the running
ones to end cleanly (`eval.suite_tokens`); how the session ended is recorded (`Suite.ending`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from kernelblaster.eval.local_launcher import Finished, LocalLauncher, Message, ServicesFactory, Task
from kernelblaster.eval.progress import SuiteBoard, SuiteDisplay
from kernelblaster.eval.results import KBVersionRow, ProblemResult, ProblemRow
from kernelblaster.eval.suite import Suite, SuiteConfig, SuiteEnding, create_suite, open_suite, runner_lock
from kernelblaster.eval.suite_kb import start_version
from kernelblaster.eval.suite_tokens import SuiteTokens, request_stop, withdraw_stop
from kernelblaster.eval.worker import ProblemEvent, ProblemJob, run_problem
from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.llm.recording import recorded_tokens
from kernelblaster.kb.journal import KBChange, read_changes
from kernelblaster.kb.snapshots import SnapshotPolicy
from kernelblaster.kb.store import trim_snapshots

POLL_S = 1.0
# A finished problem keeps the last snapshot of its working KB, the KB as its run left it.
FINISHED_PROBLEM_SNAPSHOTS = SnapshotPolicy(keep_runs=0)


class Launcher(Protocol):
    """Runs tasks somewhere, a bounded number at a time."""

    @property
    def free_slots(self) -> int: ...

    def start(self, key: int, task: Task, job: BaseModel) -> str: ...

    def wait(self, timeout: float) -> list[Message]: ...

    def close(self) -> None: ...


class KBWriter(Protocol):
    """The one writer of the suite's KB (`eval.suite_kb.SuiteKB`, or the Ray actor holding one)."""

    @property
    def latest(self) -> int: ...

    def document_bytes(self, version: int) -> bytes: ...

    def submit(self, position: int, changes: Sequence[KBChange]) -> list[KBVersionRow]: ...


def start_suite(root: Path, config: SuiteConfig, services_factory: ServicesFactory = Services,
                display: SuiteDisplay | None = None, ray_address: str | None = None) -> list[ProblemRow]:
    """Create the suite directory `root` and run every problem."""
    with runner_lock(root):
        suite = create_suite(root, config)
        return _run(suite, services_factory, display, ray_address)


def resume_suite(root: Path, services_factory: ServicesFactory = Services, display: SuiteDisplay | None = None,
                 ray_address: str | None = None, token_limit: int | None = None) -> list[ProblemRow]:
    """Continue the suite in `root`: interrupted problems resume, pending ones start, finished ones stay.
    `token_limit` replaces the suite's token limit (to go on after it stopped there, say)."""
    with runner_lock(root):
        suite = open_suite(root)
        if token_limit is not None:
            suite.set_token_limit(token_limit)
        return _run(suite, services_factory, display, ray_address)


def _run(suite: Suite, services_factory: ServicesFactory, display: SuiteDisplay | None,
         ray_address: str | None) -> list[ProblemRow]:
    try:
        if ray_address is None:
            launcher: Launcher = LocalLauncher(suite.config.gpus, services_factory)
            kb: KBWriter = suite.kb()
        else:
            from kernelblaster.eval.ray_cluster import connect

            launcher, kb = connect(ray_address, suite, services_factory)
        return SuiteRunner(suite, launcher, kb, display).run()
    finally:
        suite.db.close()


class SuiteRunner:
    """One pass over a suite's unfinished problems."""

    def __init__(self, suite: Suite, launcher: Launcher, kb: KBWriter, display: SuiteDisplay | None) -> None:
        self.suite = suite
        self.launcher = launcher
        self.kb = kb
        self.display = display
        rows = suite.db.problems()
        self.board = SuiteBoard(rows)
        self._rows = {row.position: row for row in rows}
        self._todo = [row for row in rows if row.status in ("pending", "running")]
        self._in_flight: dict[int, int] = {}  # position -> the KB version it started from
        self.tokens = SuiteTokens(suite.config.token_limit)
        for row in rows:
            self.tokens.seen(row.position, _spent(row))
        self._stopping: str | None = None

    def run(self) -> list[ProblemRow]:
        self.suite.record_ending(None)
        withdraw_stop(self.suite.stop_request)
        try:
            self._submit_unapplied()
            self._check_tokens()
            while (self._todo and self._stopping is None) or self._in_flight:
                self._start_what_can_start()
                for message in self.launcher.wait(POLL_S):
                    self._handle(message)
                self._check_tokens()
        finally:
            self.launcher.close()
        self.suite.record_ending(self._ending())
        return self.suite.db.problems()

    def _check_tokens(self) -> None:
        """Once the suite's problems have spent its token limit: start none, and ask those running to end."""
        reason = self.tokens.exhausted()
        if reason is not None and self._stopping is None:
            self._stopping = reason
            request_stop(self.suite.stop_request, reason)
            if self.display:
                self.display.stopping(self.board, reason, len(self._todo))

    def _ending(self) -> SuiteEnding:
        if self._stopping is None:
            return SuiteEnding(reason="finished", detail="every problem ran", tokens=self.tokens.total, left=0)
        return SuiteEnding(reason="token_limit", detail=self._stopping, tokens=self.tokens.total,
                           left=len(self._todo))

    def _submit_unapplied(self) -> None:
        """Problems that finished before a kill, but whose learning had not reached the suite's KB yet."""
        if self.suite.config.learns:
            for row in self._rows.values():
                if row.status in ("done", "failed") and row.kb_version_after is None:
                    self._submit(row.position)

    def _start_what_can_start(self) -> None:
        config = self.suite.config
        while self._todo and self._stopping is None and self.launcher.free_slots > 0:
            row = self._todo[0]
            version = (row.kb_version_before if row.kb_version_before is not None
                       else start_version(row.position, config.window, config.learns))
            if self.kb.latest < version:
                return  # problems start in order: this one waits for the learning of those before it
            self._todo.pop(0)
            run_dir = self.suite.run_dir(row.position)
            self.suite.db.mark_running(row.position, str(run_dir), version)
            slot = self.launcher.start(row.position, run_problem, self._job(row, run_dir, version))
            self._in_flight[row.position] = version
            self.board.started(row.position, slot)

    def _job(self, row: ProblemRow, run_dir: Path, version: int) -> ProblemJob:
        config = self.suite.config
        context = config.context.model_copy(update={"run_dir": str(run_dir),
                                                    "kb_path": str(self.suite.work_kb(row.position)), "gpus": (0,)})
        return ProblemJob(position=row.position, problem=config.problems[row.position], run_dir=str(run_dir),
                          context=context, budget=config.budget, start_kb=self.kb.document_bytes(version),
                          wall_file=str(self.suite.work_dir(row.position) / "wall_s.txt"),
                          stop_file=str(self.suite.stop_request) if config.token_limit else None)

    def _handle(self, message: Message) -> None:
        if isinstance(message, ProblemEvent):
            self.tokens.seen(message.position, message.tokens)
            self.board.update(message)
            if self.display:
                self.display.event(self.board, message)
            return
        if not isinstance(message, Finished):
            return
        result = message.result if isinstance(message.result, ProblemResult) else ProblemResult(
            verdict="error", error=f"the problem's worker died: {message.why}")
        version = self._in_flight.pop(message.key)
        self.tokens.seen(message.key, result.total_tokens)
        learns = self.suite.config.learns
        self.suite.db.record_result(message.key, result, kb_version_after=None if learns else version)
        # Its working KB's snapshot per iteration can go: what each iteration learned is in its run's journal.
        trim_snapshots(self.suite.work_kb(message.key), FINISHED_PROBLEM_SNAPSHOTS)
        self.board.finished(message.key, result)
        if self.display:
            self.display.finished(self.board, self._rows[message.key].problem_id, result)
        if learns:
            self._submit(message.key)

    def _submit(self, position: int) -> None:
        changes = read_changes(RunFiles(self.suite.run_dir(position)).kb_journal)
        for version in self.kb.submit(position, changes):
            self.suite.db.record_version(version)


def _spent(row: ProblemRow) -> int:
    """The tokens a problem has spent: its result's, else (interrupted) what its run has recorded so far."""
    if row.result is not None:
        return row.result.total_tokens
    return recorded_tokens(RunFiles(row.run_dir).llm_log) if row.run_dir else 0
