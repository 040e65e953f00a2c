"""The run directory's layout: where sources, evaluation results, learning notes and the report are kept.

Every path the state holds is relative to the run directory, so a run directory can be moved or copied
and still resumed. Kernel sources are stored by content hash, so the same source is stored once.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel

from kernelblaster.graph.context import RunContext

RUNS_DIRECTORY = Path("runs")
_NOT_IN_RUN_ID = re.compile(r"[^A-Za-z0-9_.-]")


class RunRecord(BaseModel):
    """`run.json`: what `resume` needs to continue a run that this process did not start."""

    run_id: str
    problem_path: str
    init_kernel: str | None
    context: RunContext


def default_run_dir(problem_path: str, thread_id: str | None) -> Path:
    """Where a run started without a run directory (from Studio) keeps its files: one per thread."""
    return RUNS_DIRECTORY / f"{Path(problem_path).stem}-{(thread_id or 'run')[:8]}"


def run_id_for(run_dir: str) -> str:
    """The run directory's name, made file-name safe: the run's checkpoint thread."""
    return _NOT_IN_RUN_ID.sub("_", Path(run_dir).name).lstrip("_.-")[:128] or "run"


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def write_text_atomically(path: Path, text: str) -> None:
    """Write `text` so that a kill leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "w") as temp_file:
            temp_file.write(text)
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


class RunFiles:
    """One run directory."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @property
    def record(self) -> Path:
        return self.root / "run.json"

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

    def path(self, relative: str) -> Path:
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
        """Every exchange with a model (`graph.recording`)."""
        return self.root / "llm.jsonl"

    @property
    def endpoint(self) -> Path:
        """What the run learned about its endpoint (`graph.quirks`)."""
        return self.root / "endpoint.json"

    @property
    def answers(self) -> Path:
        """The journal of agent answers (`graph.agents.AnswerJournal`)."""
        return self.root / "answers"

    def write_record(self, record: RunRecord) -> None:
        write_text_atomically(self.record, record.model_dump_json(indent=1))

    def read_record(self) -> RunRecord:
        return RunRecord.model_validate_json(self.record.read_text())
