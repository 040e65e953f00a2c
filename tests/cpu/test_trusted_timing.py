"""The trusted timing's protocol and decisions (harness/timing.py) without a GPU: the arithmetic of the batch
clock, when a median is forged, which batches are checked, and the batch loop against the protocol test double
of the driver (tests/fixtures/candidates/fake_driver_protocol.py) on CPU tensors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.buffers import SharedBuffer, SharedSet
from kernelblaster.harness.compare import POISON_BYTE
from kernelblaster.harness.report import render_eval
from kernelblaster.harness.result import CandidateTiming, CheckResult, EvalResult, TrustedTiming
from kernelblaster.harness.spec import TensorSpec
from kernelblaster.harness.stats import TimingStats
from kernelblaster.harness.timing import (
    BESIDE_CAP_MS,
    MAX_BATCHES,
    MIN_BATCHES,
    MIN_CHECKED_BATCHES,
    SNAPSHOT_SAMPLES,
    BatchChecks,
    BatchClock,
    BatchKind,
    CheckSchedule,
    OutputSnapshot,
    RoundTrip,
    TimedInputs,
    TrustedBatches,
    TrustedOutcome,
    digest,
    forged_median,
    measure_round_trip,
    trusted_timing,
)
from kernelblaster.tools.driver_process import (
    DriverForged,
    DriverSession,
    TimeRequest,
    TimingReply,
    forged_timing,
)

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "fake_driver_protocol.py"
QUIET = RoundTrip(min_ms=0.2, spread_ms=0.05)


def trusted(per_call_ms: float, tolerance_ms: float) -> TrustedTiming:
    return TrustedTiming(per_call_ms=per_call_ms, tolerance_ms=tolerance_ms, round_trip_ms=0.2, batches=4,
                         checked_batches=2, calls_per_batch=4)


# -- the arithmetic ------------------------------------------------------------------------------------
def test_a_round_trip_keeps_the_fastest_sample_and_the_spread() -> None:
    round_trip = RoundTrip.of([0.31, 0.25, 0.4])
    assert round_trip.min_ms == 0.25
    assert round_trip.spread_ms == pytest.approx(0.15)


def test_a_batch_per_call_time_subtracts_the_digest_and_the_round_trip() -> None:
    clock = BatchClock(calls=4, wall_ms=10.2, digest_ms=1.0)
    assert clock.per_call_ms(RoundTrip(min_ms=0.2, spread_ms=0.0)) == pytest.approx(2.25)


def test_a_batch_per_call_time_is_never_negative() -> None:
    assert BatchClock(calls=4, wall_ms=0.1, digest_ms=0.5).per_call_ms(QUIET) == 0.0


def test_the_trusted_figure_is_the_lowest_of_the_checked_batches_only() -> None:
    clocks = [BatchClock(4, 4.2, 0.0), BatchClock(4, 8.2, 0.0), BatchClock(4, 6.2, 0.0)]
    figure = trusted_timing(clocks, [False, True, True], RoundTrip(min_ms=0.2, spread_ms=0.0))
    assert figure.per_call_ms == pytest.approx(1.5)  # the unchecked 1.0 ms batch does not count
    assert (figure.batches, figure.checked_batches, figure.calls_per_batch) == (3, 2, 4)


def test_the_tolerance_is_five_percent_when_the_round_trip_is_quiet() -> None:
    figure = trusted_timing([BatchClock(4, 8.2, 0.0)], [True], RoundTrip(min_ms=0.2, spread_ms=0.04))
    assert figure.tolerance_ms == pytest.approx(0.05 * 2.0)


def test_the_tolerance_is_the_round_trip_jitter_per_call_where_that_is_larger() -> None:
    figure = trusted_timing([BatchClock(4, 0.6, 0.0)], [True], RoundTrip(min_ms=0.2, spread_ms=0.2))
    assert figure.tolerance_ms == pytest.approx(0.05)


def test_the_tolerance_covers_the_jitter_of_the_snapshot_repeats() -> None:
    clocks = [BatchClock(4, 8.2, 0.0, digest_spread_ms=0.8)]
    figure = trusted_timing(clocks, [True], RoundTrip(min_ms=0.2, spread_ms=0.0))
    assert figure.tolerance_ms == pytest.approx(0.8 / 4)


def test_the_tolerance_is_the_fastest_batchs_jitter_not_a_noisier_slower_ones() -> None:
    noisy = BatchClock(4, 9.2, 0.0, beside=RoundTrip(min_ms=0.2, spread_ms=0.9))
    clocks = [BatchClock(4, 8.2, 0.0, digest_spread_ms=0.4), noisy]
    figure = trusted_timing(clocks, [True, True], RoundTrip(min_ms=0.2, spread_ms=0.0))
    assert figure.tolerance_ms == pytest.approx(0.4 / 4)


def test_batches_beside_that_differ_widely_widen_the_tolerance_by_at_most_the_cap() -> None:
    # A candidate loading the host after its reply makes the batches after it slow: 1 ms calls claimed as 0.1.
    clocks = [BatchClock(4, 4 * 1.0 + 0.2, 0.0, beside=RoundTrip(min_ms=0.2, spread_ms=5.0))]
    figure = trusted_timing(clocks, [True], RoundTrip(min_ms=0.2, spread_ms=0.0))
    assert figure.tolerance_ms == pytest.approx(BESIDE_CAP_MS / 4)
    assert forged_median(0.1, figure) is not None


def test_a_loaded_host_slowing_the_round_trip_beside_a_batch_does_not_make_an_honest_median_forged() -> None:
    # An honest 0.07 ms call, four to a batch, on a host whose round trips take 0.5 ms now, not 0.2 as when
    # the null candidate was calibrated (seen on an H200 while the other GPU's tests compiled).
    loaded = RoundTrip(min_ms=0.5, spread_ms=0.02)
    wall = 4 * 0.07 + 0.5
    alone = trusted_timing([BatchClock(4, wall, 0.0)], [True], QUIET)
    beside = trusted_timing([BatchClock(4, wall, 0.0, beside=loaded)], [True], QUIET)
    assert forged_median(0.07, alone) is not None
    assert forged_median(0.07, beside) is None


def test_the_round_trip_beside_a_batch_is_never_subtracted_below_the_calibrations() -> None:
    clock = BatchClock(calls=4, wall_ms=10.2, digest_ms=1.0, beside=RoundTrip(min_ms=0.05, spread_ms=0.0))
    assert clock.per_call_ms(RoundTrip(min_ms=0.2, spread_ms=0.0)) == pytest.approx(2.25)


def test_a_batch_beside_adds_at_most_its_cap_to_the_calibrations_round_trip() -> None:
    clock = BatchClock(calls=4, wall_ms=10.0, digest_ms=0.0, beside=RoundTrip(min_ms=50.0, spread_ms=0.0))
    assert clock.round_trip_ms(QUIET) == pytest.approx(QUIET.min_ms + BESIDE_CAP_MS)


def test_the_tolerance_covers_how_much_the_round_trips_beside_a_batch_differed() -> None:
    clocks = [BatchClock(4, 8.2, 0.0, beside=RoundTrip(min_ms=0.2, spread_ms=0.8))]
    figure = trusted_timing(clocks, [True], RoundTrip(min_ms=0.2, spread_ms=0.0))
    assert figure.tolerance_ms == pytest.approx(0.8 / 4)


def test_a_figure_needs_a_checked_batch() -> None:
    with pytest.raises(ValueError):
        trusted_timing([BatchClock(4, 1.0, 0.0)], [False], QUIET)


# -- the ruling on the median --------------------------------------------------------------------------
def test_keeping_the_sum_and_moving_the_median_is_forged() -> None:
    reason = forged_median(0.094, trusted(per_call_ms=2.2, tolerance_ms=0.11))
    assert reason is not None and "checked batches" in reason


def test_a_forgery_that_keeps_the_sum_passes_the_wall_clock_check_but_not_the_batches() -> None:
    # 2.2 ms of real work per call, claimed as 0.01 ms on 7 calls of 8 and the rest on the 8th: the sum of the
    # claims matches the harness's wall clock around the request, so only the batches see the median is false.
    request = TimeRequest(warmup=0, iters=80, sets=[0], flush=True, poison=True)
    claims = ([0.01] * 7 + [8 * 2.2 - 7 * 0.01]) * 10
    reply = TimingReply(ok=True, event_ms=claims, incomplete_calls=0, policy_windows=0)
    wall_ms = sum(claims) + 80 * 0.1 + 20
    assert forged_timing(request, reply, wall_ms) is None
    median = TimingStats.from_samples(claims).median_ms
    assert forged_median(median, trusted(per_call_ms=2.2, tolerance_ms=0.11)) is not None


def test_a_median_above_the_trusted_figure_is_believed() -> None:
    assert forged_median(2.5, trusted(per_call_ms=2.2, tolerance_ms=0.11)) is None


def test_a_median_within_the_tolerance_below_the_trusted_figure_is_believed() -> None:
    assert forged_median(2.1, trusted(per_call_ms=2.2, tolerance_ms=0.11)) is None


def test_a_median_just_beyond_the_tolerance_is_forged() -> None:
    assert forged_median(2.08, trusted(per_call_ms=2.2, tolerance_ms=0.11)) is not None


# -- which batches are checked -------------------------------------------------------------------------
def run_schedule(draw: bool) -> list[bool]:
    schedule = CheckSchedule(draw=lambda: draw)
    decisions = []
    while not schedule.done:
        decisions.append(schedule.decide())
    return decisions


def test_a_schedule_that_draws_every_check_ends_after_the_minimum_batches() -> None:
    assert run_schedule(True) == [True] * MIN_BATCHES


def test_a_schedule_that_draws_no_check_still_checks_the_minimum_by_the_end() -> None:
    decisions = run_schedule(False)
    assert len(decisions) == MAX_BATCHES and sum(decisions) == MIN_CHECKED_BATCHES
    assert decisions[-MIN_CHECKED_BATCHES:] == [True] * MIN_CHECKED_BATCHES


def test_the_default_schedule_draws_both_ways() -> None:
    drawn = {CheckSchedule().draw() for _ in range(200)}
    assert drawn == {True, False}


# -- the digest ----------------------------------------------------------------------------------------
def test_the_digest_changes_with_any_byte() -> None:
    data = torch.arange(1000, dtype=torch.uint8)
    changed = data.clone()
    changed[997] ^= 1
    assert int(digest([data], 7)) != int(digest([changed], 7))


def test_the_digest_depends_on_where_the_bytes_are() -> None:
    data = torch.arange(64, dtype=torch.uint8)
    swapped = torch.cat([data[8:16], data[:8], data[16:]])
    assert int(digest([data], 7)) != int(digest([swapped], 7))


def test_the_digest_depends_on_the_secret_salt() -> None:
    data = torch.arange(64, dtype=torch.uint8)
    assert int(digest([data], 7)) != int(digest([data], 8))


# -- the batch loop against the protocol double ----------------------------------------------------------
def cpu_set(values: float) -> SharedSet:
    def buffer(name: str, value: float) -> SharedBuffer:
        tensor = torch.full((64,), value, dtype=torch.float32)
        spec = TensorSpec(name=name, origin="input", dtype="float32", shape=[64], strides=[1])
        return SharedBuffer(spec, 0, tensor.numel() * 4, tensor.view(torch.uint8), tensor, "ab" * 64)

    return SharedSet(inputs=[buffer("x", values)], params=[], outputs=[buffer("out", 0.0)])


def cpu_set_with_weight(values: float, weight: float) -> SharedSet:
    """`cpu_set` with one param (64 floats of `weight`)."""
    shared = cpu_set(values)
    tensor = torch.full((64,), weight, dtype=torch.float32)
    spec = TensorSpec(name="w", origin="state_dict 'w'", dtype="float32", shape=[64], strides=[1])
    shared.params.append(SharedBuffer(spec, 0, tensor.numel() * 4, tensor.view(torch.uint8), tensor, "cd" * 64))
    return shared


def no_refill() -> None:
    raise AssertionError("a nudge refilled the sets")


def fake_session(batch_ms: float, **env: str) -> DriverSession:
    return DriverSession([str(FAKE_DRIVER)], wrapper=[sys.executable], sandbox=None,
                         env={"FAKE_DRIVER_BATCH_MS": str(batch_ms), **env})


class Recorder:
    """The evaluator's checks, recording what the loop asked for; `write` fills an output as a kernel would."""

    def __init__(self, sets: list[SharedSet], failing_set: int | None = None, inputs_ok: tuple[bool, ...] = ()) -> None:
        self.sets, self.failing_set, self.inputs_ok = sets, failing_set, list(inputs_ok)  # then always True
        self.checked: list[int] = []
        self.inputs_checked = 0
        self.prepared: list[BatchKind] = []
        self.checked_per_batch: list[list[int]] = []

    def prepare(self, kind: BatchKind) -> None:
        self.prepared.append(kind)
        self.checked_per_batch.append([])

    def outputs(self, index: int) -> CheckResult | None:
        self.checked.append(index)
        self.checked_per_batch[-1].append(index)
        if index == self.failing_set:
            return CheckResult(name="timed_outputs", passed=False, detail=f"set {index} wrong")
        return None

    def inputs(self) -> bool:
        self.inputs_checked += 1
        return self.inputs_ok.pop(0) if self.inputs_ok else True

    def checks(self) -> BatchChecks:
        return BatchChecks(outputs=self.outputs, inputs=self.inputs, prepare=self.prepare)


