"""The run directory's layout: where sources, evaluation results, learning notes and the report are kept.

A run directory is self-contained and movable: `run.json` holds no path into it (the directory is wherever
`run.json` is found), the run works on its own copy of the problem (and `--init` kernel) under `inputs/`,
and every path the state holds is relative to it. Kernel sources are stored by content hash, so the same
source is stored once. One process at a time advances a run (`RunFiles.exclusive`); `status.json` says
where it stands without opening its checkpoints, for `kernelblaster runs`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from kernelblaster.graph.core.context import RunContext
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import write_text_atomically

RunStatusName = Literal["created", "running", "waiting_for_answer", "finished", "stopped", "failed"]

RUNS_DIRECTORY = Path("runs")
_NOT_IN_RUN_ID = re.compile(r"[^A-Za-z0-9_.-]")


class RunRecord(BaseModel):
    """`run.json`: what `resume` needs to continue a run that this process did not start.

    `problem_path` and `init_kernel` are the user's files as given (absolute); the run copies them into
    `inputs/` when it starts. `context.run_dir` is not stored, and a KB inside the run is stored relative.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    problem_path: str
    init_kernel: str | None
    created: datetime | None = None
    context: RunContext

    def context_in(self, root: Path) -> RunContext:
        """The run's context for its directory `root`, wherever the directory now is."""
        kb_path = self.context.kb_path
        if kb_path is not None and not Path(kb_path).is_absolute():
            kb_path = str(root / kb_path)
        return self.context.model_copy(update={"run_dir": str(root), "kb_path": kb_path})


class RunStatus(BaseModel):
    """`status.json`: where the run stood when a process last touched it."""

    status: RunStatusName
    updated: datetime
    best_speedup: float | None = None
    reason: str | None = None
    pid: int | None = None


class RunInUse(UserFacingError):
    """Another process is advancing the run."""


class RunFileDamaged(UserFacingError):
    """A file of the run that cannot be read back; it is left as it is, and the message says what to do."""

    def __init__(self, files: RunFiles, path: Path, detail: str, problem: str | None = None) -> None:
        best = files.best_kernel()
        new_run = f"kernelblaster optimize {problem or 'PROBLEM.py'}"
        what_to_do = (f"the run's kernels and reports are intact: start a new run from its best kernel with "
                      f"`{new_run} --init {best}`" if best else
                      f"the run has no correct kernel yet to start from: start a new run with `{new_run}`")
        super().__init__(f"{path} is damaged ({detail}) and is left as it is; {what_to_do}")


def default_run_dir(problem_path: str | Path, thread_id: str | None = None) -> Path:
    """Where a run started without a run directory keeps its files: `runs/<problem>-<time>` from the command
    line, `runs/<problem>-<thread>` from Studio (one directory per thread)."""
    suffix = thread_id[:8] if thread_id else f"{datetime.now():%Y%m%d-%H%M%S}"
    return RUNS_DIRECTORY / f"{Path(problem_path).stem}-{suffix}"


