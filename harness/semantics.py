"""The settings a problem's forward pass depends on that are neither inputs, parameters nor constructor
arguments of the problem's Model: PyTorch modules' settings with their defaults (LayerNorm's eps, a
BatchNorm's momentum and affine flag, a convolution's padding_mode) and the arguments of the functional
calls the pass makes, defaults filled in from the function's signature (cross_entropy's reduction and
ignore_index, interpolate's align_corners).

Derived, never listed by hand: `SemanticsRecorder` watches one reference pass (on the meta device, like
the rest of the analysis) and reads each PyTorch module it runs against its constructor's signature, and
each functional call against the function's signature (Python's, or the ATen schema of a builtin).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

# At most this many settings lines reach the header (a model of hundreds of modules would flood it).
MAX_LINES = 24
# Arguments that say where or how a result is stored, not what is computed, and deprecated aliases.
_NOT_SEMANTIC = frozenset({"self", "input", "out", "layout", "device", "pin_memory", "memory_format", "requires_grad",
                           "generator", "names", "inplace", "size_average", "reduce", "dtype", "factory_kwargs"})
# Calls that move, reshape or read tensors without computing on their values.
_STRUCTURAL = frozenset({
    "view", "view_as", "reshape", "reshape_as", "size", "dim", "numel", "permute", "transpose", "t", "contiguous",
    "flatten", "unflatten", "unsqueeze", "squeeze", "expand", "expand_as", "to", "type", "float", "double",
    "half", "bfloat16", "int", "long", "bool", "clone", "detach", "split", "chunk", "cat", "concat", "stack",
    "narrow", "select", "index_select", "repeat", "tile", "movedim", "get_device", "is_contiguous", "stride",
    "data_ptr", "element_size", "storage_offset", "new_empty", "new_zeros", "new_ones", "new_full", "zeros_like",
    "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "tolist", "item", "copy_", "fill_", "zero_",
    "shape", "dtype", "device", "is_cuda", "ndim", "T", "mT", "requires_grad_", "data", "unbind", "flip",
    # arithmetic whose only hidden argument is add's and sub's alpha=1: its constants are in the header already
    "add", "sub", "mul", "div", "true_divide", "neg", "matmul", "mm", "bmm", "rsub", "multiply", "subtract",
})
# Containers: their children are the modules that compute.
_CONTAINERS: tuple[type[nn.Module], ...] = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
# Modules whose forward pass differs between training and evaluation.
_MODE_DEPENDENT: tuple[type[nn.Module], ...] = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm,
                                                nn.modules.dropout._DropoutNd, nn.RReLU)


def render_value(value: object) -> str | None:
    """A setting as Python spells it; None for tensors and anything without a short, faithful text."""
    if isinstance(value, torch.Tensor | nn.Module):
        return None
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float('{value}')"
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, tuple | list) and len(value) <= 8:
        parts = [render_value(v) for v in value]
        if all(part is not None for part in parts):
            inner = ", ".join(p for p in parts if p is not None)
            return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else (
                f"({inner})" if isinstance(value, tuple) else f"[{inner}]")
    return None


def module_settings(module: nn.Module) -> list[tuple[str, str]]:
    """(name, value) of every constructor argument a PyTorch module keeps as an attribute, defaults included;
    a `bias` flag reads as whether the module has a bias tensor."""
    try:
        parameters = list(inspect.signature(type(module).__init__).parameters.values())
    except (TypeError, ValueError):
        return []
    settings = []
    for parameter in parameters:
        if parameter.name in _NOT_SEMANTIC or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if not hasattr(module, parameter.name):
            continue
        value = getattr(module, parameter.name)
        if parameter.name == "bias" and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None
        text = render_value(value)
        if text is not None:
            settings.append((parameter.name, text))
    if isinstance(module, _MODE_DEPENDENT):
        settings.append(("mode", "'training'" if module.training else "'eval'"))
    return settings


def call_settings(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) of the non-tensor arguments of one call, defaults filled in from its signature (Python's,
    else the ATen schema of the same name); as passed where neither binds."""
    bound = _bind_python(func, args, kwargs)
    if bound is None:
        bound = _bind_aten(getattr(func, "__name__", ""), args, kwargs)
    if bound is None:
        bound = {f"arg{i}": value for i, value in enumerate(args)} | dict(kwargs)
    settings = []
    for name, value in bound.items():
        if name in _NOT_SEMANTIC:
            continue
        text = render_value(value)
        if text is not None:
            settings.append((name, text))
    return settings