def run_batches(batch_ms: float, median_ms: float, recorder: Recorder, draw: bool = True,
                **env: str) -> TrustedOutcome:
    with fake_session(batch_ms, **env) as session:
        runner = TrustedBatches(session, recorder.sets, recorder.checks(), RoundTrip(min_ms=0.0, spread_ms=0.0),
                                timeout_s=10, schedule=CheckSchedule(draw=lambda: draw))
        return runner.run(median_ms, torch.empty(1024, dtype=torch.uint8))


def test_an_honest_median_gets_the_trusted_figure_beside_it() -> None:
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)])
    outcome = run_batches(batch_ms=20.0, median_ms=1000.0, recorder=recorder)  # (a loaded host only adds)
    assert outcome.forged is None and outcome.failed is None
    figure = outcome.timing
    assert figure is not None and figure.per_call_ms >= 19.0 and figure.calls_per_batch == 2


def test_each_batch_is_clocked_between_two_of_the_same_batches_on_the_null_candidates_driver() -> None:
    beside: list[list[int]] = []

    def round_trip(order: list[int]) -> float:
        beside.append(sorted(order))
        return 0.3

    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)])
    with fake_session(20.0) as session:
        runner = TrustedBatches(session, recorder.sets, recorder.checks(), RoundTrip(min_ms=0.0, spread_ms=0.0),
                                timeout_s=10, schedule=CheckSchedule(draw=lambda: True), beside=round_trip)
        outcome = runner.run(1000.0, torch.empty(1024, dtype=torch.uint8))
    assert outcome.timing is not None and beside == [[0, 1]] * (2 * len(runner.clocks))  # the nudged one too
    assert all(clock.beside == RoundTrip(min_ms=0.3, spread_ms=0.0) for clock in runner.clocks)


