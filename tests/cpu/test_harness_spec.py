"""harness/spec.py: the argument contract derived from one reference run (inputs, params, outputs, constants)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.harness.analysis import analyse_problem, spec_for_problem
from kernelblaster.harness.problem import ProblemError, instantiate, load_problem
from kernelblaster.harness.spec import ProblemSpec, TensorSpec, derive_spec

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"


def cpu_spec(name: str) -> ProblemSpec:
    return derive_spec(instantiate(load_problem(PROBLEMS / name), 0, "cpu"))


@pytest.fixture(scope="module")
def mixed() -> ProblemSpec:
    return cpu_spec("mixed_arguments.py")


@pytest.fixture(scope="module")
def batchnorm() -> ProblemSpec:
    return cpu_spec("batchnorm_train.py")


def test_inputs_are_the_tensor_forward_arguments_in_get_inputs_order(mixed: ProblemSpec) -> None:
    assert [(t.name, t.shape, t.dtype) for t in mixed.inputs] == [("x", [8, 4], "float32"), ("y", [8, 4], "float32")]
    assert mixed.inputs[1].origin == "forward argument 'y'"


def test_params_follow_state_dict_order_including_buffers(mixed: ProblemSpec, batchnorm: ProblemSpec) -> None:
    assert [t.name for t in mixed.params] == ["scale", "shift"]
    assert [t.name for t in batchnorm.params] == [
        "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
    ]


def test_num_batches_tracked_is_a_zero_dimensional_int64(batchnorm: ProblemSpec) -> None:
    tracked = batchnorm.params[-1]
    assert (tracked.dtype, tracked.shape, tracked.strides, tracked.numel) == ("int64", [], [], 1)


def test_a_single_output_is_named_out(batchnorm: ProblemSpec) -> None:
    assert [(t.name, t.shape) for t in batchnorm.outputs] == [("out", [2, 3, 4, 4])]
    assert batchnorm.output_is_tuple is False


def test_a_tuple_of_outputs_is_named_out0_out1(mixed: ProblemSpec) -> None:
    assert [(t.name, t.shape) for t in mixed.outputs] == [("out0", [8, 4]), ("out1", [8])]
    assert mixed.output_is_tuple is True


def test_constants_come_from_non_tensor_forward_args_then_init_args(mixed: ProblemSpec) -> None:
    assert [(c.kind, c.name, c.value) for c in mixed.constants] == [
        ("forward", "dim", 1),
        ("forward", "alpha", 0.5),
        ("init", "window", [3, 3]),
        ("init", "channels", 4),
        ("init", "eps", 1e-5),
        ("init", "affine", True),
    ]


def test_constant_values_keep_their_python_kind(mixed: ProblemSpec) -> None:
    kinds = {c.name: type(c.value).__name__ for c in mixed.constants}
    assert kinds == {"dim": "int", "alpha": "float", "window": "list", "channels": "int", "eps": "float",
                     "affine": "bool"}
    assert {c.name: c.text for c in mixed.constants}["window"] == "(3, 3)"


def test_a_non_contiguous_input_gets_contiguous_strides(mixed: ProblemSpec) -> None:
    # get_inputs returns y as a transposed view (strides [1, 8]); the candidate always sees a contiguous copy.
    assert mixed.inputs[1].strides == [4, 1]


def test_compulsory_bytes_count_every_input_param_and_output_once(mixed: ProblemSpec, batchnorm: ProblemSpec) -> None:
    # mixed: inputs 2 x 32 floats, params 2 x 4 floats, outputs 32 + 8 floats.
    assert mixed.compulsory_bytes == 4 * (32 + 32 + 4 + 4 + 32 + 8)
    # batchnorm: input and output 96 floats each, four 3-float params, one int64 counter.
    assert batchnorm.compulsory_bytes == 4 * (96 + 96 + 4 * 3) + 8


def test_tensor_spec_numel_of_a_scalar_is_one() -> None:
    assert TensorSpec(name="s", origin="", dtype="float32", shape=[], strides=[]).numel == 1


def test_spec_without_a_gpu_matches_the_cpu_spec(mixed: ProblemSpec) -> None:
    assert spec_for_problem(load_problem(PROBLEMS / "mixed_arguments.py"), gpu=None) == mixed


def test_spec_without_a_gpu_never_materialises_the_inputs() -> None:
    # The input is 1 EiB: only the meta device can describe it.
    spec = spec_for_problem(load_problem(PROBLEMS / "huge_input.py"), gpu=None)
    assert spec.inputs[0].shape == [1 << 30, 1 << 28]
    assert spec.compulsory_bytes == 2 * 4 * (1 << 58)


def test_spec_falls_back_to_the_cpu_for_a_data_dependent_shape() -> None:
    # Boolean masking (torch.nonzero) cannot run on meta; on the CPU four of the eight inputs are positive.
    spec = spec_for_problem(load_problem(PROBLEMS / "data_dependent_mask.py"), gpu=None)
    assert spec.outputs[0].shape == [4]


def test_spec_falls_back_to_the_cpu_for_a_model_using_item() -> None:
    spec = spec_for_problem(load_problem(PROBLEMS / "item_sized_output.py"), gpu=None)
    assert spec.outputs[0].shape == [5]


def test_spec_of_a_broken_forward_still_fails_after_the_fallback() -> None:
    with pytest.raises(ProblemError, match=r"broken_forward_raises\.py: the reference forward pass failed"):
        spec_for_problem(load_problem(PROBLEMS / "broken_forward_raises.py"), gpu=None)



def test_a_problem_is_analysed_once_per_process_also_from_a_copy_of_its_file(tmp_path: Path) -> None:
    original = PROBLEMS / "tiny_linear.py"
    (tmp_path / "copy").mkdir()
    copy = tmp_path / "copy" / original.name
    copy.write_text(original.read_text())
    first = analyse_problem(load_problem(original), gpu=None)
    assert analyse_problem(load_problem(copy), gpu=None) is first
    copy.write_text(original.read_text() + "\n# changed\n")
    assert analyse_problem(load_problem(copy), gpu=None) is not first
