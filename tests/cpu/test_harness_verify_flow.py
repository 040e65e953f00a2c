"""harness/verify.py's whole flow on CPU: the real checks, reference cases (float64, special values with their
reach) and comparisons, with the candidate a PyTorch function standing in for the driver's kb_forward on CPU
buffers. The issue's causal attention that skips masked work passes `special_values` with an Inf in a later
token; a NaN-dropping one fails it; `extra_verification` passes the GEMM-sum rewrite and fails a kernel that is
right only on the verification seeds."""

from __future__ import annotations

import gc
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
import torch
import torch.nn.functional as F

from kernelblaster.harness import evaluate, references
from kernelblaster.harness.buffers import SharedBuffer, SharedSet
from kernelblaster.harness.dtypes import dtype_info
from kernelblaster.harness.problem import Problem, instantiate, load_problem
from kernelblaster.harness.references import ReferenceCache, ReferenceCase, compute_case
from kernelblaster.harness.spec import TensorSpec, derive_spec
from kernelblaster.harness.verify import VerificationContext, extra_verification, verify_candidate
from kernelblaster.tools.driver_process import DriverSession

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "problems"
ATTENTION = FIXTURES / "causal_attention_small.py"
GEMM_SUM = FIXTURES / "gemm_divide_sum_scale_small.py"
SEEDS = [0, 1, 2]

Candidate = Callable[[list[torch.Tensor], list[torch.Tensor]], list[torch.Tensor]]


class CpuReferences(ReferenceCache):
    """The references of the harness, computed on the CPU instead of `cuda:{gpu}`."""

    def _compute(self, seed: int, special: tuple[str, Callable[[torch.Tensor], object]] | None) -> ReferenceCase:
        return compute_case(instantiate(self.problem, seed, "cpu"), special, self.float64)


class PythonDriver:
    """Stands in for the driver process: kb_forward is `candidate` run on the shared set's CPU tensors."""

    def __init__(self, shared: SharedSet, candidate: Candidate) -> None:
        self.shared, self.candidate = shared, candidate

    def run(self, set_index: int, timeout_s: float) -> None:
        outputs = self.candidate([b.tensor for b in self.shared.inputs], [b.tensor for b in self.shared.params])
        for buffer, value in zip(self.shared.outputs, outputs, strict=True):
            buffer.tensor.copy_(value)

    def batch(self, sets: list[int], timeout_s: float) -> None:
        for index in sets:  # verification's batches hold set 0, the only one here
            self.run(index, timeout_s)


def cpu_buffer(spec: TensorSpec) -> SharedBuffer:
    raw = torch.zeros(spec.numel * dtype_info(spec.dtype).itemsize, dtype=torch.uint8)
    tensor = raw.view(dtype_info(spec.dtype).torch_dtype).reshape(spec.shape)
    return SharedBuffer(spec=spec, pointer=0, nbytes=raw.numel(), raw=raw, tensor=tensor, ipc_handle_hex="")


def cpu_set(problem: Problem) -> SharedSet:
    spec = derive_spec(instantiate(problem, 0, "cpu"))
    return SharedSet(inputs=[cpu_buffer(s) for s in spec.inputs], params=[cpu_buffer(s) for s in spec.params],
                     outputs=[cpu_buffer(s) for s in spec.outputs])


def setup(path: Path, candidate: Candidate, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[DriverSession, SharedSet, VerificationContext]:
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)  # CPU buffers: nothing to wait for
    problem = load_problem(path)
    shared = cpu_set(problem)
    context = VerificationContext(CpuReferences(problem, 0, SEEDS, "per_case", True, float64=True), "strict", 10.0,
                                  1 << 20)
    return cast(DriverSession, PythonDriver(shared, candidate)), shared, context


def inf_in_a_later_token(tensor: torch.Tensor) -> None:
    """One +Inf in token 6 of the first sequence: tokens 0..5 of it cannot depend on it."""
    tensor[0, 6, 3] = math.inf


def nan_in_a_later_token(tensor: torch.Tensor) -> None:
    tensor[0, 6, 3] = math.nan