def _bind_python(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    try:
        signature = inspect.signature(func)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    values: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if "Tensor" in str(parameter.annotation) and not isinstance(value, bool | int | float | str):
            continue  # a tensor slot left empty (weight=None) is not a setting
        values[name] = value
    return values


def _bind_aten(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments bound to the first ATen overload of `name` they fit, its defaults filled in."""
    packet = getattr(torch.ops.aten, name, None) if name and not name.startswith("_") else None
    if packet is None or not hasattr(packet, "overloads"):
        return None
    for overload_name in packet.overloads():
        if overload_name.endswith("out"):
            continue
        schema = getattr(packet, overload_name)._schema
        bound = _bind_schema(schema.arguments, args, kwargs)
        if bound is not None:
            return bound
    return None


def _bind_schema(arguments: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    positional = [a for a in arguments if not a.kwarg_only]
    if len(args) > len(positional) or not set(kwargs) <= {a.name for a in arguments}:
        return None
    values: dict[str, Any] = {}
    for argument, value in zip(positional, args, strict=False):
        values[argument.name] = value
    values.update(kwargs)
    for argument in arguments:
        kind = str(argument.type)
        if argument.name in values:
            value = values[argument.name]
            if ("Tensor" in kind) != isinstance(value, torch.Tensor) and value is not None:
                return None
            if "Dimname" in kind and not isinstance(value, str):
                return None
        elif argument.has_default_value():
            values[argument.name] = argument.default_value
        else:
            return None
    return values


class SemanticsRecorder(TorchFunctionMode):
    """Records, while `model`'s forward pass runs, each PyTorch module it calls with its settings and each
    functional call made outside those modules with its non-tensor arguments: one line each, in order, once."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._model = model
        self._names = {id(module): name for name, module in model.named_modules() if name}
        self._lines: list[str] = []
        self._inside_root = 0
        self._inside_pytorch_module = 0

    @property
    def lines(self) -> list[str]:
        if len(self._lines) <= MAX_LINES:
            return list(self._lines)
        return [*self._lines[:MAX_LINES], f"... and {len(self._lines) - MAX_LINES} more"]

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if self._inside_root and not self._inside_pytorch_module:
            # What the settings say is for the agents: reading them must never fail the problem's analysis.
            with contextlib.suppress(Exception):
                self._record_call(func, args, kwargs)
        return func(*args, **kwargs)

    @contextmanager
    def watching(self) -> Iterator[SemanticsRecorder]:
        """Record while the model's forward pass runs inside this block (module hooks and this mode)."""
        handles = [nn.modules.module.register_module_forward_pre_hook(self._enter),
                   nn.modules.module.register_module_forward_hook(self._leave)]
        try:
            with self:
                yield self
        finally:
            for handle in handles:
                handle.remove()

    @contextmanager
    def modules_only(self) -> Iterator[SemanticsRecorder]:
        """Record the modules alone (no function mode: recurrent models run untracked)."""
        handles: list[RemovableHandle] = [nn.modules.module.register_module_forward_pre_hook(self._enter),
                                          nn.modules.module.register_module_forward_hook(self._leave)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _enter(self, module: nn.Module, args: object) -> None:
        if module is self._model:
            self._inside_root += 1
        elif self._inside_root and _is_pytorch_module(module):
            if not self._inside_pytorch_module:
                with contextlib.suppress(Exception):  # as in __torch_function__
                    self._record_module(module)
            self._inside_pytorch_module += 1

    def _leave(self, module: nn.Module, args: object, output: object) -> None:
        if module is self._model:
            self._inside_root -= 1
        elif self._inside_root and _is_pytorch_module(module):
            self._inside_pytorch_module -= 1

    def _record_module(self, module: nn.Module) -> None:
        name = self._names.get(id(module), "(unnamed)")
        found = module_settings(module)
        if not found:
            return  # nn.ReLU(): nothing the source does not say
        settings = ", ".join(f"{key}={value}" for key, value in found)
        self._add(f"self.{name} = nn.{type(module).__name__}({settings})")

    def _record_call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        name = getattr(func, "__name__", "")
        if not name or name.startswith("_") or name in _STRUCTURAL:
            return
        settings = call_settings(func, args, kwargs)
        if not settings:
            return
        module = getattr(func, "__module__", None) or ""
        owner = getattr(func, "__objclass__", None) or getattr(getattr(func, "__self__", None), "__class__", None)
        prefix = ("F." if module.startswith("torch.nn.functional") else
                  "Tensor." if owner is torch.Tensor or owner is torch._C.TensorBase else "torch.")
        self._add(f"{prefix}{name}({', '.join(f'{key}={value}' for key, value in settings)})")

    def _add(self, line: str) -> None:
        if line not in self._lines:
            self._lines.append(line)


def _is_pytorch_module(module: nn.Module) -> bool:
    return type(module).__module__.startswith("torch.nn.") and not isinstance(module, _CONTAINERS)
