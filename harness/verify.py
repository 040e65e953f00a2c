"""Verify a running candidate against the PyTorch reference, one named check at a time.

Checks run in `result.CHECK_ORDER` and stop at the first failure, whose detail is written for the
lowering agent to act on. All buffers belong to this trusted process; the driver only sees shared
inputs, params and outputs, and outputs are poisoned before every call so unwritten elements show.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from kernelblaster.harness.buffers import SharedSet
from kernelblaster.harness.compare import POISON_BYTE, as_bytes, compare_output, is_weak_reference, unwritten_elements
from kernelblaster.harness.precision import PrecisionPolicy, tolerance_for
from kernelblaster.harness.references import SPECIAL_CASES, ReferenceCache, ReferenceCase
from kernelblaster.harness.result import CheckResult
from kernelblaster.tools.driver_process import DriverSession


@dataclass
class VerificationContext:
    references: ReferenceCache
    policy: PrecisionPolicy
    timeout_s: float


@dataclass
class Verification:
    checks: list[CheckResult] = field(default_factory=list)
    weakly_checked: bool = False

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


def verify_candidate(session: DriverSession, shared: SharedSet, context: VerificationContext,
                     verification: Verification) -> None:
    """Append checks to `verification` until one fails. Driver crashes and timeouts propagate to the caller,
    leaving the checks done so far in place."""
    runner = _CandidateRunner(session, shared, context)
    for check in runner.checks():
        verification.checks.append(check)
        verification.weakly_checked = runner.weak_reference
        if not check.passed:
            return


class _CandidateRunner:
    def __init__(self, session: DriverSession, shared: SharedSet, context: VerificationContext) -> None:
        self.session, self.shared, self.context = session, shared, context
        self.weak_reference = False

    def checks(self) -> Iterator[CheckResult]:
        first = self.context.references.seed_case(self.context.references.seeds[0])
        self.weak_reference = any(is_weak_reference(r) for r in first.outputs)
        outputs = self._call(first)
        yield CheckResult(name="runs", passed=True, detail="kb_forward returned 0 with no CUDA error")
        yield self._outputs_written(outputs)
        yield self._compare_all(outputs, first.outputs, "correct", first.label)
        yield self._inputs_unchanged(first)
        yield self._deterministic(outputs)
        yield self._no_caching(outputs)
        yield self._special_values()

    def _call(self, case: ReferenceCase) -> list[torch.Tensor]:
        """Fill the shared set with the case's arguments, poison the outputs, run once, copy the outputs out."""
        self.shared.fill(case.tensor_args, case.params)
        return self._rerun()

    def _rerun(self) -> list[torch.Tensor]:
        self.shared.poison_outputs(POISON_BYTE)
        torch.cuda.synchronize(self.context.references.gpu)
        self.session.run(0, timeout_s=self.context.timeout_s)
        return [buffer.tensor.clone() for buffer in self.shared.outputs]

    def _outputs_written(self, outputs: list[torch.Tensor]) -> CheckResult:
        counts = [(b.spec.name, unwritten_elements(o), o.numel()) for b, o in zip(self.shared.outputs, outputs,
                                                                                   strict=True)]
        unwritten = [f"'{name}': {count} of {total}" for name, count, total in counts if count]
        if unwritten:
            return CheckResult(name="outputs_written", passed=False,
                               detail="elements never written (still the poison pattern): " + ", ".join(unwritten))
        return CheckResult(name="outputs_written", passed=True, detail="every output element was written")

    def _compare_all(self, outputs: list[torch.Tensor], reference: list[torch.Tensor], name: str,
                     label: str) -> CheckResult:
        for buffer, output, expected in zip(self.shared.outputs, outputs, reference, strict=True):
            comparison = compare_output(output, expected, tolerance_for(expected.dtype, self.context.policy),
                                        f"{label}, output '{buffer.spec.name}'")
            if not comparison.passed:
                return CheckResult(name=name, passed=False, detail=comparison.detail)
        return CheckResult(name=name, passed=True, detail=f"{label}: every output within tolerance "
                           f"({self.context.policy} precision)")

    def _inputs_unchanged(self, case: ReferenceCase) -> CheckResult:
        buffers = self.shared.inputs + self.shared.params
        originals = case.tensor_args + case.params
        changed = [b.spec.name for b, original in zip(buffers, originals, strict=True)
                   if not _same_bytes(b.tensor, original)]
        if changed:
            return CheckResult(name="inputs_unchanged", passed=False,
                               detail="kb_forward modified read-only arguments: " + ", ".join(changed))
        return CheckResult(name="inputs_unchanged", passed=True, detail="inputs and params are bitwise unchanged")

    def _deterministic(self, first_outputs: list[torch.Tensor]) -> CheckResult:
        repeats = [self._rerun() for _ in range(2)]
        bitwise = all(_same_bytes(a, b) for repeat in repeats for a, b in zip(repeat, first_outputs, strict=True))
        if bitwise:
            return CheckResult(name="deterministic", passed=True, detail="repeated calls are bitwise identical")
        for repeat in repeats:
            check = self._compare_all(repeat, first_outputs, "deterministic", "repeated call on identical inputs")
            if not check.passed:
                return check.model_copy(update={"detail": check.detail + " (a race or uninitialised memory)"})
        return CheckResult(name="deterministic", passed=True,
                           detail="repeated calls agree within tolerance (not bitwise: e.g. atomics order)")

    def _no_caching(self, previous: list[torch.Tensor]) -> CheckResult:
        references = self.context.references
        for seed in references.seeds[1:]:
            case = references.seed_case(seed)
            outputs = self._call(case)
            check = self._compare_all(outputs, case.outputs, "no_caching", f"{case.label} refilled into the same "
                                      "buffers")
            if not check.passed:
                stale = all(_same_bytes(a, b) for a, b in zip(outputs, previous, strict=True))
                suffix = " — the output is identical to the previous call's: results are being cached" if stale else ""
                return check.model_copy(update={"detail": check.detail + suffix})
            previous = outputs
        fresh = len(references.seeds) - 1
        return CheckResult(name="no_caching", passed=True,
                           detail=f"{fresh} fresh seeds in the same buffers gave new correct outputs")

    def _special_values(self) -> CheckResult:
        cases = self.context.references.special_cases()
        if not cases:
            return CheckResult(name="special_values", passed=True, detail="no floating-point inputs to perturb")
        for case in cases:
            check = self._compare_all(self._call(case), case.outputs, "special_values", case.label)
            if not check.passed:
                return check
        labels = ", ".join(label for label, _ in SPECIAL_CASES)
        return CheckResult(name="special_values", passed=True, detail=f"correct for {labels}")


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(as_bytes(a), as_bytes(b))