def test_a_median_far_below_the_harness_clock_is_forged() -> None:
    outcome = run_batches(batch_ms=20.0, median_ms=1.0, recorder=Recorder([cpu_set(1.0), cpu_set(2.0)]))
    assert outcome.forged is not None and "checked batches" in outcome.forged


def test_every_set_is_checked_in_every_checked_batch() -> None:
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0), cpu_set(3.0)])
    run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder)
    assert sorted(recorder.checked) == sorted([0, 1, 2] * (1 + MIN_BATCHES))  # the nudged batch and the fresh ones


def test_inputs_are_checked_after_every_batch_checked_or_not() -> None:
    recorder = Recorder([cpu_set(1.0)])
    run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder, draw=False)
    # The nudged batch and MAX_BATCHES fresh ones, and once before the first, after the event timing.
    assert recorder.inputs_checked == 1 + MAX_BATCHES + 1


def test_outputs_wrong_in_a_checked_batch_fail_the_timed_outputs_check() -> None:
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)], failing_set=1)
    outcome = run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder)
    failed = outcome.failed
    assert failed is not None and failed.name == "timed_outputs" and "set 1" in failed.detail


def test_inputs_changed_during_a_batch_fail_inputs_unchanged() -> None:
    recorder = Recorder([cpu_set(1.0)], inputs_ok=(True, False))  # as filled; then written by a batch
    outcome = run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder)
    assert outcome.failed is not None and outcome.failed.name == "inputs_unchanged"
    assert recorder.inputs_checked == 2


