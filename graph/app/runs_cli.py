"""`kernelblaster runs` and `kernelblaster report`: find runs again and read their reports.

Both read only a run's `run.json`, `status.json` and `report.md` (and, where `report.md` of an ended run
was deleted, `report.json` to print it again), never its checkpoints, so they answer at once and work on a
run another process is advancing.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kernelblaster.graph.core.run_files import RUNS_DIRECTORY, RunFiles, RunRecord, RunStatus
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import read_text_file
from kernelblaster.tools.options import Options, PathText, Subcommands, add_command
from kernelblaster.tools.untrusted_text import for_terminal

_WHY_NO_REPORT = {
    "created": "it has not started; start it with `kernelblaster resume {run}`",
    "running": "it is running (pid {pid})",
    "waiting_for_answer": "it is waiting for your answer to {run}/question.md (`kernelblaster answer {run} --file "
                          "ANSWER`)",
    "stopped": "it stopped before finishing; continue it with `kernelblaster resume {run}`",
}


class RunsOptions(Options):
    directory: PathText = str(RUNS_DIRECTORY)
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
    runs.add_argument("directory", nargs="?", help=f"where the run directories are ({RUNS_DIRECTORY})")
    runs.add_argument("--json", dest="as_json", action="store_true", help="print one JSON object per run")

    report = add_command(subparsers, "report", help="print a run's report again", options=ReportOptions,
                         run=run_report)
    report.add_argument("run_dir", help="the run directory")


def run_runs(options: RunsOptions) -> int:
    directory = Path(options.directory)
    if not directory.is_dir():
        raise UserFacingError(f"{directory} is not a directory of runs (`kernelblaster optimize` makes them under "
                              f"{RUNS_DIRECTORY}/, or where --run-dir says)")
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
    """Print the run's `report.md`; if it was deleted, the same report made again from what it was made from."""
    files = RunFiles(Path(options.run_dir))
    record = files.read_record()
    if files.report_markdown.is_file():
        # The report quotes compiler and driver output, which a candidate controls: shown, never obeyed.
        print(for_terminal(read_text_file(files.report_markdown, "the report")), end="")
        return 0
    status = files.read_status()
    # Without a readable status.json, report.json (written only when a run finishes) says whether it ended.
    current = _current(status) if status else None
    rebuilt = None if current in _WHY_NO_REPORT else _rebuilt_report(files, record, status)
    if rebuilt is None:
        raise UserFacingError(_why_no_report(files, current or "created", status))
    text, source = rebuilt
    # On stderr: stdout stays the report alone, as when the file is there.
    print(f"kernelblaster: note: {files.report_markdown} is missing; this is the report rebuilt from {source}",
          file=sys.stderr)
    print(for_terminal(text), end="")
    return 0


def _why_no_report(files: RunFiles, current: str, status: RunStatus | None) -> str:
    if current in _WHY_NO_REPORT:
        why = _WHY_NO_REPORT[current].format(run=files.root, pid=status.pid if status else "?")
        return f"{files.root} has no report yet: {why}"
    return (f"{files.report_markdown} is missing: the run is {current}, but its report was deleted and "
            f"{files.report_json}, which it can be rebuilt from, is missing too")


def _rebuilt_report(files: RunFiles, record: RunRecord, status: RunStatus | None) -> tuple[str, Path] | None:
    """The `report.md` an ended run wrote, made again, and the file it was made from: for a failed run, the
    error `status.json` records; for a finished one, `report.json` (written with it); None if that is not
    there. Nothing is written: the run may be another process's to advance."""
    if status is not None and status.status == "failed":
        # graph.app.api imports LangGraph: only a failed run whose report was deleted needs it.
        from kernelblaster.graph.app.api import failure_report

        reason = status.reason or "no reason was recorded"
        return failure_report(record, RunFiles(files.root.resolve()), reason), files.status
    if files.report_json.is_file():
        return _report_from_json(files), files.report_json
    return None


def _report_from_json(files: RunFiles) -> str:
    """`report.md` as the run's `finish` step rendered it from the report that `report.json` holds."""
    # Imports torch (through the state's models): only a run whose report.md was deleted needs it.
    from kernelblaster.nodes.report import RunReport, render_markdown

    try:
        report = RunReport.model_validate_json(files.report_json.read_bytes())
    except (OSError, ValidationError) as error:
        detail = (error.strerror or str(error)) if isinstance(error, OSError) else "not a run's report"
        raise UserFacingError(f"{files.report_markdown} is missing, and {files.report_json}, which it can be rebuilt "
                              f"from, cannot be read ({detail})") from None
    return render_markdown(report)


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
