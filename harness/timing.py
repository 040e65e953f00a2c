"""Time a candidate (through the driver) and the PyTorch baselines (in this process) by one method, and bound
the candidate's claimed times by the harness's own clock.

The score. Warm-up, then many calls rotating over the input sets, an L2 flush before each call, and CUDA
events on the stream around the call; the GPU time between the events is the time, and the PyTorch
baselines are timed the same way in this process, so speedups compare like with like. Host-side API time
inside a call shows in the events only where it keeps the GPU waiting. The driver checks, for every call,
that the outputs were final the moment the stream's work was done (`stream_escape`).

The threat. Those events are recorded and read in the driver's process, where the candidate's code runs:
it can scan the stack and heap, re-record the driver's start event, rewrite its replies. The driver's
sum of times is held against this process's clock (tools/driver_process.py, `forged_timing`), but the
score is the median: "keep the sum, move the median" beat that. So nothing the driver's process reports is
believed without a figure this process measured itself.

What must hold: whatever the candidate does in its process, the event median the score uses is not more
than 5% (or the measured timing noise, where larger) below the GPU time its calls really take, and every
figure comes with a bound measured here. How (`TrustedBatches`):
- Batches. After the event timing, the candidate runs batches: one call per rotating set, in a random
  order, back to back on its stream with no synchronisation between them, then one device-wide synchronise
  and the reply (the driver's `batch` request). Before each batch this process changes every set's
  contents (at a few secret places before the first, from a fresh seed before every later one:
  `TimedInputs`), poisons every set's outputs (each set has its own), flushes L2 with its own buffer,
  synchronises its device and sends an empty batch (so both processes are awake, as when the round trip
  was measured), all outside the clock. The clock runs from
  sending the request to the moment a snapshot of the batch's outputs, read here after the reply at
  secret random places (`OutputSnapshot`), is complete (`BatchClock`). A reply sent before the work was
  done (forged, or early) cannot stop the clock at less than the work: the snapshot is taken again three
  times at once and after the outputs are checked, and outputs that changed after it are `forged_result`.
- What is subtracted is measured here only: the snapshot's own time (taken three more times after the
  clock, the fastest kept) and the round trip of an empty batch on the harness's own null candidate's driver,
  a process with no candidate code: the fastest of several empty batches at calibration (`RoundTrip`), or,
  where larger, the faster of the same batch clocked on that driver right before and after the candidate's
  (it runs beside the candidate's; its calls launch one empty kernel each, so the GPU switches contexts as
  for the candidate's; `BatchClock.beside`). On two H200s of one host, honest kernels' batches of four took
  0.27 to 0.41 ms more than the quiet empty round trip allowed, and were judged forged: what the empty
  batches did not see (a loaded host, the switches between the two processes' contexts) the null batches
  beside carry too. Per-call trusted time = (wall - snapshot - round trip)
  / calls. Noise only ever adds to a batch's wall.
- Checks it cannot predict. After each batch, and only then, the harness draws (secrets) whether to check
  it: every output of every call against the reference on that set's contents (computed then), and, after
  every batch, the inputs and params of every set against a digest taken when they were last changed (and
  once before the first batch, after the event-timed calls). Only checked batches give the trusted figure
  (the lowest of them); at least two are checked, and batches run until they are. A candidate that skips
  work in some batches gains only where the batch goes unchecked, and an unchecked batch's time is never
  used. Every set is in every batch, so every set is checked. Verification calls are batches too (of set
  0), with the same poisoning of outputs and workspace. The event-timed calls (the `time` request) are
  recognisable and their outputs are not compared: they give only the median, and work skipped there only
  pulls the median below the trusted figure.
- Contents that never repeat (`TimedInputs`). The first batch (`nudged`) finds the event-timed calls'
  contents changed at a few secret places, inputs and learned weights alike, and is always checked: a cache
  keyed on pointers or on sampled values (of the inputs, or of weights it prepared once) gives stale outputs
  there. It never gives the figure: most of its contents are as the calls before saw them, so an exact
  memo that compares each call's contents with the last and recomputes only what changed is rightly fast
  there (four changed places let one recompute four rows of a GEMM: a "time" a small fraction of the
  work, with every output right). Every later batch (`fresh`) refills every set, inputs and params, from a
  fresh secret seed of the problem's own distribution, so the calls that give the figure do all the work
  on contents no call saw before, and the event median, which such a memo serves from its copies, falls
  below it: `forged_result`.
- The decision. An event median more than max(5% of the trusted figure, the fastest checked batch's measured
  jitter per call: the calibration's spread, its snapshot repeats', how much the batches beside it differed,
  the last at most `BESIDE_CAP_MS`) below the trusted figure is `forged_result` (after more batches have had
  the chance to lower the trusted figure): the events then cannot be the calls' time.
  The score stays the event median otherwise (the baselines' method); it is never replaced by the
  trusted figure, which measures back-to-back calls.
- Why an honest kernel passes. The batch hides the launch latency between calls and keeps the candidate's
  own workspace warm in L2, and every call's inputs and outputs are cold (flushed before the batch and
  touched once in it), so the batch's per-call time is at most the flushed event time, up to noise.
  Multi-launch kernels that are host-bound are host-bound in both. Workspace poisoning is on in every call
  of both (driver), so it costs both the same.
- What it guarantees, and what not. The median cannot be forged lower than 95% of what the GPU spends on
  the candidate's checked, back-to-back calls (less the round trip's jitter per call, which for calls
  much shorter than a round trip's jitter, tens of microseconds, over the sets per batch, is the bound);
  the launch gap and workspace warmth a batch hides are the forger's only other room. On a loaded host the
  jitter is larger: at most `BESIDE_CAP_MS` over the calls of a batch more, so for calls of a few tens of
  microseconds (four to a batch) the roofline floor, not this clock, is then the bound. And work still
  writing after the reply escapes the snapshot only if it writes a tiny share of the outputs (8192
  random bytes of each are read). Contents changed at random places make a cache keyed on pointers or on
  sampled values (inputs or weights) return stale outputs, which the nudged batch's check sees; one keyed
  on the whole content, or a memo of what changed, misses in every fresh batch, so hits in the event-timed
  calls only pull the median below the trusted figure. Not covered: a problem whose `get_inputs()` and
  model are not random (a fresh seed gives the same contents, so a cache can serve its fresh batches;
  without floating-point inputs or weights the nudged batch changes nothing either); work a candidate
  defers from one call of a batch to a later one (it can read the batch's list in its process), so that
  fused calls make the batch faster than calls one at a time; and
  an honest kernel whose time depends strongly on its data, so that one set's calls are much slower than
  the others': its median can then lie below the batches' mean by more than the tolerance.
- Cost per evaluation. Once per evaluator: 7 empty batches on the null candidate's driver (beside its
  existing calibration), and each rotating set filled with the arguments of a seed verification never
  uses (never run: what a set must give is computed when a batch is checked). Per candidate: the nudged
  batch and typically 4 fresh ones (3 to 10, and 4 more only when the median looks forged) of one call
  per rotating set (at most 4), so about 20 calls beside the event timing's; before the nudged batch a
  change of 4 elements per input and learned weight, before each fresh one every set refilled from a
  new seed (the problem's model and inputs built once per set, as when the sets were first filled); per
  batch one poisoning of the outputs, one L2 flush, four snapshots (about a dozen small kernels each) and
  two digests of every input and param (one before, one after); per checked batch (the nudged one and at
  least two fresh) one reference forward per set on its contents and a comparison of every output.
  Memory beyond the rotating sets: this process's flush buffer (2x L2), the digest's chunk temporaries (a
  few 16 MiB tensors) and one reference forward (or one set's refill) at a time, which the memory plan's
  trusted reserve
  (`MemoryPlan.trusted_reserve_bytes`) counts. Verification makes 15 calls (11 before: the special
  values now have 8 cases under `strict`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from kernelblaster.harness.buffers import SharedSet
from kernelblaster.harness.compare import POISON_BYTE
from kernelblaster.harness.result import CandidateTiming, CheckResult, TrustedTiming
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


# ---------------------------------------------------------------------------------------------------
# The harness's own clock on batches of the candidate's calls
# ---------------------------------------------------------------------------------------------------
TRUSTED_MARGIN = 0.05  # the median may lie this share below the trusted per-call time (clock skew, boost)
ROUND_TRIP_SAMPLES = 7
MIN_BATCHES = 3
MIN_CHECKED_BATCHES = 2
MAX_BATCHES = 10
EXTRA_BATCHES = 4  # run when the median looks forged, so noise alone never condemns
# The most a batch beside may add to the calibration's round trip: 0.27 to 0.41 ms were seen on an H200
# (batches of four), with room for a busier host; beyond it, only slowing the GPU for others explains it.
BESIDE_CAP_MS = 1.0
DIGEST_REPEATS = 3
DIGEST_CHUNK = 1 << 21  # 64-bit words per digest step: its temporaries (16 MiB each) stay in L2
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class RoundTrip:
    """An empty batch's request-to-reply time on the harness's null candidate's driver: the fastest sample
    is subtracted from every batch, the spread is the jitter a batch's wall may carry beyond it."""

    min_ms: float
    spread_ms: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> RoundTrip:
        if not samples_ms:
            raise ValueError("no round-trip samples")
        return cls(min_ms=min(samples_ms), spread_ms=max(samples_ms) - min(samples_ms))


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_round_trip(session: DriverSession, device: torch.device, timeout_s: float,
                       samples: int = ROUND_TRIP_SAMPLES) -> RoundTrip:
    """Empty batches on `session` (the null candidate's driver), clocked from the request to the reply as
    `clocked_batch` clocks a batch (whose snapshot after the reply is measured and subtracted on its own)."""
    measured = []
    for _ in range(samples):
        _synchronize(device)
        started = time.perf_counter()
        session.batch([], timeout_s=timeout_s)
        measured.append((time.perf_counter() - started) * 1000)
    return RoundTrip.of(measured)