def attention(drop_nan: bool = False) -> Candidate:
    """Causal attention that skips masked work (row s reads tokens 0..s only), as a flash-style kernel does."""
    def forward(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        (x,), (_, w_attn, b_attn, w_proj, b_proj) = inputs, params
        batch, tokens, channels = x.shape
        qkv = x @ w_attn.T + b_attn
        q, k, v = (t.reshape(batch, tokens, 2, -1).transpose(1, 2) for t in qkv.split(channels, dim=2))
        y = torch.empty_like(q)
        for s in range(tokens):
            scores = q[:, :, s:s + 1] @ k[:, :, : s + 1].transpose(-2, -1) / math.sqrt(q.shape[-1])
            y[:, :, s] = (F.softmax(scores, dim=-1) @ v[:, :, : s + 1])[:, :, 0]
        if drop_nan:
            y = torch.nan_to_num(y, nan=0.0)
        return [y.transpose(1, 2).reshape(batch, tokens, channels) @ w_proj.T + b_proj]
    return forward


def gemm_sum_rewrite(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [inputs[0] @ params[0].sum(dim=0).unsqueeze(1) * 0.75]


@pytest.mark.parametrize("placement", [inf_in_a_later_token, nan_in_a_later_token])
def test_attention_that_skips_masked_work_passes_every_check(placement: Callable[[torch.Tensor], None],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(references, "SPECIAL_CASES", (("a special value in a later token", placement),))
    session, shared, context = setup(ATTENTION, attention(), monkeypatch)
    verification = verify_candidate(session, shared, context)
    assert verification.passed, verification.checks[-1].detail
    assert [c.name for c in verification.checks][-1] == "special_values"


def test_attention_that_drops_a_nan_fails_special_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(references, "SPECIAL_CASES", (("NaN in a later token", nan_in_a_later_token),))
    session, shared, context = setup(ATTENTION, attention(drop_nan=True), monkeypatch)
    verification = verify_candidate(session, shared, context)
    failed = verification.checks[-1]
    assert not failed.passed and failed.name == "special_values", failed.detail
    assert "NaN must propagate" in failed.detail


def test_the_gemm_sum_rewrite_passes_extra_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    session, shared, context = setup(GEMM_SUM, gemm_sum_rewrite, monkeypatch)
    check = extra_verification(session, shared, context)
    assert check.passed and check.name == "extra_verification", check.detail


def test_a_kernel_right_only_on_the_verification_cases_fails_extra_verification(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Right on every case verification shows it (special values sit at places drawn anew for each case, so it
    # cannot know them in advance: it is told when verification is over), wrong on any other.
    verifying = [True]

    def memorised(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        if verifying[0]:
            return gemm_sum_rewrite(inputs, params)
        return [inputs[0][:, :-8] @ params[0][:, :-8].sum(dim=0).unsqueeze(1) * 0.75]  # skips work elsewhere

    session, shared, context = setup(GEMM_SUM, memorised, monkeypatch)
    assert verify_candidate(session, shared, context).passed
    verifying[0] = False
    check = extra_verification(session, shared, context)
    assert not check.passed and check.name == "extra_verification"
    assert "extra verification below the compute floor" in check.detail


def test_a_kernel_that_skips_work_still_fails_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    def skips_rows(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        return [inputs[0] @ params[0][::2].sum(dim=0).unsqueeze(1) * 0.75]  # half of W's rows never read

    session, shared, context = setup(GEMM_SUM, skips_rows, monkeypatch)
    failed = verify_candidate(session, shared, context).checks[-1]
    assert not failed.passed and failed.name == "correct", failed.detail


def test_a_kernel_that_caches_its_first_result_still_fails_no_caching(monkeypatch: pytest.MonkeyPatch) -> None:
    cache: list[torch.Tensor] = []

    def cached(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        if not cache:
            cache.append(gemm_sum_rewrite(inputs, params)[0].clone())
        return [cache[0]]

    session, shared, context = setup(GEMM_SUM, cached, monkeypatch)
    failed = verify_candidate(session, shared, context).checks[-1]
    assert not failed.passed and failed.name == "no_caching", failed.detail
    assert "cached" in failed.detail


def test_no_copy_of_the_outputs_is_held_while_a_later_case_is_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A per-case cache computes each later case while the runner waits: the trusted side's peak (a whole reference
    # case, which the memory plan counts) must not carry a copy of the outputs beside it.
    gc.collect()  # earlier tests' garbage of this shape is no copy of these outputs
    session, shared, context = setup(GEMM_SUM, gemm_sum_rewrite, monkeypatch)
    output = shared.outputs[0].tensor
    copies_seen: list[int] = []
    compute = CpuReferences._compute

    def counting(self: CpuReferences, seed: int,
                 special: tuple[str, Callable[[torch.Tensor], object]] | None) -> ReferenceCase:
        tensors = [t for t in gc.get_objects() if issubclass(type(t), torch.Tensor)]
        alive = {t.data_ptr() for t in tensors if t.shape == output.shape}
        copies_seen.append(len(alive - {output.data_ptr()}))
        return compute(self, seed, special)

    monkeypatch.setattr(CpuReferences, "_compute", counting)
    verification = verify_candidate(session, shared, context)
    assert verification.passed, verification.checks[-1].detail
    assert len(copies_seen) > len(SEEDS) and copies_seen == [0] * len(copies_seen)


def test_timing_sets_are_filled_with_their_seeds_arguments_and_no_reference_is_computed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # What a timing set must give is computed on its contents when a batch is checked (`timing_reference`); a
    # reference computed at filling time (fp32, float64 and its conditioning) went unused.
    def never(*args: object) -> ReferenceCase:
        raise AssertionError("a reference was computed to fill a timing set")

    monkeypatch.setattr(references, "instantiate", lambda problem, seed, device: instantiate(problem, seed, "cpu"))
    monkeypatch.setattr(references, "compute_case", never)
    problem = load_problem(GEMM_SUM)
    cache = CpuReferences(problem, 0, SEEDS, "cached", True, float64=True)
    arguments = cache.timing_arguments(1)
    assert arguments.tensor_args and arguments.params
    expected = instantiate(problem, references._TIMING_SEED_BASE + 1, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(arguments.tensor_args, expected.tensor_args, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(arguments.params, expected.initial_state.values(), strict=True))


TIED_WEIGHTS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 8, bias=False)
        self.head.weight = self.embed.weight  # tied: two state_dict entries, one tensor
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return self.head(self.embed(x)) * self.scale


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""


def test_learned_weights_are_the_parameters_and_not_the_buffers() -> None:
    instance = instantiate(load_problem(ATTENTION), 0, "cpu")
    flags = dict(zip(instance.initial_state, references.learned_params(instance), strict=True))
    assert flags == {"c_attn.weight": True, "c_attn.bias": True, "c_proj.weight": True, "c_proj.bias": True,
                     "bias": False}  # the causal mask is the problem's constant


def test_tied_weights_are_not_learned_weights_the_timing_may_change_alone(tmp_path: Path) -> None:
    (tmp_path / "tied.py").write_text(TIED_WEIGHTS)
    instance = instantiate(load_problem(tmp_path / "tied.py"), 0, "cpu")
    flags = dict(zip(instance.initial_state, references.learned_params(instance), strict=True))
    assert flags == {"embed.weight": False, "head.weight": False, "scale": True}


def test_a_timing_reference_runs_on_the_sets_params_as_they_are_now(monkeypatch: pytest.MonkeyPatch) -> None:
    # The timing changes a set's weights before a batch: the reference must be computed on them, not on the
    # weights its seed first gave.
    monkeypatch.setattr(references, "instantiate", lambda problem, seed, device: instantiate(problem, seed, "cpu"))
    problem = load_problem(GEMM_SUM)
    cache = CpuReferences(problem, 0, SEEDS, "per_case", True)
    arguments = cache.timing_arguments(0)
    as_filled = cache.timing_reference(0, arguments.tensor_args, arguments.params).outputs[0]
    changed = [param.clone() for param in arguments.params]
    changed[0][3, 5] *= 0.5
    case = cache.timing_reference(0, arguments.tensor_args, changed)
    expected = torch.sum(arguments.tensor_args[0] @ changed[0].T / 2, dim=1, keepdim=True) * 1.5
    assert torch.allclose(case.outputs[0], expected) and not torch.allclose(case.outputs[0], as_filled)


def test_fresh_timing_arguments_never_repeat_the_sets_own_or_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(references, "instantiate", lambda problem, seed, device: instantiate(problem, seed, "cpu"))
    cache = CpuReferences(load_problem(GEMM_SUM), 0, SEEDS, "per_case", True)
    own, first, second = (cache.timing_arguments(0, fresh=fresh) for fresh in (False, True, True))
    for a, b in ((own, first), (first, second), (own, second)):
        assert not torch.equal(a.tensor_args[0], b.tensor_args[0]) and not torch.equal(a.params[0], b.params[0])
    assert first.learned == [True]


def test_a_refill_before_a_fresh_batch_changes_every_sets_inputs_and_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(references, "instantiate", lambda problem, seed, device: instantiate(problem, seed, "cpu"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)  # CPU buffers: nothing to wait for
    problem = load_problem(GEMM_SUM)
    cache = CpuReferences(problem, 0, SEEDS, "per_case", True)
    sets = [cpu_set(problem), cpu_set(problem)]
    learned = evaluate._fill_with_timing_arguments(cache, sets)
    before = [[b.tensor.clone() for b in shared.inputs + shared.params] for shared in sets]
    assert evaluate._fill_with_timing_arguments(cache, sets, fresh=True) == learned == [True]
    for shared, old in zip(sets, before, strict=True):
        for buffer, value in zip(shared.inputs + shared.params, old, strict=True):
            assert float((buffer.tensor != value).float().mean()) > 0.9


def test_a_verification_records_the_seconds_of_its_checks_and_of_special_values_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    session, shared, context = setup(GEMM_SUM, gemm_sum_rewrite, monkeypatch)
    verification = verify_candidate(session, shared, context)
    assert verification.passed
    assert list(verification.seconds) == ["verification", "special_values"]
    assert all(seconds > 0 for seconds in verification.seconds.values())


def test_a_verification_that_stops_before_special_values_records_no_special_values_stage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def skips_rows(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        return [inputs[0] @ params[0][::2].sum(dim=0).unsqueeze(1) * 0.75]

    session, shared, context = setup(GEMM_SUM, skips_rows, monkeypatch)
    verification = verify_candidate(session, shared, context)
    assert not verification.passed
    assert list(verification.seconds) == ["verification"]


def test_the_float64_references_a_verification_made_are_counted_once_as_conditioning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    session, shared, context = setup(GEMM_SUM, gemm_sum_rewrite, monkeypatch)
    assert verify_candidate(session, shared, context).passed
    references = context.references
    assert references.take_float64_seconds() > 0
    assert references.take_float64_seconds() == 0.0  # taken: the next evaluation starts from nothing


def _counting_references(stop_after: int | None, stop: threading.Event) -> tuple[ReferenceCache, list[int]]:
    references = CpuReferences(load_problem(GEMM_SUM), 0, SEEDS, "cached", True, float64=False)
    computed: list[int] = []
    compute = references._compute

    def counted(seed: int, special: tuple[str, Callable[[torch.Tensor], object]] | None) -> ReferenceCase:
        computed.append(seed)
        if len(computed) == stop_after:
            stop.set()
        return compute(seed, special)

    references._compute = counted  # type: ignore[method-assign]  # counts the cases the warming begins
    return references, computed


def test_warming_the_references_computes_every_case_ahead() -> None:
    references, computed = _counting_references(None, threading.Event())
    references.warm(strict=True)
    assert len(computed) == len(SEEDS) + len(references.special_labels(strict=True))


def test_warming_the_references_begins_no_case_once_told_to_stop() -> None:
    stop = threading.Event()
    references, computed = _counting_references(1, stop)
    references.warm(strict=True, stop=stop)
    assert computed == [SEEDS[0]]
