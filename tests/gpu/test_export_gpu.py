"""Exported kernels on a GPU (issue 26): every example's fast kernel and kernels for four KernelBench problems,
exported as a PyTorch package, built, and run as the problem's Model would be: outputs within the precision
policy's tolerance (the harness's own comparison), `torch.compile(ModelNew)` running, calls the kernel was not
written for refused naming the argument; and each exported KernelBench file through the load_inline path of
benchmarks/harness_vs_load_inline.py (KernelBench's protocol: the file builds its own extension)."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from fixtures.export import EXAMPLE_CASES, KERNELBENCH_CASES, REPO_ROOT, ExportCase, import_package, load_module

from kernelblaster.harness.compare import compare_output
from kernelblaster.harness.evaluate import detect_arch
from kernelblaster.harness.export.exporter import export_kernelbench, export_torch, prepare_export
from kernelblaster.harness.precision import PrecisionPolicy, tolerance_for, torch_precision
from kernelblaster.harness.problem import ProblemInstance, instantiate, load_problem

pytestmark = pytest.mark.gpu
CASES = EXAMPLE_CASES + KERNELBENCH_CASES
POLICY: PrecisionPolicy = "strict"  # what the examples' and these kernels' evaluations use
_names = itertools.count()


@pytest.fixture(scope="module")
def build_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exports")


_built: dict[str, ModuleType] = {}


def built_package(case: ExportCase, root: Path) -> ModuleType:
    """The case's package, exported for this GPU's arch, imported and built (once per module)."""
    if case.id not in _built:
        kernel = prepare_export(case.problem, case.kernel, arch=detect_arch(0), precision=POLICY)
        out = root / f"gpu_export_{case.id.lower()}_{next(_names)}"
        export_torch(kernel, out)
        package = import_package(out)
        package.build()
        _built[case.id] = package
    return _built[case.id]


def model_new_for(package: ModuleType, instance: ProblemInstance) -> torch.nn.Module:
    """ModelNew with the instance's constructor arguments and weights, on the GPU."""
    with torch.device("cuda"):
        model: torch.nn.Module = package.ModelNew(*instance.init_args)
    model.load_state_dict(instance.initial_state)
    return model


def outputs_of(result: Any) -> list[torch.Tensor]:
    return list(result) if isinstance(result, tuple) else [result]


def assert_within_policy(outputs: list[torch.Tensor], reference: list[torch.Tensor]) -> None:
    assert len(outputs) == len(reference)
    for index, (output, expected) in enumerate(zip(outputs, reference, strict=True)):
        comparison = compare_output(output, expected, tolerance_for(expected.dtype, POLICY), f"output {index}")
        assert comparison.passed, comparison.detail


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_model_new_matches_the_reference_within_the_precision_policy(build_root: Path, case: ExportCase) -> None:
    package = built_package(case, build_root)
    for seed in (0, 1):
        instance = instantiate(load_problem(case.problem), seed, "cuda")
        model = model_new_for(package, instance)
        with torch_precision(POLICY):
            reference = instance.reference()
        with torch.no_grad():
            outputs = outputs_of(model(*instance.args))
        assert_within_policy(outputs, reference)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_torch_compile_of_model_new_runs_and_matches_the_reference(build_root: Path, case: ExportCase) -> None:
    package = built_package(case, build_root)
    instance = instantiate(load_problem(case.problem), 0, "cuda")
    compiled = torch.compile(model_new_for(package, instance), fullgraph=True)
    with torch_precision(POLICY):
        reference = instance.reference()
    with torch.no_grad():
        outputs = outputs_of(compiled(*instance.args))
    assert_within_policy(outputs, reference)


def _softmax_package(build_root: Path) -> tuple[ModuleType, torch.Tensor]:
    case = EXAMPLE_CASES[1]
    assert case.id == "softmax_rows"
    return built_package(case, build_root), torch.randn(4096, 8192, device="cuda")


