"""Reference cases for verification: seeded instances and the PyTorch outputs they must produce.

A problem's references do not depend on the candidate. When the memory plan allows (`cached`), an
evaluator computes them once (while the first candidate compiles) and reuses them for every candidate;
otherwise (`per_case`) each case is computed when it is checked and dropped after, so only one is ever
held. A case keeps its arguments, the params the model started from and the outputs, never the model.
References are always computed in full fp32 (no TF32), whatever freedom the candidate was given.
"""

from __future__ import annotations

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


def _with_special_values(tensor: torch.Tensor) -> None:
    flat = tensor.view(-1)
    positions = [0, flat.numel() // 2, flat.numel() - 1][: flat.numel()]
    for position, value in zip(positions, (float("nan"), float("inf"), float("-inf")), strict=False):
        flat[position] = value


# Each transform changes a floating-point input in place (the instance is made for the case alone).
SPECIAL_CASES: tuple[tuple[str, Callable[[torch.Tensor], object]], ...] = (
    (f"inputs scaled by {LARGE_SCALE:g}", lambda t: t.mul_(LARGE_SCALE)),
    (f"inputs scaled by {TINY_SCALE:g}", lambda t: t.mul_(TINY_SCALE)),
    ("negated inputs", lambda t: t.neg_()),
    ("NaN, +Inf and -Inf in the inputs", _with_special_values),
)


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

    def special_labels(self) -> list[str]:
        """Labels of the special-value cases; none when the problem has no floating-point input."""
        return [label for label, _ in SPECIAL_CASES] if self.float_inputs else []

    def special_case(self, label: str) -> ReferenceCase:
        transform = dict(SPECIAL_CASES)[label]
        return self._case(label, lambda: self._compute(self.seeds[0], (label, transform)))

    def warm(self) -> None:
        """Compute every case now when they are kept (e.g. in a thread while the candidate compiles)."""
        if self.holding != "cached":
            return
        for seed in self.seeds:
            self.seed_case(seed)
        for label in self.special_labels():
            self.special_case(label)

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