@dataclass(frozen=True)
class BatchClock:
    """One batch by this process's clock: from the request to the outputs' digest, and the digest's own time."""

    calls: int
    wall_ms: float
    digest_ms: float  # the snapshot's own time: the fastest of its repeats after the clock
    digest_spread_ms: float = 0.0  # how much its repeats differed: jitter the clocked snapshot may carry
    # The same batch on the null candidate's driver right before and after this one, less its snapshot: the
    # round trip, the GPU's switches between the two processes' contexts and the snapshot's first read after
    # them, as the host was at that moment (the calibration's empty batches were quiet and switched nothing).
    beside: RoundTrip | None = None

    def round_trip_ms(self, calibrated: RoundTrip) -> float:
        """The round trip subtracted from this batch: the larger of the calibration's and the one beside it,
        both measured on a process without candidate code, the latter at most `BESIDE_CAP_MS` above the
        former (a candidate that kept the GPU busy for other processes would otherwise buy itself time)."""
        beside = self.beside.min_ms if self.beside else 0.0
        return max(calibrated.min_ms, min(beside, calibrated.min_ms + BESIDE_CAP_MS))

    def jitter_ms(self, calibrated: RoundTrip) -> float:
        """What noise may add to this batch's wall beyond the work and the subtracted round trip. How much the
        batches beside differed counts at most `BESIDE_CAP_MS`: a candidate that loads the host or the GPU after
        its reply slows the batch after it, and would otherwise widen its own tolerance at will."""
        beside = min(self.beside.spread_ms, BESIDE_CAP_MS) if self.beside else 0.0
        return calibrated.spread_ms + beside + self.digest_spread_ms

    def per_call_ms(self, round_trip: RoundTrip) -> float:
        return max(0.0, (self.wall_ms - self.digest_ms - self.round_trip_ms(round_trip)) / max(self.calls, 1))


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= (1 << 63) else value


