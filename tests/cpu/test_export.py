"""`kernelblaster export` and `bench export` without a GPU: the files each format writes, the package's Python
side (ModelNew, the op, its fake, its refusals) with a stand-in for the built kernel, the generated sources
compiled (nvcc for the kernels, g++ against torch's headers for the binding), and the refusals of bad input.
Building and running the exported kernels is tests/gpu/test_export_gpu.py."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fixtures.cli import kernelblaster
from fixtures.export import (
    EXAMPLE_CASES,
    KERNELBENCH,
    KERNELBENCH_CASES,
    ExportCase,
    import_package,
    load_module,
    make_run_dir,
)

from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.suite import create_suite
from kernelblaster.harness.problem import load_problem

SOFTMAX, GEMM, BATCHNORM = EXAMPLE_CASES[1], EXAMPLE_CASES[2], EXAMPLE_CASES[3]
PACKAGE_FILES = {"__init__.py", "problem.py", "kernel.cu", "kb_problem.h", "kb_abi.h", "binding.cpp", "kernel.json"}
_exports = 0


def _package_name(case: ExportCase) -> str:
    """A new package name per export: a package is imported once per process, under its name."""
    global _exports
    _exports += 1
    return f"exported_{case.id.lower()}_{_exports}"


def _export_torch(capsys: pytest.CaptureFixture[str], case: ExportCase, tmp_path: Path) -> Path:
    out = tmp_path / _package_name(case)
    finished = kernelblaster(capsys, "export", case.problem, case.kernel, "--format", "torch", "--out", out)
    assert finished.status == 0, finished.err
    return out


def _export_kernelbench(capsys: pytest.CaptureFixture[str], case: ExportCase, tmp_path: Path) -> Path:
    out = tmp_path / f"{case.id}_kernel.py"
    finished = kernelblaster(capsys, "export", case.problem, case.kernel, "--format", "kernelbench", "--out", out)
    assert finished.status == 0, finished.err
    return out


def _model_and_inputs(case: ExportCase, model_class: type[torch.nn.Module]) -> tuple[torch.nn.Module, list[Any]]:
    problem = load_problem(case.problem)
    torch.manual_seed(0)
    return model_class(*problem.get_init_inputs()), list(problem.get_inputs())


class StandInKernel:
    """What the built extension is to the package (`forward(inputs, params) -> outputs`): the problem's PyTorch
    reference on the CPU, recording each call; the package's Python side, tested without a GPU."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
        self.reference: Callable[[list[torch.Tensor]], Any] = lambda tensors: None

    def forward(self, inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        self.calls.append((inputs, params))
        with torch.no_grad():
            output = self.reference(inputs)
        return list(output) if isinstance(output, tuple) else [output]


@pytest.mark.parametrize("case", EXAMPLE_CASES, ids=lambda case: case.id)
def test_torch_export_of_every_example_writes_the_package_files(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, case: ExportCase) -> None:
    out = _export_torch(capsys, case, tmp_path)
    assert {path.name for path in out.iterdir()} == PACKAGE_FILES
    assert (out / "kernel.cu").read_text() == case.kernel.read_text()
    assert (out / "problem.py").read_text() == case.problem.read_text()


@pytest.mark.parametrize("case", EXAMPLE_CASES, ids=lambda case: case.id)
def test_model_new_of_every_example_has_the_models_state_dict_keys_and_loads_its_weights_without_a_build(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, case: ExportCase) -> None:
    package = import_package(_export_torch(capsys, case, tmp_path))
    problem = load_problem(case.problem)
    model = problem.model_class(*problem.get_init_inputs())
    new = package.ModelNew(*problem.get_init_inputs())
    assert list(new.state_dict()) == list(model.state_dict())
    new.load_state_dict(model.state_dict())
    assert all(torch.equal(new.state_dict()[key], value) for key, value in model.state_dict().items())
    assert package._extension is None  # importing and constructing built nothing


@pytest.mark.parametrize("case", EXAMPLE_CASES + KERNELBENCH_CASES, ids=lambda case: case.id)
def test_kernelbench_file_of_every_kernel_defines_model_new_over_the_problems_model_and_load_inline(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, case: ExportCase) -> None:
    tree = ast.parse(_export_kernelbench(capsys, case, tmp_path).read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    assert [ast.unparse(base) for base in classes["ModelNew"].bases] == ["Model"] and "Model" in classes
    (call,) = _load_inline_calls(tree)
    assert {keyword.arg for keyword in call.keywords} >= {"name", "cpp_sources", "cuda_sources", "functions"}


@pytest.mark.parametrize("case", [KERNELBENCH_CASES[3], GEMM, BATCHNORM], ids=lambda case: case.id)
def test_kernelbench_model_new_seeded_as_kernelbench_seeds_it_has_the_models_state(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: ExportCase) -> None:
    """KernelBench never loads weights: it seeds, builds Model, seeds again and builds ModelNew. The file is run
    with load_inline stood in for (no build without a GPU), which is all it does at import."""
    import torch.utils.cpp_extension

    built: list[dict[str, Any]] = []
    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", lambda **kwargs: built.append(kwargs))
    module = load_module(_export_kernelbench(capsys, case, tmp_path))
    init_args = load_problem(case.problem).get_init_inputs()
    torch.manual_seed(42)
    model = module.Model(*init_args)
    torch.manual_seed(42)
    new = module.ModelNew(*init_args)
    assert list(new.state_dict()) == list(model.state_dict())
    assert all(torch.equal(new.state_dict()[key], value) for key, value in model.state_dict().items())
    assert [call["functions"] for call in built] == [["forward"]]


@pytest.mark.parametrize("case", EXAMPLE_CASES + KERNELBENCH_CASES, ids=lambda case: case.id)
def test_kernelbench_file_of_every_kernel_has_nothing_kernelbenchs_static_checker_refuses(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, case: ExportCase) -> None:
    from kernelblaster.harness.export.exporter import kernelbench_refused_lines

    text = _export_kernelbench(capsys, case, tmp_path).read_text()
    assert kernelbench_refused_lines(text) == []
    assert "__global__" in text and "load_inline" in text  # what its CUDA check looks for


def test_export_says_where_a_kernelbench_file_holds_what_kernelbenchs_checker_refuses(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    problem = tmp_path / "passing.py"
    source = SOFTMAX.problem.read_text()
    problem.write_text(source.replace("import torch\n", "import torch\n\nif False:\n    pass\n", 1))
    out = tmp_path / "kernel.py"
    finished = kernelblaster(capsys, "export", problem, SOFTMAX.kernel, "--format", "kernelbench", "--out", out)
    assert finished.status == 0, finished.err
    assert "note: KernelBench's static checker refuses" in finished.out and ": pass" in finished.out


def _load_inline_calls(tree: ast.Module) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == "load_inline"]


def _assigned(tree: ast.Module, name: str) -> Any:
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and [ast.unparse(target) for target in node.targets] == [name]]
    return ast.literal_eval(value)


@pytest.mark.parametrize("case", EXAMPLE_CASES + KERNELBENCH_CASES, ids=lambda case: case.id)
def test_kernelbench_cuda_source_of_every_kernel_compiles_with_nvcc_and_its_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, case: ExportCase) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on PATH")
    tree = ast.parse(_export_kernelbench(capsys, case, tmp_path).read_text())
    (call,) = _load_inline_calls(tree)
    flags = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "extra_cuda_cflags"))
    source = tmp_path / "cuda.cu"
    source.write_text(_assigned(tree, "kernel_cuda_source"))  # one translation unit: no header left to find
    compiled = subprocess.run(["nvcc", "-c", *flags, source.name, "-o", "cuda.o"], cwd=tmp_path,
                              capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stderr


def _cuda_include() -> Path | None:
    nvcc = shutil.which("nvcc")
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"]
    if nvcc is not None:
        dry_run = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                                 capture_output=True, text=True, check=False)
        tops = [line.split("=", 1)[1] for line in (dry_run.stdout + dry_run.stderr).splitlines()
                if line.startswith("#$ TOP=")]
        candidates = [Path(top) / "include" for top in tops] + candidates
    return next((path for path in candidates if (path / "cuda_runtime_api.h").is_file()), None)


