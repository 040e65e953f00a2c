"""`kernelblaster eval`, `baseline` and `header`: the harness from the command line.

Flags are validated into the models below (see `tools.options`) before the problem is loaded; the harness
itself (torch, nvcc) is imported only when a command runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field

from kernelblaster.kb.precision import PRECISION_POLICIES, PrecisionPolicy
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import (
    GpuIndex,
    Libraries,
    Options,
    ReadableFile,
    SanitizerTools,
    Seconds,
    Subcommands,
    add_command,
)

if TYPE_CHECKING:
    from kernelblaster.harness.result import EvalResult, Verdict

# `eval`'s exit status by verdict; 2 is bad input or environment (a UserFacingError), as for every command.
EXIT_OK = 0
EXIT_REJECTED = 1  # the candidate failed: compile_error, static_violation, incorrect, crash, timeout, sanitizer_error,
#                   forged_result, sandbox_violation, suspicious
EXIT_HARNESS_ERROR = 3
EXIT_TOO_LARGE = 4
EXIT_NO_GPU = 5
_EXIT_BY_VERDICT: dict[Verdict, int] = {"ok": EXIT_OK, "harness_error": EXIT_HARNESS_ERROR,
                                        "too_large": EXIT_TOO_LARGE, "no_gpu": EXIT_NO_GPU}
# The name the harness gives every candidate it compiles; compiler messages cite it.
BUILT_SOURCE_NAME = re.compile(r"(?<![\w./-])candidate\.cu\b")


def _gpu_arch(text: str) -> str:
    """A GPU architecture the installed nvcc compiles for (without nvcc, `eval` says so when it compiles)."""
    from kernelblaster.tools.nvcc import arch_problem

    if not re.fullmatch(r"sm_\d{2,3}[af]?", text):
        raise ValueError("expected a GPU architecture such as sm_90")
    try:
        unsupported = arch_problem(text)
    except UserFacingError:  # no nvcc: reported where it is needed, as without --arch
        return text
    if unsupported is not None:
        raise ValueError(unsupported)
    return text


class ProblemOptions(Options):
    problem: ReadableFile


class MeasureOptions(ProblemOptions):
    as_json: bool = False
    profile: bool = False
    precision: PrecisionPolicy = "strict"
    gpu: GpuIndex = 0


class EvalCommandOptions(MeasureOptions):
    candidate: ReadableFile
    seeds: Annotated[int, Field(ge=1, le=100)] = 5
    allow: Libraries = ()
    timeout: Seconds = 20.0
    arch: Annotated[str, AfterValidator(_gpu_arch)] | None = None
    no_baseline: bool = False
    unsafe_no_sandbox: bool = False
    sanitize: SanitizerTools = ()


def add_commands(subparsers: Subcommands) -> None:
    evaluate = add_command(subparsers, "eval", help="compile, verify, time and optionally profile a CUDA candidate",
                           options=EvalCommandOptions, run=run_eval)
    evaluate.add_argument("problem", help="KernelBench-style problem file (Model, get_inputs, get_init_inputs)")
    evaluate.add_argument("candidate", help="CUDA source defining kb_forward (see `kernelblaster header`)")
    _add_measure_flags(evaluate)
    evaluate.add_argument("--seeds", metavar="N", help="seeds of fresh inputs to verify with (5)")
    evaluate.add_argument("--allow", metavar="LIBS",
                          help="comma-separated libraries the candidate may use (cublas, cudnn, cutlass ...)")
    evaluate.add_argument("--timeout", metavar="SECONDS", help="seconds one call may take before it is a hang (20)")
    evaluate.add_argument("--arch", help="GPU architecture to compile for (default: the GPU's own, else sm_90)")
    evaluate.add_argument("--no-baseline", action="store_true", help="skip timing the PyTorch baselines")
    evaluate.add_argument("--unsafe-no-sandbox", action="store_true",
                          help="compile and run the candidate without the OS sandbox (README: Security)")
    evaluate.add_argument("--sanitize", metavar="memcheck,racecheck",
                          help="once verified, run one call under these compute-sanitizer checkers (memcheck, "
                               "racecheck, initcheck); an error is the verdict sanitizer_error")

    baseline = add_command(subparsers, "baseline", help="time (and optionally profile) the PyTorch baselines",
                           options=MeasureOptions, run=run_baseline)
    baseline.add_argument("problem", help="KernelBench-style problem file")
    _add_measure_flags(baseline)

    header = add_command(subparsers, "header", help="print the generated kb_problem.h for a problem",
                         options=ProblemOptions, run=run_header)
    header.add_argument("problem", help="KernelBench-style problem file")


def _add_measure_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", dest="as_json", action="store_true", help="print one JSON object, not a report")
    parser.add_argument("--profile", action="store_true", help="profile with Nsight Compute (ncu)")
    parser.add_argument("--precision", metavar="|".join(PRECISION_POLICIES),
                        help="numerical freedom given to the candidate and, equally, to PyTorch (strict)")
    parser.add_argument("--gpu", metavar="INDEX", help="CUDA device index (0)")


def run_eval(options: EvalCommandOptions) -> int:
    from kernelblaster.harness.evaluate import EvalOptions, evaluate_candidate
    from kernelblaster.harness.report import render_eval
    from kernelblaster.harness.requirements import check_gpu_index
    from kernelblaster.harness.result import NOT_THE_CANDIDATES
    from kernelblaster.harness.sanitize_run import require_sanitizer
    from kernelblaster.harness.stages import StageClock, process_age_seconds

    harness_options = EvalOptions(seeds=options.seeds, precision=options.precision, allow=frozenset(options.allow),
                                  gpu=options.gpu, profile=options.profile, baseline=not options.no_baseline,
                                  timeout_s=options.timeout, arch=options.arch,
                                  unsafe_no_sandbox=options.unsafe_no_sandbox, sanitize=options.sanitize)
    check_gpu_index(options.gpu)
    if options.sanitize:
        require_sanitizer()
    clock = StageClock()
    started = process_age_seconds()  # the interpreter, the imports and the checks of the machine up to here
    if started is not None:
        clock.add("process_start", started)
    result = _citing_the_users_file(evaluate_candidate(options.problem, options.candidate, harness_options, clock),
                                    options.candidate)
    print(result.model_dump_json(indent=2) if options.as_json else render_eval(result, options.profile))
    if result.verdict in NOT_THE_CANDIDATES:  # the report says nothing about the candidate: say why on stderr
        print(f"kernelblaster: {result.verdict}: {result.summary}", file=sys.stderr)
    return exit_status(result)


def exit_status(result: EvalResult) -> int:
    return _EXIT_BY_VERDICT.get(result.verdict, EXIT_REJECTED)


def _citing_the_users_file(result: EvalResult, candidate: Path) -> EvalResult:
    """Compiler messages name the copy the harness compiled; the user knows the file by its own name."""
    def cited(value: Any) -> Any:
        if isinstance(value, str):
            return BUILT_SOURCE_NAME.sub(lambda _: str(candidate), value)
        if isinstance(value, dict):
            return {key: cited(item) for key, item in value.items()}
        return [cited(item) for item in value] if isinstance(value, list) else value

    return type(result).model_validate(cited(result.model_dump(mode="json")))


def run_baseline(options: MeasureOptions) -> int:
    from kernelblaster.harness.baseline_report import measure_baseline_report
    from kernelblaster.harness.evaluate import EvalOptions, gpu_available
    from kernelblaster.harness.problem import load_problem
    from kernelblaster.harness.report import render_baseline_lines, render_profile_lines, render_roofline
    from kernelblaster.harness.requirements import check_gpu_index

    problem = load_problem(options.problem)
    if not gpu_available():
        raise UserFacingError("no CUDA GPU is visible; the PyTorch baselines can only be timed on an NVIDIA GPU")
    check_gpu_index(options.gpu)
    import torch

    harness_options = EvalOptions(precision=options.precision, gpu=options.gpu, profile=options.profile)
    report = measure_baseline_report(problem, harness_options, torch.cuda.get_device_name(options.gpu))
    if options.as_json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
        return 0
    lines = [f"problem: {problem.path} on {report.gpu}, precision {report.precision}",
             *render_baseline_lines(report.timing), render_roofline(report.roofline),
             *render_profile_lines(report.profile, options.profile)]
    print("\n".join(lines))
    return 0


def run_header(options: ProblemOptions) -> int:
    from kernelblaster.harness.analysis import SpecNeedsGpu, spec_for_problem
    from kernelblaster.harness.header import generate_header
    from kernelblaster.harness.problem import load_problem
    from kernelblaster.harness.requirements import visible_gpu_count

    problem = load_problem(Path(options.problem))
    # The spec `eval` compiles against, derived on the meta device so that no input is materialised; only a
    # model whose shapes depend on the data is run, on the GPU when there is one.
    try:
        spec = spec_for_problem(problem, gpu=None)
    except SpecNeedsGpu:
        if visible_gpu_count() == 0:
            raise
        spec = spec_for_problem(problem, gpu=0)
    print(generate_header(spec), end="")
    return 0
