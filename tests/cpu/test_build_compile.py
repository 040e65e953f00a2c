"""tools/nvcc.py: compiling with the real nvcc, parsing its log, caching objects, reporting failures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.nvcc import (
    COMPILE_TIMEOUT_S,
    CompileResult,
    _arch_supported,
    arch_flags,
    arch_problem,
    compile_object,
    find_nvcc,
    parse_messages,
)
from kernelblaster.tools.sandbox import Sandbox

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "candidates"
DRIVER_DIR = Path(__file__).resolve().parents[2] / "harness" / "driver"


def compile_fixture(name: str, out_dir: Path, sandbox: Sandbox, cache_dir: Path | None = None,
                    timeout_s: float = COMPILE_TIMEOUT_S) -> CompileResult:
    return compile_object(
        FIXTURES / f"{name}.cu",
        out_dir / f"{name}.o",
        arch="sm_90",
        include_dirs=[FIXTURES, DRIVER_DIR],
        cache_dir=cache_dir,
        sandbox=sandbox,
        timeout_s=timeout_s,
    )


def test_a_correct_candidate_compiles_to_an_object(tmp_path: Path, sandbox: Sandbox) -> None:
    result = compile_fixture("scale_ok", tmp_path, sandbox)
    assert result.ok and not result.cached and not result.timed_out
    assert result.output == tmp_path / "scale_ok.o" and result.output.stat().st_size > 0
    assert result.errors == []


def test_ptxas_usage_is_reported_per_kernel_with_a_demangled_name(tmp_path: Path, sandbox: Sandbox) -> None:
    [kernel] = compile_fixture("scale_ok", tmp_path, sandbox).kernels
    assert kernel.name == "scale_kernel(float const*, float*, float*, long)"
    assert kernel.mangled_name.startswith("_Z12scale_kernel")
    assert kernel.arch == "sm_90a"
    assert kernel.registers > 0
    assert kernel.shared_memory_bytes == 1024  # float tile[256]
    assert (kernel.spill_store_bytes, kernel.spill_load_bytes) == (0, 0)


def test_ptxas_spills_and_stack_frame_are_parsed_from_a_real_compile(tmp_path: Path, sandbox: Sandbox) -> None:
    [kernel] = compile_fixture("register_spills", tmp_path, sandbox).kernels
    assert kernel.registers <= 32  # __launch_bounds__(1024, 2)
    assert kernel.spill_store_bytes > 0 and kernel.spill_load_bytes > 0
    assert kernel.stack_frame_bytes > 0
    assert kernel.shared_memory_bytes == 4096  # float staging[1024]


def test_a_compile_error_is_returned_with_file_and_line_messages(tmp_path: Path, sandbox: Sandbox) -> None:
    result = compile_fixture("compile_error", tmp_path, sandbox)
    assert not result.ok and result.output is None
    assert [(m.file, m.line, m.severity) for m in result.errors] == [
        ("compile_error.cu", 6, "error"),
        ("compile_error.cu", 7, "error"),
    ]
    assert result.errors[0].text.startswith('identifier "undefined_element_count" is undefined')
    assert "undefined_element_count" in result.log
    assert not (tmp_path / "compile_error.o").exists()


def test_a_second_compile_of_the_same_source_elsewhere_is_a_cache_hit(tmp_path: Path, sandbox: Sandbox) -> None:
    first = compile_fixture("scale_ok", tmp_path / "a", sandbox, cache_dir=tmp_path / "cache")
    second = compile_fixture("scale_ok", tmp_path / "b", sandbox, cache_dir=tmp_path / "cache")
    assert not first.cached and second.cached
    assert second.output is not None and second.output.read_bytes() == (tmp_path / "a" / "scale_ok.o").read_bytes()
    assert second.kernels == first.kernels


def test_a_changed_header_misses_the_cache(tmp_path: Path, sandbox: Sandbox) -> None:
    work = tmp_path / "work"
    shutil.copytree(FIXTURES, work)

    def compile_to(output: Path) -> CompileResult:
        return compile_object(work / "scale_ok.cu", output, arch="sm_90", include_dirs=[work, DRIVER_DIR],
                              cache_dir=tmp_path / "cache", sandbox=sandbox)

    compile_to(work / "first.o")
    (work / "kb_problem.h").write_text((work / "kb_problem.h").read_text() + "static constexpr int KB_EXTRA = 1;\n")
    second = compile_to(work / "second.o")
    assert second.ok and not second.cached


def test_a_failed_compile_is_not_cached(tmp_path: Path, sandbox: Sandbox) -> None:
    compile_fixture("compile_error", tmp_path, sandbox, cache_dir=tmp_path / "cache")
    again = compile_fixture("compile_error", tmp_path, sandbox, cache_dir=tmp_path / "cache")
    assert not again.cached and not again.ok


def test_a_compile_past_its_time_limit_is_reported_not_raised(tmp_path: Path, sandbox: Sandbox) -> None:
    result = compile_fixture("scale_ok", tmp_path, sandbox, timeout_s=0.05)
    assert result.timed_out and not result.ok
    assert "nvcc timed out after 0.05 s" in result.log


def test_hopper_compiles_for_the_arch_specific_target_and_other_archs_plainly() -> None:
    assert arch_flags("sm_90") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert arch_flags("sm_80") == ["-arch=sm_80"]


def test_an_unknown_arch_is_a_user_error() -> None:
    with pytest.raises(UserFacingError, match="unknown GPU arch 'hopper'"):
        arch_flags("hopper")


def test_a_missing_nvcc_names_the_setting_that_points_to_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELBLASTER_NVCC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(UserFacingError, match=r"nvcc not found.*KERNELBLASTER_NVCC"):
        find_nvcc()


def test_a_configured_nvcc_that_does_not_exist_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELBLASTER_NVCC", "/nowhere/nvcc")
    with pytest.raises(UserFacingError, match="KERNELBLASTER_NVCC=/nowhere/nvcc"):
        find_nvcc()


def test_a_configured_nvcc_that_cannot_be_executed_is_a_user_error(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    not_executable = tmp_path / "nvcc"
    not_executable.write_text("#!/bin/sh\n")
    monkeypatch.setenv("KERNELBLASTER_NVCC", str(not_executable))
    with pytest.raises(UserFacingError, match=f"KERNELBLASTER_NVCC={not_executable} does not name"):
        find_nvcc()


def test_compiling_for_an_arch_nvcc_does_not_know_is_a_user_error_before_nvcc_sees_the_source(
        tmp_path: Path) -> None:
    source = tmp_path / "candidate.cu"
    source.write_text("this is not CUDA\n")  # were it compiled, its errors would be the compile error
    with pytest.raises(UserFacingError, match=r"^nvcc [\d.]+ cannot compile for sm_80a; it supports sm_\d+"):
        compile_object(source, tmp_path / "candidate.o", arch="sm_80a", include_dirs=[], cache_dir=None,
                       sandbox=None)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_an_arch_nvcc_compiles_for_raises_no_problem(arch: str) -> None:
    assert arch_problem(arch) is None


def test_an_arch_left_in_nvcc_append_flags_does_not_decide_the_arch_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # A compile runs in the sandbox's environment, where nvcc never sees this variable.
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-arch=sm_10")
    _arch_supported.cache_clear()
    try:
        assert arch_problem("sm_90") is None
    finally:
        _arch_supported.cache_clear()


# Parsing of recorded log lines from the tools nvcc drives (the compile tests above use real logs).
RECORDED_LINK_LOG = """\
/usr/bin/ld: /tmp/w/candidate.o: in function `kb_forward':
tmpxft_00002e0a_00000000-6_candidate.cudafe1.cpp:(.text+0x15): undefined reference to `helper_defined_nowhere'
collect2: error: ld returned 1 exit status
"""


def test_linker_errors_name_the_missing_symbol_and_the_function() -> None:
    first = parse_messages(RECORDED_LINK_LOG)[0]
    assert first.severity == "error"
    assert first.text == "ld: undefined reference to `helper_defined_nowhere' (in kb_forward)"


def test_tool_errors_without_a_location_are_errors() -> None:
    log = "ptxas error   : Entry function '_Z1kv' uses too much shared data (0x20000 bytes, 0xc000 max)\n"
    [message] = parse_messages(log)
    assert (message.file, message.line, message.severity) == (None, None, "error")
    assert message.text.startswith("ptxas: Entry function '_Z1kv' uses too much shared data")


def test_host_compiler_messages_keep_file_and_line() -> None:
    [message] = parse_messages("candidate.cu:3:10: fatal error: torch/extension.h: No such file or directory\n")
    assert message.render() == "candidate.cu:3: error: torch/extension.h: No such file or directory"


def test_front_end_warnings_are_warnings_with_their_source_excerpt() -> None:
    log = 'candidate.cu(9): warning #177-D: variable "x" was declared but never referenced\n    int x;\n        ^\n'
    [message] = parse_messages(log)
    assert (message.line, message.severity) == (9, "warning")
    assert message.text.splitlines()[1].strip() == "int x;"


def test_the_object_cache_tells_installs_apart_but_not_work_directories(tmp_path: Path) -> None:
    from kernelblaster.tools.nvcc import _cache_key

    installs = [tmp_path / "install-a", tmp_path / "install-b"]
    sources = [tmp_path / "work-1" / "candidate.cu", tmp_path / "work-2" / "candidate.cu"]
    for folder in installs:
        folder.mkdir()
        (folder / "kb_abi.h").write_text("struct KBTensor;\n")
    for source in sources:
        source.parent.mkdir()
        source.write_text("__global__ void k() {}\n")
    def key(source: Path, install: Path) -> str:
        return _cache_key(source, [source.parent, install], ["-c"], "13.0")

    assert key(sources[0], installs[0]) == key(sources[1], installs[0])
    assert key(sources[0], installs[0]) != key(sources[0], installs[1])
