"""`kernelblaster bench run | resume | report | baseline | export`: benchmark suites from the command line.

Flags are validated into the options models below (a run's settings into `RunContext`, as for `optimize`)
before anything is created. Building the parser imports nothing heavy; each command imports what it runs.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import model_validator

from kernelblaster.graph.app.run_cli import RunSettings, add_run_flags, note_outdated_catalogue
from kernelblaster.kb.precision import PRECISION_POLICIES, PrecisionPolicy
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import GpuIndices, Options, PathText, PositiveInt, Seconds, Subcommands, add_command

if TYPE_CHECKING:
    from kernelblaster.eval.problems import SuiteProblem
    from kernelblaster.eval.results import ProblemRow
    from kernelblaster.eval.suite import SuiteConfig

SUITES_DIRECTORY = Path("suites")
SuiteMemory = Literal["continual", "fresh", "frozen", "none"]


class Selection(Options):
    suite: PathText
    level: str | None = None
    problems: str | None = None


class BenchRunOptions(RunSettings, Selection):
    out: PathText | None = None
    order: Literal["given", "shuffle"] = "given"
    shuffle_seed: int = 0
    suite_memory: SuiteMemory = "continual"
    max_wall: Seconds | None = None
    suite_token_limit: PositiveInt | None = None
    ray: str | None = None
    parallel: PositiveInt | None = None

    @model_validator(mode="after")
    def _parallel_needs_ray(self) -> BenchRunOptions:
        # On this host a problem runs per --gpus device (two on one GPU would spoil each other's timings), so
        # --parallel would change nothing here: refused rather than silently ignored.
        if self.parallel is not None and self.ray is None:
            raise ValueError(f"--parallel {self.parallel} needs --ray (it sets the problems in flight on a Ray "
                             "cluster); on this host one problem runs per GPU: choose them with --gpus 0,1,...")
        return self


class ResumeOptions(Options):
    suite_dir: PathText
    ray: str | None = None
    suite_token_limit: PositiveInt | None = None


class ReportOptions(Options):
    suite_dir: PathText
    compare: tuple[PathText, ...] = ()
    out: PathText | None = None


class ExportOptions(Options):
    suite_dir: PathText
    format: Literal["kernelbench"]
    out: PathText
    force: bool = False


class BaselineOptions(Selection):
    out: PathText | None = None
    gpus: GpuIndices = (0,)
    precision: PrecisionPolicy = "strict"
    published: PathText | None = None


def add_commands(subparsers: Subcommands) -> None:
    """Add `bench` and its sub-commands."""
    parser = subparsers.add_parser("bench", help="benchmark suites: many problems, one learning KB, reports")
    commands = parser.add_subparsers(dest="bench_command", required=True, metavar="BENCH_COMMAND")
    _add_run(commands)

    resume = add_command(commands, "resume", help="continue a suite after a crash or a kill",
                         options=ResumeOptions, run=run_resume)
    resume.add_argument("suite_dir", help="the suite directory")
    _add_ray(resume)
    _add_suite_token_limit(resume, " (replaces the suite's: to go on after it stopped at its limit)")

    report = add_command(commands, "report", help="Markdown and HTML report with plots of a suite's results",
                         options=ReportOptions, run=run_report)
    report.add_argument("suite_dir", help="the suite directory")
    report.add_argument("--compare", nargs="+", metavar="OTHER_DIR", help="other suites (ablations) side by side")
    report.add_argument("--out", metavar="DIR", help="where to write (default: SUITE_DIR/report)")
    _add_baseline(commands)
    _add_export(commands)


def _add_run(commands: Subcommands) -> None:
    run = add_command(commands, "run", help="optimize every problem of a suite, all learning into one KB",
                      options=BenchRunOptions, run=run_bench)
    _add_selection(run)
    run.add_argument("--out", metavar="SUITE_DIR", help="suite directory (default: suites/<name>-<time>)")
    run.add_argument("--order", metavar="given|shuffle", help="problem order (given)")
    run.add_argument("--shuffle-seed", metavar="N", help="seed of --order shuffle (0)")
    add_run_flags(run)
    run.add_argument("--memory", dest="suite_memory", metavar="continual|fresh|frozen|none",
                     help="continual: learn from the --kb KB on; fresh: from the seed KB; frozen: read, never "
                          "write; none: no KB (ablation)")
    run.add_argument("--signature", dest="profile_feedback", metavar="full|cycles-only",
                     help="profile feedback: the full Nsight Compute profile, or elapsed cycles only (ablation)")
    run.add_argument("--agent", metavar="full|minimal",
                     help="full method, or the minimal agent: lowering with feedback only (ablation)")
    run.add_argument("--max-wall", metavar="SECONDS",
                     help="wall-time budget of each problem (its token budget: --token-limit)")
    _add_suite_token_limit(run)
    _add_ray(run)
    run.add_argument("--parallel", metavar="N", help="with --ray: problems in flight at once (the cluster's GPUs)")


def _add_baseline(commands: Subcommands) -> None:
    baseline = add_command(commands, "baseline", help="time PyTorch eager and torch.compile for every problem and "
                           "compare with KernelBench's published H100 times", options=BaselineOptions,
                           run=run_baseline)
    _add_selection(baseline)
    baseline.add_argument("--out", metavar="DIR", help="results directory (default: suites/baseline-<name>-<time>)")
    baseline.add_argument("--gpus", metavar="0,1", help="CUDA devices to time on (0)")
    baseline.add_argument("--precision", metavar="|".join(PRECISION_POLICIES), help="numerical freedom (strict)")
    baseline.add_argument("--published", metavar="DIR",
                          help="KernelBench baseline_times/<hardware> directory (default: SUITE's H100_Modal)")


def _add_export(commands: Subcommands) -> None:
    export = add_command(commands, "export", help="write every problem's best kernel as a KernelBench submission file, "
                         "named as KernelBench's runs/<run_name>/ folder expects", options=ExportOptions,
                         run=run_export)
    export.add_argument("suite_dir", help="the suite directory")
    export.add_argument("--format", metavar="kernelbench", help="KernelBench's submission format (the one offered)")
    export.add_argument("--out", metavar="DIR", help="where to write the files (a new or empty directory)")
    export.add_argument("--force", action="store_true", help="write into DIR even if it holds files")


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="a KernelBench-layout directory, or a text file listing problems")
    parser.add_argument("--level", metavar="1,2", help="levels to run (default: all)")
    parser.add_argument("--problems", metavar="1-20,23", help="problem numbers within the levels (default: all)")


def _add_suite_token_limit(parser: argparse.ArgumentParser, note: str = "") -> None:
    parser.add_argument("--suite-token-limit", metavar="TOKENS",
                        help="tokens all the suite's problems may spend together: then no problem starts and the "
                             f"running ones end cleanly{note}")


def _add_ray(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray", metavar="auto|ADDRESS", help="run on a Ray cluster (pip install 'kernelblaster["
                        "cluster]'): one task per problem with one GPU, the KB held by one actor")


def run_bench(options: BenchRunOptions) -> int:
    from kernelblaster.eval.progress import SuiteDisplay
    from kernelblaster.eval.runner import start_suite

    config = _suite_config(options)
    suite = Path(options.suite)
    root = Path(options.out) if options.out else SUITES_DIRECTORY / f"{suite.stem}-{datetime.now():%Y%m%d-%H%M%S}"
    print(f"suite directory: {root} ({len(config.problems)} problems, {config.ablation})")
    rows = start_suite(root, config, display=SuiteDisplay(sys.stdout), ray_address=options.ray)
    return _finish(root, rows)


def run_resume(options: ResumeOptions) -> int:
    from kernelblaster.eval.progress import SuiteDisplay
    from kernelblaster.eval.runner import resume_suite

    root = Path(options.suite_dir)
    _check_resumable_here(root, options.ray)
    return _finish(root, resume_suite(root, display=SuiteDisplay(sys.stdout), ray_address=options.ray,
                                      token_limit=options.suite_token_limit))


def _check_resumable_here(root: Path, ray: str | None) -> None:
    """Where problems are left to run, the checks `bench run` makes before it starts (the endpoint, a GPU):
    a problem started here without them would fail, and a failed problem is not run again."""
    from kernelblaster.eval.suite import open_suite
    from kernelblaster.graph.core.services import Services

    suite = open_suite(root)
    try:
        left = any(row.status in ("pending", "running") for row in suite.db.problems())
        context = suite.config.context
    finally:
        suite.db.close()
    if left:
        Services().check(context)
        if ray is None:
            _require_gpu()


def run_report(options: ReportOptions) -> int:
    from kernelblaster.eval.report import write_report

    root = Path(options.suite_dir)
    written = write_report(root, [Path(other) for other in options.compare],
                           Path(options.out) if options.out else root / "report")
    print("\n".join(str(path) for path in written))
    return 0


def run_baseline(options: BaselineOptions) -> int:
    from kernelblaster.eval.baseline import PUBLISHED_FILES, run_baselines, untimed_problems

    problems = _selected_problems(options)
    suite = Path(options.suite)
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    root = Path(options.out) if options.out else SUITES_DIRECTORY / f"baseline-{suite.stem}-{stamp}"
    published = Path(options.published) if options.published else \
        (suite if suite.is_dir() else suite.parent) / "baseline_times" / "H100_Modal"
    if options.published and not any((published / name).is_file() for name in PUBLISHED_FILES.values()):
        raise UserFacingError(f"--published {published}: holds no KernelBench baseline times "
                              f"({' or '.join(PUBLISHED_FILES.values())})")
    untimed = untimed_problems(root, problems, options.precision)
    if untimed:
        _require_gpu(f"timing the PyTorch baselines of {len(untimed)} problem(s) needs an NVIDIA GPU (a directory "
                     "whose problems are all timed writes its comparison without one)")
    report = run_baselines(root, problems, options.gpus, options.precision, published, out=sys.stdout)
    summary = report.read_text().splitlines()[-1]  # the comparison ends with its geometric means
    print(f"{summary}\nbaselines: {root / 'results.sqlite'}\nreport: {report}")
    return 0


def run_export(options: ExportOptions) -> int:
    from kernelblaster.eval.suite import open_suite
    from kernelblaster.graph.app.export_cli import DEFAULT_ARCH, check_same_header, run_kernel
    from kernelblaster.harness.export.exporter import export_kernelbench, prepare_export

    root, out = Path(options.suite_dir), Path(options.out)
    if not (root / "results.sqlite").is_file():
        raise UserFacingError(f"SUITE_DIR {root}: not a suite directory (no results.sqlite)")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not options.force)):
        raise UserFacingError(f"--out {out}: " + ("is not a directory" if not out.is_dir() else
                                                  "holds files (add --force to write among them)"))
    suite = open_suite(root)
    try:
        rows = suite.db.problems()
        run_dirs = {row.position: suite.run_dir(row.position) for row in rows}
    finally:
        suite.db.close()
    out.mkdir(parents=True, exist_ok=True)
    written, skipped = 0, []
    for row in rows:
        run_dir = run_dirs[row.position]
        if not (run_dir / "run.json").is_file():
            skipped.append(f"{row.problem_id} ({row.status}, no run yet)")
            continue
        try:
            found = run_kernel(run_dir)
            kernel = prepare_export(found.problem, found.candidate, arch=found.arch or DEFAULT_ARCH,
                                    precision=found.precision, allow=found.allow, verified=True)
            check_same_header(found, kernel.header)
        except UserFacingError as why:
            skipped.append(f"{row.problem_id} ({why})")
            continue
        path = export_kernelbench(kernel, out / kernelbench_file_name(row.level, row.number, row.problem_id),
                                  force=True)
        print(f"{row.problem_id}: {path}")
        written += 1
    print(f"{written} kernel(s) written to {out}; evaluate them with KernelBench: copy {out} to its runs/<run_name>/ "
          "and run `python scripts/eval_from_generations.py run_name=<run_name> level=<L> dataset_src=local`")
    if skipped:
        print(f"{len(skipped)} problem(s) without a kernel to export: " + "; ".join(skipped[:10]))
    return 0


def kernelbench_file_name(level: int | None, number: int | None, problem_id: str) -> str:
    """KernelBench's name for sample 0 of a problem (scripts/generate_samples.py and eval_from_generations.py
    read `level_<L>_problem_<N>_sample_<S>_kernel.py`); a problem outside KernelBench's levels keeps its id."""
    if level is not None and number is not None:
        return f"level_{level}_problem_{number}_sample_0_kernel.py"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", problem_id).strip("-")
    return f"{slug}_sample_0_kernel.py"


