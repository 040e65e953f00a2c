"""Evaluate CUDA candidates against one PyTorch problem: build, verify (optionally under compute-sanitizer
too), time, score and profile; and explain a crash with compute-sanitizer's memcheck (`diagnose`).

`CandidateEvaluator` is bound to one problem and one set of options: the problem's analysis (spec and
footprint, derived without the GPU, and kept on disk for later processes), header, memory plan, references,
roofline and baselines are made once. While a candidate compiles, CUDA starts in this process, the memory is
planned, the references are computed and the trusted null candidate is built, in the background. The
stages run separately, so an agent can retry a failed compile or verification before spending GPU time on
timing (a time below the reference algorithm's compute floor is verified again, in the same driver process,
before it is scored); each returns a value, the values are gathered in `Findings`, and `verdict.decide`
turns them into the verdict in one place. Every outcome of the candidate (compile errors, crashes, hangs,
wrong answers, forged replies, what the sandbox blocked) is an `EvalResult`, and so are a problem too
large for the GPU (`too_large`, before anything is allocated) and any exception of the harness itself
(`harness_error`, the traceback in the result). Candidates compile and run in the OS sandbox
(tools/sandbox.py). Only bad input the harness can name (a broken problem file, a missing candidate, a
missing toolchain, library or compute-sanitizer, a sandbox that cannot start without
--unsafe-no-sandbox) raises a `UserFacingError`.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from typing import TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field

from kernelblaster.harness.analysis import analyse_problem
from kernelblaster.harness.baseline import baseline_for
from kernelblaster.harness.buffers import SharedMemoryPool, SharedSet
from kernelblaster.harness.build import (
    CACHE_VARIABLE,
    BuildResult,
    build_candidate,
    check_libraries_installed,
    source_refusal,
)
from kernelblaster.harness.cuda_device import device_capability, device_name
from kernelblaster.harness.gpu_facts import GpuFacts, read_gpu_facts
from kernelblaster.harness.gpu_reserve import (
    TrustedOutOfMemory,
    candidate_allowance_bytes,
    freed_since,
    hoarding_check,
    noting_out_of_memory,
    null_driver_bytes,
    reserved_for_trusted,
    trusted_session_bytes,
)
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.machine import this_machine
from kernelblaster.harness.memory_plan import GpuMemory, MemoryPlan, ProblemSizes, plan_memory
from kernelblaster.harness.precision import PrecisionPolicy
from kernelblaster.harness.precision_facts import PrecisionFacts, measure_precision_facts, not_measured
from kernelblaster.harness.problem import Problem, load_problem
from kernelblaster.harness.profile.outcome import ProfileOutcome
from kernelblaster.harness.profile.run import cached_pytorch_profile, profile_candidate
from kernelblaster.harness.references import FLOAT64_FLOP_LIMIT, ReferenceCache
from kernelblaster.harness.result import (
    BaselineTiming,
    CandidateTiming,
    CheckResult,
    CompileSummary,
    EvalResult,
    Roofline,
    Speedup,
)
from kernelblaster.harness.roofline import below_compute_floor, peaks_for_device, roofline_check, roofline_for
from kernelblaster.harness.sanitize_run import SanitizedCall, require_sanitizer, sanitize_call
from kernelblaster.harness.stages import Stage, StageClock, StageTimes
from kernelblaster.harness.timing import (
    BatchChecks,
    RoundTrip,
    TimedInputs,
    TrustedBatches,
    clocked_batch,
    flush_bytes,
    measure_round_trip,
    stream_escape_check,
    time_candidate,
    wall_seconds,
)
from kernelblaster.harness.verdict import Findings, Measurement, Score, decide
from kernelblaster.harness.verify import (
    DriverFailure,
    Verification,
    VerificationContext,
    extra_verification,
    timed_set_failure,
    verify_candidate,
)
from kernelblaster.kb.operations import OperationKind
from kernelblaster.tools.driver_process import DriverError, DriverProgram, DriverSession
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import cached_measurement, read_text_file
from kernelblaster.tools.sandbox import Sandbox, require_sandbox
from kernelblaster.tools.sanitizer import SanitizerResult, SanitizerTool, locate_sanitizer
from kernelblaster.tools.toolkit import ToolUnavailable

T = TypeVar("T")

DEFAULT_ARCH = "sm_90"
BASELINE_PROFILE_TIMEOUT_S = 600.0
NULL_CANDIDATE = files("kernelblaster.harness").joinpath("driver", "kb_null_candidate.cu")


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE, Path.home() / ".cache" / "kernelblaster"))


def gpu_available() -> bool:
    return torch.cuda.is_available()


def detect_arch(gpu: int) -> str:
    if not gpu_available():
        return DEFAULT_ARCH
    major, minor = device_capability(gpu)  # through CUDA's driver: PyTorch starts CUDA later, in the background
    return f"sm_{major}{minor}"


class TooLarge(UserFacingError):
    """The problem does not fit the GPU: nothing can be measured on it."""

    exit_status = 4


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
    unsafe_no_sandbox: bool = False  # compile and run candidates without the OS sandbox (tools/sandbox.py)
    # compute-sanitizer checkers a verified candidate's call is run under; any error is `sanitizer_error`
    sanitize: tuple[SanitizerTool, ...] = ()


@dataclass
class CandidateBuild:
    """A built candidate: `result` holds the verdict when the build failed (static rules or compiler)."""

    label: str
    source: str
    build: BuildResult
    result: EvalResult | None

    @property
    def ok(self) -> bool:
        return self.result is None

    @property
    def program(self) -> DriverProgram | None:
        return self.build.program


class CandidateEvaluator:
    def __init__(self, problem: Problem, options: EvalOptions) -> None:
        self.problem = problem
        self.options = options
        self.gpu = options.gpu if gpu_available() else None
        self.arch = options.arch or detect_arch(options.gpu)
        if options.allow:
            check_libraries_installed(options.allow, self.arch, self.objects_dir, self.sandbox)
        if options.sanitize:
            require_sanitizer()
        # Kept on disk too: a later evaluation of the same problem (a fresh `eval` process) reads it back.
        self.analysis = analyse_problem(problem, self.gpu, options.cache_dir)
        self.spec = self.analysis.spec
        self.header = generate_header(self.spec)
        self._round_trip: RoundTrip | None = None
        self._null_build: CandidateBuild | None = None  # the trusted null candidate, built once per evaluator
        self._null_lock = threading.Lock()  # it is built in the background while a candidate compiles

    # -- the stages ---------------------------------------------------------------------------------------
    def evaluate(self, source: str, label: str) -> EvalResult:
        """Build, verify and measure in one go; verification and timing share one driver process. A source the
        source rules refuse is refused first, before the GPU or the compiler is asked for anything."""
        refused = source_refusal(source, self.options.allow, self._build_dir(source))
        if refused is not None:
            return self._conclude(CandidateBuild(label, source, refused, None), Findings.of_build(refused))
        # While the candidate compiles: CUDA's start in this process and the memory plan, then the references
        # (one thread), and the null candidate's build (another). CUDA's start holds the interpreter's lock
        # while it runs, so it waits for nvcc to run (or the build to end) first.
        background, null_clock, compiling = StageClock(), StageClock(), threading.Event()
        null = self._build_null_in_background(null_clock)
        warming = self._warm_references_in_background(background, compiling)
        try:
            built = self.build(source, label, on_compile=compiling.set)
        except BaseException:  # no thread of this evaluation outlives it (its torch seeding is process-wide)
            if warming:
                warming.stop.set()  # before the thread wakes: it begins nothing for a build that never ran
            compiling.set()
            if warming:
                warming.thread.join()
            if null:
                null.join()
            raise
        if warming and not built.ok:
            warming.stop.set()  # before the thread wakes (a refusal before nvcc ran): no plan, no CUDA work
        compiling.set()
        if null:  # one compile: it finishes either way (no thread of this evaluation outlives it)
            null.join()
        if warming:  # stopped above when nothing will run: the case being computed finishes, no other begins
            warming.thread.join()
            warming.raise_failure()  # the plan's failure, raised as it was when the plan came before the build
        if not built.ok:
            if "references" in self.__dict__:  # its float64 seconds are this evaluation's, not the next one's
                self.references.take_float64_seconds()
            assert built.result is not None
            return built.result
        findings = Findings.of_build(built.build)
        findings.stages.merge(background.seconds)
        if null and self.plan.fits:  # calibration (which the null candidate is built for) runs only then
            findings.stages.merge(null_clock.seconds)
        if self.options.sanitize:  # the sanitizer's runs come between verification and timing
            verified = self._run(built, findings, verify=True, measure=False, profile=False)
            return self.measure(built, verified, self.options.profile)
        return self._run(built, findings, verify=True, measure=True, profile=self.options.profile)

    def build(self, source: str, label: str, on_compile: Callable[[], None] | None = None) -> CandidateBuild:
        """Build `source`; `on_compile` is called once nvcc runs on it (not on a cache hit)."""
        build = build_candidate(source, self.header, self._build_dir(source), arch=self.arch,
                                allow=self.options.allow, cache_dir=self.objects_dir, sandbox=self.sandbox,
                                on_compile=on_compile)
        stage = CandidateBuild(label, source, build, None)
        if build.stage != "ok":
            stage.result = self._conclude(stage, Findings.of_build(build))
        return stage

    def verify(self, built: CandidateBuild) -> EvalResult:
        """Run every correctness check (with `sanitize`, compute-sanitizer's too): ok, incorrect, crash, timeout,
        sanitizer_error, or a verdict that is not the candidate's."""
        return self._run(built, Findings.of_build(built.build), verify=True, measure=False, profile=False)

    def diagnose(self, built: CandidateBuild) -> SanitizerResult | None:
        """Run a candidate that crashed once more, under compute-sanitizer's memcheck on seeded inputs, for a
        report of where it went wrong; None when compute-sanitizer is not on this machine. The report is
        evidence for the agent, never a verdict: a failure here is a `failed` result saying why."""
        if isinstance(locate_sanitizer(), ToolUnavailable):
            return None
        gpu = self._require_gpu()
        try:
            with SharedMemoryPool(gpu) as pool:
                return self._sanitize(built, pool.allocate_set(self.spec), (SanitizerTool.MEMCHECK,))[0]
        except UserFacingError:
            raise
        except Exception as error:  # the harness's own failure
            _release_gpu_memory()
            return SanitizerResult(tool=SanitizerTool.MEMCHECK, status="failed",
                                   reason=f"the harness failed: {type(error).__name__}: {error}")

    def measure(self, built: CandidateBuild, verified: EvalResult, profile: bool) -> EvalResult:
        """Time a verified candidate; check the timed calls, score it against the roofline and the baselines."""
        if verified.verdict != "ok":
            return verified
        return self._run(built, Findings.of_result(verified), verify=False, measure=True, profile=profile)

    def baseline(self, remeasure: bool = False) -> BaselineTiming:
        """Eager and torch.compile timings of the problem, measured once and cached on disk; with `remeasure`,
        timed again now (and cached), as `bench baseline` does: a cached figure may come from a busy GPU."""
        if remeasure:
            self.__dict__["_baseline"] = self._measured_baseline(remeasure=True)
        return self._baseline

    def profile_baseline(self) -> ProfileOutcome:
        workdir = self.options.cache_dir / "baselines" / self.problem.sha256[:16]
        workdir.mkdir(parents=True, exist_ok=True)
        return cached_pytorch_profile(self.problem.path, self._require_gpu(), self.options.precision, workdir,
                                      BASELINE_PROFILE_TIMEOUT_S)

    def gpu_facts(self) -> GpuFacts:
        """The GPU's limits and measured peaks, how candidates are compiled for it and what the precision
        policy lets them use."""
        return read_gpu_facts(self._require_gpu(), self.arch, self.options.precision, self.options.cache_dir)

    def roofline_floor(self) -> Roofline:
        """The problem's compulsory bytes and FLOPs and the fastest time they allow on this GPU."""
        return self.roofline

    def precision_facts(self) -> PrecisionFacts:
        """Which cheaper arithmetic in the matrix products (TF32, 3xTF32, fp16, bf16) would pass this problem's
        verification under the run's policy: measured on the GPU once per problem and policy, cached on disk."""
        policy = self.options.precision
        if self.analysis.footprint.tracked and self.analysis.footprint.flops == 0:
            return not_measured(policy, "the forward pass has no matrix products or convolutions", products=False)
        gpu = self._require_gpu()
        path = self.options.cache_dir / "precision" / f"{self.problem.sha256[:16]}-{policy}.json"
        try:
            return cached_measurement(path, PrecisionFacts,
                                      lambda: measure_precision_facts(self.problem, f"cuda:{gpu}", policy,
                                                                      counted_flops=self.analysis.footprint.flops))
        except torch.cuda.OutOfMemoryError:
            _release_gpu_memory()
            return not_measured(policy, "the measurement did not fit in the GPU's memory")

    def operation_kinds(self) -> list[OperationKind] | None:
        """The kinds of operation the problem's forward pass performs; None where it ran untracked."""
        kinds = self.analysis.operations
        return None if kinds is None else sorted(kinds)

    def close(self) -> None:
        """Give back the GPU memory the evaluator holds (its reference outputs, and PyTorch's cached blocks);
        the run it served is over. Using it again computes the references again."""
        self.__dict__.pop("references", None)  # a cached_property: deleting it drops the cache
        if torch.cuda.is_initialized():
            _release_gpu_memory()

    # -- what is made once --------------------------------------------------------------------------------
    @cached_property
    def sandbox(self) -> Sandbox | None:
        """Where candidates compile and run; asked for only then, so baselines need no sandbox."""
        return require_sandbox(self.options.unsafe_no_sandbox)

    @cached_property
    def plan(self) -> MemoryPlan:
        gpu = self._require_gpu()
        torch.cuda.empty_cache()  # memory PyTorch caches but does not use is free for the shared sets
        free, _ = torch.cuda.mem_get_info(gpu)
        memory = GpuMemory(name=torch.cuda.get_device_name(gpu), free_bytes=free,
                           l2_bytes=torch.cuda.get_device_properties(gpu).L2_cache_size)
        sizes = ProblemSizes.of(self.spec, self.analysis.footprint.peak_bytes)
        return plan_memory(sizes, memory, self.options.seeds)

    @cached_property
    def references(self) -> ReferenceCache:
        float64 = self.plan.float64_references and self.analysis.footprint.flops <= FLOAT64_FLOP_LIMIT
        return ReferenceCache(self.problem, self._require_gpu(), list(range(self.options.seeds)),
                              self.plan.references, self.plan.sizes.float_inputs, float64)

    @cached_property
    def roofline(self) -> Roofline:
        peaks = peaks_for_device(self._require_gpu(), self.options.cache_dir)
        return roofline_for(self.spec, self.analysis.footprint.flops, peaks, self.options.precision)

    @cached_property
    def _baseline(self) -> BaselineTiming:
        return self._measured_baseline(remeasure=False)

    def _measured_baseline(self, remeasure: bool) -> BaselineTiming:
        if not self.plan.fits:
            raise TooLarge(self.plan.too_large_summary())
        return baseline_for(self.problem, self._require_gpu(), self.options.precision, self.plan.baseline_sets,
                            self.options.cache_dir, with_compile=self.options.compile_baseline, remeasure=remeasure)

    def _calibrate(self, sets: list[SharedSet], clock: StageClock) -> RoundTrip:
        """The round trip of an empty batch on the trusted null candidate's driver, on `sets`, measured once
        per evaluator (as `calibration`): what the trusted batch clock subtracts at the least (harness/timing.py)."""
        if self._round_trip is None:
            with clock.timing("calibration"), self._driver(self._null_candidate(), sets) as session:
                self._round_trip = measure_round_trip(session, torch.device("cuda", self._require_gpu()),
                                                      self.options.timeout_s)
        return self._round_trip

    def _planned(self, clock: StageClock) -> MemoryPlan:
        """The memory plan; its making, the first time (CUDA starts in this process with it), is `memory_plan`."""
        if "plan" in self.__dict__:
            return self.plan
        return clock.run("memory_plan", lambda: self.plan)

    def _null_candidate(self) -> CandidateBuild:
        """The harness's own null candidate (no candidate code: what it measures, a candidate cannot bend), built
        once per evaluator (calibration and the batches beside the candidate's use the same); a failed build is
        raised, and tried again on the next call."""
        with self._null_lock:
            if self._null_build is None:
                null = self.build(NULL_CANDIDATE.read_text(), "trusted-null-candidate")
                if not null.ok:
                    raise RuntimeError(
                        f"the harness's null candidate did not build: {null.result and null.result.summary}")
                self._null_build = null
            return self._null_build

    def _build_null_in_background(self, clock: StageClock) -> threading.Thread | None:
        """Build the null candidate while the candidate compiles (recorded in `clock` as `calibration`, which
        needs it), where the evaluation may calibrate: with a GPU (a plan that does not fit wastes one build of
        trusted code). A failure here is raised again, in the foreground, where calibration asks for it."""
        if self._null_build is not None or self.gpu is None:
            return None
        self.sandbox  # noqa: B018  # asked for here, once: a sandbox that cannot start is raised before any thread
        thread = threading.Thread(target=_build_quietly, name="build-null-candidate", daemon=True,
                                  args=(self._null_candidate, clock))
        thread.start()
        return thread

    @contextmanager
    def _batches_beside(self, sets: list[SharedSet], flush: torch.Tensor) -> Iterator[Callable[[list[int]], float]]:
        """The trusted batch clocked on the null candidate's driver (beside the candidate's, on the same sets):
        what a batch takes beyond its calls and its snapshot as the host and the GPU are while the candidate's
        batches run (harness/timing.py, `BatchClock.beside`)."""
        with self._driver(self._null_candidate(), sets) as session:
            def beside(order: list[int]) -> float:
                clock, _, _ = clocked_batch(session, sets, order, flush, secrets.randbits(64),
                                            self.options.timeout_s * len(order))
                return clock.wall_ms - clock.digest_ms

            yield beside

    @property
    def objects_dir(self) -> Path:
        return self.options.cache_dir / "objects"

    def _build_dir(self, source: str) -> Path:
        key = hashlib.sha256(_encoded(source + self.header + self.arch + ",".join(sorted(self.options.allow))))
        return self.options.cache_dir / "builds" / key.hexdigest()[:20]

    # -- running the stages -------------------------------------------------------------------------------
    def _run(self, built: CandidateBuild, findings: Findings, *, verify: bool, measure: bool,
             profile: bool) -> EvalResult:
        try:
            self._gather(built, findings, verify, measure, profile)
        except UserFacingError:
            raise
        except Exception as error:  # the harness's own failure: reported as a verdict, never as a traceback
            findings.fail_harness(error)
            _release_gpu_memory()
        float64 = self.references.take_float64_seconds() if "references" in self.__dict__ else 0.0
        if float64 > 0:  # the float64 references made for this evaluation, wherever they were
            findings.stages.add("conditioning", float64)
        return self._conclude(built, findings)

    def _gather(self, built: CandidateBuild, findings: Findings, verify: bool, measure: bool, profile: bool) -> None:
        """Run the stages in order, each adding its value to `findings`, until one rules the candidate out."""
        if self.gpu is None:
            findings.no_gpu = True
            return
        findings.plan = self._planned(findings.stages)
        if not findings.plan.fits:
            return
        findings.stage = "setup"
        with SharedMemoryPool(self.gpu) as pool:
            with findings.stages.timing("driver_start"):
                sets = [pool.allocate_set(self.spec) for _ in range(self.plan.rotating_sets if measure else 1)]
            self._in_driver(built, sets, findings, verify, measure)
            if verify and self.options.sanitize and findings.passed:
                findings.add_sanitizer(self._timed(findings, "sanitize", "sanitizer",
                                                   lambda: self._sanitize(built, sets[0], self.options.sanitize)))
            if profile and findings.timing is not None and findings.passed:
                findings.profile = self._profile(findings, built, sets)
            releasing = time.perf_counter()
        findings.stages.add("teardown", time.perf_counter() - releasing)
        timing = findings.timing
        if measure and timing is not None and findings.passed:
            findings.add_score(self._timed(findings, "score", "score", lambda: self._score(timing)))

    def _in_driver(self, built: CandidateBuild, sets: list[SharedSet], findings: Findings, verify: bool,
                   measure: bool) -> None:
        """Verify and time in one driver process. What this process allocates meanwhile is set aside before
        the driver starts (harness/gpu_reserve.py): a candidate that takes the GPU's memory gets a verdict on
        its outputs, or, should this process run out all the same, one on the memory it held."""
        if measure:
            self._calibrate(sets, findings.stages)  # before the candidate's process holds any memory
            # The GPU's peaks (measured once, with buffers of a few GiB the plan does not count) before the
            # candidate's process runs: the compute-floor test after timing needs them.
            self.roofline_floor()
        gpu = self._require_gpu()
        if self.plan.references == "cached":
            # Every kept case, the strict-only ones too, is computed before the candidate's process holds any
            # memory and the reserve is taken: one computed later would be kept out of the reserve.
            with findings.stages.timing("references"):
                self.references.warm(self.options.precision == "strict")
        # Left free beside the candidate's allowance: the null candidate's driver (its batches run beside the
        # trusted batches).
        leave = candidate_allowance_bytes(self.plan) + null_driver_bytes(self.plan)
        with reserved_for_trusted(gpu, trusted_session_bytes(self.plan), leave):
            try:
                with self._driver(built, sets, findings.stages) as session, noting_out_of_memory(gpu):
                    self._check_in(session, sets, findings, verify=verify, measure=measure)
            except DriverError as error:  # setup, or a call while timing
                findings.driver_failure = DriverFailure.of(error)
                findings.checks.append(findings.driver_failure.check())
            except TrustedOutOfMemory as oom:  # the driver has ended: what it gave back is what it held
                check = hoarding_check(freed_since(gpu, oom.free_bytes), self.plan)
                if check is None:
                    raise oom.error from None
                findings.checks.append(check)

    def _check_in(self, session: DriverSession, sets: list[SharedSet], findings: Findings, *, verify: bool,
                  measure: bool) -> None:
        """Verify and time through one driver session; a time below only the reference's compute floor (an
        algebraic rewrite does less work) earns more verification, not rejection."""
        if verify:  # verification and timing record their parts' seconds themselves
            findings.add_verification(self._timed(findings, "verify", None, lambda: self._verify(session, sets[0])))
        if measure and findings.passed:
            findings.add_measurement(self._timed(findings, "time", None, lambda: self._time(session, sets)))
        timing = findings.timing
        if timing is not None and findings.passed and below_compute_floor(self.roofline, timing.event.median_ms):
            findings.checks.append(self._timed(findings, "reverify", "reverify", lambda: extra_verification(
                session, sets[0], self._verification_context())))

    @contextmanager
    def _driver(self, built: CandidateBuild, sets: list[SharedSet],
                clock: StageClock | None = None) -> Iterator[DriverSession]:
        """The candidate's driver process, set up on `sets`; with `clock`, its start is `driver_start` and its
        end, after a block that did not raise, `teardown`."""
        program = built.program
        assert program is not None, "only a built candidate runs"
        gpu = self._require_gpu()
        clock = clock or StageClock()
        starting = time.perf_counter()
        with DriverSession(program.command(filtered=self.sandbox is not None), sandbox=self.sandbox,
                           view=program.view()) as session:
            session.setup([s.ipc() for s in sets], flush_bytes=flush_bytes(gpu), device=gpu,
                          timeout_s=self.options.timeout_s)
            clock.add("driver_start", time.perf_counter() - starting)
            yield session
            ending = time.perf_counter()
        clock.add("teardown", time.perf_counter() - ending)

    def _timed(self, findings: Findings, stage: str, record: Stage | None, run: Callable[[], T]) -> T:
        """Run one stage, named `stage` for a harness failure, and record its wall time as `record` (None: the
        stage's value carries its parts' seconds)."""
        findings.stage = stage
        started = time.perf_counter()
        value = run()
        if record is not None:
            findings.stages.add(record, wall_seconds(started))
        return value

    def _verify(self, session: DriverSession, shared: SharedSet) -> Verification:
        return verify_candidate(session, shared, self._verification_context())

    def _time(self, session: DriverSession, sets: list[SharedSet]) -> Measurement:
        """The event timing (the score), then the trusted batches that bound it and check the timed calls
        (harness/timing.py); a median the harness's clock contradicts is `forged_result`."""
        clock = StageClock()
        with clock.timing("event_timing"):
            learned = _fill_with_timing_arguments(self.references, sets)

            def refill() -> None:
                _fill_with_timing_arguments(self.references, sets, fresh=True)

            inputs = TimedInputs(sets, learned=learned, refill=refill)  # digested as filled: the event-timed
            # calls must leave them so too
            timing = time_candidate(session, list(range(len(sets))), self.options.timeout_s)
            escape = stream_escape_check(timing)
        if not escape.passed:
            return Measurement(timing, [escape], clock.seconds)
        batches_started = time.perf_counter()
        assert self._round_trip is not None, "the null candidate's calibration comes first"
        context = self._verification_context()
        checks = BatchChecks(outputs=lambda index: timed_set_failure(index, sets[index], context),
                             inputs=inputs.unchanged, prepare=inputs.prepare)
        flush = torch.empty(flush_bytes(self._require_gpu()), dtype=torch.uint8, device=f"cuda:{self.gpu}")
        with self._batches_beside(sets, flush) as beside:
            outcome = TrustedBatches(session, sets, checks, self._round_trip, self.options.timeout_s,
                                     beside=beside).run(timing.event.median_ms, flush)
        del flush
        clock.add("trusted_batches", time.perf_counter() - batches_started)
        if outcome.forged is not None:
            raise session.reject(outcome.forged)
        if outcome.failed is not None:
            return Measurement(timing, [escape, outcome.failed], clock.seconds)
        assert outcome.timing is not None
        timing = timing.model_copy(update={"trusted": outcome.timing})
        return Measurement(timing, [escape, CheckResult(
            name="timed_outputs", passed=True,
            detail=f"the batch of timed calls on contents changed at secret places, and "
                   f"{outcome.timing.checked_batches} of the {outcome.timing.batches} on fresh contents, chosen "
                   "after they ran, gave complete, "
                   f"correct outputs on all {len(sets)} sets; inputs and params unchanged after every batch")],
            clock.seconds)

    def _sanitize(self, built: CandidateBuild, shared: SharedSet,
                  tools: tuple[SanitizerTool, ...]) -> list[SanitizerResult]:
        """One call on seeded inputs under each checker, each in a driver process of its own."""
        program = built.program
        assert program is not None, "only a built candidate runs"
        _fill_with_seeds(self.references, [shared])
        gpu = self._require_gpu()
        call = SanitizedCall(command=program.command(filtered=self.sandbox is not None), view=program.view(),
                             tensor_set=shared.ipc(), device=gpu, flush_bytes=flush_bytes(gpu),
                             timeout_s=self.options.timeout_s, sandbox=self.sandbox)
        return [sanitize_call(call, tool) for tool in tools]

    def _score(self, timing: CandidateTiming) -> Score:
        time_ms = timing.event.median_ms
        roofline, floor_check = roofline_check(self.roofline, time_ms)
        baseline = self._baseline if self.options.baseline else None
        speedup = Speedup.of(time_ms, baseline) if baseline else None
        return Score(roofline, floor_check, baseline, speedup)

    def _profile(self, findings: Findings, built: CandidateBuild, sets: list[SharedSet]) -> ProfileOutcome:
        """The candidate's profile; its seconds recorded as `profile`, the wait for the host's profiler (another
        evaluation's profile) apart as `profile_wait`."""
        program = built.program
        assert program is not None
        waited, started = StageClock(), time.perf_counter()
        profile = self._timed(findings, "profile", None, lambda: profile_candidate(
            program, [s.ipc() for s in sets], self._require_gpu(), self.options.timeout_s, self.sandbox, waited))
        findings.stages.merge(waited.seconds)
        findings.stages.add("profile", wall_seconds(started) - waited.seconds.get("profile_wait", 0.0))
        return profile

    def _verification_context(self) -> VerificationContext:
        return VerificationContext(self.references, self.options.precision, self.options.timeout_s,
                                   self.plan.compare_chunk_elements)

    def _warm_references_in_background(self, clock: StageClock, compiling: threading.Event) -> _Warming | None:
        """While the candidate compiles (once `compiling` is set): the memory plan (CUDA starts in this process
        with it; `memory_plan`), then, where the plan keeps them, the references (`references`), both recorded
        in `clock`. A failure of the plan is kept, and raised once the build is over; a build that failed
        before the plan began (stopped) leaves it for the next evaluation."""
        if self.gpu is None:
            return None
        stop, failures = threading.Event(), list[BaseException]()
        thread = threading.Thread(target=self._plan_and_warm, name="warm-references", daemon=True,
                                  args=(compiling, stop, failures, clock))
        thread.start()
        return _Warming(thread, stop, failures)

    def _plan_and_warm(self, compiling: threading.Event, stop: threading.Event, failures: list[BaseException],
                       clock: StageClock) -> None:
        compiling.wait()
        if stop.is_set():
            return
        try:
            plan = self._planned(clock)
        except BaseException as error:  # raised in the foreground, after the build
            failures.append(error)
            return
        if plan.fits and plan.references == "cached":
            _warm_quietly(self.references, self.options.precision == "strict", stop, clock)

    def _require_gpu(self) -> int:
        if self.gpu is None:
            raise UserFacingError("no CUDA GPU is visible; this step needs an NVIDIA GPU")
        return self.gpu

    def _conclude(self, built: CandidateBuild, findings: Findings) -> EvalResult:
        return _concluded(self.problem, self.options, self.gpu, self.arch, built, findings)


def evaluate_candidate(problem_path: Path | str, candidate_path: Path | str, options: EvalOptions,
                       clock: StageClock | None = None) -> EvalResult:
    """Evaluate one candidate file on one problem file; `clock` holds what ran before (the process's start). A
    candidate the source rules refuse is refused once the problem is loaded: before its spec, the GPU and nvcc."""
    clock = clock or StageClock()
    with clock.timing("problem_load"):
        problem = load_problem(problem_path)
    source = read_text_file(Path(candidate_path), "the candidate")
    result = refused_by_source_rules(problem, source, str(candidate_path), options)
    if result is None:
        with clock.timing("problem_spec"):
            evaluator = CandidateEvaluator(problem, options)
        result = evaluator.evaluate(source, str(candidate_path))
    clock.merge(result.stages.ran())
    return result.model_copy(update={"stages": clock.times()})


def refused_by_source_rules(problem: Problem, source: str, label: str, options: EvalOptions) -> EvalResult | None:
    """The verdict `static_violation` when the source rules refuse `source`, else None; no problem spec, GPU
    memory, reference or compiler is needed for it (the rules after the compile still run in every build)."""
    key = hashlib.sha256(_encoded(source + ",".join(sorted(options.allow)))).hexdigest()[:20]
    refused = source_refusal(source, options.allow, options.cache_dir / "builds" / f"refused-{key}")
    if refused is None:
        return None
    gpu = options.gpu if gpu_available() else None
    return _concluded(problem, options, gpu, options.arch or detect_arch(options.gpu),
                      CandidateBuild(label, source, refused, None), Findings.of_build(refused))


def _concluded(problem: Problem, options: EvalOptions, gpu: int | None, arch: str, built: CandidateBuild,
               findings: Findings) -> EvalResult:
    verdict, summary = decide(built.build, findings)
    build, score = built.build, findings.score
    return EvalResult(
        verdict=verdict, summary=summary, problem=str(problem.path), problem_sha256=problem.sha256,
        candidate=built.label, source_sha256=hashlib.sha256(_encoded(built.source)).hexdigest(),
        gpu=device_name(gpu) if gpu is not None else None, arch=arch,  # a refusal never starts PyTorch's CUDA
        precision=options.precision, compiled=build.stage == "ok", compile_log=build.log,
        compile=CompileSummary(stage=build.stage, seconds=build.seconds, cached=build.cached,
                               resources=[r.render() for r in build.resources]),
        checks=findings.checks, weakly_checked=findings.weakly_checked, timing=findings.timing,
        baseline=score.baseline if score else None, speedup=score.speedup if score else None,
        roofline=score.roofline if score else None, profile=findings.profile, sanitizer=findings.sanitizer,
        memory=findings.plan,
        failure=findings.harness_failure, stages=_stage_times(build, findings),
        machine=this_machine(gpu),
    )


def _encoded(text: str) -> bytes:
    """`text` as UTF-8 to hash, a lone surrogate included (a source holding one is refused, `not_text`, but is
    named and hashed first)."""
    return text.encode("utf-8", "surrogatepass")


def _stage_times(build: BuildResult, findings: Findings) -> StageTimes:
    clock = StageClock(build.stage_seconds)
    clock.merge(findings.stages.seconds)
    return clock.times()


def _fill_with_seeds(references: ReferenceCache, sets: list[SharedSet]) -> None:
    """Ordinary seeded values in every set (verification left special values in set 0)."""
    for index, shared in enumerate(sets):
        case = references.seed_case(references.seeds[index % len(references.seeds)])
        shared.fill(case.tensor_args, case.params)
        del case  # before the next is computed: a per-case cache holds one at a time
    torch.cuda.synchronize(references.gpu)


def _fill_with_timing_arguments(references: ReferenceCache, sets: list[SharedSet], fresh: bool = False) -> list[bool]:
    """Every set gets the arguments of a seed of its own that verification never uses (no reference: what a set
    must give is computed when a batch is checked): timing and verification calls run on the same sets, and no
    set is verification's alone. With `fresh`, each set's seed is a new secret one (before each fresh batch).
    Returns which params are learned weights (`references.learned_params`)."""
    learned: list[bool] = []
    for index, shared in enumerate(sets):
        arguments = references.timing_arguments(index, fresh=fresh)
        shared.fill(arguments.tensor_args, arguments.params)
        learned = arguments.learned
        del arguments  # before the next are built: one set of arguments at a time
    torch.cuda.synchronize(references.gpu)
    return learned


@dataclass(frozen=True)
class _Warming:
    """The references computed in the background, and how to tell it to begin no further case."""

    thread: threading.Thread
    stop: threading.Event
    failures: list[BaseException] = field(default_factory=list)  # what the thread raised, for the foreground

    def raise_failure(self) -> None:
        """Raise what the thread raised, once it has ended."""
        if self.failures:
            raise self.failures[0]


def _build_quietly(build: Callable[[], CandidateBuild], clock: StageClock) -> None:
    """Build the null candidate ahead; a failure here recurs, and is reported, when it is needed."""
    with contextlib.suppress(Exception), clock.timing("calibration"):
        build()


def _warm_quietly(references: ReferenceCache, strict: bool, stop: threading.Event, clock: StageClock) -> None:
    """Compute the references ahead; a failure here recurs, and is reported, when the case is needed."""
    with contextlib.suppress(Exception), clock.timing("references"):
        references.warm(strict, stop)


def _release_gpu_memory() -> None:
    """Give PyTorch's cached blocks back to the device: after a failure (an out-of-memory one above all),
    and when an evaluator is closed."""
    gc.collect()
    with contextlib.suppress(RuntimeError):  # a broken context: the next evaluation reports it
        torch.cuda.empty_cache()
