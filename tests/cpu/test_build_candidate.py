"""harness/build.py: the stages of building one candidate, its own link unit beside the driver's, and the object
check."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kernelblaster.harness.build import BuildResult, build_candidate, driver_object
from kernelblaster.tools.sandbox import Sandbox
from kernelblaster.tools.symbols import find_symbol_violations, link_libraries, undefined_symbols

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "candidates"
HEADER = (FIXTURES / "kb_problem.h").read_text()
ARCH = "sm_90"


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One compile cache for the test session, so the driver object is compiled once."""
    return tmp_path_factory.getbasetemp() / "kb_build_cache"


def build(name: str, workdir: Path, cache_dir: Path, sandbox: Sandbox,
          allow: frozenset[str] = frozenset()) -> BuildResult:
    source = (FIXTURES / f"{name}.cu").read_text()
    return build_candidate(source, HEADER, workdir, arch=ARCH, allow=allow, cache_dir=cache_dir, sandbox=sandbox)


@pytest.fixture(scope="module")
def scale_ok(tmp_path_factory: pytest.TempPathFactory, build_cache: Path, sandbox: Sandbox) -> BuildResult:
    return build("scale_ok", tmp_path_factory.mktemp("scale_ok"), build_cache, sandbox)


def library(built: BuildResult) -> Path:
    assert built.program is not None
    return built.program.library