def _suite_config(options: BenchRunOptions) -> SuiteConfig:
    from kernelblaster.eval.problems import ordered
    from kernelblaster.eval.suite import RUN_MEMORY, SuiteConfig
    from kernelblaster.eval.worker import ProblemBudget
    from kernelblaster.graph.core.services import Services
    from kernelblaster.kb.paths import resolve_kb_path

    problems = ordered(_selected_problems(options), options.order, options.shuffle_seed)
    if options.context.llm in ("human", "replay"):
        raise UserFacingError(f"--llm {options.context.llm}: a suite's problems are answered by an endpoint "
                              "(optimize one problem with `kernelblaster optimize` for this)")
    context = options.context.model_copy(update={"memory": RUN_MEMORY[options.suite_memory]})
    Services().check(context)
    if options.suite_memory != "fresh":
        note_outdated_catalogue(context)
    if options.ray is None:
        _require_gpu()
    window = len(context.gpus) if options.ray is None else _ray_window(options)
    return SuiteConfig(
        source=str(Path(options.suite).resolve()), selection=f"levels {options.level or 'all'}, problems "
        f"{options.problems or 'all'}", order=options.order, shuffle_seed=options.shuffle_seed, problems=problems,
        context=context, memory=options.suite_memory,
        start_kb="seed" if options.suite_memory == "fresh" else str(resolve_kb_path(context.kb_path).resolve()),
        budget=ProblemBudget(max_wall_s=options.max_wall), window=window, gpus=context.gpus,
        token_limit=options.suite_token_limit)


