"""Evaluate one CUDA candidate against a PyTorch problem: build, verify, time, roofline, profile, baseline.

`evaluate_candidate` is the harness's one entry point; it always returns an `EvalResult` for anything the
candidate does (compile errors, crashes, hangs, wrong answers) and raises only for bad input it can name
(a broken problem file, a missing candidate file, a missing toolchain).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from harness.baseline import baseline_for
from harness.buffers import SharedMemoryPool, SharedSet
from harness.build import BuildResult, build_candidate
from harness.header import generate_header
from harness.precision import PrecisionPolicy
from harness.problem import Problem, instantiate, load_problem
from harness.profile_run import profile_candidate
from harness.result import CandidateTiming, CheckResult, CompileSummary, EvalResult, Speedup
from harness.roofline import count_flops, peaks_for_device, roofline_check, roofline_for
from harness.spec import ProblemSpec, spec_for_problem
from harness.timing import flush_bytes, stream_escape_check, time_candidate, wall_seconds
from harness.verify import Verification, VerificationContext, verify_candidate
from tools.driver_process import DriverCrashed, DriverSession, DriverTimeout
from tools.errors import UserFacingError

DEFAULT_ARCH = "sm_90"
MAX_ROTATING_SETS = 4
ROTATION_MEMORY_SHARE = 0.25


def default_cache_dir() -> Path:
    return Path(os.environ.get("KERNELBLASTER_CACHE", Path.home() / ".cache" / "kernelblaster"))


class EvalOptions(BaseModel):
    model_config = ConfigDict(frozen=True)

    seeds: int = 5
    precision: PrecisionPolicy = "strict"
    allow: frozenset[str] = frozenset()
    gpu: int = 0
    profile: bool = False
    baseline: bool = True
    compile_baseline: bool = True
    timeout_s: float = 20.0
    arch: str | None = None
    cache_dir: Path = Field(default_factory=default_cache_dir)


@dataclass
class _Evaluation:
    """The parts of an EvalResult filled in as the stages run."""

    problem: Problem
    spec: ProblemSpec
    source: str
    candidate: str
    options: EvalOptions
    arch: str
    started: float = field(default_factory=time.perf_counter)
    seconds: dict[str, float] = field(default_factory=dict)

    def result(self, verdict: str, summary: str, **fields: object) -> EvalResult:
        self.seconds["total"] = wall_seconds(self.started)
        return EvalResult(
            verdict=verdict, summary=summary, problem=str(self.problem.path), problem_sha256=self.problem.sha256,
            candidate=self.candidate, source_sha256=hashlib.sha256(self.source.encode()).hexdigest(),
            gpu=torch.cuda.get_device_name(self.options.gpu) if gpu_available() else None, arch=self.arch,
            precision=self.options.precision, seconds=self.seconds, **fields,
        )


def gpu_available() -> bool:
    return torch.cuda.is_available()


def evaluate_candidate(problem_path: Path | str, candidate_path: Path | str, options: EvalOptions) -> EvalResult:
    problem = load_problem(problem_path)
    try:
        source = Path(candidate_path).read_text()
    except OSError as error:
        raise UserFacingError(f"{candidate_path}: cannot read the candidate ({error.strerror or error})") from None
    return evaluate_source(problem, source, str(candidate_path), options)


def evaluate_source(problem: Problem, source: str, candidate: str, options: EvalOptions) -> EvalResult:
    spec = spec_for_problem(problem, options.gpu if gpu_available() else None)
    evaluation = _Evaluation(problem, spec, source, candidate, options, arch=options.arch or detect_arch(options.gpu))
    build_started = time.perf_counter()
    build = build_candidate(source, generate_header(spec), options.cache_dir / "builds", arch=evaluation.arch,
                            allow=options.allow, cache_dir=options.cache_dir / "objects")
    evaluation.seconds["build"] = wall_seconds(build_started)
    if build.stage != "ok":
        return _build_failure(evaluation, build)
    checks = [CheckResult(name="static", passed=True, detail="no forbidden includes or APIs"),
              CheckResult(name="compile", passed=True, detail=_compile_detail(build))]
    built = {"compiled": True, "compile_log": build.log, "compile": _compile_summary(build)}
    if not gpu_available():
        return evaluation.result("no_gpu", "compiled; no CUDA GPU is visible, so it was not run (needs an NVIDIA GPU)",
                                 checks=checks, **built)
    return _evaluate_on_gpu(evaluation, build, checks, built)


def detect_arch(gpu: int) -> str:
    if not gpu_available():
        return DEFAULT_ARCH
    major, minor = torch.cuda.get_device_capability(gpu)
    return f"sm_{major}{minor}"


def _build_failure(evaluation: _Evaluation, build: BuildResult) -> EvalResult:
    if build.stage == "static_violation":
        detail = "; ".join(v.message for v in build.violations)
        return evaluation.result("static_violation", f"rejected before compiling: {detail}", compiled=False,
                                 checks=[CheckResult(name="static", passed=False, detail=detail)])
    checks = [CheckResult(name="static", passed=True, detail="no forbidden includes or APIs"),
              CheckResult(name="compile", passed=False, detail=_compile_detail(build))]
    return evaluation.result("compile_error", f"{build.stage.replace('_', ' ')}: {_compile_detail(build)}",
                             compiled=False, compile_log=build.log, compile=_compile_summary(build), checks=checks)


def _compile_detail(build: BuildResult) -> str:
    if build.stage == "ok":
        return f"compiled in {build.seconds:.1f} s" + (" (cached)" if build.cached else "")
    errors = [m.render() for m in build.messages if m.severity == "error"]
    return "; ".join(errors[:3]) if errors else (build.log.strip().splitlines() or ["failed"])[-1]


def _compile_summary(build: BuildResult) -> CompileSummary:
    return CompileSummary(stage=build.stage, seconds=build.seconds, cached=build.cached,
                          resources=[r.render() for r in build.resources])


def _evaluate_on_gpu(evaluation: _Evaluation, build: BuildResult, checks: list[CheckResult],
                     built: dict[str, object]) -> EvalResult:
    options, spec = evaluation.options, evaluation.spec
    verification = Verification(checks=checks)
    with SharedMemoryPool(options.gpu) as pool:
        sets = [pool.allocate_set(spec) for _ in range(_rotating_sets(spec, options.gpu))]
        try:
            with DriverSession(build.executable) as session:
                session.setup([s.ipc() for s in sets], flush_bytes=flush_bytes(options.gpu), device=options.gpu,
                              timeout_s=options.timeout_s)
                started = time.perf_counter()
                context = VerificationContext(evaluation.problem, options.gpu, options.precision,
                                              list(range(options.seeds)), options.timeout_s)
                verify_candidate(session, sets[0], context, verification)
                evaluation.seconds["verify"] = wall_seconds(started)
                if not verification.passed:
                    failed = next(c for c in verification.checks if not c.passed)
                    return evaluation.result("incorrect", f"failed check '{failed.name}': {failed.detail}",
                                             checks=verification.checks, weakly_checked=verification.weakly_checked,
                                             **built)
                _fill_rotation_sets(evaluation.problem, sets, options.gpu)
                started = time.perf_counter()
                timing = time_candidate(session, list(range(len(sets))), options.timeout_s)
                evaluation.seconds["time"] = wall_seconds(started)
        except DriverTimeout as error:
            verification.checks.append(CheckResult(name="runs", passed=False, detail=str(error)))
            return evaluation.result("timeout", str(error), checks=verification.checks, **built)
        except DriverCrashed as error:
            verification.checks.append(CheckResult(name="runs", passed=False, detail=str(error)))
            return evaluation.result("crash", str(error), checks=verification.checks, **built)
        return _score(evaluation, build, sets, verification, timing, built)


def _score(evaluation: _Evaluation, build: BuildResult, sets: list[SharedSet], verification: Verification,
           timing: CandidateTiming, built: dict[str, object]) -> EvalResult:
    options = evaluation.options
    checks = verification.checks
    escape = stream_escape_check(timing)
    checks.append(escape)
    if not escape.passed:
        return evaluation.result("incorrect", f"failed check 'stream_escape': {escape.detail}", checks=checks,
                                 timing=timing, weakly_checked=verification.weakly_checked, **built)
    instance = instantiate(evaluation.problem, 0, f"cuda:{options.gpu}")
    peaks = peaks_for_device(options.gpu, options.cache_dir)
    roofline, floor_check = roofline_check(
        roofline_for(evaluation.spec, count_flops(instance), peaks, options.precision), timing.event.median_ms)
    checks.append(floor_check)
    extra: dict[str, object] = {"timing": timing, "roofline": roofline, "weakly_checked": verification.weakly_checked}
    if options.baseline:
        started = time.perf_counter()
        baseline = baseline_for(evaluation.problem, options.gpu, options.precision, len(sets), options.cache_dir,
                                with_compile=options.compile_baseline)
        evaluation.seconds["baseline"] = wall_seconds(started)
        extra |= {"baseline": baseline, "speedup": Speedup.of(timing.event.median_ms, baseline)}
    if options.profile:
        started = time.perf_counter()
        extra["profile"] = profile_candidate(build.executable, [s.ipc() for s in sets], options.gpu,
                                             build.executable.parent, options.timeout_s)
        evaluation.seconds["profile"] = wall_seconds(started)
    if not floor_check.passed:
        return evaluation.result("suspicious", floor_check.detail, checks=checks, **extra, **built)
    return evaluation.result("ok", _ok_summary(timing.event.median_ms, extra.get("speedup")), checks=checks,
                             **extra, **built)


def _ok_summary(time_ms: float, speedup: object) -> str:
    text = f"correct; {time_ms * 1000:.1f} us"
    if isinstance(speedup, Speedup):
        text += f"; {speedup.vs_best:.2f}x vs the faster PyTorch baseline"
    return text


def _rotating_sets(spec: ProblemSpec, gpu: int) -> int:
    free, _ = torch.cuda.mem_get_info(gpu)
    affordable = int(free * ROTATION_MEMORY_SHARE) // max(spec.compulsory_bytes, 1)
    return max(1, min(MAX_ROTATING_SETS, affordable))


def _fill_rotation_sets(problem: Problem, sets: list[SharedSet], gpu: int) -> None:
    """Verification left special values in set 0; every set gets ordinary seeded values for timing."""
    for seed, shared in enumerate(sets):
        instance = instantiate(problem, seed, f"cuda:{gpu}")
        shared.fill(instance.tensor_args, list(instance.initial_state.values()))
    torch.cuda.synchronize(gpu)