def test_inputs_changed_by_the_event_timed_calls_fail_before_the_first_batch() -> None:
    recorder = Recorder([cpu_set(1.0)], inputs_ok=(False,))
    outcome = run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder)
    assert outcome.failed is not None and outcome.failed.name == "inputs_unchanged"
    assert recorder.checked == []


def test_timed_inputs_halve_a_few_places_of_each_float_input() -> None:
    shared = cpu_set(1.0)
    TimedInputs([shared], refill=no_refill).nudge()
    after = shared.inputs[0].tensor
    changed = after != 1.0
    assert 1 <= int(changed.sum()) <= 4 and bool((after[changed] == 0.5).all())


def test_the_first_batch_finds_its_contents_nudged_and_every_later_one_refilled() -> None:
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)])
    run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder)
    assert recorder.prepared == ["nudged"] + ["fresh"] * MIN_BATCHES


def test_the_nudged_batch_is_checked_even_when_no_fresh_batch_is_drawn() -> None:
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)])
    run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder, draw=False)
    assert sorted(recorder.checked_per_batch[0]) == [0, 1]


def test_wrong_outputs_in_the_nudged_batch_fail_the_timed_outputs_check_whatever_is_drawn() -> None:
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)], failing_set=0)
    outcome = run_batches(batch_ms=1.0, median_ms=1000.0, recorder=recorder, draw=False)
    assert outcome.failed is not None and outcome.failed.name == "timed_outputs"
    assert recorder.prepared == ["nudged"]