def digest(tensors: Sequence[torch.Tensor], salt: int) -> torch.Tensor:
    """A position-dependent hash of the bytes of `tensors` (flat uint8 views), as a 0-d int64 tensor on their
    device, enqueued without a synchronise: each 64-bit word, keyed by its place and `salt` (this process's
    secret, which the driver never sees), goes through a splitmix-style mix, and the mixes are summed."""
    if not tensors:
        return torch.zeros((), dtype=torch.int64)
    device = tensors[0].device
    key, step = _signed(salt), _signed(0x9E3779B97F4A7C15)
    first, second = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)
    total = torch.zeros((), dtype=torch.int64, device=device)
    position = 0
    for raw in tensors:
        words = raw.numel() // 8
        for part in (raw[: words * 8].view(torch.int64), raw[words * 8:].to(torch.int64)):
            for start in range(0, part.numel(), DIGEST_CHUNK):
                piece = part[start:start + DIGEST_CHUNK]
                mixed = torch.arange(position, position + piece.numel(), dtype=torch.int64, device=device)
                mixed.mul_(step).add_(key).add_(piece)
                mixed.bitwise_xor_(mixed >> 31).mul_(first)
                mixed.bitwise_xor_(mixed >> 29).mul_(second)
                mixed.bitwise_xor_(mixed >> 32)
                total += mixed.sum()
                position += piece.numel()
    return total