def run_id_for(run_dir: str) -> str:
    """The run directory's name, made file-name safe: the run's checkpoint thread."""
    return _NOT_IN_RUN_ID.sub("_", Path(run_dir).name).lstrip("_.-")[:128] or "run"


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class RunFiles:
    """One run directory."""

    # What setup measured before the first kernel, relative to the root (as `save` and `read` take paths).
    BASELINE_TIMING = "baseline/timing.json"
    BASELINE_PROFILE = "baseline/profile.json"
    FACTS = "baseline/facts.json"

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @property
    def record(self) -> Path:
        return self.root / "run.json"

    @property
    def status(self) -> Path:
        return self.root / "status.json"

    @property
    def lock(self) -> Path:
        return self.root / "run.lock"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints.sqlite"

    @property
    def best_source(self) -> Path:
        return self.root / "best.cu"

    @property
    def report_markdown(self) -> Path:
        return self.root / "report.md"

    @property
    def report_json(self) -> Path:
        return self.root / "report.json"

    @property
    def header(self) -> Path:
        return self.root / "kb_problem.h"

    @property
    def question(self) -> Path:
        return self.root / "question.md"

    def input_copy(self, original: Path) -> str:
        """Where the run keeps its copy of a file it was given, relative to the run directory."""
        return f"inputs/{original.name}"

    def path(self, relative: str) -> Path:
        """A path the state holds, in this directory (an absolute path stays as it is)."""
        return self.root / relative

    def read(self, relative: str) -> str:
        return self.path(relative).read_text()

    def save_source(self, source: str) -> tuple[str, str]:
        """Store a kernel source; its path relative to the run directory and its SHA-256."""
        sha256 = source_sha256(source)
        relative = f"kernels/{sha256[:16]}.cu"
        if not self.path(relative).exists():
            write_text_atomically(self.path(relative), source)
        return relative, sha256

    def save(self, relative: str, model: BaseModel) -> str:
        write_text_atomically(self.path(relative), model.model_dump_json(indent=1))
        return relative

    def result_path(self, label: str, stage: str) -> str:
        return f"results/{label}.{stage}.json"

    def learning_path(self, iteration: int, stage: str) -> str:
        return f"learning/iteration-{iteration:03d}/{stage}.json"

    @property
    def llm_log(self) -> Path:
        """Every exchange with a model (`graph.llm.recording`)."""
        return self.root / "llm.jsonl"

    @property
    def endpoint(self) -> Path:
        """What the run learned about its endpoint (`graph.llm.quirks`)."""
        return self.root / "endpoint.json"

    @property
    def kb_journal(self) -> Path:
        """Every change the run made to its KB (`kb.journal`)."""
        return self.root / "kb_changes.jsonl"

    @property
    def answers(self) -> Path:
        """The journal of agent answers (`graph.llm.agents.AnswerJournal`)."""
        return self.root / "answers"

    def write_record(self, record: RunRecord) -> None:
        write_text_atomically(self.record, record.model_dump_json(indent=1))

    def read_record(self) -> RunRecord:
        """`run.json`, or a one-line error saying it is missing or damaged."""
        if not self.record.is_file():
            raise UserFacingError(f"{self.root}: not a run directory (no run.json)")
        try:
            return RunRecord.model_validate_json(self.record.read_bytes())
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            raise RunFileDamaged(self, self.record, f"{where + ': ' if where else ''}{first['msg']}") from None
        except OSError as error:
            raise RunFileDamaged(self, self.record, f"cannot be read: {error.strerror or error}") from None

    def write_status(self, status: RunStatus) -> None:
        write_text_atomically(self.status, status.model_dump_json(indent=1))

    def read_status(self) -> RunStatus | None:
        """`status.json`, or None if there is none or it cannot be read (it is only a summary)."""
        try:
            return RunStatus.model_validate_json(self.status.read_bytes())
        except (OSError, ValidationError):
            return None

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the run for the block, or a one-line error if another process holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.lock, "a+") as lock_file:
            try:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock_file.seek(0)
                holder = lock_file.read().strip() or "unknown"
                raise RunInUse(f"{self.root} is in use by another kernelblaster process (pid {holder}); "
                                      "wait for it to end, or stop it first") from None
            try:
                lock_file.seek(0)
                lock_file.truncate()
                lock_file.write(str(os.getpid()))
                lock_file.flush()
                yield
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def best_kernel(self) -> Path | None:
        """`best.cu` if the run finished, else its fastest kernel measured correct so far, if any."""
        if self.best_source.is_file():
            return self.best_source
        from kernelblaster.harness.result import EvalResult

        measured: list[tuple[float, str]] = []
        for path in self.root.glob("results/*.measure.json"):
            try:
                result = EvalResult.model_validate_json(path.read_bytes())
            except (OSError, ValidationError):
                continue
            if result.verdict == "ok" and result.timing is not None:
                measured.append((result.timing.event.median_ms, result.source_sha256))
        if not measured:
            return None
        kernel = self.path(f"kernels/{min(measured)[1][:16]}.cu")
        return kernel if kernel.is_file() else None
