"""harness/header.py: the generated kb_problem.h names every argument and compiles with a candidate."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pytest

from kernelblaster.harness.header import c_identifier, generate_header
from kernelblaster.harness.problem import instantiate, load_problem
from kernelblaster.harness.spec import ConstantSpec, ConstantValue, ProblemSpec, TensorSpec, derive_spec

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"
DRIVER_DIR = Path(__file__).resolve().parents[2] / "harness" / "driver"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


def tensor(name: str, shape: list[int], dtype: str = "float32") -> TensorSpec:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return TensorSpec(name=name, origin=f"test tensor '{name}'", dtype=dtype, shape=shape, strides=strides)


def constant(name: str, value: ConstantValue | None, kind: Literal["forward", "init"] = "init") -> ConstantSpec:
    return ConstantSpec(name=name, origin=f"test constant '{name}'", kind=kind, value=value, text=repr(value))


def spec_of(inputs: Sequence[TensorSpec] = (), params: Sequence[TensorSpec] = (), outputs: Sequence[TensorSpec] = (),
            constants: Sequence[ConstantSpec] = ()) -> ProblemSpec:
    return ProblemSpec(problem_name="header_test", problem_sha256="ab" * 32, inputs=list(inputs),
                       params=list(params), outputs=list(outputs), constants=list(constants),
                       output_is_tuple=len(outputs) > 1)


def defined(header: str) -> dict[str, str]:
    """Every `static constexpr` name in the header and its value text."""
    found = re.findall(r"static constexpr \w+ (\w+)(?:\[\d+\])? = (.+);", header)
    names = [name for name, _ in found]
    assert len(names) == len(set(names)), f"duplicate definitions: {sorted(n for n in names if names.count(n) > 1)}"
    return dict(found)


@pytest.fixture(scope="module")
def mixed_header() -> str:
    return generate_header(derive_spec(instantiate(load_problem(PROBLEMS / "mixed_arguments.py"), 0, "cpu")))


# Names that collide after mangling ('a.b' / 'a_b', 'x' / 'X'), start with digits (nn.Sequential), or
# collide with another tensor's derived constants ('w' has KB_PARAM_W_NUMEL; 'w.numel' mangles to that).
AWKWARD = spec_of(
    inputs=[tensor("x", [8, 2]), tensor("X", [3])],
    params=[tensor("a.b", [4]), tensor("a_b", [5]), tensor("0.weight", [2, 2]), tensor("w", [6]),
            tensor("w.numel", [7])],
    outputs=[tensor("out", [8, 2])],
    constants=[constant("k", 3, "forward"), constant("K", 4, "forward"), constant("1st", 1.5)],
)


def test_the_comment_block_names_every_argument(mixed_header: str) -> None:
    comment = "\n".join(line for line in mixed_header.splitlines() if line.startswith("//"))
    for expected in ("inputs[0]  x: float32 (float) [8, 4]", "inputs[1]  y: float32 (float) [8, 4]",
                     "params[0]  scale: float32 (float) [4]", "params[1]  shift: float32 (float) [4]",
                     "outputs[0]  out0: float32 (float) [8, 4]", "outputs[1]  out1: float32 (float) [8]",
                     "constant dim = 1", "constant alpha = 0.5", "constant window = (3, 3)",
                     "constant channels = 4", "constant eps = 1e-05", "constant affine = True"):
        assert expected in comment


def test_the_header_defines_argument_counts(mixed_header: str) -> None:
    names = defined(mixed_header)
    assert (names["KB_NUM_INPUTS"], names["KB_NUM_PARAMS"], names["KB_NUM_OUTPUTS"]) == ("2", "2", "2")


def test_the_header_defines_index_dtype_ndim_dims_and_numel(mixed_header: str) -> None:
    names = defined(mixed_header)
    assert names["KB_IN_Y"] == "1"
    assert names["KB_IN_Y_DTYPE"] == "0"
    assert names["KB_IN_Y_NDIM"] == "2"
    assert (names["KB_IN_Y_DIM0"], names["KB_IN_Y_DIM1"], names["KB_IN_Y_NUMEL"]) == ("8", "4", "32")
    assert (names["KB_PARAM_SHIFT"], names["KB_OUT_OUT1"], names["KB_OUT_OUT1_DIM0"]) == ("1", "1", "8")


def test_scalar_arguments_become_typed_constants(mixed_header: str) -> None:
    assert "static constexpr int64_t KB_ARG_DIM = 1;" in mixed_header
    assert "static constexpr double KB_ARG_ALPHA = 0.5;" in mixed_header
    assert "static constexpr int64_t KB_INIT_WINDOW[2] = {3, 3};" in mixed_header
    assert "static constexpr double KB_INIT_EPS = 1e-05;" in mixed_header
    assert "static constexpr bool KB_INIT_AFFINE = true;" in mixed_header


def test_a_zero_dimensional_tensor_has_ndim_zero_and_numel_one() -> None:
    names = defined(generate_header(spec_of(params=[tensor("count", [], "int64")])))
    assert (names["KB_PARAM_COUNT_DTYPE"], names["KB_PARAM_COUNT_NDIM"], names["KB_PARAM_COUNT_NUMEL"]) == (
        "8", "0", "1")
    assert "KB_PARAM_COUNT_DIM0" not in names


def test_c_identifier_makes_valid_upper_case_identifiers() -> None:
    assert c_identifier("bn.running_mean") == "BN_RUNNING_MEAN"
    assert c_identifier("0.weight") == "_0_WEIGHT"
    assert c_identifier("...") == "UNNAMED"
    assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*", c_identifier(n)) for n in ("0", "a-b", "é", "x y"))


def test_colliding_names_get_unique_identifiers_and_every_definition_is_unique() -> None:
    names = defined(generate_header(AWKWARD))  # asserts that no name is defined twice
    tensor_indices = {name: value for name, value in names.items() if re.fullmatch(r"KB_(IN|PARAM|OUT)_\w+", name)
                      and not re.search(r"_(DTYPE|NDIM|NUMEL|DIM\d+)$", name)}
    # One index constant per tensor: 2 inputs, 5 params, 1 output.
    assert sorted(tensor_indices.values()) == sorted(["0", "1", "0", "1", "2", "3", "4", "0"])


def test_names_starting_with_digits_give_valid_identifiers() -> None:
    names = defined(generate_header(AWKWARD))
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) for name in names)
    assert names["KB_PARAM__0_WEIGHT_NUMEL"] == "4"
    assert names["KB_INIT__1ST"] == "1.5"


def test_infinite_constants_are_valid_cpp_literals() -> None:
    header = generate_header(derive_spec(instantiate(load_problem(PROBLEMS / "non_float_constants.py"), 0, "cpu")))
    names = defined(header)
    assert not re.search(r"\binf\b|\bnan\b", names["KB_INIT_LOW"] + names["KB_INIT_BOUNDS"])


def compile_candidate(header: str, body: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    (workdir / "kb_problem.h").write_text(header)
    source = workdir / "candidate.cu"
    source.write_text('#include "kb_problem.h"\n' + body + "\n" + KB_FORWARD)
    assert NVCC is not None, "the test is marked needs_nvcc"
    return subprocess.run(
        [NVCC, "-c", "-std=c++17", "-arch=sm_90", f"-I{workdir}", f"-I{DRIVER_DIR}", str(source),
         "-o", str(workdir / "candidate.o")],
        capture_output=True, text=True, timeout=300,
    )


KB_FORWARD = (
    'extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, '
    "cudaStream_t stream) { (void)inputs; (void)params; (void)outputs; (void)stream; return 0; }\n"
)


@needs_nvcc
def test_the_header_of_a_real_problem_compiles_with_its_constants(mixed_header: str, tmp_path: Path) -> None:
    body = "\n".join([
        "static_assert(KB_NUM_INPUTS == 2 && KB_NUM_PARAMS == 2 && KB_NUM_OUTPUTS == 2, \"counts\");",
        "static_assert(KB_IN_X == 0 && KB_IN_Y == 1 && KB_OUT_OUT1 == 1, \"indices\");",
        "static_assert(KB_IN_X_DIM0 == 8 && KB_IN_X_DIM1 == 4 && KB_IN_X_NUMEL == 32, \"dims\");",
        "static_assert(KB_IN_X_DTYPE == KB_FLOAT32, \"dtype code matches kb_abi.h\");",
        "static_assert(KB_INIT_WINDOW[1] == 3 && KB_INIT_AFFINE && KB_ARG_DIM == 1, \"constants\");",
        "static_assert(KB_ARG_ALPHA == 0.5 && KB_INIT_EPS < 1e-4, \"float constants\");",
    ])
    compiled = compile_candidate(mixed_header, body, tmp_path)
    assert compiled.returncode == 0, compiled.stderr


@needs_nvcc
def test_a_header_with_awkward_names_and_infinite_constants_compiles(tmp_path: Path) -> None:
    awkward = AWKWARD.model_copy(update={"constants": [
        *AWKWARD.constants, constant("low", float("-inf")), constant("high", float("inf")),
        constant("missing", float("nan")), constant("bounds", [float("-inf"), 0.5]),
    ]})
    body = "\n".join([
        "static_assert(KB_NUM_PARAMS == 5, \"counts\");",
        "static_assert(KB_PARAM__0_WEIGHT_NUMEL == 4, \"digit-leading name\");",
        "static_assert(KB_INIT_LOW < -1e308 && KB_INIT_HIGH > 1e308 && KB_INIT_BOUNDS[0] < 0, \"infinities\");",
        "static_assert(KB_INIT_MISSING != KB_INIT_MISSING, \"NaN\");",
    ])
    compiled = compile_candidate(generate_header(awkward), body, tmp_path)
    assert compiled.returncode == 0, compiled.stderr


@needs_nvcc
def test_array_constants_are_readable_in_device_code_through_their_element_scalars(
        mixed_header: str, tmp_path: Path) -> None:
    body = "__global__ void use_window(int64_t* out) { out[0] = KB_INIT_WINDOW_0 + KB_INIT_WINDOW_1; }"
    compiled = compile_candidate(mixed_header, body, tmp_path)
    assert compiled.returncode == 0, compiled.stderr
