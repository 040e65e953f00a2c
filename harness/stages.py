"""The named stages of one evaluation and the wall seconds each took (`StageTimes`, part of every `EvalResult`),
and the `StageClock` the harness and the command line record them with.

Light on purpose (pydantic only): the build and the command line record stages without importing torch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

# In the order an evaluation runs them; `StageTimes` has one field per name, in this order.
Stage = Literal["process_start", "problem_load", "static_check", "problem_spec", "memory_plan", "compile", "link",
                "references", "conditioning",
                "calibration", "driver_start", "verification", "special_values", "sanitizer", "event_timing",
                "trusted_batches", "reverify", "score", "profile_wait", "profile", "teardown"]
STAGES: tuple[Stage, ...] = get_args(Stage)
T = TypeVar("T")


def _seconds(description: str) -> Any:
    return Field(default=None, ge=0, description=description + ", seconds")


class StageTimes(BaseModel):
    """Wall seconds per stage of one evaluation. A stage that did not run is absent (None here, left out of the
    JSON), never zero. Stages can overlap (CUDA's start, the memory plan and the references, and the null
    candidate's build, run in the background while the candidate compiles), and a stage run twice (a driver
    started for verification, then again for timing) adds up."""

    process_start: float | None = _seconds("From the process's start to the evaluation's: the interpreter, the "
                                           "imports of the harness and the checks of the GPU index (CUDA's driver "
                                           "starts there) and tools; `eval` on the command line only")
    problem_load: float | None = _seconds("Importing the problem file")
    static_check: float | None = _seconds("The source rules (harness/static_check.py)")
    problem_spec: float | None = _seconds("The problem's forward pass for its spec, footprint and header "
                                          "(harness/analysis.py; read back from the cache folder once a "
                                          "process made it)")
    memory_plan: float | None = _seconds("Starting CUDA in this process (where nothing had) and planning the GPU "
                                         "memory: once per evaluator (in the background while the candidate "
                                         "compiles)")
    compile: float | None = _seconds("nvcc compiling the candidate's object (a cache hit takes next to nothing) "
                                     "and the checks of the compiled host code and object")
    link: float | None = _seconds("Linking the candidate's library against the driver's (the trusted driver "
                                  "pieces built first where the cache lacks them) and checking its imports")
    references: float | None = _seconds("Computing the PyTorch references of the seeds, the special values and "
                                        "the timing cases ahead (in the background while the candidate compiles)")
    conditioning: float | None = _seconds("Of the references' seconds, wherever they were computed (ahead, in "
                                          "verification, in the checks of the trusted batches), those of the "
                                          "float64 reference and PyTorch's fp32 error measured from it, which the "
                                          "tolerances widen by; counted in those stages too")
    calibration: float | None = _seconds("The round trip of an empty batch on the harness's null candidate, which "
                                         "the trusted batches subtract, and the null candidate's build (in the "
                                         "background while the candidate compiles)")
    driver_start: float | None = _seconds("Allocating the shared input sets, starting the candidate's driver "
                                          "process in the sandbox and its setup")
    verification: float | None = _seconds("The correctness checks up to special values: runs, outputs written, "
                                          "correct, inputs unchanged, deterministic, no caching")
    special_values: float | None = _seconds("The special-values check (NaN, Inf, large and badly conditioned "
                                            "inputs)")
    sanitizer: float | None = _seconds("compute-sanitizer's runs, one per checker asked for")
    event_timing: float | None = _seconds("Filling the timing cases and timing the calls with CUDA events")
    trusted_batches: float | None = _seconds("The harness's own clock on batches of the candidate's calls, and "
                                             "the checks of their outputs")
    reverify: float | None = _seconds("More verification of a time below the reference's compute floor")
    score: float | None = _seconds("The roofline and the PyTorch baselines (timed here the first time, then "
                                   "read from the cache)")
    profile_wait: float | None = _seconds("Waiting for the host's Nsight Compute, which profiles one process at a "
                                         "time: another evaluation's profile was running (on any GPU of the host)")
    profile: float | None = _seconds("Nsight Compute's profile, the wait for it apart")
    teardown: float | None = _seconds("Ending the candidate's driver process and giving back the shared sets")

    @model_serializer(mode="wrap")
    def _ran_only(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, float]:
        """Only the stages that ran: an absent stage is left out, not written as null."""
        return {name: value for name, value in handler(self).items() if value is not None}

    def ran(self) -> dict[Stage, float]:
        """The stages that ran, in the order of `STAGES`."""
        return {stage: seconds for stage in STAGES if (seconds := getattr(self, stage)) is not None}


class StageClock:
    """Seconds per stage as they are recorded; a stage recorded twice adds up. Threads of one evaluation (its
    background work) may record into one clock."""

    def __init__(self, seconds: dict[Stage, float] | None = None) -> None:
        self.seconds: dict[Stage, float] = dict(seconds or {})
        self._lock = threading.Lock()

    def add(self, stage: Stage, seconds: float) -> None:
        with self._lock:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + max(seconds, 0.0)

    def merge(self, other: dict[Stage, float]) -> None:
        for stage, seconds in other.items():
            self.add(stage, seconds)

    @contextmanager
    def timing(self, stage: Stage) -> Iterator[None]:
        """Record the block's wall time under `stage`, also when it raises."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, time.perf_counter() - started)

    def run(self, stage: Stage, work: Callable[[], T]) -> T:
        with self.timing(stage):
            return work()

    def times(self) -> StageTimes:
        return StageTimes.model_validate(self.seconds)


def process_age_seconds() -> float | None:
    """Seconds since this process started, from /proc (Linux, to the kernel's clock tick); None where unknown."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            # The command name (field 2) may hold spaces and parentheses: count the fields after its last ')'.
            fields = stat.read().rsplit(")", 1)[1].split()
            since_boot = float(uptime.read().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
        return max(since_boot - int(fields[19]) / ticks, 0.0)
    except (OSError, ValueError, IndexError):
        return None
