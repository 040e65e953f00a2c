"""Reference cases for verification: seeded instances and the PyTorch outputs they must produce.

A problem's references do not depend on the candidate. When the memory plan allows (`cached`), an
evaluator computes them once (while the first candidate compiles) and reuses them for every candidate;
otherwise (`per_case`) each case is computed when it is checked and dropped after, so only one is ever
held. A case keeps its arguments, the params the model started from and the outputs, never the model.
References are always computed in full fp32 (no TF32), whatever freedom the candidate was given.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from kernelblaster.harness.precision import torch_precision
from kernelblaster.harness.problem import Problem, instantiate

LARGE_SCALE = 1e3
TINY_SCALE = 1e-4

ReferenceHolding = Literal["cached", "per_case"]


@dataclass
class ReferenceCase:
    label: str
    args: list[Any]  # forward arguments: tensors on the GPU and plain values
    params: list[torch.Tensor]  # the state_dict values the model started from
    outputs: list[torch.Tensor]

    @property
    def tensor_args(self) -> list[torch.Tensor]:
        return [a for a in self.args if isinstance(a, torch.Tensor)]


# Special values sit at random places (drawn per process, so no kernel can know them), many per tensor.
SPECIAL_VALUES_PER_ELEMENTS = 4096
MIN_SPECIAL_VALUES, MAX_SPECIAL_VALUES = 3, 64
WIDE_RANGE_EXPONENT = 8  # wide-range inputs: each element times 2**k, k uniform in [-8, 8] (exact in floats)


def _random_positions(numel: int, count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    return torch.randperm(numel, generator=generator)[: min(count, numel)]


def _with_special_values(tensor: torch.Tensor) -> None:
    """NaN, +Inf and -Inf in turn at many random places."""
    flat = tensor.view(-1)
    count = max(MIN_SPECIAL_VALUES, min(MAX_SPECIAL_VALUES, flat.numel() // SPECIAL_VALUES_PER_ELEMENTS))
    positions = _random_positions(flat.numel(), count).to(flat.device)
    values = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=flat.dtype, device=flat.device)
    flat[positions] = values[torch.arange(positions.numel(), device=flat.device) % 3]


def _one_nan(tensor: torch.Tensor) -> None:
    """A single NaN at a random place: a kernel that skips part of its work can miss it."""
    flat = tensor.view(-1)
    if flat.numel():
        flat[int(_random_positions(flat.numel(), 1)[0])] = float("nan")


def _one_large(tensor: torch.Tensor) -> None:
    """One value 1000 times the tensor's largest magnitude, of the element's sign, at a random place: it
    dominates any sum it is part of, so a reduction that skips terms is off by it."""
    flat = tensor.view(-1)
    if flat.numel() == 0:
        return
    position = int(_random_positions(flat.numel(), 1)[0])
    largest = float(flat.abs().max()) if bool(flat.isfinite().all()) else 1.0
    flat[position] = (-1.0 if float(flat[position]) < 0 else 1.0) * LARGE_SCALE * max(largest, 1e-3)


def _zero_mean(tensor: torch.Tensor) -> None:
    tensor.sub_(tensor.mean())


def _wide_range(tensor: torch.Tensor) -> None:
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    exponents = torch.randint(-WIDE_RANGE_EXPONENT, WIDE_RANGE_EXPONENT + 1, tuple(tensor.shape), generator=generator)
    tensor.mul_(torch.pow(2.0, exponents.to(torch.float64)).to(device=tensor.device, dtype=tensor.dtype))


# Each transform changes a floating-point input in place (the instance is made for the case alone).
SPECIAL_CASES: tuple[tuple[str, Callable[[torch.Tensor], object]], ...] = (
    (f"inputs scaled by {LARGE_SCALE:g}", lambda t: t.mul_(LARGE_SCALE)),
    (f"inputs scaled by {TINY_SCALE:g}", lambda t: t.mul_(TINY_SCALE)),
    ("negated inputs", lambda t: t.neg_()),
    ("NaN, +Inf and -Inf at random places in the inputs", _with_special_values),
    ("one NaN at a random place in each input", _one_nan),
    ("one large value at a random place in each input", _one_large),
)
# Under `strict` only, and only where the problem's domain allows (a case whose reference has non-finite
# outputs is skipped): inputs that make plain fp32 arithmetic, not luck on positive inputs, the requirement.
STRICT_CASES: tuple[tuple[str, Callable[[torch.Tensor], object]], ...] = (
    ("zero-mean inputs", _zero_mean),
    (f"wide-range inputs (each element times 2^k, |k| <= {WIDE_RANGE_EXPONENT})", _wide_range),
)
# Timing cases are seeds never used by verification, drawn per process.
_TIMING_SEED_BASE = (1 << 40) + secrets.randbits(40)


def is_float_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


class ReferenceCache:
    """Reference cases of one problem on one GPU, memoised when `holding` is `cached`."""

    def __init__(self, problem: Problem, gpu: int, seeds: list[int], holding: ReferenceHolding,
                 float_inputs: bool) -> None:
        self.problem, self.gpu, self.seeds, self.holding = problem, gpu, seeds, holding
        self.float_inputs = float_inputs
        self._cases: dict[str, ReferenceCase] = {}
        self._lock = threading.Lock()

    def seed_case(self, seed: int) -> ReferenceCase:
        return self._case(f"seed {seed}", lambda: self._compute(seed, None))

    def special_labels(self, strict: bool = False) -> list[str]:
        """Labels of the special-value cases (with `strict`, also the strict-only ones); none when the problem has
        no floating-point input."""
        cases = SPECIAL_CASES + (STRICT_CASES if strict else ())
        return [label for label, _ in cases] if self.float_inputs else []

    def special_case(self, label: str) -> ReferenceCase:
        transform = dict(SPECIAL_CASES + STRICT_CASES)[label]
        return self._case(label, lambda: self._compute(self.seeds[0], (label, transform)))

    def timing_case(self, index: int) -> ReferenceCase:
        """The case timing set `index` is filled with: a seed verification never uses, secret to the driver."""
        seed = _TIMING_SEED_BASE + index
        return self._case(f"timing case {index}", lambda: self._relabelled(seed, f"timing case {index}"))

    def timing_reference(self, index: int, tensor_args: list[torch.Tensor]) -> list[torch.Tensor]:
        """The outputs timing case `index` must give on `tensor_args` (its set's contents now: the timing changes
        them between batches), in strict fp32, computed now and never kept. The forward runs on copies, so a
        problem that writes its inputs cannot change the set."""
        instance = instantiate(self.problem, _TIMING_SEED_BASE + index, f"cuda:{self.gpu}")
        slots: list[Any] = [None if isinstance(a, torch.Tensor) else a for a in instance.args]
        is_tensor = [isinstance(a, torch.Tensor) for a in instance.args]
        instance.args = []  # the instance's own inputs go before the copies come: one set of inputs at a time
        given = iter(tensor_args)
        instance.args = [next(given).clone() if tensor else slot for slot, tensor in zip(slots, is_tensor, strict=True)]
        with torch_precision("strict"):
            return instance.reference()

    def _relabelled(self, seed: int, label: str) -> ReferenceCase:
        case = self._compute(seed, None)
        case.label = label
        return case

    def warm(self, strict: bool = False, timing_sets: int = 0) -> None:
        """Compute every case now when they are kept (e.g. in a thread while the candidate compiles): the seeds,
        the special values (with `strict`, the strict-only ones too) and `timing_sets` timing cases."""
        if self.holding != "cached":
            return
        for seed in self.seeds:
            self.seed_case(seed)
        for label in self.special_labels(strict):
            self.special_case(label)
        for index in range(timing_sets):
            self.timing_case(index)

    def _case(self, label: str, compute: Callable[[], ReferenceCase]) -> ReferenceCase:
        if self.holding != "cached":
            return compute()
        with self._lock:
            if label not in self._cases:
                self._cases[label] = compute()
            return self._cases[label]

    def _compute(self, seed: int, special: tuple[str, Callable[[torch.Tensor], object]] | None) -> ReferenceCase:
        instance = instantiate(self.problem, seed, f"cuda:{self.gpu}")
        label = f"seed {seed}"
        if special is not None:
            label, transform = special
            # Once per distinct tensor: an input passed twice is still transformed once.
            for tensor in {id(a): a for a in instance.args if is_float_tensor(a)}.values():
                transform(tensor)
        with torch_precision("strict"):
            outputs = instance.reference()
        return ReferenceCase(label, instance.args, list(instance.initial_state.values()), outputs)
