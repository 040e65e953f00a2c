"""harness/problem.py: loading a KernelBench problem file, seeded materialisation, and the reference call.

Every way a problem file can be broken must surface as one ProblemError (a UserFacingError) whose message
names the file and the cause, never as a raw exception with a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelblaster.harness.problem import ProblemError, instantiate, load_problem
from kernelblaster.harness.spec import derive_spec
from kernelblaster.tools.errors import UserFacingError

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"


def problem_error(name: str) -> ProblemError:
    """The ProblemError raised while loading, instantiating on the CPU and deriving the spec of a fixture."""
    with pytest.raises(ProblemError) as caught:
        derive_spec(instantiate(load_problem(PROBLEMS / name), 0, "cpu"))
    return caught.value


def test_a_good_problem_loads_with_its_name_source_and_hash() -> None:
    problem = load_problem(PROBLEMS / "tiny_linear.py")
    assert problem.name == "tiny_linear"
    assert problem.source == (PROBLEMS / "tiny_linear.py").read_text()
    assert len(problem.sha256) == 64
    assert issubclass(problem.model_class, torch.nn.Module)
    assert problem.get_init_inputs() == [16, 4]


def test_problem_error_is_a_user_facing_error() -> None:
    assert issubclass(ProblemError, UserFacingError)


def test_a_missing_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_problem.py"
    with pytest.raises(ProblemError, match=r"no_such_problem\.py: cannot read"):
        load_problem(missing)


def test_a_syntax_error_names_the_file_and_the_exception(tmp_path: Path) -> None:
    path = tmp_path / "broken_syntax.py"
    path.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x:\n        return x\n")
    with pytest.raises(ProblemError) as caught:
        load_problem(path)
    assert str(path) in str(caught.value)
    assert "SyntaxError" in str(caught.value)


def test_an_import_error_names_the_file_and_the_missing_module() -> None:
    with pytest.raises(ProblemError) as caught:
        load_problem(PROBLEMS / "broken_import.py")
    message = str(caught.value)
    assert "broken_import.py" in message
    assert "ModuleNotFoundError" in message and "kernelblaster_no_such_module" in message


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        ("broken_no_model.py", "class Model(nn.Module)"),
        ("broken_model_not_module.py", "class Model(nn.Module)"),
        ("broken_no_get_inputs.py", "get_inputs()"),
        ("broken_no_get_init_inputs.py", "get_init_inputs()"),
    ],
)
def test_a_missing_or_wrong_definition_is_named(name: str, missing: str) -> None:
    with pytest.raises(ProblemError) as caught:
        load_problem(PROBLEMS / name)
    assert str(caught.value).startswith(str(PROBLEMS / name))
    assert missing in str(caught.value)


def test_an_exception_in_model_init_names_the_file_and_the_exception() -> None:
    message = str(problem_error("broken_init_raises.py"))
    assert "broken_init_raises.py" in message
    assert "ValueError: cannot build a model with 7 features" in message


def test_an_exception_in_get_inputs_names_the_file_and_the_exception() -> None:
    message = str(problem_error("broken_get_inputs_raises.py"))
    assert "broken_get_inputs_raises.py" in message
    assert "RuntimeError: the input generator is broken" in message


def test_an_exception_in_forward_names_the_file_and_the_exception() -> None:
    message = str(problem_error("broken_forward_raises.py"))
    assert "broken_forward_raises.py" in message
    assert "RuntimeError" in message and "cannot be multiplied" in message


def test_a_forward_returning_a_non_tensor_names_the_file_and_the_type() -> None:
    message = str(problem_error("broken_forward_returns_int.py"))
    assert "broken_forward_returns_int.py" in message
    assert "must return a tensor" in message and "got int" in message


def test_the_same_seed_gives_the_same_inputs_and_weights() -> None:
    problem = load_problem(PROBLEMS / "tiny_linear.py")
    first, second = instantiate(problem, 3, "cpu"), instantiate(problem, 3, "cpu")
    assert torch.equal(first.args[0], second.args[0])
    assert first.initial_state.keys() == second.initial_state.keys()
    for key in first.initial_state:
        assert torch.equal(first.initial_state[key], second.initial_state[key]), key


def test_a_different_seed_gives_different_inputs_and_weights() -> None:
    problem = load_problem(PROBLEMS / "tiny_linear.py")
    first, second = instantiate(problem, 3, "cpu"), instantiate(problem, 4, "cpu")
    assert not torch.equal(first.args[0], second.args[0])
    assert not torch.equal(first.initial_state["linear.weight"], second.initial_state["linear.weight"])


def test_instantiate_creates_inputs_and_model_on_the_requested_device() -> None:
    instance = instantiate(load_problem(PROBLEMS / "tiny_linear.py"), 0, "meta")
    assert instance.args[0].device.type == "meta"
    assert all(value.device.type == "meta" for value in instance.model.state_dict().values())


def test_tensor_args_keeps_only_tensors_in_order() -> None:
    instance = instantiate(load_problem(PROBLEMS / "mixed_arguments.py"), 0, "cpu")
    assert [type(a).__name__ for a in instance.args] == ["Tensor", "int", "Tensor", "float"]
    assert len(instance.tensor_args) == 2
    assert instance.tensor_args[0] is instance.args[0] and instance.tensor_args[1] is instance.args[2]


def test_reference_returns_a_list_for_a_single_output_and_for_a_tuple() -> None:
    single = instantiate(load_problem(PROBLEMS / "tiny_linear.py"), 0, "cpu").reference()
    pair = instantiate(load_problem(PROBLEMS / "mixed_arguments.py"), 0, "cpu").reference()
    assert [list(t.shape) for t in single] == [[8, 4]]
    assert [list(t.shape) for t in pair] == [[8, 4], [8]]


def test_reference_restores_buffers_so_a_state_dependent_output_repeats() -> None:
    instance = instantiate(load_problem(PROBLEMS / "stateful_buffer.py"), 0, "cpu")
    first, second = instance.reference(), instance.reference()
    assert torch.equal(first[0], instance.args[0])  # the counter went 0 -> 1 on each call
    assert torch.equal(first[0], second[0])


def test_reference_of_training_mode_batchnorm_repeats_and_starts_from_the_initial_statistics() -> None:
    instance = instantiate(load_problem(PROBLEMS / "batchnorm_train.py"), 0, "cpu")
    assert instance.model.training
    first = instance.reference()[0]
    after_one = {k: v.clone() for k, v in instance.model.state_dict().items()}
    second = instance.reference()[0]
    assert torch.equal(first, second)
    # Each call starts from the initial statistics, so the state after two calls equals the state after one.
    for key, value in instance.model.state_dict().items():
        assert torch.equal(value, after_one[key]), key
    state = instance.model.state_dict()
    assert int(state["bn.num_batches_tracked"]) == 1
    assert not torch.equal(state["bn.running_mean"], instance.initial_state["bn.running_mean"])


def test_reference_with_explicit_arguments_uses_them() -> None:
    instance = instantiate(load_problem(PROBLEMS / "stateful_buffer.py"), 0, "cpu")
    other = torch.full((5,), 2.0)
    assert torch.equal(instance.reference([other])[0], other)


def test_get_inputs_returning_a_bare_tensor_is_named_as_the_mistake() -> None:
    error = problem_error("broken_get_inputs_bare_tensor.py")
    assert "broken_get_inputs_bare_tensor.py" in str(error)
    assert "get_inputs() must return a list" in str(error)


def test_a_tensor_with_more_than_eight_dimensions_is_rejected() -> None:
    assert "at most 8" in str(problem_error("broken_nine_dimensions.py"))


def test_a_forward_returning_no_tensors_is_rejected() -> None:
    assert "returned no tensors" in str(problem_error("broken_returns_nothing.py"))