def _output_bytes(sets: Sequence[SharedSet], order: Sequence[int]) -> list[torch.Tensor]:
    return [buffer.raw for index in order for buffer in sets[index].outputs]


def input_bytes(sets: Sequence[SharedSet]) -> list[torch.Tensor]:
    """Every input and param of every set, as flat bytes (what must stay unchanged)."""
    return [buffer.raw for shared in sets for buffer in shared.inputs + shared.params]


SNAPSHOT_SAMPLES = 8192  # bytes of each output read at secret random places when the clock stops


class OutputSnapshot:
    """The outputs of a batch read at secret random byte places (all bytes of a small output): cheap and of fixed
    cost, so the clock carries little of it. Work still writing the outputs after the snapshot changes some of
    those places unless it writes almost none of the outputs: `take` then gives another value."""

    def __init__(self, outputs: Sequence[torch.Tensor], salt: int) -> None:
        self.outputs, self.salt = list(outputs), salt
        generator = torch.Generator().manual_seed(secrets.randbits(63))
        self.picks = [torch.arange(raw.numel()) if raw.numel() <= SNAPSHOT_SAMPLES
                      else torch.randint(raw.numel(), (SNAPSHOT_SAMPLES,), generator=generator) for raw in outputs]
        self.picks = [pick.to(raw.device) for pick, raw in zip(self.picks, self.outputs, strict=True)]

    def take(self) -> int:
        """The snapshot's value now (synchronises)."""
        gathered = torch.cat([raw[pick] for raw, pick in zip(self.outputs, self.picks, strict=True)])
        return int(digest([gathered], self.salt).item())  # one digest of everything gathered: few launches