def calls_in_function(linked: Path, function: str) -> list[str]:
    """Names of the functions `function` calls directly, from the disassembly of the linked library."""
    disassembly = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(linked)], capture_output=True, text=True, check=True
    ).stdout
    body = disassembly.split(f"<{function}>:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"\bcall\s+\S+\s+<([^>@+]+)", body)


def test_a_correct_candidate_builds_its_library_beside_the_driver_library_and_the_launcher(
        scale_ok: BuildResult) -> None:
    assert scale_ok.stage == "ok"
    assert scale_ok.violations == []
    assert scale_ok.program is not None and scale_ok.program.library.name == "candidate.so"
    assert scale_ok.program.driver.is_file() and scale_ok.program.driver != scale_ok.program.library
    assert os.access(scale_ok.program.launcher, os.X_OK)


def exported(linked: Path) -> set[str]:
    listing = subprocess.run(["nm", "-D", "--defined-only", str(linked)], capture_output=True, text=True,
                             check=True).stdout
    return {line.split()[-1] for line in listing.splitlines() if line.strip()}


def test_the_candidate_library_exports_kb_forward_alone(scale_ok: BuildResult) -> None:
    assert exported(library(scale_ok)) == {"kb_forward"}


def test_the_driver_library_exports_its_entry_alone(scale_ok: BuildResult) -> None:
    assert scale_ok.program is not None
    assert exported(scale_ok.program.driver) == {"kb_driver_main"}


def dynamic_section(linked: Path) -> str:
    return subprocess.run(["readelf", "-d", str(linked)], capture_output=True, text=True, check=True).stdout


def test_both_libraries_bind_every_symbol_at_load_and_their_own_references_to_themselves(
        scale_ok: BuildResult) -> None:
    assert scale_ok.program is not None
    for linked in (scale_ok.program.driver, library(scale_ok)):
        assert re.search(r"\(FLAGS\)\s+SYMBOLIC BIND_NOW", dynamic_section(linked)), linked


def test_the_candidate_library_binds_nothing_from_the_driver_library(scale_ok: BuildResult) -> None:
    # The workspace wrappers used to read a poisoning flag the driver exported, which the candidate could clear.
    assert "libkb_driver.so" not in dynamic_section(library(scale_ok))
    needed = subprocess.run(["nm", "-D", "--undefined-only", str(library(scale_ok))], capture_output=True,
                            text=True, check=True).stdout
    assert "kb_" not in needed


def test_the_source_and_header_are_written_into_the_work_directory(scale_ok: BuildResult) -> None:
    assert scale_ok.source_path.read_text() == (FIXTURES / "scale_ok.cu").read_text()
    assert scale_ok.header_path.read_text() == HEADER
    assert library(scale_ok).parent == scale_ok.source_path.parent


def test_the_build_reports_kernel_resources(scale_ok: BuildResult) -> None:
    assert [kernel.name.split("(")[0] for kernel in scale_ok.resources] == ["scale_kernel"]


def test_the_candidate_object_refers_to_the_plain_c_allocators(scale_ok: BuildResult) -> None:
    # cudaMalloc(&float_ptr, n) goes through cuda_runtime.h's template overload, which forwards to the C
    # function: the object's undefined reference is plain `cudaMalloc`, which the linker can redirect.
    assert scale_ok.compile is not None and scale_ok.compile.output is not None
    needed = undefined_symbols(scale_ok.compile.output)
    assert "cudaMalloc" in needed and "cudaMallocAsync" in needed


def test_the_linked_candidate_allocates_through_the_driver_poisoning_wrappers(scale_ok: BuildResult) -> None:
    calls = calls_in_function(library(scale_ok), "kb_forward")
    assert "__wrap_cudaMalloc" in calls and "__wrap_cudaMallocAsync" in calls
    assert "cudaMalloc" not in calls and "cudaMallocAsync" not in calls


def test_pinned_host_buffers_are_allocated_through_the_poisoning_wrappers(tmp_path: Path, build_cache: Path,
                                                                          sandbox: Sandbox) -> None:
    built = build("reads_fresh_pinned_memory", tmp_path, build_cache, sandbox)
    calls = calls_in_function(library(built), "kb_forward")
    assert "__wrap_cudaMallocHost" in calls and "__wrap_cudaHostAlloc" in calls
    assert "cudaMallocHost" not in calls and "cudaHostAlloc" not in calls


def test_a_graph_allocation_node_is_refused_as_memory_no_wrapper_poisons(tmp_path: Path, build_cache: Path,
                                                                         sandbox: Sandbox) -> None:
    source = (FIXTURES / "scale_ok.cu").read_text() + (
        "\nextern \"C\" int take_graph_memory(cudaGraph_t graph, cudaGraphNode_t* node, "
        "cudaMemAllocNodeParams* params) {\n"
        "  return cudaGraphAddMemAllocNode(node, graph, nullptr, 0, params) == cudaSuccess ? 0 : 1;\n}\n")
    built = build_candidate(source, HEADER, tmp_path, arch=ARCH, allow=frozenset(), cache_dir=build_cache,
                            sandbox=sandbox)
    assert built.stage == "static_violation"
    assert "cudaGraphAddMemAllocNode" in {v.text for v in built.violations if v.rule == "unlisted_import"}


def test_the_poisoning_wrapper_reaches_the_real_allocator(scale_ok: BuildResult) -> None:
    assert "cudaMalloc" in calls_in_function(library(scale_ok), "__wrap_cudaMalloc")


def test_a_second_build_in_a_new_directory_reuses_the_compiled_object(tmp_path: Path, build_cache: Path,
        sandbox: Sandbox) -> None:
    build("scale_ok", tmp_path / "first", build_cache, sandbox)
    again = build("scale_ok", tmp_path / "second", build_cache, sandbox)
    assert again.stage == "ok" and again.cached


def test_the_driver_object_is_compiled_once_per_arch(build_cache: Path, sandbox: Sandbox) -> None:
    driver_object(ARCH, build_cache, sandbox)
    assert driver_object(ARCH, build_cache, sandbox).cached


def test_a_compile_error_stops_the_build_with_the_compiler_messages(tmp_path: Path, build_cache: Path,
        sandbox: Sandbox) -> None:
    result = build("compile_error", tmp_path, build_cache, sandbox)
    assert result.stage == "compile_error"
    assert [(m.file, m.line) for m in result.messages if m.severity == "error"] == [
        ("candidate.cu", 6),
        ("candidate.cu", 7),
    ]
    assert result.link is None and result.program is None


def test_a_static_violation_stops_the_build_before_compiling(tmp_path: Path, build_cache: Path,
        sandbox: Sandbox) -> None:
    source = '#include "kb_problem.h"\n#include <torch/extension.h>\n' + (FIXTURES / "scale_ok.cu").read_text()
    result = build_candidate(source, HEADER, tmp_path, arch=ARCH, allow=frozenset(), cache_dir=build_cache,
                             sandbox=sandbox)
    assert result.stage == "static_violation"
    assert [v.rule for v in result.violations] == ["pytorch_include"]
    assert result.compile is None


def test_calls_hidden_by_macros_are_caught_in_the_compiled_object(tmp_path: Path, build_cache: Path,
        sandbox: Sandbox) -> None:
    result = build("hidden_fopen_getenv", tmp_path, build_cache, sandbox)
    assert result.stage == "static_violation"
    assert {(v.rule, v.text) for v in result.violations} == {("file_io", "fopen"), ("environment", "getenv")}
    assert result.compile is not None and result.link is None


def test_a_call_of_a_function_defined_nowhere_is_refused_naming_it(tmp_path: Path, build_cache: Path,
        sandbox: Sandbox) -> None:
    result = build("undefined_helper", tmp_path, build_cache, sandbox)
    assert result.stage == "static_violation"
    [violation] = result.violations
    assert violation.rule == "unlisted_import" and "helper_defined_nowhere" in violation.message
    assert "does not define" in violation.message and result.program is None


def test_library_symbols_are_violations_unless_the_library_is_allowed() -> None:
    symbols = ["cublasSgemm_v2", "cudaLaunchKernel"]
    [violation] = find_symbol_violations(symbols, frozenset())
    assert violation.rule == "library:cublas" and "--allow cublas" in violation.message
    assert find_symbol_violations(symbols, frozenset({"cublas"})) == []


@pytest.mark.parametrize(
    ("symbol", "rule"),
    [("__open64_2", "file_io"), ("write", "file_io"), ("std::cin", "file_io"), ("cudaIpcOpenMemHandle", "ipc"),
     ("std::thread::_M_start_thread(std::unique_ptr<std::thread::_State>, void (*)())", "threads"),
     ("cudaMemcpyAsync_ptsz", "default_stream"), ("cuCtxCreate_v2", "device_control")],
)  # fmt: skip
def test_forbidden_symbols_are_recognised_in_their_object_forms(symbol: str, rule: str) -> None:
    assert [v.rule for v in find_symbol_violations([symbol], frozenset())] == [rule]


def test_the_symbols_nvcc_itself_emits_are_not_violations(scale_ok: BuildResult) -> None:
    assert scale_ok.compile is not None and scale_ok.compile.output is not None
    assert find_symbol_violations(undefined_symbols(scale_ok.compile.output), frozenset()) == []


def test_cublas_legacy_allocator_is_refused_even_where_cublas_is_allowed() -> None:
    [violation] = find_symbol_violations(["cublasAlloc"], frozenset({"cublas"}))
    assert violation.rule == "library_allocation" and "cudaMalloc" in violation.message


def test_allowed_libraries_are_linked_by_their_library_names() -> None:
    assert link_libraries(frozenset({"cublas"})) == ["cublas", "cublasLt"]
    assert link_libraries(frozenset({"cutlass"})) == []


IOSTREAM_PRINT = ("if (cudaGetLastError() != cudaSuccess) { std::cerr << \"launch failed\" << std::endl; return 3; }\n"
                  "  return 0;")


def test_a_candidate_printing_with_iostream_builds(tmp_path: Path, build_cache: Path, sandbox: Sandbox) -> None:
    # Before GCC 13, <iostream> puts a std::ios_base::Init initialiser in the init array: allowed, that alone.
    source = "#include <iostream>\n" + (FIXTURES / "scale_ok.cu").read_text().replace(
        "return cudaGetLastError() == cudaSuccess ? 0 : 3;", IOSTREAM_PRINT)
    built = build_candidate(source, HEADER, tmp_path, arch=ARCH, allow=frozenset(), cache_dir=build_cache,
                            sandbox=sandbox)
    assert built.stage == "ok", [v.message for v in built.violations]


def test_iostream_does_not_cover_another_global_object_with_a_constructor(tmp_path: Path, build_cache: Path,
                                                                           sandbox: Sandbox) -> None:
    source = ("#include <iostream>\n#include <vector>\nstatic std::vector<int> sizes(4);\n"
              + (FIXTURES / "scale_ok.cu").read_text())
    built = build_candidate(source, HEADER, tmp_path, arch=ARCH, allow=frozenset(), cache_dir=build_cache,
                            sandbox=sandbox)
    assert [v.rule for v in built.violations] == ["load_time_code"]
