"""Time a candidate (through the driver) and the PyTorch baselines (in this process) by one method.

Both: warm-up, then many calls rotating over several input sets, an L2 flush before each call, and CUDA
events on the stream around the call; the GPU time between the events is the time. Host-side API time
inside a call (allocations, attribute setting, event waits) shows in the events only where it keeps the
GPU waiting, as it would in any program. Work a candidate leaks onto another stream is not timed by the
events, so the driver checks, for every call, that the outputs were final the moment the stream's work was
done: a call whose outputs still changed afterwards fails `stream_escape` and earns nothing.
`flush_and_sync_ms` measures, in this trusted process, the work around each timed call that the driver's
claims leave out (for the forgery check).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelblaster.harness.result import CandidateTiming, CheckResult
from kernelblaster.harness.stats import TimingStats
from kernelblaster.tools.driver_process import DriverSession

TARGET_TIMED_SECONDS = 0.3
MIN_ITERATIONS = 30
MAX_ITERATIONS = 1000
PROBE_WARMUP = 2
PROBE_ITERATIONS = 5
# A timing request may take this many times the probe's wall time per call before it counts as a hang.
BUDGET_FACTOR = 4


@dataclass(frozen=True)
class IterationPlan:
    warmup: int
    iterations: int

    @classmethod
    def for_estimate(cls, estimate_ms: float) -> IterationPlan:
        iterations = int(TARGET_TIMED_SECONDS * 1000 / max(estimate_ms, 1e-3))
        iterations = max(MIN_ITERATIONS, min(MAX_ITERATIONS, iterations))
        return cls(warmup=max(5, iterations // 10), iterations=iterations)


def flush_bytes(device: int) -> int:
    return 2 * torch.cuda.get_device_properties(device).L2_cache_size


def flush_and_sync_ms(device: int, samples: int = 7) -> float:
    """One L2 flush and device synchronise, timed in this (trusted) process: the work around each timed
    call that the driver's claimed times leave out, for the check that the claims are genuine."""
    flush = torch.empty(flush_bytes(device), dtype=torch.uint8, device=f"cuda:{device}")
    measured = []
    for k in range(samples):
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        flush.fill_(k & 0xFF)
        torch.cuda.synchronize(device)
        measured.append((time.perf_counter() - started) * 1000)
    return sorted(measured)[samples // 2]


def time_candidate(session: DriverSession, set_indices: list[int], timeout_s: float) -> CandidateTiming:
    started = time.perf_counter()
    probe = session.time(sets=set_indices, warmup=PROBE_WARMUP, iters=PROBE_ITERATIONS, flush=True,
                         timeout_s=timeout_s)
    seconds_per_call = (time.perf_counter() - started) / (PROBE_WARMUP + PROBE_ITERATIONS)
    plan = IterationPlan.for_estimate(TimingStats.from_samples(probe.event_ms).median_ms)
    calls = plan.warmup + plan.iterations
    budget = timeout_s + calls * seconds_per_call * BUDGET_FACTOR
    reply = session.time(sets=set_indices, warmup=plan.warmup, iters=plan.iterations, flush=True, timeout_s=budget)
    return CandidateTiming(
        event=TimingStats.from_samples(reply.event_ms),
        rotating_sets=len(set_indices),
        l2_flush=True,
        calls=PROBE_WARMUP + PROBE_ITERATIONS + calls,
        incomplete_calls=probe.incomplete_calls + reply.incomplete_calls,
        policy_windows=probe.policy_windows + reply.policy_windows,
    )


def stream_escape_check(timing: CandidateTiming) -> CheckResult:
    if timing.incomplete_calls:
        return CheckResult(name="stream_escape", passed=False, detail=(
            f"{timing.incomplete_calls} of {timing.calls} calls were still changing their outputs after the work on "
            "`stream` was done, so the events on `stream` did not time it: work escaped the timed stream (launch "
            "everything on `stream`, or join other streams back to it before returning)"))
    return CheckResult(name="stream_escape", passed=True,
                       detail=f"the outputs of all {timing.calls} timed and warm-up calls were final when the work "
                       "on `stream` was done")


def time_torch_calls(calls: list[Callable[[], Any]], device: int, plan: IterationPlan | None = None) -> TimingStats:
    """Time PyTorch callables (one per rotating input set) by the driver's method; returns event times."""
    flush = torch.empty(flush_bytes(device), dtype=torch.uint8, device=f"cuda:{device}")
    if plan is None:
        plan = IterationPlan.for_estimate(TimingStats.from_samples(_timed_calls(calls, flush, 0, 3)).median_ms)
    _timed_calls(calls, flush, 0, plan.warmup)
    return TimingStats.from_samples(_timed_calls(calls, flush, plan.warmup, plan.iterations))


def _timed_calls(calls: list[Callable[[], Any]], flush: torch.Tensor, first: int, count: int) -> list[float]:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    with torch.no_grad():
        for k in range(first, first + count):
            flush.fill_(k & 0xFF)
            torch.cuda.synchronize()
            start.record()
            calls[k % len(calls)]()
            stop.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(stop))
    return samples


def wall_seconds(since: float) -> float:
    return round(time.perf_counter() - since, 3)