def test_the_nudged_batch_never_gives_the_figure() -> None:
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)])
    with fake_session(20.0) as session:
        runner = TrustedBatches(session, recorder.sets, recorder.checks(), RoundTrip(min_ms=0.0, spread_ms=0.0),
                                timeout_s=10, schedule=CheckSchedule(draw=lambda: True))
        outcome = runner.run(1000.0, torch.empty(1024, dtype=torch.uint8))
    assert runner.kinds == ["nudged"] + ["fresh"] * MIN_BATCHES and all(runner.checked)
    assert outcome.timing is not None and outcome.timing.batches == outcome.timing.checked_batches == MIN_BATCHES


def test_a_memo_fast_only_where_the_contents_were_nudged_has_its_median_forged() -> None:
    # An exact memo recomputes only what changed since the call before: fast in the nudged batch (and in the
    # event-timed calls, whose median it sets), as slow as the work in every refilled one.
    recorder = Recorder([cpu_set(1.0), cpu_set(2.0)])
    outcome = run_batches(batch_ms=20.0, median_ms=1.0, recorder=recorder, FAKE_DRIVER_FIRST_BATCH_MS="1")
    assert outcome.forged is not None and "checked batches" in outcome.forged


def test_timed_inputs_halve_a_few_places_of_each_learned_weight() -> None:
    shared = cpu_set_with_weight(1.0, 3.0)
    TimedInputs([shared], refill=no_refill, learned=[True]).nudge()
    after = shared.params[0].tensor
    changed = after != 3.0
    assert 1 <= int(changed.sum()) <= 4 and bool((after[changed] == 1.5).all())


def test_timed_inputs_leave_params_that_are_not_learned_weights_as_they_are() -> None:
    shared = cpu_set_with_weight(1.0, 3.0)
    TimedInputs([shared], refill=no_refill, learned=[False]).nudge()
    assert bool((shared.params[0].tensor == 3.0).all())


def test_timed_inputs_refresh_through_the_refill_and_digest_what_it_left() -> None:
    shared = cpu_set_with_weight(1.0, 3.0)

    def refill() -> None:
        shared.inputs[0].tensor.normal_()
        shared.params[0].tensor.normal_()

    inputs = TimedInputs([shared], refill=refill, learned=[True])
    before = shared.params[0].tensor.clone()
    inputs.prepare("fresh")
    assert not torch.equal(before, shared.params[0].tensor) and inputs.unchanged()
    shared.params[0].tensor[5] = 7.0
    assert not inputs.unchanged()


def test_timed_inputs_keep_zeros_zero() -> None:
    shared = cpu_set(1.0)
    shared.inputs[0].tensor[::2] = 0.0
    for _ in range(8):
        TimedInputs([shared], refill=no_refill).nudge()
    assert bool((shared.inputs[0].tensor[::2] == 0.0).all())


def test_timed_inputs_see_a_write_after_their_change() -> None:
    shared = cpu_set(1.0)
    inputs = TimedInputs([shared], refill=no_refill)
    inputs.nudge()
    assert inputs.unchanged()
    shared.inputs[0].tensor[3] = 7.0
    assert not inputs.unchanged()


