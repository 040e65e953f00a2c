"""What a forward pass computes, as the KB's operation kinds (`harness.operations`): read from the operators
PyTorch dispatches on the meta device, views and copies aside."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from kernelblaster.harness.analysis import analyse_problem
from kernelblaster.harness.operations import OperationRecorder
from kernelblaster.harness.problem import load_problem
from kernelblaster.kb.operations import OperationKind

KERNELBENCH = Path(__file__).resolve().parents[1] / "fixtures" / "kernelbench"
META = torch.device("meta")


def _kinds(forward: Callable[[], object], model: nn.Module | None = None) -> frozenset[OperationKind]:
    recorder = OperationRecorder(model or nn.Module())
    with recorder:
        forward()
    return recorder.kinds()


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=META)


def test_an_elementwise_operator_alone_is_of_no_kind() -> None:
    assert _kinds(lambda: torch.relu(_x(8, 16))) == frozenset()


def test_a_linear_layer_and_its_activation_are_a_matmul_among_several_operations() -> None:
    linear = nn.Linear(16, 32, device=META)
    assert _kinds(lambda: F.relu(linear(_x(8, 16))), linear) == {"matmul", "several_operations"}


def test_views_and_copies_are_not_counted_as_operations() -> None:
    assert _kinds(lambda: torch.relu(_x(8, 16).t().contiguous().view(-1))) == frozenset()


def test_a_depthwise_convolution_is_grouped() -> None:
    conv = nn.Conv2d(4, 4, 3, groups=4, device=META)
    assert _kinds(lambda: conv(_x(1, 4, 8, 8)), conv) == {"convolution", "grouped_convolution"}


def test_a_transposed_convolution_is_named_as_such() -> None:
    conv = nn.ConvTranspose2d(4, 2, 3, device=META)
    assert _kinds(lambda: conv(_x(1, 4, 8, 8)), conv) == {"convolution", "transposed_convolution"}


def test_scores_of_two_activations_through_a_softmax_into_another_product_are_attention() -> None:
    q = _x(2, 8, 16)
    kinds = _kinds(lambda: torch.softmax(q @ q.transpose(1, 2) / 4.0, -1) @ q)
    assert {"attention", "matmul", "softmax"} <= kinds


def test_scores_through_a_relu_into_another_product_are_attention_too() -> None:
    q = _x(2, 8, 16)
    assert "attention" in _kinds(lambda: torch.relu(q @ q.transpose(1, 2)) @ q)


def test_a_softmax_over_a_layers_output_multiplied_into_the_input_is_not_attention() -> None:
    clusters = nn.Linear(16, 4, bias=False, device=META)  # NetVLAD's soft assignment
    x = _x(8, 16)
    assert "attention" not in _kinds(lambda: torch.softmax(clusters(x), -1).t() @ x, clusters)


def test_scores_cast_to_another_precision_on_their_way_are_still_attention() -> None:
    q = torch.randn(2, 8, 16, device=META, dtype=torch.float16)

    def half_precision_attention() -> None:
        torch.softmax(q @ q.transpose(1, 2), -1, dtype=torch.float32).to(q.dtype) @ q

    assert "attention" in _kinds(half_precision_attention)


def test_scores_with_a_bias_added_by_the_product_itself_are_still_attention() -> None:
    q, bias = _x(2, 8, 16), _x(2, 8, 8)
    assert "attention" in _kinds(lambda: torch.softmax(torch.baddbmm(bias, q, q.transpose(1, 2)), -1) @ q)


def test_a_layer_whose_weight_is_cast_first_is_no_attention() -> None:
    weight = nn.Parameter(torch.randn(16, 16, device=META))
    holder = nn.ParameterList([weight])
    x = _x(8, 16)
    assert "attention" not in _kinds(lambda: F.linear(torch.relu(F.linear(x, weight * 2)), weight * 2), holder)


def test_a_product_at_the_address_of_freed_scores_is_not_taken_for_them() -> None:
    a, c, d = _x(64, 64), _x(64, 64), _x(64, 64)

    def pass_with_freed_scores() -> None:
        (a @ a).sum()  # scores, freed at once
        for _ in range(3):
            torch.relu(c) @ d

    assert "attention" not in _kinds(pass_with_freed_scores)


def test_pytorchs_attention_operator_is_attention() -> None:
    q = _x(2, 4, 8, 16)
    assert "attention" in _kinds(lambda: F.scaled_dot_product_attention(q, q, q))


def test_a_layer_norm_is_a_normalization() -> None:
    norm = nn.LayerNorm(16, device=META)
    assert _kinds(lambda: norm(_x(8, 16)), norm) == {"normalization"}


def test_a_batch_norms_step_counter_is_not_an_operation() -> None:
    norm = nn.BatchNorm2d(4, device=META)  # training mode: it adds 1 to num_batches_tracked in place
    assert _kinds(lambda: norm(_x(2, 4, 8, 8)), norm) == {"normalization"}


def test_a_cumulative_sum_is_a_scan() -> None:
    assert _kinds(lambda: torch.cumsum(_x(8, 16), 1)) == {"scan"}


def test_a_max_pool_is_pooling() -> None:
    assert _kinds(lambda: F.max_pool2d(_x(1, 4, 8, 8), 2)) == {"pooling"}


def test_a_cross_entropy_loss_is_a_softmax_and_a_reduction() -> None:
    labels = torch.zeros(8, dtype=torch.long, device=META)
    assert {"softmax", "reduction"} <= _kinds(lambda: F.cross_entropy(_x(8, 16), labels))


def test_a_recurrent_layer_is_recurrent_whatever_operators_it_ran_as() -> None:
    assert _kinds(lambda: None, nn.Sequential(nn.LSTM(8, 8))) == {"recurrent"}


def test_one_weight_applied_step_after_step_is_a_recurrence() -> None:
    cell = nn.Linear(16, 16, device=META)

    def time_loop() -> None:
        hidden = _x(4, 16)
        for _ in range(8):
            hidden = torch.tanh(cell(hidden))

    assert "recurrent" in _kinds(time_loop, cell)


def test_a_stack_of_distinct_layers_is_no_recurrence() -> None:
    layers = nn.Sequential(*[nn.Linear(16, 16, device=META) for _ in range(8)])
    assert "recurrent" not in _kinds(lambda: layers(_x(4, 16)), layers)


def test_kernelbench_relu_is_a_lone_elementwise_operator() -> None:
    analysis = analyse_problem(load_problem(KERNELBENCH / "level1" / "19_ReLU.py"), None)
    assert analysis.operations == frozenset()


def test_kernelbench_conv_relu_bias_is_a_convolution_among_several_operations() -> None:
    analysis = analyse_problem(load_problem(KERNELBENCH / "level2" / "1_Conv2D_ReLU_BiasAdd.py"), None)
    assert analysis.operations == frozenset({"convolution", "several_operations"})


def _rows(forward: Callable[[], object], model: nn.Module | None = None) -> list[tuple[str, tuple[int, ...], int, int]]:
    """(operator, shape, rows, row length) of each row reduction the pass makes."""
    recorder = OperationRecorder(model or nn.Module())
    with recorder:
        forward()
    return [(found.operation, found.shape, found.rows, found.length) for found in recorder.reduced_rows()]


def test_a_softmax_keeps_its_input_shape_and_the_dimension_it_reduces() -> None:
    recorder = OperationRecorder(nn.Module())
    with recorder:
        torch.softmax(_x(64, 1000), dim=-1)
    (found,) = recorder.reduced_rows()
    assert (found.operation, found.shape, found.dims) == ("_softmax", (64, 1000), (1,))
    assert (found.rows, found.length) == (64, 1000)
    assert found.contiguous and found.element_bytes == 4


def test_a_layer_norm_reduces_its_normalized_trailing_dimensions() -> None:
    norm = nn.LayerNorm((8, 32), device=META)
    assert _rows(lambda: norm(_x(4, 8, 32)), norm) == [("native_layer_norm", (4, 8, 32), 4, 256)]


def test_a_training_batch_norm_reduces_every_dimension_but_the_channels_in_strided_runs() -> None:
    norm = nn.BatchNorm2d(3, device=META)
    recorder = OperationRecorder(norm)
    with recorder:
        norm(_x(2, 3, 4, 5))
    (found,) = recorder.reduced_rows()
    assert (found.dims, found.rows, found.length, found.run, found.contiguous) == ((0, 2, 3), 3, 40, 20, False)


def test_a_batch_norm_on_running_statistics_reduces_nothing() -> None:
    norm = nn.BatchNorm2d(3, device=META).eval()
    assert _rows(lambda: norm(_x(2, 3, 4, 5)), norm) == []


def test_a_group_norm_reduces_each_groups_channels_and_positions() -> None:
    norm = nn.GroupNorm(4, 8, device=META)
    assert _rows(lambda: norm(_x(2, 8, 5, 5)), norm) == [("native_group_norm", (2, 4, 50), 8, 50)]


def test_a_sum_over_a_middle_dimension_has_strided_rows() -> None:
    recorder = OperationRecorder(nn.Module())
    with recorder:
        torch.sum(_x(4, 16, 10), dim=1, keepdim=True)
    (found,) = recorder.reduced_rows()
    assert (found.rows, found.length, found.run, found.stride) == (40, 16, 1, 10)


def test_a_mean_over_everything_is_one_row() -> None:
    assert _rows(lambda: _x(6, 7).mean()) == [("mean", (6, 7), 1, 42)]


def test_cross_entropy_reduces_the_classes_then_one_value_per_sample() -> None:
    logits, target = _x(32, 10), torch.zeros(32, dtype=torch.long, device=META)
    assert _rows(lambda: F.cross_entropy(logits, target)) == [("_log_softmax", (32, 10), 32, 10),
                                                              ("nll_loss_forward", (32,), 1, 32)]


def test_a_mean_loss_reduces_every_element_as_one_row() -> None:
    assert _rows(lambda: F.mse_loss(_x(4, 5), _x(4, 5))) == [("mse_loss", (4, 5), 1, 20)]


def test_a_loss_without_reduction_and_an_elementwise_maximum_reduce_nothing() -> None:
    assert _rows(lambda: F.mse_loss(_x(4, 4), _x(4, 4), reduction="none")) == []
    assert _rows(lambda: torch.max(_x(4, 4), _x(4, 4))) == []


def test_a_repeated_reduction_is_kept_once() -> None:
    x = _x(8, 16)
    assert _rows(lambda: [torch.softmax(x, 1) for _ in range(3)]) == [("_softmax", (8, 16), 8, 16)]


def test_the_analysis_keeps_the_rows_of_kernelbenchs_softmax() -> None:
    rows = analyse_problem(load_problem(KERNELBENCH / "level1" / "23_Softmax.py"), None).rows
    assert rows is not None and [(found.rows, found.length) for found in rows] == [(4096, 393216)]