def clocked_batch(session: DriverSession, sets: Sequence[SharedSet], order: list[int], flush: torch.Tensor,
                  salt: int, timeout_s: float) -> tuple[BatchClock, OutputSnapshot, int]:
    """Poison the outputs and flush L2 (outside the clock), then one batch on `order`, clocked to a snapshot of
    its outputs; returns the clock, the snapshot and its value. A snapshot that changes when taken again is a
    forgery (work still writing after the reply): `OutputsMoved`."""
    device = flush.device
    for index in order:
        sets[index].poison_outputs(POISON_BYTE)
    snapshot = OutputSnapshot(_output_bytes(sets, order), salt)
    flush.fill_(secrets.randbelow(256))
    _synchronize(device)
    # An unclocked empty batch first, so the clocked request finds both processes awake, as the round trip's
    # back-to-back samples did: a driver asleep since the last batch would otherwise add its wake-up.
    session.batch([], timeout_s=timeout_s)
    started = time.perf_counter()
    session.batch(order, timeout_s=timeout_s)
    value = snapshot.take()
    wall_ms = (time.perf_counter() - started) * 1000
    repeats = []
    for _ in range(DIGEST_REPEATS):
        again_started = time.perf_counter()
        again = snapshot.take()
        repeats.append((time.perf_counter() - again_started) * 1000)
        if again != value:
            raise OutputsMoved("the outputs of a batch still changed after the driver had answered it (work "
                               "outside the calls, or a reply sent before the work was done)")
    clock = BatchClock(calls=len(order), wall_ms=wall_ms, digest_ms=min(repeats),
                       digest_spread_ms=max(repeats) - min(repeats))
    return clock, snapshot, value


class OutputsMoved(Exception):
    """Outputs changed after the harness's clock stopped: the reply came before the work was done."""


def forged_median(median_ms: float, trusted: TrustedTiming) -> str | None:
    """Why an event median cannot be the calls' time, given the harness's own figure; None when it can."""
    if median_ms >= trusted.per_call_ms - trusted.tolerance_ms:
        return None
    return (f"the driver's events give a median of {median_ms:.4f} ms per call, but the harness's own clock on "
            f"{trusted.checked_batches} checked batches of {trusted.calls_per_batch} back-to-back calls gives at "
            f"least {trusted.per_call_ms:.4f} ms per call (allowed {trusted.tolerance_ms:.4f} ms below it)"
            f"{_made_of(trusted)}")


def _made_of(trusted: TrustedTiming) -> str:
    """What the lowest batch figure was made of: a loaded host shows in its round trip, a forgery does not."""
    if trusted.fastest_wall_ms is None or trusted.fastest_snapshot_ms is None or trusted.fastest_round_trip_ms is None:
        return ""
    return (f"; that batch: {trusted.fastest_wall_ms:.4f} ms wall, less {trusted.fastest_snapshot_ms:.4f} ms of "
            f"snapshot and {trusted.fastest_round_trip_ms:.4f} ms of round trip (quiet: {trusted.round_trip_ms:.4f})")


def trusted_timing(clocks: Sequence[BatchClock], checked: Sequence[bool], round_trip: RoundTrip) -> TrustedTiming:
    """The lowest per-call time among checked batches (the fresh ones: `TrustedBatches` leaves the nudged batch
    out), with its tolerance: 5%, or where larger that batch's own
    measured jitter per call (the round trip's spread, its snapshot repeats', the batches beside it). Only the
    fastest batch's noise can make the figure too high; a noisier, slower batch is not the figure (at 4bc1d04
    the largest jitter of any batch, on a host whose other GPU was busy, hid a forged median entirely)."""
    counted = [clock for clock, was_checked in zip(clocks, checked, strict=True) if was_checked]
    if not counted:
        raise ValueError("no checked batch")
    calls = counted[0].calls
    fastest = min(counted, key=lambda clock: clock.per_call_ms(round_trip))
    per_call = fastest.per_call_ms(round_trip)
    tolerance = max(TRUSTED_MARGIN * per_call, fastest.jitter_ms(round_trip) / max(calls, 1))
    return TrustedTiming(per_call_ms=per_call, tolerance_ms=tolerance, round_trip_ms=round_trip.min_ms,
                         batches=len(clocks), checked_batches=len(counted), calls_per_batch=calls,
                         fastest_wall_ms=fastest.wall_ms, fastest_snapshot_ms=fastest.digest_ms,
                         fastest_round_trip_ms=fastest.round_trip_ms(round_trip))