def _selected_problems(options: Selection) -> list[SuiteProblem]:
    from kernelblaster.eval.problems import parse_levels, parse_ranges, select_problems

    levels = parse_levels(options.level) if options.level is not None else None
    numbers = parse_ranges(options.problems) if options.problems is not None else None
    return select_problems(Path(options.suite), levels, numbers)


def _ray_window(options: BenchRunOptions) -> int:
    from kernelblaster.eval.ray_cluster import cluster_gpus

    window = options.parallel or cluster_gpus(options.ray or "auto")
    if window < 1:
        raise UserFacingError(f"--ray {options.ray}: the cluster has no GPUs (or give --parallel N)")
    return window


def _require_gpu(why: str = "suites run on NVIDIA GPUs (or on a Ray cluster with --ray)") -> None:
    """A one-line error saying `why` the command needs a GPU, unless one is visible."""
    import torch

    if not torch.cuda.is_available():
        raise UserFacingError(f"no CUDA GPU is visible: {why}")


def _finish(root: Path, rows: list[ProblemRow]) -> int:
    from kernelblaster.eval.suite import open_suite

    suite = open_suite(root)
    ending = suite.ending()
    suite.db.close()
    if ending is not None and ending.reason == "token_limit":
        print(f"the suite ended early: {ending.detail}; {ending.left} problem(s) not run (go on with `kernelblaster "
              f"bench resume {root} --suite-token-limit N`)")
    failed = [row for row in rows if row.status == "failed"]
    print(f"results: {root / 'results.sqlite'}; report: `kernelblaster bench report {root}`")
    if failed:
        print(f"{len(failed)} problem(s) failed: " + ", ".join(row.problem_id for row in failed[:10]))
    return 0
