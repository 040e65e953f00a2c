"""`kernelblaster bench baseline`: PyTorch eager and torch.compile times of every problem of a suite on this
machine, beside KernelBench's published H100 times, so a user sees whether machine and protocol match.

One process per problem and GPU (a problem moving 16 GiB cannot take the others down); results go to a
results database as they come, so an interrupted run resumes where it stopped, and the harness caches
each baseline too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel

from kernelblaster.eval.local_launcher import Finished, LocalLauncher
from kernelblaster.eval.metrics import geomean
from kernelblaster.eval.problems import SuiteProblem
from kernelblaster.eval.progress import duration_text
from kernelblaster.eval.report import milliseconds as _ms
from kernelblaster.eval.results import BASELINES_KEY, DATABASE_NAME, BaselineDirectory, BaselineRow, ResultsDB
from kernelblaster.eval.suite import CONFIG_KEY, SuiteConfig, runner_lock
from kernelblaster.graph.core.services import Services
from kernelblaster.harness.evaluate import EvalOptions
from kernelblaster.harness.precision import PrecisionPolicy
from kernelblaster.harness.problem import load_problem
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import write_text_atomically

PUBLISHED_FILES = {"eager": "baseline_time_torch.json", "compile": "baseline_time_torch_compile_inductor_default.json"}
REPORT_NAME = "baseline.md"
PROTOCOLS = ("Here: median of many calls after warm-up, L2 flushed and inputs rotated between calls, CUDA events "
             "cross-checked by a host clock. KernelBench (H100_Modal): wall clock, 3 warm-ups, mean of 100 trials, "
             "PyTorch 2.5.0, CUDA 12.4; so ratios near 1 mean the same machine class and protocol.")


class BaselineJob(BaseModel):
    problem: SuiteProblem
    precision: PrecisionPolicy
    published_eager_ms: float | None
    published_compile_ms: float | None


def measure_baseline(job: BaselineJob, services: Services, emit: Callable[[BaseModel], None],
                     slot: str) -> BaselineRow:
    """Time one problem's baselines on the task's GPU; a failure is the row's `error`."""
    row = BaselineRow(problem_id=job.problem.id, level=job.problem.level, path=job.problem.path, gpu=slot,
                      precision=job.precision, published_eager_ms=job.published_eager_ms,
                      published_compile_ms=job.published_compile_ms)
    try:
        evaluator = services.evaluators(load_problem(job.problem.path), EvalOptions(precision=job.precision, gpu=0))
        # Measured now, never read from the cache: a figure cached by an earlier run may come from a GPU that
        # was busy then (at c761bb5 fifty level-2 rows repeated a run that shared its GPUs).
        timing = evaluator.baseline(remeasure=True)
    except Exception as error:  # one problem's failure is its row, and the others go on
        return row.model_copy(update={"error": f"{type(error).__name__}: {error}"[:500]})
    return row.model_copy(update={
        "gpu": _device_name(slot), "eager_ms": timing.eager.median_ms,
        "compile_ms": timing.compiled.median_ms if timing.compiled else None, "compile_error": timing.compile_error})


def run_baselines(root: Path, problems: Sequence[SuiteProblem], gpus: Sequence[int], precision: PrecisionPolicy,
                  published_dir: Path, out: TextIO, services_factory: Callable[[], Services] = Services) -> Path:
    """Time every problem not yet timed in `root`, rewriting the comparison as each one is timed (an interrupted
    run leaves the table of what it timed); the report's path."""
    published = {kind: _published(published_dir / name) for kind, name in PUBLISHED_FILES.items()}
    report = root / REPORT_NAME
    selected = {problem.id for problem in problems}
    with runner_lock(root):
        db = ResultsDB.open(root / DATABASE_NAME, create=True)
        try:
            _check_directory(root, db, precision)
            db.set_meta(BASELINES_KEY, BaselineDirectory(precision=precision))
            todo = [BaselineJob(problem=p, precision=precision,
                                published_eager_ms=_lookup(published["eager"], p),
                                published_compile_ms=_lookup(published["compile"], p))
                    for p in _untimed(db, problems)]
            _write_comparison(db, selected, report)
            _measure_all(db, todo, gpus, services_factory, out, lambda: _write_comparison(db, selected, report))
        finally:
            db.close()
    return report


def _write_comparison(db: ResultsDB, selected: set[str], report: Path) -> None:
    write_text_atomically(report, render_comparison([row for row in db.baselines() if row.problem_id in selected]))


def untimed_problems(root: Path, problems: Sequence[SuiteProblem], precision: PrecisionPolicy) -> list[SuiteProblem]:
    """The problems `root` holds no baseline of yet (all of them where it holds none at all)."""
    if not (root / DATABASE_NAME).exists():
        return list(problems)
    db = ResultsDB.open(root / DATABASE_NAME)
    try:
        _check_directory(root, db, precision)
        return _untimed(db, problems)
    finally:
        db.close()


