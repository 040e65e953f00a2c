"""`kernelblaster runs` and `kernelblaster report`: find runs again and read their reports.

Both read only a run's `run.json`, `status.json` and `report.md`, never its checkpoints, so they answer at
once and work on a run another process is advancing.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from kernelblaster.graph.run_files import RunFiles, RunStatus
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import read_text_file
from kernelblaster.tools.options import Options, PathText, Subcommands, add_command

DEFAULT_RUNS_DIRECTORY = "runs"
_WHY_NO_REPORT = {
    "created": "it has not started; start it with `kernelblaster resume {run}`",
    "running": "it is running (pid {pid})",
    "waiting_for_answer": "it is waiting for your answer to {run}/question.md (`kernelblaster answer {run} --file "
                          "ANSWER`)",
    "stopped": "it stopped before finishing; continue it with `kernelblaster resume {run}`",
}


class RunsOptions(Options):
    directory: PathText = DEFAULT_RUNS_DIRECTORY
    as_json: bool = False


class ReportOptions(Options):
    run_dir: PathText


class RunSummary(BaseModel):
    """One line of `kernelblaster runs`."""

    run_dir: str
    problem: str
    status: str
    best_speedup: float | None
    updated: datetime | None
    reason: str | None


def add_commands(subparsers: Subcommands) -> None:
    """Add `runs` and `report`."""
    runs = add_command(subparsers, "runs", help="list the runs in a runs directory: problem, status, best speedup",
                       options=RunsOptions, run=run_runs)
    runs.add_argument("directory", nargs="?", help=f"where the run directories are ({DEFAULT_RUNS_DIRECTORY})")
    runs.add_argument("--json", dest="as_json", action="store_true", help="print one JSON object per run")

    report = add_command(subparsers, "report", help="print a run's report again", options=ReportOptions,
                         run=run_report)
    report.add_argument("run_dir", help="the run directory")


def run_runs(options: RunsOptions) -> int:
    directory = Path(options.directory)
    if not directory.is_dir():
        raise UserFacingError(f"{directory} is not a directory of runs (`kernelblaster optimize` makes them under "
                              f"{DEFAULT_RUNS_DIRECTORY}/, or where --run-dir says)")
    summaries = sorted((summarize(RunFiles(child)) for child in directory.iterdir() if (child / "run.json").exists()),
                       key=lambda s: s.updated.timestamp() if s.updated else 0.0, reverse=True)
    if options.as_json:
        print("\n".join(summary.model_dump_json() for summary in summaries))
    elif not summaries:
        print(f"no runs in {directory}")
    else:
        print(format_runs(summaries))
    return 0


def run_report(options: ReportOptions) -> int:
    files = RunFiles(Path(options.run_dir))
    files.read_record()
    if files.report_markdown.is_file():
        print(read_text_file(files.report_markdown, "the report"), end="")
        return 0
    status = files.read_status()
    reason = _WHY_NO_REPORT.get(_current(status) if status else "created", "its status is unknown")
    raise UserFacingError(f"{files.root} has no report yet: "
                          f"{reason.format(run=files.root, pid=status.pid if status else '?')}")


def summarize(files: RunFiles) -> RunSummary:
    """Where one run stands, from its own files; a damaged `run.json` is listed as such."""
    try:
        record = files.read_record()
    except UserFacingError as error:
        return RunSummary(run_dir=str(files.root), problem="?", status="damaged", best_speedup=None, updated=None,
                          reason=str(error))
    status = files.read_status()
    return RunSummary(run_dir=str(files.root), problem=Path(record.problem_path).stem,
                      status=_current(status) if status else "unknown",
                      best_speedup=status.best_speedup if status else None,
                      updated=status.updated if status else record.created,
                      reason=status.reason if status else None)


def format_runs(summaries: list[RunSummary]) -> str:
    rows = [("RUN", "PROBLEM", "STATUS", "BEST", "UPDATED")]
    rows += [(s.run_dir, s.problem, s.status, f"{s.best_speedup:.2f}x" if s.best_speedup else "-",
              s.updated.astimezone().strftime("%Y-%m-%d %H:%M") if s.updated else "-") for s in summaries]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def _current(status: RunStatus) -> str:
    """The recorded status, except that a run whose process is gone is no longer running."""
    if status.status == "running" and status.pid is not None and not _alive(status.pid):
        return "stopped"
    return status.status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