def test_timed_inputs_see_a_write_before_their_first_change() -> None:
    shared = cpu_set(1.0)
    inputs = TimedInputs([shared], refill=no_refill)
    shared.inputs[0].tensor[3] = 7.0
    assert not inputs.unchanged()


def test_outputs_that_change_after_the_clock_stopped_are_forged() -> None:
    sets = [cpu_set(1.0)]

    class LateWriter(Recorder):
        def outputs(self, index: int) -> CheckResult | None:  # work landing after the harness's clock stopped
            sets[index].outputs[0].tensor.fill_(42.0)
            return None

    outcome = run_batches(batch_ms=1.0, median_ms=1000.0, recorder=LateWriter(sets))
    assert outcome.forged is not None and "changed" in outcome.forged


def test_outputs_are_poisoned_before_every_batch() -> None:
    sets = [cpu_set(1.0)]
    seen: list[bool] = []

    class PoisonWatcher(Recorder):
        def inputs(self) -> bool:  # after every batch (and once before the first); unchecked ones are not digested
            self.inputs_checked += 1
            if self.inputs_checked == 1:
                return True
            seen.append(bool((sets[0].outputs[0].raw == POISON_BYTE).all()))
            return True

        def prepare(self, kind: BatchKind) -> None:  # before the batch: as a kernel's result would leave them
            super().prepare(kind)
            sets[0].outputs[0].raw.zero_()

    run_batches(batch_ms=0.0, median_ms=1000.0, recorder=PoisonWatcher(sets), draw=False)
    assert len(seen) >= 1 + MAX_BATCHES - MIN_CHECKED_BATCHES and all(seen)


def test_a_batch_answered_with_another_count_of_calls_is_forged() -> None:
    with fake_session(0.0, FAKE_DRIVER_BATCH_CALLS="1") as session, pytest.raises(DriverForged, match="2 calls"):
        session.batch([0, 1], timeout_s=10)


def test_the_round_trip_is_measured_on_empty_batches(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with fake_session(0.0, FAKE_DRIVER_REQUEST_LOG=str(log)) as session:
        round_trip = measure_round_trip(session, torch.device("cpu"), timeout_s=10, samples=3)
    assert round_trip.min_ms > 0
    assert log.read_text().count('"sets": []') == 3


def test_a_snapshot_of_a_small_output_reads_every_byte() -> None:
    output = torch.zeros(SNAPSHOT_SAMPLES // 2, dtype=torch.uint8)
    snapshot = OutputSnapshot([output], salt=5)
    before = snapshot.take()
    output[1234] = 1
    assert snapshot.take() != before


def test_a_snapshot_sees_work_still_writing_a_share_of_a_large_output() -> None:
    output = torch.zeros(64 << 20, dtype=torch.uint8)
    snapshot = OutputSnapshot([output], salt=5)
    before = snapshot.take()
    output[-(1 << 20):] = 7  # the last 1/64 of the output lands after the snapshot
    assert snapshot.take() != before


def test_a_snapshot_is_stable_while_the_outputs_are() -> None:
    snapshot = OutputSnapshot([torch.arange(1 << 20, dtype=torch.int64).view(torch.uint8)], salt=5)
    assert snapshot.take() == snapshot.take()


# -- the report ----------------------------------------------------------------------------------------
def test_the_report_shows_the_harness_clock_beside_the_median() -> None:
    timing = CandidateTiming(event=TimingStats.from_samples([0.1, 0.11, 0.12]), rotating_sets=4, l2_flush=True,
                             calls=40, incomplete_calls=0, policy_windows=0, trusted=trusted(0.095, 0.005))
    result = EvalResult(verdict="ok", summary="correct", problem="p.py", problem_sha256="0" * 64, candidate="c.cu",
                        source_sha256="0" * 64, arch="sm_90", precision="strict", compiled=True, timing=timing)
    assert "harness's clock: 95.0 us per call in back-to-back batches (2 of 4 batches checked" in render_eval(result)


def test_a_forged_ruling_says_what_the_lowest_batch_was_made_of() -> None:
    figure = trusted_timing([BatchClock(4, 1.08, 0.2, beside=RoundTrip(min_ms=0.5, spread_ms=0.0))], [True], QUIET)
    reason = forged_median(0.01, figure)
    assert reason is not None
    assert "that batch: 1.0800 ms wall, less 0.2000 ms of snapshot and 0.5000 ms of round trip (quiet: 0.2000)" \
        in reason
