"""Time a candidate (through the driver) and the PyTorch baselines (in this process) by one method.

Both: warm-up, then many calls rotating over several input sets, an L2 flush before each call, CUDA
events around the call plus a host clock after a device-wide synchronise. The candidate's host-clock
cross-check exposes work that escapes the timed stream.
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
# Escaped work is flagged when the host clock exceeds the events by more than this share of the call,
# and by more than a fixed floor that covers host-side jitter of a few microseconds.
ESCAPE_SHARE = 0.2
ESCAPE_FLOOR_MS = 0.02


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


def time_candidate(session: DriverSession, set_indices: list[int], timeout_s: float) -> CandidateTiming:
    probe = session.time(sets=set_indices, warmup=2, iters=5, flush=True, timeout_s=timeout_s)
    plan = IterationPlan.for_estimate(TimingStats.from_samples(probe.host_ms).median_ms)
    budget = timeout_s + (plan.warmup + plan.iterations) * max(probe.host_ms) * 4
    reply = session.time(sets=set_indices, warmup=plan.warmup, iters=plan.iterations, flush=True, timeout_s=budget)
    event = TimingStats.from_samples(reply.event_ms)
    host = TimingStats.from_samples(reply.host_ms)
    return CandidateTiming(
        event=event,
        host=host,
        overhead_ms=reply.overhead_ms,
        escape_gap_ms=host.median_ms - reply.overhead_ms - event.median_ms,
        rotating_sets=len(set_indices),
        l2_flush=True,
    )


def stream_escape_check(timing: CandidateTiming) -> CheckResult:
    work_ms = timing.host.median_ms - timing.overhead_ms
    escaped = timing.escape_gap_ms > ESCAPE_FLOOR_MS and timing.escape_gap_ms > ESCAPE_SHARE * work_ms
    detail = (
        f"events on the stream measured {timing.event.median_ms * 1000:.1f} us but the call took "
        f"{work_ms * 1000:.1f} us of device time: work escaped the timed stream (launch everything on `stream`, "
        "or join other streams back to it before returning)"
        if escaped
        else f"host-clock and event timings agree (gap {timing.escape_gap_ms * 1000:.1f} us)"
    )
    return CheckResult(name="stream_escape", passed=not escaped, detail=detail)


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
