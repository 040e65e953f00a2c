"""`kernelblaster eval`, `baseline` and `header`: the harness from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from kernelblaster.harness.evaluate import EvalOptions, evaluate_candidate, gpu_available
from kernelblaster.harness.precision import PRECISION_POLICIES
from kernelblaster.harness.result import NOT_THE_CANDIDATES, EvalResult, Verdict
from kernelblaster.tools.errors import UserFacingError

# `eval`'s exit status by verdict; 2 is bad input or environment (a UserFacingError), as for every command.
EXIT_OK = 0
EXIT_REJECTED = 1  # the candidate failed: compile_error, static_violation, incorrect, crash, timeout, suspicious
EXIT_HARNESS_ERROR = 3
EXIT_TOO_LARGE = 4
EXIT_NO_GPU = 5
_EXIT_BY_VERDICT: dict[Verdict, int] = {"ok": EXIT_OK, "harness_error": EXIT_HARNESS_ERROR,
                                        "too_large": EXIT_TOO_LARGE, "no_gpu": EXIT_NO_GPU}


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser("eval", help="compile, verify, time and optionally profile a CUDA candidate")
    evaluate.add_argument("problem", help="KernelBench-style problem file (Model, get_inputs, get_init_inputs)")
    evaluate.add_argument("candidate", help="CUDA source defining kb_forward (see `kernelblaster header`)")
    _add_common(evaluate)
    evaluate.add_argument("--seeds", type=_positive_int, default=5, help="seeds of fresh inputs to verify with")
    evaluate.add_argument("--allow", type=_library_list, default=frozenset(),
                          help="comma-separated libraries the candidate may use (cublas,cublaslt,cudnn,cutlass)")
    evaluate.add_argument("--timeout", type=float, default=20.0, help="seconds one call may take before it is a hang")
    evaluate.add_argument("--arch", help="GPU architecture to compile for (default: the GPU's own, else sm_90)")
    evaluate.add_argument("--no-baseline", action="store_true", help="skip timing the PyTorch baselines")
    evaluate.add_argument("--unsafe-no-sandbox", action="store_true",
                          help="compile and run the candidate without the OS sandbox (README: Security)")
    evaluate.set_defaults(func=run_eval)

    baseline = subparsers.add_parser("baseline", help="time (and optionally profile) the PyTorch baselines")
    baseline.add_argument("problem", help="KernelBench-style problem file")
    _add_common(baseline)
    baseline.set_defaults(func=run_baseline)

    header = subparsers.add_parser("header", help="print the generated kb_problem.h for a problem")
    header.add_argument("problem", help="KernelBench-style problem file")
    header.set_defaults(func=run_header)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    parser.add_argument("--profile", action="store_true", help="profile with Nsight Compute (ncu)")
    parser.add_argument("--precision", choices=PRECISION_POLICIES, default="strict",
                        help="numerical freedom given to the candidate and, equally, to PyTorch")
    parser.add_argument("--gpu", type=int, default=0, help="CUDA device index")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


_LIBRARIES = frozenset({"cublas", "cublaslt", "cudnn", "cutlass"})


def _library_list(text: str) -> frozenset[str]:
    names = frozenset(name.strip().lower() for name in text.split(",") if name.strip())
    unknown = names - _LIBRARIES
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown libraries {sorted(unknown)}; choose from {sorted(_LIBRARIES)}")
    return names


def run_eval(args: argparse.Namespace) -> int:
    from kernelblaster.harness.report import render_eval

    options = EvalOptions(seeds=args.seeds, precision=args.precision, allow=args.allow, gpu=args.gpu,
                          profile=args.profile, baseline=not args.no_baseline, timeout_s=args.timeout, arch=args.arch,
                          unsafe_no_sandbox=args.unsafe_no_sandbox)
    result = evaluate_candidate(args.problem, args.candidate, options)
    print(result.model_dump_json(indent=2) if args.json else render_eval(result))
    if result.verdict in NOT_THE_CANDIDATES:  # the report says nothing about the candidate: say why on stderr
        print(f"kernelblaster: {result.verdict}: {result.summary}", file=sys.stderr)
    return exit_status(result)


def exit_status(result: EvalResult) -> int:
    return _EXIT_BY_VERDICT.get(result.verdict, EXIT_REJECTED)


def run_baseline(args: argparse.Namespace) -> int:
    from kernelblaster.harness.baseline_report import measure_baseline_report
    from kernelblaster.harness.problem import load_problem
    from kernelblaster.harness.report import render_baseline_lines, render_profile_lines, render_roofline

    problem = load_problem(args.problem)
    if not gpu_available():
        raise UserFacingError("no CUDA GPU is visible; the PyTorch baselines can only be timed on an NVIDIA GPU")
    import torch

    options = EvalOptions(precision=args.precision, gpu=args.gpu, profile=args.profile)
    report = measure_baseline_report(problem, options, torch.cuda.get_device_name(args.gpu))
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
        return 0
    lines = [f"problem: {problem.path} on {report.gpu}, precision {report.precision}",
             *render_baseline_lines(report.timing), render_roofline(report.roofline),
             *render_profile_lines(report.profile)]
    if report.profile:
        lines.append(report.profile.findings)
    print("\n".join(lines))
    return 0


def run_header(args: argparse.Namespace) -> int:
    from kernelblaster.harness.analysis import spec_for_problem
    from kernelblaster.harness.header import generate_header
    from kernelblaster.harness.problem import load_problem

    problem = load_problem(args.problem)
    # The spec `eval` compiles against: derived on the meta device, so no input is ever materialised.
    print(generate_header(spec_for_problem(problem, gpu=None)), end="")
    return 0
