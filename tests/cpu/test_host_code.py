"""tools/host_code.py through the real nvcc: every way a candidate's host code can hand text to the assembler
is found (asm statements and top-level asm however spelled, asm labels and attribute strings that are not plain
names), and what honest kernels write is not (device asm, compiler barriers, plain labels and attributes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.harness.build import DRIVER_DIR
from kernelblaster.tools.host_code import HEADER_FILE, RENAMED_LINES_FILE, renamed_lines
from kernelblaster.tools.nvcc import AssemblyBlock, compile_object
from kernelblaster.tools.sandbox import Sandbox

FORWARD = 'extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t) { return %s; }\n'

FOUND = {
    "top_level_asm": ('__asm__(".pushsection .rodata\\n.byte 1\\n.popsection");', "0"),
    "statement": ("static long pid() { long r; asm volatile(\".byte 0x0f, 0x05\" : \"=a\"(r) : \"a\"(39L) "
                  ": \"rcx\", \"r11\"); return r; }", "pid() > 0"),
    "statement_after_if": ("static int maybe(int x) { if (x) asm volatile(\"nop\"); return x; }", "maybe(1)"),
    "label_with_code": ('extern "C" int renamed(int) __asm__("renamed\\n\\t.byte 0x0f, 0x05\\n");', "0"),
    "section_with_code": ('__attribute__((section(".text.x\\n\\t.byte 0x0f,0x05\\n#"))) int h(int x) '
                          "{ return x + 1; }", "h(0) - 1"),
    "after_a_pragma": ('#pragma GCC diagnostic push\nasm("nop");\n#pragma GCC diagnostic pop', "0"),
    "after_extension": ('__extension__ asm("nop");', "0"),
    "stringised": ("#define S(x) #x\n#define XS(x) S(x)\n#define P(a, b) a##b\n"
                   '__asm__(XS(P(.in, clude)) " \\"kb_problem.h\\"");', "0"),
}
NOT_FOUND = {
    "device_asm": ("__global__ void lane(unsigned* out) { unsigned r; asm volatile(\"mov.u32 %0, %%laneid;\" "
                   ": \"=r\"(r)); out[threadIdx.x] = r; }", "0"),
    "compiler_barrier": ("static int fenced(int x) { asm volatile(\"\" ::: \"memory\"); return x; }", "fenced(0)"),
    "plain_label": ('extern "C" int plain(int) __asm__("kb_plain_name");\n'
                    'extern "C" int plain(int x) { return x; }', "plain(0)"),
    "plain_attributes": ('__attribute__((section(".text.kb_hot"), visibility("hidden"))) int hot(int x) '
                         "{ return x; }", "hot(0)"),
}


def inspected(code: str, result: str, folder: Path, sandbox: Sandbox) -> list[AssemblyBlock]:
    """What the host-code inspection of a compile of `code` (kb_forward returning `result`) found."""
    (folder / "kb_problem.h").write_text('#pragma once\n#include "kb_abi.h"\n')
    (folder / "candidate.cu").write_text(f'#include "kb_problem.h"\n{code}\n{FORWARD % result}')
    compiled = compile_object(folder / "candidate.cu", folder / "candidate.o", arch="sm_90",
                              include_dirs=[folder, DRIVER_DIR], cache_dir=None, sandbox=sandbox,
                              inspect_host_code=True)
    assert compiled.ok, compiled.log
    assert not list(folder.glob(".candidate.o.*")), "the kept host compiler files are removed"
    return compiled.host_assembly


def host_assembly(code: str, result: str, folder: Path, sandbox: Sandbox) -> list[str]:
    return [f"{block.file}:{block.line}: {block.text}" for block in inspected(code, result, folder, sandbox)
            if not block.file.startswith("/")]


@pytest.mark.parametrize("case", FOUND, ids=str)
def test_text_the_host_code_hands_to_the_assembler_is_found_at_its_line(case: str, tmp_path: Path,
                                                                       sandbox: Sandbox) -> None:
    code, result = FOUND[case]
    found = host_assembly(code, result, tmp_path, sandbox)
    assert found and all(f.startswith("candidate.cu:") for f in found), found
    assert {int(f.split(":")[1]) for f in found} <= {2, 3, 4, 5, 6}, found


@pytest.mark.parametrize("case", NOT_FOUND, ids=str)
def test_what_honest_kernels_write_is_not_assembly_in_host_code(case: str, tmp_path: Path,
                                                                sandbox: Sandbox) -> None:
    code, result = NOT_FOUND[case]
    assert host_assembly(code, result, tmp_path, sandbox) == []


# Line directives however spelled, which the source rules (harness/static_check.py) also refuse: the compile
# alone (no source rules) must still show each in the preprocessor's own output.
RENAMED = {
    "line_directive": '#line 1 "tmpxft_00000000-6_candidate.fatbin.c"\nstatic int hidden = 1;\n#line 9 "candidate.cu"',
    "form_feed": '\f#line 1 "/usr/include/kb.fatbin.c"\nstatic int hidden = 1;\n\f#line 9 "candidate.cu"',
    "gnu_marker_after_carriage_return": 'static int a = 1;\r# 1 "/usr/include/stdio.h"\nstatic int hidden = 1;',
    "comment_before_the_hash": '/* x */ # 1 "kb_problem.h"\nstatic int hidden = 1;\n# 9 "candidate.cu"',
    # An empty macro first: not a directive to the preprocessor, which passes the line on; cudafe++ obeys it.
    "left_for_cudafe_by_an_empty_macro": '#define KB_EMPTY\nKB_EMPTY # 1 "/usr/include/stdio.h"\nstatic int h = 1;',
    "left_for_cudafe_as_a_digraph": '#define KB_EMPTY\nKB_EMPTY %:line 1 "/usr/include/x.fatbin.c"\nstatic int h = 1;',
}


def renamed(code: str, folder: Path, sandbox: Sandbox) -> list[str]:
    return [block.text for block in inspected(code, "0", folder, sandbox) if block.file == RENAMED_LINES_FILE]


@pytest.mark.parametrize("case", RENAMED, ids=str)
def test_lines_renamed_by_any_spelling_of_a_line_directive_are_found_in_the_preprocessor_s_output(
        case: str, tmp_path: Path, sandbox: Sandbox) -> None:
    assert renamed(RENAMED[case], tmp_path, sandbox)


def test_includes_and_a_line_number_alone_rename_nothing(tmp_path: Path, sandbox: Sandbox) -> None:
    assert renamed('#include <cstdint>\n#include <cuda_fp16.h>\n#line 200\nstatic int shifted = 1;', tmp_path,
                   sandbox) == []


def test_asm_in_lines_named_after_a_fatbinary_file_that_is_not_nvcc_s_own_is_found(tmp_path: Path,
                                                                                   sandbox: Sandbox) -> None:
    # A GNU marker with the include flag reads as an include to every check of the preprocessor's output; only
    # nvcc's own fatbinary file, in a folder whose name the candidate cannot know, may hold top-level asm.
    code = ('# 1 "/usr/include/kb.fatbin.c" 1\n__asm__(".pushsection .rodata\\n.byte 1\\n.popsection");\n'
            '# 3 "candidate.cu" 2')
    found = [block.text for block in inspected(code, "0", tmp_path, sandbox) if block.file == HEADER_FILE]
    assert found and "kb.fatbin.c" in found[0], found


def test_a_directive_like_line_inside_a_raw_string_is_no_directive() -> None:
    preprocessed = ('# 0 "candidate.cu"\n# 1 "candidate.cu"\nconst char* note = R"(\n# 3 "model.py" scales x\n)";\n'
                    '  # 4 "/usr/include/stdio.h"\n')
    assert [finding.text for finding in renamed_lines(preprocessed)] == [
        'a directive left for cudafe++: # 4 "/usr/include/stdio.h"']