@dataclass
class CheckSchedule:
    """Whether to check a batch, drawn after it ran: at random (`draw`, secrets by default), but at least
    `MIN_CHECKED_BATCHES` checked by the end, which comes after `MIN_BATCHES` and at most `MAX_BATCHES`."""

    draw: Callable[[], bool] = field(default=lambda: secrets.randbelow(2) == 0)
    ran: int = 0
    checked: int = 0

    def decide(self) -> bool:
        """For the batch that just ran: check it?"""
        self.ran += 1
        remaining = MAX_BATCHES - self.ran
        must = MIN_CHECKED_BATCHES - self.checked > remaining  # too few batches left to leave it to chance
        check = must or self.draw()
        self.checked += check
        return check

    @property
    def done(self) -> bool:
        return self.ran >= MAX_BATCHES or (self.ran >= MIN_BATCHES and self.checked >= MIN_CHECKED_BATCHES)


PERTURBED_PER_INPUT = 4
BatchKind = Literal["nudged", "fresh"]


class TimedInputs:
    """The timing sets' contents before each batch, digested then, so after the batch `unchanged` tells whether
    the calls wrote them.

    Before the first batch (`nudge`) every floating-point input and every learned parameter (`learned`, one flag
    per param of a set: weights, never buffers such as masks, nor a tensor tied to another) is changed at a few
    secret random places (halved: exact, sign and zeros kept, so structured inputs such as triangular ones stay
    so): a cache keyed on pointers or on sampled values, of the inputs or of weights derived once, returns stale
    outputs there, and that batch is always checked. Before every later batch (`refresh`) every set is refilled
    by `refill` from a fresh secret seed, inputs and params: no content ever repeats, so a cache keyed on the
    whole content misses, and so does an exact memo that recomputes only what changed since the call before
    (four changed places a batch let it recompute four rows of a GEMM)."""

    def __init__(self, sets: Sequence[SharedSet], *, refill: Callable[[], None], learned: Sequence[bool] = ()) -> None:
        """Digests the sets as they are now (as filled, before any timed call)."""
        self.sets, self.refill = sets, refill
        self.learned = list(learned)
        self.salt = secrets.randbits(64)
        self.expected = self._digest()

    def prepare(self, kind: BatchKind) -> None:
        """Before a batch: `nudge` for the first (`nudged`), `refresh` for every later one (`fresh`)."""
        if kind == "nudged":
            self.nudge()
        else:
            self.refresh()

    def nudge(self) -> None:
        for shared in self.sets:
            learned = [param for param, flag in zip(shared.params, self.learned, strict=False) if flag]
            for buffer in shared.inputs + learned:
                tensor = buffer.tensor
                if tensor.dtype.is_floating_point and tensor.numel():
                    halve_at_random_places(tensor, PERTURBED_PER_INPUT)
        self.expected = self._digest()

    def refresh(self) -> None:
        self.refill()
        self.expected = self._digest()

    def unchanged(self) -> bool:
        return self._digest() == self.expected

    def _digest(self) -> int:
        return int(digest(input_bytes(self.sets), self.salt).item())


def halve_at_random_places(tensor: torch.Tensor, count: int) -> None:
    flat = tensor.view(-1)
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    positions = torch.randint(flat.numel(), (count,), generator=generator).to(flat.device)
    flat[positions] = flat[positions] * 0.5


@dataclass(frozen=True)
class BatchChecks:
    """What the harness does around a batch, supplied by the evaluator: `prepare(kind)` before it (outside the
    clock: change the inputs and params, `TimedInputs.prepare`); `outputs(set index)` a failed check of that
    set's outputs or None; `inputs()` whether every set's inputs and params are still as prepared."""

    outputs: Callable[[int], CheckResult | None]
    inputs: Callable[[], bool]
    prepare: Callable[[BatchKind], None] = lambda kind: None


@dataclass(frozen=True)
class TrustedOutcome:
    """The trusted figure, or the check the candidate failed on a batch, or why its claims are forged."""

    timing: TrustedTiming | None
    failed: CheckResult | None = None
    forged: str | None = None


