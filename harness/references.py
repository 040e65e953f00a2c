"""Reference cases for verification: seeded instances and the PyTorch outputs they must produce.

A problem's references do not depend on the candidate. When the memory plan allows (`cached`), an
evaluator computes them once (while the first candidate compiles) and reuses them for every candidate;
otherwise (`per_case`) each case is computed when it is checked and dropped after, so only one is ever
held. A case keeps its arguments, the params the model started from and the outputs, never the model.
References are always computed in full fp32 (no TF32), whatever freedom the candidate was given. Where the
evaluator allows it (`float64`: memory and a FLOP budget), each case is also computed in float64: candidates are
judged against that, with a tolerance that follows PyTorch's own fp32 error on the case (harness/conditioning.py).
A case with NaN or infinities in its inputs also keeps the reference on the finite originals and which outputs
each kind of special value reaches (harness/special_values.py), so a candidate is judged on the mathematics.
"""

from __future__ import annotations

import copy
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch

from kernelblaster.harness.conditioning import Conditioning, either_expected, measure_conditioning
from kernelblaster.harness.precision import torch_precision
from kernelblaster.harness.problem import Problem, ProblemInstance, instantiate, outputs_as_list
from kernelblaster.harness.special_values import Placement, Reach, expected_output, reach_of

LARGE_SCALE = 1e3
TINY_SCALE = 1e-4
# A float64 reference pass costs about this many FLOPs at most (the problem's fp32 FLOP count): on an H100 (fp64
# about 50 TFLOP/s in matrix products, a few TFLOP/s in cuDNN's fp64 convolutions) well under a second a case.
FLOAT64_FLOP_LIMIT = 10**12

ReferenceHolding = Literal["cached", "per_case"]


@dataclass
class SpecialExpectation:
    """For a case with NaN/Inf in its inputs: the reference on the finite originals (float64, rounded to each
    output's dtype, where computed) and, per output, which elements each kind of special value reaches."""

    finite: list[torch.Tensor]
    reach: list[Reach]


@dataclass
class ReferenceCase:
    label: str
    args: list[Any]  # forward arguments: tensors on the GPU and plain values
    params: list[torch.Tensor]  # the state_dict values the model started from
    outputs: list[torch.Tensor]  # PyTorch's fp32 (strict) result
    exact: list[torch.Tensor] | None = None  # the float64 result rounded to each output's dtype, where computed
    conditioning: list[Conditioning | None] | None = None  # PyTorch's fp32 error per output, where measured
    special: SpecialExpectation | None = None
    float64_s: float = 0.0  # wall seconds of the float64 reference and the conditioning measured from it

    @property
    def tensor_args(self) -> list[torch.Tensor]:
        return [a for a in self.args if isinstance(a, torch.Tensor)]

    def expected(self, index: int, output: torch.Tensor) -> torch.Tensor:
        """What output `index` of a candidate (`output`) must match: the float64 result where there is one, and
        for special values the mathematics (`special_values.expected_output`)."""
        if self.special is not None:
            return expected_output(output, self.outputs[index], self.special.finite[index], self.special.reach[index])
        if self.exact is None:
            return self.outputs[index]
        return either_expected(output, self.outputs[index], self.exact[index])

    def conditioning_of(self, index: int) -> Conditioning | None:
        return self.conditioning[index] if self.conditioning is not None else None


# Special values sit at random places (drawn per process, so no kernel can know them), many per tensor.
SPECIAL_VALUES_PER_ELEMENTS = 4096
MIN_SPECIAL_VALUES, MAX_SPECIAL_VALUES = 3, 64
WIDE_RANGE_EXPONENT = 8  # wide-range inputs: each element times 2**k, k uniform in [-8, 8] (exact in floats)


# Below this many elements positions come from a permutation; above, from draws (a permutation of a 1.6e9-element
# input takes over a minute of CPU time and 13 GB of host memory, for 64 positions).
PERMUTE_BELOW = 1 << 20
# Wide-range inputs are scaled this many elements at a time on their own device (bounded temporaries).
WIDE_RANGE_CHUNK = 1 << 23


