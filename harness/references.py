"""Reference cases for verification: seeded instances and the PyTorch outputs they must produce.

A problem's references do not depend on the candidate, so an evaluator computes them once (while the
first candidate compiles) and reuses them for every candidate, as long as they fit the memory budget.
References are always computed in full fp32 (no TF32), whatever freedom the candidate was given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelblaster.harness.precision import torch_precision
from kernelblaster.harness.problem import Problem, ProblemInstance, instantiate

LARGE_SCALE = 1e3
TINY_SCALE = 1e-4


@dataclass
class ReferenceCase:
    label: str
    instance: ProblemInstance
    args: list[Any]
    outputs: list[torch.Tensor]

    @property
    def tensor_args(self) -> list[torch.Tensor]:
        return [a for a in self.args if isinstance(a, torch.Tensor)]

    @property
    def params(self) -> list[torch.Tensor]:
        return list(self.instance.initial_state.values())

    @property
    def nbytes(self) -> int:
        tensors = self.tensor_args + self.outputs
        return sum(t.numel() * t.element_size() for t in tensors)


def _with_special_values(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.clone().reshape(-1)
    positions = [0, flat.numel() // 2, flat.numel() - 1][: flat.numel()]
    for position, value in zip(positions, (float("nan"), float("inf"), float("-inf")), strict=False):
        flat[position] = value
    return flat.reshape(tensor.shape)


SPECIAL_CASES: tuple[tuple[str, Callable[[torch.Tensor], torch.Tensor]], ...] = (
    (f"inputs scaled by {LARGE_SCALE:g}", lambda t: t * LARGE_SCALE),
    (f"inputs scaled by {TINY_SCALE:g}", lambda t: t * TINY_SCALE),
    ("negated inputs", lambda t: -t),
    ("NaN, +Inf and -Inf in the inputs", _with_special_values),
)


def is_float_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


class ReferenceCache:
    """Memoised reference cases of one problem on one GPU, kept while they fit `budget_bytes`."""

    def __init__(self, problem: Problem, gpu: int, seeds: list[int], budget_bytes: int) -> None:
        self.problem, self.gpu, self.seeds, self.budget_bytes = problem, gpu, seeds, budget_bytes
        self._cases: dict[str, ReferenceCase] = {}
        self._lock = threading.Lock()

    def seed_case(self, seed: int) -> ReferenceCase:
        return self._memoised(f"seed {seed}", lambda: self._compute_seed(seed))

    def special_cases(self) -> list[ReferenceCase]:
        base = self.seed_case(self.seeds[0])
        if not any(is_float_tensor(a) for a in base.args):
            return []
        return [self._memoised(label, lambda label=label, transform=transform: self._compute_special(
            base, label, transform)) for label, transform in SPECIAL_CASES]

    def warm(self) -> None:
        """Compute every case now (e.g. in a thread while the candidate compiles)."""
        for seed in self.seeds:
            self.seed_case(seed)
        self.special_cases()

    def _memoised(self, label: str, compute: Callable[[], ReferenceCase]) -> ReferenceCase:
        with self._lock:
            if label in self._cases:
                return self._cases[label]
            case = compute()
            if sum(c.nbytes for c in self._cases.values()) + case.nbytes <= self.budget_bytes:
                self._cases[label] = case
            return case

    def _compute_seed(self, seed: int) -> ReferenceCase:
        instance = instantiate(self.problem, seed, f"cuda:{self.gpu}")
        with torch_precision("strict"):
            outputs = instance.reference()
        return ReferenceCase(f"seed {seed}", instance, instance.args, outputs)

    def _compute_special(self, base: ReferenceCase, label: str,
                         transform: Callable[[torch.Tensor], torch.Tensor]) -> ReferenceCase:
        args = [transform(a) if is_float_tensor(a) else a for a in base.args]
        with torch_precision("strict"):
            outputs = base.instance.reference(args)
        return ReferenceCase(label, base.instance, args, outputs)