def _check_directory(root: Path, db: ResultsDB, precision: PrecisionPolicy) -> None:
    """Refuse a suite's directory, and one timed under another policy: one table of two policies compares
    nothing."""
    if db.get_meta(CONFIG_KEY, SuiteConfig) is not None:
        raise UserFacingError(f"{root} holds a suite of `kernelblaster bench run`; time baselines into another "
                              "--out directory")
    recorded = db.get_meta(BASELINES_KEY, BaselineDirectory)
    policies = {row.precision for row in db.baselines() if row.error is None and row.precision is not None}
    if recorded is not None:
        policies.add(recorded.precision)
    others = sorted(policies - {precision})
    if others:
        raise UserFacingError(f"{root} holds baselines timed under --precision {', '.join(others)}; time "
                              f"{precision} into another --out directory")


def _untimed(db: ResultsDB, problems: Sequence[SuiteProblem]) -> list[SuiteProblem]:
    done = {row.problem_id for row in db.baselines() if row.error is None}
    return [problem for problem in problems if problem.id not in done]


def _measure_all(db: ResultsDB, todo: list[BaselineJob], gpus: Sequence[int],
                 services_factory: Callable[[], Services], out: TextIO, recorded: Callable[[], None]) -> None:
    launcher = LocalLauncher(gpus, services_factory)
    waiting = list(enumerate(todo))
    started: dict[int, BaselineJob] = {}
    began, timed = time.monotonic(), 0
    try:
        while waiting or started:
            while waiting and launcher.free_slots:
                key, job = waiting.pop(0)
                launcher.start(key, measure_baseline, job)
                started[key] = job
            for message in launcher.wait(1.0):
                if isinstance(message, Finished):
                    job = started.pop(message.key)
                    row = message.result if isinstance(message.result, BaselineRow) else BaselineRow(
                        problem_id=job.problem.id, level=job.problem.level, path=job.problem.path,
                        error=f"the worker died: {message.why}")
                    db.record_baseline(row)
                    recorded()
                    timed += 1
                    print(f"[{_progress(timed, len(todo), began)}] {_line(row)}", file=out, flush=True)
    finally:
        launcher.close()


def render_comparison(rows: Sequence[BaselineRow]) -> str:
    lines = ["# PyTorch baselines here and published (KernelBench, H100)", "", PROTOCOLS, "",
             "| problem | GPU | eager ms | compile ms | published eager ms | published compile ms | eager ratio | "
             "compile ratio | note |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.problem_id} | {row.gpu or '-'} | {_ms(row.eager_ms)} | {_ms(row.compile_ms)} | "
                     f"{_ms(row.published_eager_ms)} | {_ms(row.published_compile_ms)} | "
                     f"{_ratio(row.eager_ms, row.published_eager_ms)} | "
                     f"{_ratio(row.compile_ms, row.published_compile_ms)} | {row.error or row.compile_error or ''} |")
    eager = [row.eager_ms / row.published_eager_ms for row in rows if row.eager_ms and row.published_eager_ms]
    compiled = [row.compile_ms / row.published_compile_ms for row in rows
                if row.compile_ms and row.published_compile_ms]
    lines += ["", f"Geometric mean of here / published: eager {_value(geomean(eager))} over {len(eager)} problems, "
                  f"torch.compile {_value(geomean(compiled))} over {len(compiled)} problems (above 1: slower here)."]
    return "\n".join(lines) + "\n"


def _published(path: Path) -> dict[str, dict[str, float]]:
    """`{"level1": {"19_ReLU.py": mean ms}}`, or nothing if the file is not there."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return {level: {name: float(entry["mean"]) for name, entry in problems.items()}
                for level, problems in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserFacingError(f"{path}: not a KernelBench baseline-times file ({error})") from None


def _lookup(published: dict[str, dict[str, float]], problem: SuiteProblem) -> float | None:
    return published.get(f"level{problem.level}", {}).get(Path(problem.path).name)


def _device_name(slot: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else slot


def _progress(timed: int, total: int, began: float) -> str:
    """`3/72, ~4m left`: the problems this run has timed, and the time left at its pace so far."""
    if timed == total:
        return f"{timed}/{total}"
    left = (time.monotonic() - began) / timed * (total - timed)
    return f"{timed}/{total}, ~{duration_text(left)} left"


def _line(row: BaselineRow) -> str:
    if row.error:
        return f"{row.problem_id}: failed: {row.error}"
    return (f"{row.problem_id}: eager {_ms(row.eager_ms)} ms (published {_ms(row.published_eager_ms)}), "
            f"compile {_ms(row.compile_ms)} ms (published {_ms(row.published_compile_ms)})")


def _ratio(here: float | None, published: float | None) -> str:
    return f"{here / published:.2f}" if here and published else "-"


def _value(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"