def _random_positions(numel: int, count: int) -> torch.Tensor:
    """`min(count, numel)` distinct places in [0, numel), a uniformly random subset in random order (as a
    permutation's first elements), by a secret seed drawn now."""
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    wanted = min(count, numel)
    if numel <= PERMUTE_BELOW:
        return torch.randperm(numel, generator=generator)[:wanted]
    chosen: dict[int, None] = {}  # insertion-ordered: draws in order, repeats dropped
    while len(chosen) < wanted:
        for position in torch.randint(numel, (wanted,), generator=generator).tolist():
            if len(chosen) < wanted:
                chosen.setdefault(position)
    return torch.tensor(list(chosen), dtype=torch.int64)


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
    """Each element times 2**k, k uniform in [-8, 8], drawn on the tensor's own device (a CPU draw of a 6 GiB
    input took 13 GB of host memory and a minute); the powers of two come from a table, so exact."""
    generator = torch.Generator(device=tensor.device).manual_seed(secrets.randbits(63))
    powers = torch.pow(2.0, torch.arange(-WIDE_RANGE_EXPONENT, WIDE_RANGE_EXPONENT + 1, dtype=torch.float64))
    powers = powers.to(device=tensor.device, dtype=tensor.dtype)
    if not tensor.is_contiguous():  # rare: scaled whole, in its own shape
        tensor.mul_(powers[torch.randint(powers.numel(), tuple(tensor.shape), generator=generator,
                                         device=tensor.device)])
        return
    flat = tensor.view(-1)
    for start in range(0, flat.numel(), WIDE_RANGE_CHUNK):
        part = flat[start:start + WIDE_RANGE_CHUNK]
        part.mul_(powers[torch.randint(powers.numel(), part.shape, generator=generator, device=tensor.device)])


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
# Timing cases are seeds never used by verification, drawn per process; the sets' refills before each fresh
# batch draw theirs above these, each when it is made.
_TIMING_SEED_BASE = (1 << 40) + secrets.randbits(40)
_FRESH_TIMING_SEED_BASE = 1 << 41


@dataclass(frozen=True)
class TimingArguments:
    """What a timing set is filled with: the forward's tensor arguments, the model's state_dict values, and per
    state_dict entry whether it is a learned weight the timing may change at random places (`learned_params`)."""

    tensor_args: list[torch.Tensor]
    params: list[torch.Tensor]
    learned: list[bool]


def learned_params(instance: ProblemInstance) -> list[bool]:
    """Per state_dict entry of the instance's model: a parameter (a learned weight, which a kernel must take as
    it comes), held by no other entry. Buffers (a causal mask, running statistics) are the problem's own
    constants a kernel may rely on, and tied weights must change together: neither is changed in place."""
    state = instance.model.state_dict(keep_vars=True)
    holders = Counter(value.data_ptr() for value in state.values())
    return [isinstance(value, torch.nn.Parameter) and value.numel() > 0 and holders[value.data_ptr()] == 1
            for value in state.values()]


def is_float_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