def test_the_generated_binding_compiles_against_torchs_headers(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cuda_include, compiler = _cuda_include(), shutil.which("g++")
    if cuda_include is None or compiler is None:
        pytest.skip("needs g++ and the CUDA toolkit's headers")
    out = _export_torch(capsys, GEMM, tmp_path)
    torch_include = Path(torch.__file__).parent / "include"
    # A CPU build of torch ships c10/cuda's headers but not the one its CUDA build generates; an empty one
    # stands in (it only configures how c10_cuda is linked).
    generated = tmp_path / "generated" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    generated.parent.mkdir(parents=True)
    generated.write_text("#pragma once\n")
    command = [compiler, "-fsyntax-only", "-std=c++20", "-DTORCH_EXTENSION_NAME=exported", f"-I{out}",
               f"-I{torch_include}", f"-I{torch_include / 'torch' / 'csrc' / 'api' / 'include'}",
               f"-I{sysconfig.get_paths()['include']}", f"-I{cuda_include}", f"-idirafter{tmp_path / 'generated'}",
               str(out / "binding.cpp")]
    compiled = subprocess.run(command, capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stderr[-3000:]


def _with_stand_in(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: ExportCase) -> tuple[Any, StandInKernel]:
    package = import_package(_export_torch(capsys, case, tmp_path))
    stand_in = StandInKernel()
    package._extension = stand_in  # type: ignore[attr-defined]  # the package's build, made already
    return package, stand_in


def test_model_new_calls_the_kernel_with_the_inputs_then_the_state_dict_tensors_in_order(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    package, stand_in = _with_stand_in(capsys, tmp_path, GEMM)
    new, inputs = _model_and_inputs(GEMM, package.ModelNew)
    stand_in.reference = lambda tensors: package.Model.forward(new, *tensors)
    with torch.no_grad():
        new(*inputs)
    ((given_inputs, given_params),) = stand_in.calls
    assert given_inputs[0] is inputs[0]
    linear = new.get_submodule("linear")
    assert [id(t) for t in given_params] == [id(linear.weight), id(linear.bias)]


def test_model_new_under_no_grad_calls_the_binding_without_the_ops_dispatch(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, stand_in = _with_stand_in(capsys, tmp_path, GEMM)
    new, inputs = _model_and_inputs(GEMM, package.ModelNew)
    stand_in.reference = lambda tensors: package.Model.forward(new, *tensors)
    monkeypatch.setattr(package, "kernel_op", lambda *args: pytest.fail("the op's dispatch was taken"))
    with torch.no_grad():
        assert torch.equal(new(*inputs), package.Model.forward(new, *inputs))
    assert len(stand_in.calls) == 1


def test_model_new_refuses_a_wrong_shape_on_its_direct_path_too(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    package, _ = _with_stand_in(capsys, tmp_path, SOFTMAX)
    new, _ = _model_and_inputs(SOFTMAX, package.ModelNew)
    with torch.no_grad(), pytest.raises(ValueError, match=r"input 'x': expected shape \(4096, 8192\), got \(4, 8\)"):
        new(torch.randn(4, 8))


def test_model_new_whose_parameters_need_grad_goes_through_the_op(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, stand_in = _with_stand_in(capsys, tmp_path, GEMM)
    new, inputs = _model_and_inputs(GEMM, package.ModelNew)
    stand_in.reference = lambda tensors: package.Model.forward(new, *tensors)
    through_op: list[bool] = []
    op = package.kernel_op

    def counted(*args: Any) -> Any:
        through_op.append(True)
        return op(*args)

    monkeypatch.setattr(package, "kernel_op", counted)
    new(*inputs)
    assert through_op == [True]


def test_model_new_returns_a_tuple_where_the_model_does_and_checks_the_non_tensor_arguments(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    case = ExportCase(KERNELBENCH.parent / "problems" / "mixed_arguments.py", EXAMPLE_CASES[0].kernel)
    package, stand_in = _with_stand_in(capsys, tmp_path, case)
    new, (x, dim, y, alpha) = _model_and_inputs(case, package.ModelNew)
    stand_in.reference = lambda tensors: package.Model.forward(new, tensors[0], dim, tensors[1], alpha)
    outputs = new(x, dim, y.contiguous(), alpha)
    assert isinstance(outputs, tuple) and len(outputs) == 2
    with pytest.raises(ValueError, match=r"forward argument 'alpha': the kernel was compiled for 0.5, got 0.25"):
        new(x, dim, y.contiguous(), 0.25)


def test_model_new_refuses_a_constructor_argument_the_kernel_was_not_compiled_for(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    package, _ = _with_stand_in(capsys, tmp_path, BATCHNORM)
    with pytest.raises(ValueError, match=r"argument 'eps': the kernel was compiled for 1e-05, got 0.001"):
        package.ModelNew(64, 1e-3)


def test_a_gradient_through_the_kernel_is_refused_saying_backward_is_not_provided(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    package, stand_in = _with_stand_in(capsys, tmp_path, GEMM)
    new, inputs = _model_and_inputs(GEMM, package.ModelNew)
    stand_in.reference = lambda tensors: package.Model.forward(new, *tensors)
    output = new(*inputs)  # parameters require grad: the output has a backward node, which refuses
    with pytest.raises(RuntimeError, match="backward is not provided"):
        output.sum().backward()


def test_torch_compile_runs_the_kernel_through_its_fake_and_refuses_a_wrong_shape_naming_the_input(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    package, stand_in = _with_stand_in(capsys, tmp_path, SOFTMAX)
    new, (x,) = _model_and_inputs(SOFTMAX, package.ModelNew)
    stand_in.reference = lambda tensors: torch.softmax(tensors[0], dim=-1)
    compiled = torch.compile(new, fullgraph=True)
    assert torch.equal(compiled(x), torch.softmax(x, dim=-1))
    with pytest.raises(Exception, match=r"input 'x': expected shape \(4096, 8192\), got \(4, 8\)"):
        compiled(torch.randn(4, 8))


def test_torch_compile_of_a_model_whose_parameters_need_grad_runs_and_only_backward_refuses(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    package, stand_in = _with_stand_in(capsys, tmp_path, GEMM)
    new, inputs = _model_and_inputs(GEMM, package.ModelNew)
    stand_in.reference = lambda tensors: package.Model.forward(new, *tensors)
    output = torch.compile(new, fullgraph=True)(*inputs)  # traces the backward too: its refusal has a fake
    with pytest.raises(RuntimeError, match="backward is not provided"):
        output.sum().backward()


def test_torch_export_captures_the_kernel_as_one_op(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    package, _ = _with_stand_in(capsys, tmp_path, GEMM)
    new, inputs = _model_and_inputs(GEMM, package.ModelNew)
    exported = torch.export.export(new, tuple(inputs))
    op = json.loads((Path(package.__file__).parent / "kernel.json").read_text())["op"].replace("::", ".")
    assert next(str(node.target) for node in exported.graph.nodes if node.op == "call_function") == f"{op}.default"


def test_export_of_a_run_takes_its_best_kernel_precision_and_measured_arch(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", SOFTMAX, precision="tf32", arch="sm_80")
    finished = kernelblaster(capsys, "export", run, "--format", "torch", "--out", tmp_path / "softmax_run")
    assert finished.status == 0, finished.err
    record = json.loads((tmp_path / "softmax_run" / "kernel.json").read_text())
    assert (record["precision"], record["arch"]) == ("tf32", "sm_80")
    assert (tmp_path / "softmax_run" / "kernel.cu").read_text() == SOFTMAX.kernel.read_text()


def test_kernelbench_export_of_a_run_builds_for_the_runs_arch(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", KERNELBENCH_CASES[0], arch="sm_80")
    finished = kernelblaster(capsys, "export", run, "--format", "kernelbench", "--out", tmp_path / "relu.py")
    assert finished.status == 0, finished.err
    assert "'-arch=sm_80'" in (tmp_path / "relu.py").read_text()


def test_a_kernel_exported_from_a_file_says_nothing_verified_it_and_where_it_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = _export_kernelbench(capsys, KERNELBENCH_CASES[0], tmp_path).read_text()
    package = _export_torch(capsys, SOFTMAX, tmp_path)
    for exported in (text, (package / "__init__.py").read_text()):
        assert "Not verified" in exported and "Verified by" not in exported
        assert "outside KernelBlaster's sandbox" in exported
    assert json.loads((package / "kernel.json").read_text())["verified_in_run"] is False


def test_a_kernel_exported_from_a_run_says_the_run_verified_it(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", KERNELBENCH_CASES[0])
    finished = kernelblaster(capsys, "export", run, "--format", "kernelbench", "--out", tmp_path / "relu.py")
    assert finished.status == 0, finished.err
    text = (tmp_path / "relu.py").read_text()
    assert "Verified by KernelBlaster under the 'strict' precision policy" in text and "Not verified" not in text


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    finished = kernelblaster(capsys, "export", *argv)
    assert finished.status == 2
    return finished.error_line


def test_export_of_a_run_whose_header_differs_from_the_one_made_here_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", SOFTMAX)
    (run / "kb_problem.h").write_text((run / "kb_problem.h").read_text().replace("8192", "8193"))
    line = _refusal(capsys, run, "--format", "torch", "--out", tmp_path / "pkg")
    assert line.startswith(f"{run / 'kb_problem.h'}: the run's kernels were compiled with this kb_problem.h")
    assert not (tmp_path / "pkg").exists()


def test_export_of_a_missing_run_directory_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _refusal(capsys, tmp_path / "gone", "--format", "torch", "--out", tmp_path / "pkg")
    assert line == f"RUN_DIR {tmp_path / 'gone'}: no such directory"


def test_export_of_a_run_with_no_correct_kernel_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", SOFTMAX, best=False)
    line = _refusal(capsys, run, "--format", "torch", "--out", tmp_path / "pkg")
    assert line == f"{run}: the run has no kernel measured correct yet; nothing to export"
    assert not (tmp_path / "pkg").exists()


def test_export_of_a_directory_that_is_no_run_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _refusal(capsys, tmp_path, "--format", "torch", "--out", tmp_path / "pkg").endswith("(no run.json)")


def test_an_unknown_format_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _refusal(capsys, SOFTMAX.problem, SOFTMAX.kernel, "--format", "onnx", "--out", tmp_path / "x")
    assert line == "--format onnx: input should be 'torch' or 'kernelbench'"


def test_an_existing_out_path_is_refused_without_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text("mine\n")
    line = _refusal(capsys, SOFTMAX.problem, SOFTMAX.kernel, "--format", "kernelbench", "--out", tmp_path / "kernel.py")
    assert line == f"--out {tmp_path / 'kernel.py'}: exists (add --force to replace it)"
    assert (tmp_path / "kernel.py").read_text() == "mine\n"


def test_a_kernelbench_out_path_that_is_a_directory_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _refusal(capsys, SOFTMAX.problem, SOFTMAX.kernel, "--format", "kernelbench", "--out", tmp_path, "--force")
    assert line == f"--out {tmp_path}: is a directory; name the .py file to write"


def test_force_never_replaces_a_directory_an_export_did_not_write(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep\n")
    line = _refusal(capsys, SOFTMAX.problem, SOFTMAX.kernel, "--format", "torch", "--out", tmp_path / "mine", "--force")
    assert line.endswith("exists and is not a package KernelBlaster exported; not replacing it")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep\n"


def test_force_replaces_an_earlier_export(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "softmax_pkg"
    kernelblaster(capsys, "export", GEMM.problem, GEMM.kernel, "--format", "torch", "--out", out)
    finished = kernelblaster(capsys, "export", SOFTMAX.problem, SOFTMAX.kernel, "--format", "torch", "--out", out,
                             "--force")
    assert finished.status == 0, finished.err
    assert (out / "kernel.cu").read_text() == SOFTMAX.kernel.read_text()


def test_a_package_directory_that_is_not_a_python_name_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _refusal(capsys, SOFTMAX.problem, SOFTMAX.kernel, "--format", "torch", "--out", tmp_path / "my-kernel")
    assert "'my-kernel' is not a Python name" in line


def test_a_precision_flag_with_a_run_directory_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", SOFTMAX)
    line = _refusal(capsys, run, "--format", "torch", "--out", tmp_path / "pkg", "--precision", "fp16")
    assert line.startswith("--precision: a run's kernel was verified under the run's own setting")


def test_a_missing_candidate_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _refusal(capsys, SOFTMAX.problem, tmp_path / "gone.cu", "--format", "torch", "--out", tmp_path / "pkg")
    assert line == f"CANDIDATE.cu {tmp_path / 'gone.cu'}: no such file"


def test_a_candidate_without_kb_forward_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "empty.cu").write_text("__global__ void k() {}\n")
    line = _refusal(capsys, SOFTMAX.problem, tmp_path / "empty.cu", "--format", "torch", "--out", tmp_path / "pkg")
    assert line == f"{tmp_path / 'empty.cu'}: defines no kb_forward (not a KernelBlaster candidate)"


def test_bench_export_names_each_problems_kernel_as_kernelbench_runs_expect_and_lists_the_rest(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from fixtures.suite.scripted_suite import suite_config

    suite = create_suite(tmp_path / "suite", suite_config(problems=select_problems(KERNELBENCH)))
    positions = {row.problem_id: row.position for row in suite.db.problems()}
    suite.db.close()
    for case, problem_id in ((KERNELBENCH_CASES[0], "level1/19_ReLU"), (KERNELBENCH_CASES[3],
                                                                        "level2/1_Conv2D_ReLU_BiasAdd")):
        make_run_dir(suite.run_dir(positions[problem_id]), case)
    finished = kernelblaster(capsys, "bench", "export", tmp_path / "suite", "--format", "kernelbench", "--out",
                             tmp_path / "runs" / "kernelblaster")
    assert finished.status == 0, finished.err
    written = sorted(path.name for path in (tmp_path / "runs" / "kernelblaster").iterdir())
    assert written == ["level_1_problem_19_sample_0_kernel.py", "level_2_problem_1_sample_0_kernel.py"]
    assert "3 problem(s) without a kernel to export" in finished.out


def test_bench_export_of_a_directory_that_is_no_suite_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    finished = kernelblaster(capsys, "bench", "export", tmp_path, "--format", "kernelbench", "--out", tmp_path / "o")
    assert finished.status == 2
    assert finished.error_line == f"SUITE_DIR {tmp_path}: not a suite directory (no results.sqlite)"
