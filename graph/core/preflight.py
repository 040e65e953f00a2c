"""Everything a new run is checked for before its run directory is created, each failure one line:
the problem file loads and its model runs on its inputs (on shapes alone where it can, as the harness
derives its spec), the `--init` kernel can be read, the run directory can be made (and holds no
other run or files), the KB the user chose exists and is valid (and no file holds its index's place), and
the services find what the run needs on this machine (an LLM endpoint, a GPU, nvcc, ncu). A run started
from Studio gets the same checks of its files, settings and machine, in the same words, from its `setup`
node (`check_started_run`); its problem is run when the harness first loads it, and its default KB made on
first use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.run_files import RunFiles, default_run_dir
from kernelblaster.graph.core.services import Services
from kernelblaster.harness.analysis import analyse_problem
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.requirements import visible_gpu_count
from kernelblaster.kb.index import check_index_directory
from kernelblaster.kb.paths import chosen_kb_path, index_directory_for
from kernelblaster.kb.store import read_document
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import directory_problem, read_text_file, require_file


@dataclass(frozen=True)
class CheckedRun:
    """A new run that passed every check: its absolute paths."""

    problem: Path
    init: Path | None
    run_dir: Path
    kb_path: Path


def check_new_run(problem: Path | str, context: RunContext, init: Path | str | None,
                  services: Services) -> CheckedRun:
    """Check a new run as `Run.create` is asked for it; nothing is written."""
    problem_path = require_file(Path(problem), "the problem file").resolve()
    init_path = check_init_kernel(Path(init)) if init is not None else None
    run_dir = _check_run_directory(Path(context.run_dir or default_run_dir(problem_path)))
    kb_path = chosen_kb_path(context.kb_path).absolute()
    check_index_directory(index_directory_for(kb_path))
    if kb_path.exists():
        read_document(kb_path)
    elif (unusable := directory_problem(kb_path.parent)) is not None:
        raise UserFacingError(f"the default KB cannot be created: its folder {kb_path.parent} {unusable}")
    services.check(context)
    _check_problem_runs(problem_path, context)
    return CheckedRun(problem=problem_path, init=init_path, run_dir=run_dir, kb_path=kb_path)


def check_started_run(problem: Path, init: Path | None, run_dir: Path, context: RunContext,
                      services: Services, thread_id: str | None) -> None:
    """Check a run as its first node (of thread `thread_id`) finds it, in the words `check_new_run` uses: a
    run started from Studio was not checked before (its run directory may hold nothing yet, or this run's own
    files, but never another run)."""
    require_file(problem, "the problem file")
    if init is not None:
        check_init_kernel(init)
    _require_usable_directory(run_dir)
    files = RunFiles(run_dir)
    if files.record.exists() and files.read_record().run_id != thread_id:
        raise UserFacingError(f"the run directory {run_dir} holds another run (continue that one with `kernelblaster "
                              f"resume {run_dir}`); name a new directory")
    chosen_kb_path(context.kb_path)
    services.check(context)


def _check_problem_runs(problem_path: Path, context: RunContext) -> None:
    """Build the problem and run its model once the way the harness will (a failing `get_inputs`, a forward
    that raises), on the run's first GPU only where shapes alone do not do."""
    analyse_problem(load_problem(problem_path), analysis_gpu(context))


def analysis_gpu(context: RunContext) -> int | None:
    """The GPU a run's problem analysis may fall back to (its first, if this machine has it): the analysis
    is kept per process by problem and GPU, so the preflight's serves the run's later questions."""
    return context.gpus[0] if visible_gpu_count() > context.gpus[0] else None


def check_init_kernel(init: Path) -> Path:
    require_file(init, "the --init CUDA file")
    source = read_text_file(init, "the --init CUDA file")
    if not source.strip():
        raise UserFacingError(f"the --init CUDA file {init} is empty")
    return init.resolve()


def _check_run_directory(run_dir: Path) -> Path:
    files = RunFiles(run_dir)
    if files.record.exists():
        raise UserFacingError(f"{run_dir} already holds a run: continue it with `kernelblaster resume {run_dir}`")
    _require_usable_directory(run_dir)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise UserFacingError(f"the run directory {run_dir} is not empty; name a new one (a run keeps its files "
                              "apart from everything else)")
    return run_dir.resolve()


def _require_usable_directory(run_dir: Path) -> None:
    unusable = directory_problem(run_dir)
    if unusable is not None:
        raise UserFacingError(f"the run directory {run_dir} {unusable}")
