"""The problem's argument contract, derived from one reference run: names, dtypes and shapes of every
input, parameter/buffer (state_dict order), non-tensor argument and output."""

from __future__ import annotations

import inspect
import math
from typing import Any, Literal

import torch
from pydantic import BaseModel

from kernelblaster.harness.dtypes import dtype_info, dtype_of_tensor
from kernelblaster.harness.problem import Problem, ProblemError, ProblemInstance, outputs_as_list, problem_code
from kernelblaster.harness.semantics import SemanticsRecorder

ConstantValue = bool | int | float | list[int] | list[float]
MAX_DIMS = 8  # KBTensor.shape has eight entries
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class TensorSpec(BaseModel):
    name: str
    origin: str
    dtype: str
    shape: list[int]
    strides: list[int]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class ConstantSpec(BaseModel):
    """A non-tensor value the candidate sees as a compile-time constant."""

    name: str
    origin: str
    kind: Literal["forward", "init"]
    value: ConstantValue | None
    text: str


class ProblemSpec(BaseModel):
    problem_name: str
    problem_sha256: str
    inputs: list[TensorSpec]
    params: list[TensorSpec]
    outputs: list[TensorSpec]
    constants: list[ConstantSpec]
    output_is_tuple: bool
    # What the forward pass depends on besides its arguments and the Model's constructor arguments (PyTorch
    # modules' settings and functional calls' arguments, defaults included): harness.semantics.
    semantics: list[str] = []

    @property
    def compulsory_bytes(self) -> int:
        """Bytes any implementation must move: every input and parameter read once, every output written once."""
        tensors = self.inputs + self.params + self.outputs
        return sum(t.numel * dtype_info(t.dtype).itemsize for t in tensors)


def derive_spec(instance: ProblemInstance) -> ProblemSpec:
    """Run the reference forward pass once on the instance's device and describe its arguments and outputs."""
    semantics = SemanticsRecorder(instance.model)
    with semantics.watching():
        raw_output = run_forward(instance)
    return spec_from_output(instance, raw_output, semantics.lines)


def run_forward(instance: ProblemInstance) -> Any:
    """The model's raw return value for the instance's arguments; a failure (or an overrun: see
    `harness.problem.problem_code`) names the problem file."""
    with problem_code(instance.problem.path, "the reference forward pass"):
        instance.model.load_state_dict(instance.initial_state)
        with torch.no_grad():
            return instance.model(*instance.args)


def spec_from_output(instance: ProblemInstance, raw_output: Any, semantics: list[str] | None = None) -> ProblemSpec:
    """The spec of an instance whose forward pass returned `raw_output` (with the settings it ran with, as a
    `SemanticsRecorder` read them)."""
    problem = instance.problem
    outputs = outputs_as_list(raw_output, problem)
    if not outputs:
        raise ProblemError(f"{problem.path}: Model.forward returned no tensors")
    forward_names = _parameter_names(instance.model.forward, len(instance.args), prefix="arg")
    init_names = _parameter_names(problem.model_class.__init__, len(instance.init_args), prefix="init", skip_self=True)
    return ProblemSpec(
        problem_name=problem.name,
        problem_sha256=problem.sha256,
        inputs=[
            _tensor_spec(name, f"forward argument '{name}'", arg)
            for name, arg in zip(forward_names, instance.args, strict=True)
            if isinstance(arg, torch.Tensor)
        ],
        params=[_tensor_spec(key, f"state_dict '{key}'", value) for key, value in instance.initial_state.items()],
        outputs=_output_specs(outputs),
        constants=_checked_constants(problem, [
            *_constants(forward_names, instance.args, kind="forward"),
            *_constants(init_names, instance.init_args, kind="init"),
        ]),
        output_is_tuple=isinstance(raw_output, tuple | list),
        semantics=semantics or [],
    )


def _parameter_names(function: Any, count: int, prefix: str, skip_self: bool = False) -> list[str]:
    """Positional names from the signature; varargs and unnamed extras get `<prefix><index>`."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    if skip_self and parameters and parameters[0].name == "self":
        parameters = parameters[1:]
    positional = [
        p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return [positional[i] if i < len(positional) else f"{prefix}{i}" for i in range(count)]


def _tensor_spec(name: str, origin: str, tensor: torch.Tensor) -> TensorSpec:
    if tensor.dim() > MAX_DIMS:
        raise ProblemError(f"{origin} has {tensor.dim()} dimensions; the candidate ABI describes at most {MAX_DIMS}")
    # Shared buffers are always contiguous copies, so the candidate sees contiguous strides.
    contiguous = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta").stride()
    return TensorSpec(
        name=name,
        origin=origin,
        dtype=dtype_of_tensor(tensor).name,
        shape=list(tensor.shape),
        strides=list(contiguous),
    )


def _output_specs(outputs: list[torch.Tensor]) -> list[TensorSpec]:
    if len(outputs) == 1:
        return [_tensor_spec("out", "the returned tensor", outputs[0])]
    return [_tensor_spec(f"out{i}", f"returned tuple element {i}", t) for i, t in enumerate(outputs)]


def _constants(names: list[str], values: list[Any], kind: Literal["forward", "init"]) -> list[ConstantSpec]:
    origin = "forward argument" if kind == "forward" else "Model.__init__ argument"
    return [
        ConstantSpec(name=name, origin=f"{origin} '{name}'", kind=kind, value=_constant_value(value), text=repr(value))
        for name, value in zip(names, values, strict=True)
        if not isinstance(value, torch.Tensor)
    ]


def _checked_constants(problem: Problem, constants: list[ConstantSpec]) -> list[ConstantSpec]:
    """The constants, if every integer fits the header's int64_t (a wider one would silently wrap)."""
    for constant in constants:
        values = constant.value if isinstance(constant.value, list) else [constant.value]
        if any(isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX for v in values):
            raise ProblemError(f"{problem.path}: {constant.origin} = {constant.text} does not fit in a 64-bit "
                               "integer, the type a candidate receives it as")
    return constants


def _constant_value(value: Any) -> ConstantValue | None:
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, tuple | list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    if isinstance(value, tuple | list) and value and all(isinstance(v, int | float) for v in value):
        return [float(v) for v in value]
    return None