class ReferenceCache:
    """Reference cases of one problem on one GPU, memoised when `holding` is `cached`."""

    def __init__(self, problem: Problem, gpu: int, seeds: list[int], holding: ReferenceHolding,
                 float_inputs: bool, float64: bool = False) -> None:
        self.problem, self.gpu, self.seeds, self.holding = problem, gpu, seeds, holding
        self.float_inputs, self.float64 = float_inputs, float64
        self._cases: dict[str, ReferenceCase] = {}
        self._lock = threading.Lock()
        self._float64_s = 0.0  # of the cases computed since `take_float64_seconds` last asked

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

    def timing_arguments(self, index: int, fresh: bool = False) -> TimingArguments:
        """The tensor arguments and params timing set `index` is filled with: a seed verification never uses,
        secret to the driver; with `fresh`, a new secret seed drawn now (the trusted batches refill every set
        from one before every batch but the first). Built, never run: what the timed calls must give is computed
        on the set's contents when a batch is checked (`timing_reference`), so a reference here would go unused."""
        seed = _FRESH_TIMING_SEED_BASE + secrets.randbits(40) if fresh else _TIMING_SEED_BASE + index
        instance = instantiate(self.problem, seed, f"cuda:{self.gpu}")
        return TimingArguments(instance.tensor_args, list(instance.initial_state.values()), learned_params(instance))

    def timing_reference(self, index: int, tensor_args: list[torch.Tensor],
                         params: list[torch.Tensor]) -> ReferenceCase:
        """What timing case `index` must give on `tensor_args` and `params` (its set's contents now: the timing
        changes them between batches), judged as every case is (`compute_case`), computed now and never kept.
        The forward runs on copies, so a problem that writes its inputs cannot change the set."""
        instance = instantiate(self.problem, _TIMING_SEED_BASE + index, f"cuda:{self.gpu}")
        slots: list[Any] = [None if isinstance(a, torch.Tensor) else a for a in instance.args]
        is_tensor = [isinstance(a, torch.Tensor) for a in instance.args]
        instance.args = []  # the instance's own inputs go before the copies come: one set of inputs at a time
        given = iter(tensor_args)
        instance.args = [next(given).clone() if tensor else slot for slot, tensor in zip(slots, is_tensor, strict=True)]
        names = list(instance.initial_state)
        instance.initial_state = {}  # likewise its own params: the model starts from the set's
        instance.initial_state = {name: param.clone() for name, param in zip(names, params, strict=True)}
        case = self._counted(compute_case(instance, None, self.float64))
        case.label = f"timing set {index}, its contents changed before the batch"
        return case

    def take_float64_seconds(self) -> float:
        """Seconds the float64 references and their conditioning took since the last call (the stage
        `conditioning`), wherever the cases were computed."""
        with self._lock:
            seconds, self._float64_s = self._float64_s, 0.0
        return seconds

    def _counted(self, case: ReferenceCase) -> ReferenceCase:
        with self._lock:
            self._float64_s += case.float64_s
        return case

    def warm(self, strict: bool = False, stop: threading.Event | None = None) -> None:
        """Compute every case now when they are kept (e.g. in a thread while the candidate compiles): the seeds
        and the special values (with `strict`, the strict-only ones too). With `stop` set (the candidate did not
        build), no further case is begun; the rest are computed when needed."""
        if self.holding != "cached":
            return
        cases: list[Callable[[], ReferenceCase]] = [
            *(partial(self.seed_case, seed) for seed in self.seeds),
            *(partial(self.special_case, label) for label in self.special_labels(strict))]
        for case in cases:
            if stop is not None and stop.is_set():
                return
            case()

    def _case(self, label: str, compute: Callable[[], ReferenceCase]) -> ReferenceCase:
        if self.holding != "cached":
            return self._counted(compute())
        with self._lock:
            if label not in self._cases:
                self._cases[label] = case = compute()
                self._float64_s += case.float64_s
            return self._cases[label]

    def fresh_case(self, seed: int, spike: bool) -> ReferenceCase:
        """A case never kept (extra verification): seed `seed`, with `spike` one large value at a random place of
        every floating-point input (a kernel that skips work misses it)."""
        if not spike:
            return self._counted(self._compute(seed, None))
        return self._counted(self._compute(seed, (f"seed {seed} with one large value per input", _spiked(seed))))

    def _compute(self, seed: int, special: tuple[str, Callable[[torch.Tensor], object]] | None) -> ReferenceCase:
        instance = instantiate(self.problem, seed, f"cuda:{self.gpu}")
        return compute_case(instance, special, self.float64)


