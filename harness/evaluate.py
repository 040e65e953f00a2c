"""Evaluate CUDA candidates against one PyTorch problem: build, verify, measure.

`CandidateEvaluator` is bound to one problem and one set of options (the spec, header, roofline and
baselines are computed once) and exposes the three stages separately, so an agent can retry a failed
compile or a failed verification before spending GPU time on timing. `evaluate_candidate` runs all three.
Every outcome of the candidate (compile errors, crashes, hangs, wrong answers) is an `EvalResult`; only
bad input the harness can name (a broken problem file, a missing candidate, a missing toolchain) raises.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field

from kernelblaster.harness.baseline import baseline_for
from kernelblaster.harness.buffers import SharedMemoryPool, SharedSet
from kernelblaster.harness.build import BuildResult, build_candidate
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.precision import PrecisionPolicy
from kernelblaster.harness.problem import Problem, instantiate, load_problem
from kernelblaster.harness.profile import ProfileOutcome
from kernelblaster.harness.profile_run import profile_candidate, profile_pytorch
from kernelblaster.harness.references import ReferenceCache
from kernelblaster.harness.result import (
    BaselineTiming,
    CandidateTiming,
    CheckResult,
    CompileSummary,
    EvalResult,
    Roofline,
    Speedup,
    Verdict,
)
from kernelblaster.harness.roofline import count_flops, peaks_for_device, roofline_check, roofline_for
from kernelblaster.harness.spec import spec_for_problem
from kernelblaster.harness.timing import flush_bytes, stream_escape_check, time_candidate, wall_seconds
from kernelblaster.harness.verify import Verification, VerificationContext, verify_candidate
from kernelblaster.tools.driver_process import DriverCrashed, DriverSession, DriverTimeout
from kernelblaster.tools.errors import UserFacingError

T = TypeVar("T")

DEFAULT_ARCH = "sm_90"
MAX_ROTATING_SETS = 4
ROTATION_MEMORY_SHARE = 0.25
REFERENCE_MEMORY_SHARE = 0.25
BASELINE_PROFILE_TIMEOUT_S = 600.0


def default_cache_dir() -> Path:
    return Path(os.environ.get("KERNELBLASTER_CACHE", Path.home() / ".cache" / "kernelblaster"))


def gpu_available() -> bool:
    return torch.cuda.is_available()


def detect_arch(gpu: int) -> str:
    if not gpu_available():
        return DEFAULT_ARCH
    major, minor = torch.cuda.get_device_capability(gpu)
    return f"sm_{major}{minor}"


class EvalOptions(BaseModel):
    model_config = ConfigDict(frozen=True)

    seeds: int = Field(default=5, ge=1)
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
class BuildStage:
    """A built candidate: `result` holds the verdict when the build failed (static rules or compiler)."""

    label: str
    source: str
    build: BuildResult
    result: EvalResult | None

    @property
    def ok(self) -> bool:
        return self.result is None

    @property
    def executable(self) -> Path | None:
        return self.build.executable


class CandidateEvaluator:
    def __init__(self, problem: Problem, options: EvalOptions) -> None:
        self.problem = problem
        self.options = options
        self.gpu = options.gpu if gpu_available() else None
        self.spec = spec_for_problem(problem, self.gpu)
        self.header = generate_header(self.spec)
        self.arch = options.arch or detect_arch(options.gpu)

    def evaluate(self, source: str, label: str) -> EvalResult:
        """Build, verify and measure in one go; verification and timing share one driver process."""
        warming = self._warm_references_in_background()
        built = self.build(source, label)
        if warming:
            warming.join()
        if not built.ok:
            return built.result
        return self._in_driver(built, verified=None, measure=True, profile=self.options.profile)

    def build(self, source: str, label: str) -> BuildStage:
        started = time.perf_counter()
        key = hashlib.sha256((source + self.header + self.arch + ",".join(sorted(self.options.allow))).encode())
        build = build_candidate(source, self.header, self.options.cache_dir / "builds" / key.hexdigest()[:20],
                                arch=self.arch, allow=self.options.allow, cache_dir=self.objects_dir)
        stage = BuildStage(label, source, build, None)
        seconds = {"build": wall_seconds(started)}
        if build.stage == "static_violation":
            detail = "; ".join(v.message for v in build.violations)
            stage.result = self._result(stage, "static_violation", f"rejected before compiling: {detail}", seconds,
                                        checks=[CheckResult(name="static", passed=False, detail=detail)])
        elif build.stage != "ok":
            stage.result = self._result(stage, "compile_error", f"{build.stage.replace('_', ' ')}: "
                                        f"{_compile_detail(build)}", seconds, checks=self._build_checks(build))
        return stage

    def verify(self, built: BuildStage) -> EvalResult:
        """Run every correctness check; verdict ok, incorrect, crash, timeout or no_gpu."""
        return self._in_driver(built, verified=None, measure=False, profile=False)

    def measure(self, built: BuildStage, verified: EvalResult, profile: bool) -> EvalResult:
        """Time a verified candidate; add the stream-escape and roofline checks, speedups and the profile."""
        if verified.verdict != "ok":
            return verified
        return self._in_driver(built, verified=verified, measure=True, profile=profile)

    def baseline(self) -> BaselineTiming:
        """Eager and torch.compile timings of the problem, measured once and cached on disk."""
        return self._baseline

    def profile_baseline(self) -> ProfileOutcome:
        workdir = self.options.cache_dir / "baselines" / self.problem.sha256[:16]
        workdir.mkdir(parents=True, exist_ok=True)
        return profile_pytorch(self.problem.path, self._require_gpu(), self.options.precision, workdir,
                               BASELINE_PROFILE_TIMEOUT_S)

    @cached_property
    def _baseline(self) -> BaselineTiming:
        return baseline_for(self.problem, self._require_gpu(), self.options.precision, MAX_ROTATING_SETS,
                            self.options.cache_dir, with_compile=self.options.compile_baseline)

    @cached_property
    def roofline(self) -> Roofline:
        gpu = self._require_gpu()
        flops = count_flops(instantiate(self.problem, 0, f"cuda:{gpu}"))
        return roofline_for(self.spec, flops, peaks_for_device(gpu, self.options.cache_dir), self.options.precision)

    def _require_gpu(self) -> int:
        if self.gpu is None:
            raise UserFacingError("no CUDA GPU is visible; this step needs an NVIDIA GPU")
        return self.gpu

    def _in_driver(self, built: BuildStage, verified: EvalResult | None, measure: bool,
                   profile: bool) -> EvalResult:
        """Verify (unless `verified` is given) and then, if asked, time, in one driver process."""
        if self.gpu is None:
            return self._result(built, "no_gpu", "compiled; no CUDA GPU is visible, so it was not run "
                                "(needs an NVIDIA GPU)", {}, checks=self._build_checks(built.build))
        verification = Verification(checks=list(verified.checks) if verified else self._build_checks(built.build),
                                    weakly_checked=verified.weakly_checked if verified else False)
        seconds = dict(verified.seconds) if verified else {}
        with SharedMemoryPool(self.gpu) as pool:
            sets = [pool.allocate_set(self.spec) for _ in range(self._rotating_sets() if measure else 1)]

            def stages(session: DriverSession) -> CandidateTiming | None:
                if verified is None:
                    started = time.perf_counter()
                    context = VerificationContext(self.references, self.options.precision, self.options.timeout_s)
                    verify_candidate(session, sets[0], context, verification)
                    seconds["verify"] = wall_seconds(started)
                if not (measure and verification.passed):
                    return None
                started = time.perf_counter()
                _fill_with_seeds(self.references, sets)
                timing = time_candidate(session, list(range(len(sets))), self.options.timeout_s)
                seconds["time"] = wall_seconds(started)
                return timing

            verdict, summary, timing = self._run_in_driver(built, sets, stages, verification.checks)
            profile_outcome = self._profile(built, sets) if timing and profile else None
        fields = {"checks": verification.checks, "weakly_checked": verification.weakly_checked}
        if verdict != "ok":
            return self._result(built, verdict, summary, seconds, **fields)
        if not verification.passed:
            failed = next(c for c in verification.checks if not c.passed)
            return self._result(built, "incorrect", f"failed check '{failed.name}': {failed.detail}", seconds,
                                **fields)
        passed = self._result(built, "ok", "passed every correctness check", seconds, **fields)
        return self._scored(passed, timing, verification.checks, profile_outcome) if timing else passed

    def _run_in_driver(self, built: BuildStage, sets: list[SharedSet], work: Callable[[DriverSession], T],
                       checks: list[CheckResult]) -> tuple[Verdict, str, T | None]:
        """Run `work(session)` in a fresh driver process; a hang or crash becomes a failed `runs` check."""
        try:
            with DriverSession(built.executable) as session:
                session.setup([s.ipc() for s in sets], flush_bytes=flush_bytes(self.gpu), device=self.gpu,
                              timeout_s=self.options.timeout_s)
                return "ok", "", work(session)
        except (DriverTimeout, DriverCrashed) as error:
            checks.append(CheckResult(name="runs", passed=False, detail=str(error)))
            return ("timeout" if isinstance(error, DriverTimeout) else "crash"), str(error), None

    def _warm_references_in_background(self) -> threading.Thread | None:
        if self.gpu is None:
            return None
        thread = threading.Thread(target=self.references.warm, name="warm-references", daemon=True)
        thread.start()
        return thread

    @property
    def objects_dir(self) -> Path:
        return self.options.cache_dir / "objects"

    @cached_property
    def references(self) -> ReferenceCache:
        free, _ = torch.cuda.mem_get_info(self._require_gpu())
        return ReferenceCache(self.problem, self._require_gpu(), list(range(self.options.seeds)),
                              budget_bytes=int(free * REFERENCE_MEMORY_SHARE))

    def _scored(self, verified: EvalResult, timing: CandidateTiming, checks: list[CheckResult],
                profile: ProfileOutcome | None) -> EvalResult:
        escape = stream_escape_check(timing)
        checks.append(escape)
        update: dict[str, object] = {"timing": timing, "checks": checks, "profile": profile}
        if not escape.passed:
            return verified.model_copy(update=update | {"verdict": "incorrect",
                                                        "summary": f"failed check 'stream_escape': {escape.detail}"})
        roofline, floor_check = roofline_check(self.roofline, timing.event.median_ms)
        checks.append(floor_check)
        update["roofline"] = roofline
        speedup = None
        if self.options.baseline:
            speedup = Speedup.of(timing.event.median_ms, self._baseline)
            update |= {"baseline": self._baseline, "speedup": speedup}
        if not floor_check.passed:
            return verified.model_copy(update=update | {"verdict": "suspicious", "summary": floor_check.detail})
        return verified.model_copy(update=update | {"verdict": "ok",
                                                    "summary": _ok_summary(timing.event.median_ms, speedup)})

    def _profile(self, built: BuildStage, sets: list[SharedSet]) -> ProfileOutcome:
        return profile_candidate(built.executable, [s.ipc() for s in sets], self._require_gpu(),
                                 built.executable.parent, self.options.timeout_s)

    def _rotating_sets(self) -> int:
        free, _ = torch.cuda.mem_get_info(self.gpu)
        affordable = int(free * ROTATION_MEMORY_SHARE) // max(self.spec.compulsory_bytes, 1)
        return max(1, min(MAX_ROTATING_SETS, affordable))

    def _build_checks(self, build: BuildResult) -> list[CheckResult]:
        return [CheckResult(name="static", passed=True, detail="no forbidden includes or APIs"),
                CheckResult(name="compile", passed=build.stage == "ok", detail=_compile_detail(build))]

    def _result(self, built: BuildStage, verdict: Verdict, summary: str, seconds: dict[str, float],
                **fields: object) -> EvalResult:
        build = built.build
        return EvalResult(
            verdict=verdict, summary=summary, problem=str(self.problem.path), problem_sha256=self.problem.sha256,
            candidate=built.label, source_sha256=hashlib.sha256(built.source.encode()).hexdigest(),
            gpu=torch.cuda.get_device_name(self.gpu) if self.gpu is not None else None, arch=self.arch,
            precision=self.options.precision, compiled=build.stage == "ok", compile_log=build.log,
            compile=_compile_summary(build), seconds={"build": build.seconds} | seconds, **fields,
        )


def evaluate_candidate(problem_path: Path | str, candidate_path: Path | str, options: EvalOptions) -> EvalResult:
    problem = load_problem(problem_path)
    try:
        source = Path(candidate_path).read_text()
    except OSError as error:
        raise UserFacingError(f"{candidate_path}: cannot read the candidate ({error.strerror or error})") from None
    return CandidateEvaluator(problem, options).evaluate(source, str(candidate_path))


def _compile_detail(build: BuildResult) -> str:
    if build.stage == "ok":
        return f"compiled in {build.seconds:.1f} s" + (" (cached)" if build.cached else "")
    errors = [m.render() for m in build.messages if m.severity == "error"]
    return "; ".join(errors[:3]) if errors else (build.log.strip().splitlines() or ["failed"])[-1]


def _compile_summary(build: BuildResult) -> CompileSummary:
    return CompileSummary(stage=build.stage, seconds=build.seconds, cached=build.cached,
                          resources=[r.render() for r in build.resources])


def _ok_summary(time_ms: float, speedup: Speedup | None) -> str:
    text = f"correct; {time_ms * 1000:.1f} us"
    if speedup:
        text += f"; {speedup.vs_best:.2f}x vs the faster PyTorch baseline"
    return text


def _fill_with_seeds(references: ReferenceCache, sets: list[SharedSet]) -> None:
    """Verification left special values in set 0; every set gets ordinary seeded values for timing."""
    for index, shared in enumerate(sets):
        case = references.seed_case(references.seeds[index % len(references.seeds)])
        shared.fill(case.tensor_args, case.params)
    torch.cuda.synchronize(references.gpu)
