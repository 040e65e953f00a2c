"""Verify a running candidate against the PyTorch reference, one named check at a time.

Checks run in `result.CHECK_ORDER` and stop at the first failure, whose detail is written for the
lowering agent to act on. All buffers belong to this trusted process; the driver only sees shared
inputs, params and outputs, and outputs are poisoned before every call so unwritten elements show.
Outputs are read where the candidate wrote them (the shared buffers); one copy of them is kept for the
determinism check, and only a digest of them after it (the staleness check needs bitwise identity alone), so no
copy is held while later cases are computed; reference cases are requested one at a time, so a `per_case`
reference cache holds at most one case while a check runs. Outputs are judged by `ReferenceCase.expected`: the
float64 result where there is one, within bounds that follow the case's own conditioning, and for NaN/Inf in the
inputs the outputs each special value reaches. A candidate faster than the reference's FLOPs allow is checked
again on fresh random seeds and spiked inputs (`extra_verification`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import torch

from kernelblaster.harness.buffers import SharedSet
from kernelblaster.harness.compare import POISON_BYTE, compare_output, identical, is_weak_reference, unwritten_elements
from kernelblaster.harness.conditioning import Conditioning, describe, widen
from kernelblaster.harness.precision import PrecisionPolicy, tolerance_for
from kernelblaster.harness.references import STRICT_CASES, ReferenceCache, ReferenceCase
from kernelblaster.harness.result import CheckResult
from kernelblaster.harness.special_values import summary
from kernelblaster.harness.stages import Stage, StageClock
from kernelblaster.harness.timing import digest
from kernelblaster.tools.driver_process import DriverError, DriverForged, DriverSession, DriverTimeout

STRICT_LABELS = frozenset(label for label, _ in STRICT_CASES)


@dataclass
class VerificationContext:
    references: ReferenceCache
    policy: PrecisionPolicy
    timeout_s: float
    chunk: int  # elements per comparison chunk (the memory plan's)

    def compare(self, outputs: list[torch.Tensor], expected: list[torch.Tensor], names: list[str], check: str,
                label: str, conditioning: list[Conditioning | None] | None = None) -> CheckResult:
        """Every output against its expected tensor, as the check `check`; the first failure is the result. With
        `conditioning` (PyTorch's own error per output), the policy's bounds widen to cover it."""
        for index, (name, output, reference) in enumerate(zip(names, outputs, expected, strict=True)):
            failed = self._failure(output, reference, conditioning[index] if conditioning else None, check,
                                   f"{label}, output '{name}'")
            if failed is not None:
                return failed
        return self._passed(check, label)

    def compare_case(self, outputs: list[torch.Tensor], case: ReferenceCase, names: list[str], check: str,
                     label: str) -> CheckResult:
        """Every output against what the case says it must be (`ReferenceCase.expected`): the float64 result
        where there is one, within bounds that follow the case's conditioning; for special values, the
        mathematics (which outputs each special value reaches)."""
        for index, (name, output) in enumerate(zip(names, outputs, strict=True)):
            expected = case.expected(index, output)
            failed = self._failure(output, expected, case.conditioning_of(index), check, f"{label}, output '{name}'")
            del expected  # one output's expectation at a time
            if failed is not None:
                if case.special is not None:
                    failed.detail += f" ({summary(case.special.reach)}; outputs a special value cannot reach " \
                                     "are judged as finite values)"
                return failed
        return self._passed(check, label)

    def _failure(self, output: torch.Tensor, expected: torch.Tensor, conditioning: Conditioning | None, check: str,
                 label: str) -> CheckResult | None:
        tolerance = widen(tolerance_for(expected.dtype, self.policy), conditioning)
        comparison = compare_output(output, expected, tolerance, label, self.chunk)
        if comparison.passed:
            return None
        return CheckResult(name=check, passed=False, detail=comparison.detail + describe(conditioning))

    def _passed(self, check: str, label: str) -> CheckResult:
        return CheckResult(name=check, passed=True, detail=f"{label}: every output within tolerance "
                           f"({self.policy} precision)")


@dataclass(frozen=True)
class DriverFailure:
    """The driver crashed or hung while running the candidate, the sandbox stopped it for a forbidden
    system call, or what it replied cannot have come from the driver."""

    verdict: Literal["crash", "timeout", "sandbox_violation", "forged_result"]
    detail: str

    @classmethod
    def of(cls, error: DriverError) -> DriverFailure:
        if isinstance(error, DriverForged):
            return cls("forged_result", f"{error.reason}: the result was not the driver's")
        if error.blocked:
            return cls("sandbox_violation", "the sandbox blocked " + "; ".join(error.blocked))
        return cls("timeout" if isinstance(error, DriverTimeout) else "crash", str(error))

    def check(self) -> CheckResult:
        names = {"sandbox_violation": "sandbox", "forged_result": "genuine_results"}
        return CheckResult(name=names.get(self.verdict, "runs"), passed=False, detail=self.detail)


@dataclass
class Verification:
    """The verification stage's value: the checks run (stopping at the first failure) and why it stopped."""

    checks: list[CheckResult] = field(default_factory=list)
    weakly_checked: bool = False
    failure: DriverFailure | None = None
    seconds: dict[Stage, float] = field(default_factory=dict)  # verification and special_values, as they ran

    @property
    def passed(self) -> bool:
        return self.failure is None and all(check.passed for check in self.checks)


def verify_candidate(session: DriverSession, shared: SharedSet, context: VerificationContext) -> Verification:
    """Run the checks until one fails; a crash or hang ends them with a failed `runs` check."""
    verification = Verification()
    runner = _CandidateRunner(session, shared, context)
    clock = StageClock(verification.seconds)
    checks = runner.checks()
    started = time.perf_counter()
    try:
        for check in checks:  # each check's seconds run from the previous check's end to its own
            clock.add(_stage_of(check.name), time.perf_counter() - started)
            verification.checks.append(check)
            verification.weakly_checked = runner.weak_reference
            if not check.passed:
                break
            started = time.perf_counter()
    except DriverError as error:
        clock.add("verification", time.perf_counter() - started)  # a failed call counts as verification
        verification.failure = DriverFailure.of(error)
        verification.checks.append(verification.failure.check())
    verification.seconds = clock.seconds
    return verification


def _stage_of(check: str) -> Stage:
    return "special_values" if check == "special_values" else "verification"


def timed_set_failure(index: int, shared: SharedSet, context: VerificationContext) -> CheckResult | None:
    """The outputs set `index` holds after a timed batch (poisoned before it) against the reference on the
    inputs and params it holds (changed before each batch: `timing.TimedInputs`), as the check
    `timed_outputs`; None when complete and correct. The reference is released on return."""
    label = f"timed call on set {index} (its contents changed before the batch)"
    for buffer in shared.outputs:
        missing = unwritten_elements(buffer.tensor, context.chunk)
        if missing:
            return CheckResult(name="timed_outputs", passed=False,
                               detail=f"{label}: {missing} of {buffer.tensor.numel()} elements of output "
                               f"'{buffer.spec.name}' never written (still the poison pattern)")
    case = context.references.timing_reference(index, [b.tensor for b in shared.inputs],
                                               [b.tensor for b in shared.params])
    check = context.compare_case([b.tensor for b in shared.outputs], case, [b.spec.name for b in shared.outputs],
                                 "timed_outputs", label)
    return None if check.passed else check


# Calls below the reference algorithm's compute floor (an algebraic rewrite, or skipped work) are checked on this
# many more seeds, drawn now (the candidate cannot know them); every other one has one large value at a random
# place of each input, which a kernel that skips work misses.
EXTRA_SEEDS = 6


def extra_verification(session: DriverSession, shared: SharedSet, context: VerificationContext) -> CheckResult:
    """More verification for a candidate faster than the reference's FLOPs allow (`roofline.below_compute_floor`):
    fresh random seeds, half with a large value at a random place of every input. A DriverError propagates."""
    runner = _CandidateRunner(session, shared, context)
    for index in range(EXTRA_SEEDS):
        case = context.references.fresh_case(secrets.randbelow(2**31), spike=index % 2 == 1)
        runner.call(case)
        label = f"extra verification below the compute floor, {case.label}"
        written = runner.outputs_written()
        if not written.passed:
            return written.model_copy(update={"name": "extra_verification", "detail": f"{label}: {written.detail}"})
        check = runner.compare_case(case, "extra_verification", label)
        del case
        if not check.passed:
            return check
    return CheckResult(name="extra_verification", passed=True,
                       detail=f"below the reference's compute floor: {EXTRA_SEEDS} more random seeds, half with one "
                       "large value per input, gave correct outputs")


class _CandidateRunner:
    def __init__(self, session: DriverSession, shared: SharedSet, context: VerificationContext) -> None:
        self.session, self.shared, self.context = session, shared, context
        self.weak_reference = False
        self._previous: list[torch.Tensor] = []  # a copy of the last call's outputs, through the determinism check
        # After it, only their digest: the copy would be held while each later case is computed (a whole output
        # more at the trusted side's peak), and telling a cached result needs bitwise identity alone.
        self._previous_digest: int | None = None
        self._salt = secrets.randbits(64)
        self._conditioning: list[Conditioning | None] | None = None  # the first case's, for repeated calls

    def checks(self) -> Iterator[CheckResult]:
        references = self.context.references
        first = references.seed_case(references.seeds[0])
        self.weak_reference = any(is_weak_reference(r, self.context.chunk) for r in first.outputs)
        self.call(first)
        yield CheckResult(name="runs", passed=True, detail="kb_forward returned 0 with no CUDA error")
        yield self.outputs_written()
        yield self.compare_case(first, "correct", first.label)
        yield self._inputs_unchanged(first)
        self._conditioning = first.conditioning
        del first  # a per-case cache computes the next cases one at a time: hold none meanwhile
        self._previous = [o.clone() for o in self._outputs]
        yield self._deterministic()
        self._previous_digest, self._previous = self._digest(), []
        yield self._no_caching()
        yield self._special_values()

    @property
    def _outputs(self) -> list[torch.Tensor]:
        return [buffer.tensor for buffer in self.shared.outputs]

    @property
    def _names(self) -> list[str]:
        return [buffer.spec.name for buffer in self.shared.outputs]

    def call(self, case: ReferenceCase) -> None:
        """Fill the shared set with the case's arguments and run the candidate once on it."""
        self.shared.fill(case.tensor_args, case.params)
        self._rerun()

    def _rerun(self) -> None:
        self.shared.poison_outputs(POISON_BYTE)
        torch.cuda.synchronize(self.context.references.gpu)
        self.session.batch([0], timeout_s=self.context.timeout_s)  # as timing calls the candidate

    def compare_case(self, case: ReferenceCase, check: str, label: str) -> CheckResult:
        return self.context.compare_case(self._outputs, case, self._names, check, label)

    def outputs_written(self) -> CheckResult:
        counts = [(b.spec.name, unwritten_elements(b.tensor, self.context.chunk), b.tensor.numel())
                  for b in self.shared.outputs]
        unwritten = [f"'{name}': {count} of {total}" for name, count, total in counts if count]
        if unwritten:
            return CheckResult(name="outputs_written", passed=False,
                               detail="elements never written (still the poison pattern): " + ", ".join(unwritten))
        return CheckResult(name="outputs_written", passed=True, detail="every output element was written")

    def _inputs_unchanged(self, case: ReferenceCase) -> CheckResult:
        buffers = self.shared.inputs + self.shared.params
        originals = case.tensor_args + case.params
        changed = [b.spec.name for b, original in zip(buffers, originals, strict=True)
                   if not identical(b.tensor, original, self.context.chunk)]
        if changed:
            return CheckResult(name="inputs_unchanged", passed=False,
                               detail="kb_forward modified read-only arguments: " + ", ".join(changed))
        return CheckResult(name="inputs_unchanged", passed=True, detail="inputs and params are bitwise unchanged")

    def _digest(self) -> int:
        return int(digest([buffer.raw for buffer in self.shared.outputs], self._salt).item())

    def _same_as_previous(self) -> bool:
        if self._previous_digest is not None:
            return self._digest() == self._previous_digest
        return all(identical(a, b, self.context.chunk) for a, b in zip(self._outputs, self._previous, strict=True))

    def _deterministic(self) -> CheckResult:
        bitwise = True
        for _ in range(2):
            self._rerun()
            if self._same_as_previous():
                continue
            bitwise = False
            check = self.context.compare(self._outputs, self._previous, self._names, "deterministic",
                                         "repeated call on identical inputs", self._conditioning)
            if not check.passed:
                return check.model_copy(update={"detail": check.detail + " (a race or uninitialised memory)"})
        if bitwise:
            return CheckResult(name="deterministic", passed=True, detail="repeated calls are bitwise identical")
        return CheckResult(name="deterministic", passed=True,
                           detail="repeated calls agree within tolerance (not bitwise: e.g. atomics order)")

    def _no_caching(self) -> CheckResult:
        references = self.context.references
        for seed in references.seeds[1:]:
            check = self._check_fresh_seed(seed)
            if not check.passed:
                return check
        fresh = len(references.seeds) - 1
        return CheckResult(name="no_caching", passed=True,
                           detail=f"{fresh} fresh seeds in the same buffers gave new correct outputs")

    def _check_fresh_seed(self, seed: int) -> CheckResult:
        case = self.context.references.seed_case(seed)
        self.call(case)
        check = self.compare_case(case, "no_caching", f"{case.label} refilled into the same buffers")
        if not check.passed and self._same_as_previous():
            return check.model_copy(update={"detail": check.detail + " — the output is identical to the previous "
                                            "call's: results are being cached"})
        self._previous_digest = self._digest()
        return check

    def _special_values(self) -> CheckResult:
        labels = self.context.references.special_labels(strict=self.context.policy == "strict")
        if not labels:
            return CheckResult(name="special_values", passed=True, detail="no floating-point inputs to perturb")
        checked = []
        for label in labels:
            check = self._check_special(label)
            if check is None:
                continue
            if not check.passed:
                return check
            checked.append(label)
        return CheckResult(name="special_values", passed=True, detail="correct for " + ", ".join(checked))

    def _check_special(self, label: str) -> CheckResult | None:
        """The case's check; None for a strict-only case outside the problem's domain (its reference is not
        finite), which is skipped."""
        case = self.context.references.special_case(label)
        if label in STRICT_LABELS and not all(bool(o.isfinite().all()) for o in case.outputs
                                              if o.dtype.is_floating_point):
            return None
        self.call(case)
        return self.compare_case(case, "special_values", case.label)
