"""What a problem's forward pass computes, as the KB's operation kinds (`kb.operations`): read from the
operators PyTorch dispatches while the pass runs (on the meta device, like the rest of the analysis).

Views, copies, allocations and random fills compute nothing and are not counted. A pass that runs a matrix
product, then a softmax, then another matrix product is attention (scores, weights, weighted sum), whether
or not it calls PyTorch's attention operator.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from kernelblaster.kb.operations import OperationKind

_KIND_OF_OPERATOR: dict[str, OperationKind] = {
    **dict.fromkeys(["mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul", "linear",
                     "_scaled_mm", "addr"], "matmul"),
    **dict.fromkeys(["_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax", "logsumexp"], "softmax"),
    **dict.fromkeys(["native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "_native_batch_norm_legit_functional", "_batch_norm_with_update", "_batch_norm_no_update",
                     "native_layer_norm", "native_group_norm", "_fused_rms_norm", "rms_norm", "var", "var_mean",
                     "std", "std_mean"], "normalization"),
    **dict.fromkeys(["sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "norm",
                     "linalg_vector_norm", "any", "all", "aminmax", "nansum", "count_nonzero", "median",
                     "nll_loss_forward", "nll_loss2d_forward"], "reduction"),
    **dict.fromkeys(["cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "_cummax_helper",
                     "_cummin_helper"], "scan"),
    **dict.fromkeys(["lstm", "gru", "rnn_tanh", "rnn_relu", "_cudnn_rnn", "_thnn_fused_lstm_cell",
                     "_thnn_fused_gru_cell", "lstm_cell", "gru_cell"], "recurrent"),
}
_ATTENTION_PREFIX = "_scaled_dot_product"
_SOFTMAX_PROPER = frozenset(["_softmax", "_safe_softmax", "softmax"])
# Operators that move, allocate or fill memory without computing on the problem's data.
_NOT_COMPUTING = frozenset([
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "fill_", "zero_", "clone", "copy_", "_to_copy", "contiguous", "lift_fresh", "lift_fresh_copy", "_unsafe_view",
    "arange", "scalar_tensor", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "rand",
    "rand_like", "randn", "randn_like", "randint", "randperm", "normal_", "uniform_", "bernoulli_", "resize_",
    "set_", "_local_scalar_dense",
])


class OperationRecorder(TorchDispatchMode):
    """Records the operation kinds of the operators dispatched while it is active."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves TorchDispatchMode.__init__ unannotated
        self._kinds: set[OperationKind] = set()
        self._computing_calls = 0
        # Attention's steps in order: a matrix product, a softmax, another matrix product.
        self._matmul_seen = self._softmax_after_matmul = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        name = func.overloadpacket.__name__
        if not func.is_view and name not in _NOT_COMPUTING:
            self._computing_calls += 1
            kinds = _kinds_of_call(name, args)
            self._kinds.update(kinds)
            self._follow_attention(name, kinds)
        return func(*args, **(kwargs or {}))

    def _follow_attention(self, name: str, kinds: set[OperationKind]) -> None:
        if "matmul" in kinds:
            if self._softmax_after_matmul:
                self._kinds.add("attention")
            self._matmul_seen, self._softmax_after_matmul = True, False
        elif name in _SOFTMAX_PROPER and self._matmul_seen:
            self._softmax_after_matmul = True

    def kinds(self, model: nn.Module) -> frozenset[OperationKind]:
        """The kinds seen so far, with what the model's modules show (a recurrent layer on the meta device
        runs as its per-step operators) and `several_operations` where more than one operator computed."""
        kinds = set(self._kinds)
        if any(isinstance(module, nn.RNNBase | nn.RNNCellBase) for module in model.modules()):
            kinds.add("recurrent")
        if self._computing_calls > 1:
            kinds.add("several_operations")
        return frozenset(kinds)


def _kinds_of_call(name: str, args: tuple[Any, ...]) -> set[OperationKind]:
    if name.startswith(_ATTENTION_PREFIX) or name == "scaled_dot_product_attention":
        return {"attention", "matmul", "softmax"}
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
    transposed = "transpose" in name or (len(args) > 6 and args[6] is True)
    if transposed:
        kinds.add("transposed_convolution")
    groups = args[8] if len(args) > 8 else 1
    if isinstance(groups, int) and groups > 1:
        kinds.add("grouped_convolution")
    return kinds
