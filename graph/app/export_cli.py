"""`kernelblaster export`: a run's best kernel (or any candidate) as a PyTorch package or a KernelBench file.

A run directory gives the problem (its copy under `inputs/`), the best kernel (`best.cu`, or the fastest
kernel measured correct so far), the precision policy and allowed libraries (`run.json`) and the GPU
architecture the kernel was measured on (its result); a problem and a candidate given directly take those
from flags. Export writes files only, so it runs on a machine without a GPU or nvcc (the writing itself is
`harness.export`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, ValidationError, model_validator

from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.kb.precision import PRECISION_POLICIES, PrecisionPolicy
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import Libraries, Options, PathText, Subcommands, add_command

ExportFormat = Literal["torch", "kernelbench"]
DEFAULT_ARCH = "sm_90"  # the harness's own default (harness.evaluate.DEFAULT_ARCH), for a candidate given directly


def _arch_name(text: str) -> str:
    if not re.fullmatch(r"sm_\d{2,3}[af]?", text):
        raise ValueError("expected a GPU architecture such as sm_90")
    return text


class ExportOptions(Options):
    source: PathText
    candidate: PathText | None = None
    format: ExportFormat
    out: PathText
    force: bool = False
    arch: Annotated[str, AfterValidator(_arch_name)] | None = None
    precision: PrecisionPolicy | None = None
    allow: Libraries | None = None

    @model_validator(mode="after")
    def _run_settings_are_the_runs(self) -> ExportOptions:
        if self.candidate is None:
            given = [flag for flag, value in (("--precision", self.precision), ("--allow", self.allow)) if value]
            if given:
                raise ValueError(f"{given[0]}: a run's kernel was verified under the run's own setting (run.json); "
                                 "give it only with PROBLEM.py CANDIDATE.cu")
        return self


@dataclass(frozen=True)
class RunKernel:
    """What a run directory says about its best kernel."""

    problem: Path
    candidate: Path
    precision: PrecisionPolicy
    allow: tuple[str, ...]
    arch: str | None  # the arch of the kernel's measurement; None if no result names it
    header: Path | None  # the kb_problem.h the run's kernels were compiled with, if the run wrote it


def add_commands(subparsers: Subcommands) -> None:
    """Add `export`."""
    export = add_command(subparsers, "export", help="write a run's best kernel (or a candidate) as a PyTorch package "
                         "or a KernelBench submission file", options=ExportOptions, run=run_export)
    export.add_argument("source", metavar="RUN_DIR|PROBLEM.py", help="a run directory, or a problem file")
    export.add_argument("candidate", nargs="?", metavar="CANDIDATE.cu", help="with PROBLEM.py: the kernel to export")
    export.add_argument("--format", metavar="torch|kernelbench",
                        help="torch: a Python package (a torch.library op and ModelNew); kernelbench: one file in "
                             "KernelBench's submission format")
    export.add_argument("--out", metavar="PATH", help="the package directory (torch) or the .py file (kernelbench)")
    export.add_argument("--force", action="store_true", help="replace PATH if an earlier export wrote it")
    export.add_argument("--arch", metavar="sm_90",
                        help=f"the GPU architecture to build for (default: the run's, else {DEFAULT_ARCH})")
    export.add_argument("--precision", metavar="|".join(PRECISION_POLICIES),
                        help="with PROBLEM.py CANDIDATE.cu: the policy it was verified under (strict)")
    export.add_argument("--allow", metavar="LIBS", help="with PROBLEM.py CANDIDATE.cu: libraries it links (cublas ...)")


def run_export(options: ExportOptions) -> int:
    from kernelblaster.harness.export.exporter import (
        check_out,
        export_kernelbench,
        export_torch,
        kernelbench_refused_lines,
        prepare_export,
    )

    out = Path(options.out)
    check_out(options.format, out, options.force)
    found: RunKernel | None = None
    if options.candidate is None:
        found = run_kernel(Path(options.source))
        problem, candidate, precision, allow = found.problem, found.candidate, found.precision, found.allow
        arch = options.arch or found.arch or DEFAULT_ARCH
    else:
        problem, candidate = Path(options.source), Path(options.candidate)
        precision, allow = options.precision or "strict", options.allow or ()
        arch = options.arch or DEFAULT_ARCH
        for path, what in ((problem, "PROBLEM.py"), (candidate, "CANDIDATE.cu")):
            if not path.is_file():
                raise UserFacingError(f"{what} {path}: no such file")
    kernel = prepare_export(problem, candidate, arch=arch, precision=precision, allow=allow, verified=found is not None)
    if found is not None:
        check_same_header(found, kernel.header)
    if options.format == "torch":
        export_torch(kernel, out, force=options.force)
        print(f"{out}: package '{out.name}' ({kernel.name}, {arch}, precision {precision}); "
              f"`from {out.name} import ModelNew` where {out.parent} is on the import path")
        return 0
    export_kernelbench(kernel, out, force=options.force)
    print(f"{out}: KernelBench submission for {kernel.name} ({arch}, precision {precision})")
    refused = kernelbench_refused_lines(out.read_text())
    if refused:
        print(f"note: KernelBench's static checker refuses a file with try/except/pass outside comments; the "
              f"problem's or the kernel's own source has them: {refused[0]}" +
              (f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""))
    return 0


def run_kernel(run_dir: Path) -> RunKernel:
    """The run's best kernel with its settings, or a one-line error saying why there is none to export."""
    if not run_dir.is_dir():
        raise UserFacingError(f"RUN_DIR {run_dir}: no such directory")
    files = RunFiles(run_dir)
    record = files.read_record()
    best = files.best_kernel()
    if best is None:
        raise UserFacingError(f"{run_dir}: the run has no kernel measured correct yet; nothing to export")
    problem = files.path(files.input_copy(Path(record.problem_path)))
    if not problem.is_file():
        raise UserFacingError(f"{run_dir}: the run's copy of its problem ({problem}) is missing")
    return RunKernel(problem=problem, candidate=best, precision=record.context.precision,
                     allow=tuple(record.context.allow), arch=_measured_arch(files, best),
                     header=files.header if files.header.is_file() else None)


def check_same_header(found: RunKernel, generated: str) -> None:
    """Refuse an export whose header, made here from the run's problem, is not the one the run compiled its
    kernels with (another torch can describe a problem otherwise): the binding would not match the kernel."""
    if found.header is not None and found.header.read_text() != generated:
        raise UserFacingError(f"{found.header}: the run's kernels were compiled with this kb_problem.h, and the one "
                              "made here from the run's problem differs (another torch version?); export on a "
                              "machine set up as the run's")


def _measured_arch(files: RunFiles, kernel: Path) -> str | None:
    """The arch of a result of `kernel` (results name their kernel by the SHA-256 of its source)."""
    from kernelblaster.graph.core.run_files import source_sha256
    from kernelblaster.harness.result import EvalResult

    sha256 = source_sha256(kernel.read_text())
    for path in sorted(files.root.glob("results/*.json")):
        try:
            result = EvalResult.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            continue
        if result.source_sha256 == sha256:
            return result.arch
    return None