class TrustedBatches:
    """Runs the batches, checks a random choice of them after the fact, and rules on the event median."""

    def __init__(self, session: DriverSession, sets: Sequence[SharedSet], checks: BatchChecks,
                 round_trip: RoundTrip, timeout_s: float, schedule: CheckSchedule | None = None,
                 beside: Callable[[list[int]], float] | None = None) -> None:
        """`timeout_s` bounds one call; a batch may take that per call. `schedule` decides which batches are
        checked (a random one by default). `beside` clocks the same batch on the null candidate's driver and
        returns what it took beyond its snapshot, right before and after each batch (`BatchClock.beside`)."""
        self.session, self.sets, self.checks, self.round_trip = session, sets, checks, round_trip
        self.beside = beside
        self.timeout_s = timeout_s
        self.schedule = schedule if schedule is not None else CheckSchedule()
        self.salt = secrets.randbits(64)
        self.clocks: list[BatchClock] = []
        self.checked: list[bool] = []
        self.kinds: list[BatchKind] = []

    def run(self, median_ms: float, flush: torch.Tensor) -> TrustedOutcome:
        try:
            while not self.schedule.done:
                failed = self._one(flush)
                if failed is not None:
                    return TrustedOutcome(None, failed=failed)
            timing = self._figure()
            if forged_median(median_ms, timing) is not None:  # noise gets more chances to lower the figure
                for _ in range(EXTRA_BATCHES):
                    failed = self._one(flush, check=True)
                    if failed is not None:
                        return TrustedOutcome(None, failed=failed)
                timing = self._figure()
        except OutputsMoved as moved:
            return TrustedOutcome(None, forged=str(moved))
        return TrustedOutcome(timing, forged=forged_median(median_ms, timing))

    def _figure(self) -> TrustedTiming:
        """The trusted figure from the fresh batches alone (the lowest checked one): a nudged batch left most of
        the contents as the calls before saw them, so a memo may rightly be fast there."""
        fresh = [index for index, kind in enumerate(self.kinds) if kind == "fresh"]
        return trusted_timing([self.clocks[index] for index in fresh], [self.checked[index] for index in fresh],
                              self.round_trip)

    def _one(self, flush: torch.Tensor, check: bool | None = None) -> CheckResult | None:
        order = list(range(len(self.sets)))
        secrets.SystemRandom().shuffle(order)
        kind: BatchKind = "fresh" if self.clocks else "nudged"
        if kind == "nudged" and not self.checks.inputs():  # the event-timed calls ran on them before
            return _inputs_changed()
        self.checks.prepare(kind)
        before = self.beside(order) if self.beside else None
        clock, snapshot, value = clocked_batch(self.session, self.sets, order, flush, self.salt,
                                               self.timeout_s * len(order))  # the call timeout, per call
        if kind == "nudged":  # always checked, never the figure: the schedule counts fresh batches only
            check = True
        elif check is None:
            check = self.schedule.decide()
        self.clocks.append(clock)
        self.checked.append(check)
        self.kinds.append(kind)
        failed = self._check(order, snapshot, value, check)
        if before is not None and self.beside is not None and failed is None:  # after the check: it poisons
            self.clocks[-1] = replace(clock, beside=RoundTrip.of([before, self.beside(order)]))
        return failed

    def _check(self, order: list[int], snapshot: OutputSnapshot, value: int, check: bool) -> CheckResult | None:
        if not self.checks.inputs():
            return _inputs_changed()
        if not check:
            return None
        for index in order:
            failed = self.checks.outputs(index)
            if failed is not None:
                return failed
        if snapshot.take() != value:
            raise OutputsMoved("the outputs of a batch changed between the harness's clock and its check of them")
        return None


def _inputs_changed() -> CheckResult:
    return CheckResult(name="inputs_unchanged", passed=False,
                       detail="kb_forward modified read-only arguments (inputs or params) during the timed calls")
