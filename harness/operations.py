"""What a problem's forward pass computes, as the KB's operation kinds (`kb.operations`): read from the
operators PyTorch dispatches while the pass runs (on the meta device, like the rest of the analysis).

Views, copies, allocations, random fills and in-place updates of the model's own buffers (a batch norm's
step counter) compute nothing of the problem's and are not counted, though copies carry what their source
was (a weight, or attention scores). Two kinds come from how operators connect rather than from their
names: attention is a matrix product of two activations (scores) whose result, through elementwise steps
such as a softmax, feeds another matrix product; a recurrence is one weight multiplied in again and again
in one pass (a time loop written out in Python).

For the row families (softmax, normalizations, reductions, losses) the recorder also keeps what each such
call reduces (`ReducedRows`: its input's shape and the dimensions it reduces over), from which the first
kernel's prompt says how many rows there are, how long each is, and the design that fits.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from kernelblaster.kb.operations import OperationKind

_KIND_OF_OPERATOR: dict[str, OperationKind] = {
    **dict.fromkeys(["mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "_scaled_mm",
                     "addr"], "matmul"),
    **dict.fromkeys(["_softmax", "_log_softmax", "_safe_softmax", "logsumexp"], "softmax"),
    **dict.fromkeys(["native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "_native_batch_norm_legit_functional", "_batch_norm_with_update", "_batch_norm_no_update",
                     "native_layer_norm", "native_group_norm", "var", "var_mean", "std", "std_mean"],
                    "normalization"),
    **dict.fromkeys(["sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "norm",
                     "linalg_vector_norm", "any", "all", "aminmax", "nansum", "count_nonzero", "median",
                     "binary_cross_entropy"], "reduction"),
    **dict.fromkeys(["cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "_cummax_helper",
                     "_cummin_helper"], "scan"),
    **dict.fromkeys(["lstm", "gru", "rnn_tanh", "rnn_relu", "_cudnn_rnn", "_thnn_fused_lstm_cell",
                     "_thnn_fused_gru_cell"], "recurrent"),
}
_ATTENTION_PREFIX = "_scaled_dot_product"
# PyTorch's fused inference paths of nn.MultiheadAttention and nn.TransformerEncoderLayer (off the meta device).
_FUSED_ATTENTION: dict[str, set[OperationKind]] = {
    "_native_multi_head_attention": {"attention", "matmul", "softmax"},
    "_transformer_encoder_layer_fwd": {"attention", "matmul", "softmax", "normalization", "several_operations"},
}
# Operators that move, allocate or fill memory without computing on the problem's data.
_NOT_COMPUTING = frozenset([
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "fill_", "zero_", "clone", "copy_", "_to_copy", "lift_fresh", "lift_fresh_copy", "_unsafe_view", "arange",
    "scalar_tensor", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "rand", "rand_like",
    "randn", "randn_like", "randint", "randperm", "normal_", "uniform_", "bernoulli_", "resize_", "set_",
    "_local_scalar_dense",
])
# One weight multiplied in more often than this in one pass is a recurrence (an MLP uses each weight once).
RECURRENCE_USES = 4
# The most distinct row reductions kept (a deep model repeats the same few).
MAX_REDUCED_ROWS = 8
_SOFTMAX_OPERATORS = frozenset({"_softmax", "_log_softmax", "_safe_softmax"})
# Batch norms that use running statistics reduce nothing; the others reduce when `training` is set.
_BATCH_NORM_TRAINING = frozenset({"_batch_norm_with_update"})
_BATCH_NORM_EVAL = frozenset({"_batch_norm_no_update", "_native_batch_norm_legit_no_training"})
# ATen's loss `reduction` argument: 0 keeps one value per element (no reduction), 1 mean, 2 sum.
_NO_REDUCTION = 0


class ReducedRows(BaseModel):
    """One reduction the forward pass makes: the operator, the shape it reads and the dimensions it reduces
    over (a softmax's dim, a layer norm's normalized dims, a training batch norm's all but the channel, a
    loss's all); a row is one output's reduced elements."""

    model_config = ConfigDict(frozen=True)

    operation: str = Field(description="The ATen operator, e.g. _softmax, native_layer_norm, sum")
    shape: tuple[int, ...] = Field(description="The shape it reduces (for a group norm: [N, groups, group size])")
    dims: tuple[int, ...] = Field(description="The reduced dimensions, ascending, non-negative")
    element_bytes: int = Field(description="Bytes per element of the input")

    @property
    def length(self) -> int:
        """Elements in one row."""
        return math.prod(self.shape[d] for d in self.dims)

    @property
    def rows(self) -> int:
        return math.prod(self.shape) // self.length if self.length else 0

    @property
    def contiguous(self) -> bool:
        """Whether each row is one contiguous run (the reduced dimensions are the innermost)."""
        return self.run == self.length

    @property
    def run(self) -> int:
        """Contiguous elements of a row at a time: the innermost dimensions it reduces (1 when the innermost
        dimension is not reduced: the row's elements are `stride` apart)."""
        inner = len(self.shape)
        while inner > 0 and inner - 1 in self.dims:
            inner -= 1
        return math.prod(self.shape[inner:])

    @property
    def stride(self) -> int:
        """Elements between consecutive elements of a row's innermost reduced dimension."""
        return math.prod(self.shape[max(self.dims) + 1:]) if self.dims else 1


class OperationRecorder(TorchDispatchMode):
    """Records the operation kinds of what `model` dispatches while the recorder is active."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves TorchDispatchMode.__init__ unannotated
        self._model = model
        self._kinds: set[OperationKind] = set()
        self._computing_calls = 0
        # The model's state and what is computed from it alone (a cast or scaled copy of a weight).
        self._weights = _StorageSet([*model.parameters(), *model.buffers()])
        self._scores = _StorageSet([])  # attention scores, and what non-product steps made of them
        self._weight_uses: dict[int, int] = {}
        self._rows: dict[ReducedRows, None] = {}  # insertion-ordered set

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        result = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or self._updates_own_buffer(name, args):
            return result
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
        if name not in _NOT_COMPUTING:
            self._computing_calls += 1
        kinds = _kinds_of_call(name, args)
        self._kinds.update(kinds)
        if kinds & {"softmax", "normalization", "reduction"} and len(self._rows) < MAX_REDUCED_ROWS:
            with contextlib.suppress(Exception):  # the rows inform the prompt: reading them never fails a pass
                found = _reduced_rows(name, func, args, kwargs or {})
                if found is not None:
                    self._rows[found] = None
        if "matmul" in kinds:
            self._follow_matrix_product(name, args, outputs)
            return result
        # What is computed from weights alone is a weight; from scores, scores (copies and casts included).
        if inputs and all(t in self._weights for t in inputs):
            self._weights.update(outputs)
        elif any(t in self._scores for t in inputs):
            self._scores.update(outputs)
        return result

    def kinds(self) -> frozenset[OperationKind]:
        """The kinds seen so far, with what the model's modules show (a recurrent layer on the meta device
        runs as its per-step operators) and `several_operations` where more than one operator computed."""
        kinds = set(self._kinds)
        if any(isinstance(module, nn.RNNBase | nn.RNNCellBase) for module in self._model.modules()):
            kinds.add("recurrent")
        if any(uses > RECURRENCE_USES for uses in self._weight_uses.values()):
            kinds.add("recurrent")
        if self._computing_calls > 1:
            kinds.add("several_operations")
        return frozenset(kinds)

    def reduced_rows(self) -> tuple[ReducedRows, ...]:
        """The distinct row reductions seen so far, in the order first seen (at most MAX_REDUCED_ROWS)."""
        return tuple(self._rows)

    def _updates_own_buffer(self, name: str, args: tuple[Any, ...]) -> bool:
        return name.endswith("_") and bool(args) and isinstance(args[0], torch.Tensor) and args[0] in self._weights

    def _follow_matrix_product(self, name: str, args: tuple[Any, ...], outputs: list[torch.Tensor]) -> None:
        # addmm(bias, a, b), baddbmm(bias, a, b), addmv(bias, m, v): the bias is no operand of the product.
        operands = [t for t in args[1:3] if isinstance(t, torch.Tensor)] if name.startswith(("add", "baddbmm")) \
            else [t for t in args[:2] if isinstance(t, torch.Tensor)]
        weights = [t for t in operands if t in self._weights]
        for weight in weights:
            key = _storage_key(weight)
            self._weight_uses[key] = self._weight_uses.get(key, 0) + 1
        from_scores = any(t in self._scores for t in operands)
        if from_scores and not weights:
            self._kinds.add("attention")  # scores applied to an activation: the values
        elif from_scores or (not weights and len(operands) == 2):
            self._scores.update(outputs)  # scores (scaled by a weight, such as a decay mask, they stay scores)


class _StorageSet:
    """Tensors' storages, held weakly: a storage freed during the pass leaves the set, so a new one that the
    allocator puts at the same address is not taken for it."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self._refs: dict[int, StorageWeakRef] = {}
        self.update(tensors)

    def update(self, tensors: list[torch.Tensor]) -> None:
        for tensor in tensors:
            self._refs[_storage_key(tensor)] = StorageWeakRef(tensor.untyped_storage())

    def __contains__(self, tensor: object) -> bool:
        if not isinstance(tensor, torch.Tensor):
            return False
        ref = self._refs.get(_storage_key(tensor))
        return ref is not None and not ref.expired()


def _kinds_of_call(name: str, args: tuple[Any, ...]) -> set[OperationKind]:
    if name.startswith(_ATTENTION_PREFIX):
        return {"attention", "matmul", "softmax"}
    if name in _FUSED_ATTENTION:
        return set(_FUSED_ATTENTION[name])
    if "convolution" in name or name.startswith("conv"):
        return _convolution_kinds(name, args)
    if "pool" in name:
        return {"pooling"}
    if name.endswith("_loss") or name.endswith("_loss_forward"):
        return {"reduction"}
    kind = _KIND_OF_OPERATOR.get(name)
    return {kind} if kind is not None else set()


def _convolution_kinds(name: str, args: tuple[Any, ...]) -> set[OperationKind]:
    """aten.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)."""
    kinds: set[OperationKind] = {"convolution"}
    if "transpose" in name or (len(args) > 6 and args[6] is True):
        kinds.add("transposed_convolution")
    groups = args[8] if len(args) > 8 else 1
    if isinstance(groups, int) and groups > 1:
        kinds.add("grouped_convolution")
    return kinds


def _reduced_rows(name: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ReducedRows | None:
    """What a row-family operator call reduces, or None where it reduces nothing (a batch norm on running
    statistics, a loss with reduction='none', an elementwise max of two tensors) or is not understood."""
    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() == 0:
        return None
    tensor: torch.Tensor = args[0]
    shape, ndim = tuple(int(size) for size in tensor.shape), tensor.dim()
    bound = _bound_arguments(func, args, kwargs)
    every = tuple(range(ndim))
    dims: tuple[int, ...] | None
    if name in _SOFTMAX_OPERATORS:
        dims = (int(bound["dim"]),)
    elif name == "native_layer_norm":
        dims = every[ndim - len(bound["normalized_shape"]):]
    elif name == "native_group_norm":
        batch, channels, spatial, groups = (int(bound[key]) for key in ("N", "C", "HxW", "group"))
        shape, dims = (batch, groups, channels // groups * spatial), (2,)
    elif "batch_norm" in name:
        training = name not in _BATCH_NORM_EVAL and bool(bound.get("training", name in _BATCH_NORM_TRAINING))
        dims = (0, *every[2:]) if training else None
    elif "reduction" in bound and isinstance(bound["reduction"], int):  # a loss
        if bound["reduction"] == _NO_REDUCTION:
            return None
        if name.startswith("nll_loss") and ndim >= 2:  # reads one element of each row of classes (dim 1)
            shape = shape[:1] + shape[2:]
        dims = tuple(range(len(shape)))
    elif any(isinstance(arg, torch.Tensor) for arg in args[1:]):
        return None  # max(a, b), min(a, b): elementwise
    else:
        dim = bound.get("dim")
        dims = every if dim is None or dim == [] else tuple(int(d) for d in (dim if isinstance(dim, list | tuple)
                                                                             else [dim]))
    if dims is None:
        return None
    rank = len(shape)
    return ReducedRows(operation=name, shape=shape, dims=tuple(sorted({d % rank for d in dims})),
                       element_bytes=tensor.element_size())


def _bound_arguments(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The operator's arguments by their schema's names, defaults filled in."""
    bound: dict[str, Any] = {}
    for position, argument in enumerate(func._schema.arguments):
        if argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif position < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[position]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
    return bound


def _storage_key(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage()._cdata)