def test_a_wrong_shape_is_refused_naming_the_input_with_expected_and_got(build_root: Path) -> None:
    package, _ = _softmax_package(build_root)
    with pytest.raises(ValueError, match=r"input 'x': expected shape \(4096, 8192\), got \(4096, 8191\)"):
        package.ModelNew()(torch.randn(4096, 8191, device="cuda"))


def test_a_wrong_dtype_is_refused_naming_the_input(build_root: Path) -> None:
    package, x = _softmax_package(build_root)
    with pytest.raises(TypeError, match=r"input 'x': expected dtype torch.float32, got torch.float16"):
        package.ModelNew()(x.half())


def test_a_non_contiguous_input_is_refused_naming_the_input(build_root: Path) -> None:
    package, _ = _softmax_package(build_root)
    with pytest.raises(ValueError, match=r"input 'x': expected a contiguous tensor"):
        package.ModelNew()(torch.randn(8192, 4096, device="cuda").t())


def test_a_cpu_input_is_refused_naming_the_input(build_root: Path) -> None:
    package, x = _softmax_package(build_root)
    with pytest.raises(ValueError, match=r"input 'x': expected a CUDA tensor, got one on cpu"):
        package.ModelNew()(x.cpu())


def test_an_input_that_starts_off_alignment_gives_the_right_answer(build_root: Path) -> None:
    package, _ = _softmax_package(build_root)
    storage = torch.randn(4096 * 8192 + 1, device="cuda")
    x = storage[1:].view(4096, 8192)  # contiguous, 4 bytes past an allocation's start
    with torch.no_grad():
        assert_within_policy([package.ModelNew()(x)], [torch.softmax(x, dim=-1)])


def test_a_gradient_through_the_kernel_is_refused_saying_backward_is_not_provided(build_root: Path) -> None:
    case = EXAMPLE_CASES[2]
    assert case.id == "gemm_bias_relu"
    instance = instantiate(load_problem(case.problem), 0, "cuda")
    output = model_new_for(built_package(case, build_root), instance)(*instance.args)
    with pytest.raises(RuntimeError, match="backward is not provided"):
        output.sum().backward()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_kernelbench_file_passes_the_load_inline_path(build_root: Path, case: ExportCase) -> None:
    kernel = prepare_export(case.problem, case.kernel, arch=detect_arch(0), precision=POLICY)
    kernel_file = export_kernelbench(kernel, build_root / f"{case.id}_{next(_names)}_kernel.py")
    benchmark = load_module(REPO_ROOT / "benchmarks" / "harness_vs_load_inline.py")
    extensions = build_root / f"extensions_{case.id}"
    extensions.mkdir()
    _, correct = benchmark.kernelbench_file_seconds(case.problem, kernel_file, extensions, POLICY)
    assert correct


def test_a_kernel_that_tells_torchs_build_from_the_harnesss_computes_the_same_once_exported(build_root: Path) -> None:
    # The hostile export_build_divergence writes zeros when it sees torch's extension build (its macros, C++20,
    # no stack-protector macro): the export's flags must make its build look like the harness's.
    from hostile.hostile_cases import HOSTILE_CASES

    hostile = next(case for case in HOSTILE_CASES if case.name == "export_build_divergence")
    kernel = build_root / "export_build_divergence.cu"
    kernel.write_text(hostile.candidate_source())
    exported = prepare_export(hostile.problem, kernel, arch=detect_arch(0), precision=POLICY)
    out = build_root / f"gpu_export_hostile_{next(_names)}"  # not built_package: it keys packages by problem
    export_torch(exported, out)
    package = import_package(out)
    package.build()
    instance = instantiate(load_problem(hostile.problem), 0, "cuda")
    with torch_precision(POLICY):
        reference = instance.reference()
    with torch.no_grad():
        outputs = outputs_of(model_new_for(package, instance)(*instance.args))
    assert_within_policy(outputs, reference)