def compute_case(instance: ProblemInstance, special: tuple[str, Callable[[torch.Tensor], object]] | None,
                 float64: bool) -> ReferenceCase:
    """One case of a built instance: its fp32 outputs, with `float64` the float64 ones and PyTorch's error, and
    for special values in the inputs what each reaches. The instance is the case's own (inputs change in place)."""
    label = f"seed {instance.seed}"
    # Once per distinct tensor: an input passed twice is still transformed once.
    floats = list({id(a): a for a in instance.args if is_float_tensor(a)}.values())
    # The originals, on the host: only their values where special values land are read back.
    originals = [tensor.to("cpu", copy=True) for tensor in floats] if special is not None else []
    if special is not None:
        label, transform = special
        for tensor in floats:
            transform(tensor)
    with torch_precision("strict"):
        outputs = instance.reference()
    params = list(instance.initial_state.values())
    placement = Placement.of(originals, floats) if special is not None else None
    del originals
    if placement is not None and placement.any:
        return _special_case(instance, label, floats, placement, outputs, float64)
    started = time.perf_counter()
    exact, conditioning = _float64(instance, floats, floats, outputs) if float64 else (None, None)
    return ReferenceCase(label, instance.args, params, outputs, exact, conditioning,
                         float64_s=time.perf_counter() - started if float64 else 0.0)


def _special_case(instance: ProblemInstance, label: str, floats: list[torch.Tensor], placement: Placement,
                  outputs: list[torch.Tensor], float64: bool) -> ReferenceCase:
    """A case with NaN/Inf in its inputs: the reference on the finite originals and what each kind reaches.
    The inputs hold the finite originals while these are computed, and their special values again after."""
    def forward() -> list[torch.Tensor]:
        with torch_precision("strict"):
            return instance.reference()

    placement.write(floats)
    try:
        finite = forward()
        reach = reach_of(forward, floats, placement, finite)
        started = time.perf_counter()
        exact, conditioning = _float64(instance, floats, floats, finite) if float64 else (None, None)
        float64_s = time.perf_counter() - started if float64 else 0.0
    finally:
        placement.restore(floats)
    expectation = SpecialExpectation(exact if exact is not None else finite, reach)
    return ReferenceCase(label, instance.args, list(instance.initial_state.values()), outputs, None, conditioning,
                         expectation, float64_s)


def _replaced(args: list[Any], floats: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor]) -> list[Any]:
    """`args` with each of `floats` (by identity) replaced by its counterpart in `tensors`."""
    swap = {id(old): new for old, new in zip(floats, tensors, strict=True)}
    return [swap.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in args]


def _float64(instance: ProblemInstance, floats: Sequence[torch.Tensor], values: Sequence[torch.Tensor],
             fp32: list[torch.Tensor]) -> tuple[list[torch.Tensor] | None, list[Conditioning | None] | None]:
    """The reference in float64 on `values` (in place of `floats`), rounded to each fp32 output's dtype, and
    PyTorch's fp32 error per output; (None, None) when the problem's code cannot run in float64 (it fixes a
    dtype, say) or gives other shapes: the case is then judged against fp32 with the policy's bound alone."""
    try:
        model = copy.deepcopy(instance.model).double()
        model.load_state_dict(instance.initial_state)
        args = _replaced(instance.args, floats, [v.double() for v in values])
        with torch.no_grad(), torch_precision("strict"):
            outputs = outputs_as_list(model(*args), instance.problem)
    except Exception:  # the problem's code, in a dtype it was not written for: no float64 reference
        return None, None
    del model, args
    if len(outputs) != len(fp32) or any(a.shape != b.shape for a, b in zip(outputs, fp32, strict=True)):
        return None, None
    exact: list[torch.Tensor] = []
    conditioning: list[Conditioning | None] = []
    for high, low in zip(outputs, fp32, strict=True):
        usable = low.dtype.is_floating_point and high.dtype.is_floating_point
        exact.append(high.to(low.dtype) if usable else low)
        conditioning.append(measure_conditioning(low, high) if usable else None)
    return exact, conditioning


def _spiked(seed: int) -> Callable[[torch.Tensor], object]:
    """Put one value 16 times the tensor's largest magnitude, of the element's own sign, at a random place."""
    generator = torch.Generator().manual_seed(seed)

    def spike(tensor: torch.Tensor) -> None:
        flat = tensor.view(-1)
        if flat.numel() == 0:
            return
        position = int(torch.randint(flat.numel(), (1,), generator=generator))
        finite = flat[flat.isfinite()]
        largest = float(finite.abs().max()) if finite.numel() else 1.0
        sign = -1.0 if float(flat[position]) < 0 else 1.0
        flat[position] = sign * 16 * max(largest, 1e-3)

    return spike
