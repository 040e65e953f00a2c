"""Source rules for candidates: forbidden includes and APIs, comments and strings ignored, kb_forward required."""

from __future__ import annotations

import pytest

from kernelblaster.harness.static_check import check_source, strip_comments_and_strings
from kernelblaster.tools.errors import UserFacingError

KB_FORWARD = """
extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream) {
  return 0;
}
"""


def candidate(*lines: str) -> str:
    """A valid candidate with `lines` inserted right after the kb_problem.h include (line 2 onwards)."""
    return '#include "kb_problem.h"\n' + "\n".join(lines) + "\n" + KB_FORWARD


def rules(source: str, allow: frozenset[str] = frozenset()) -> list[str]:
    return [violation.rule for violation in check_source(source, allow)]


def test_a_plain_cuda_candidate_has_no_violations() -> None:
    assert check_source(candidate("#include <cuda_fp16.h>", "__global__ void k(float* y) { y[0] = 1.0f; }")) == []


def test_torch_include_is_reported_with_line_text_and_reason() -> None:
    [violation] = check_source(candidate("// helper", "#include <torch/extension.h>"))
    assert violation.rule == "pytorch_include"
    assert violation.line == 3
    assert violation.text == "#include <torch/extension.h>"
    assert violation.message == (
        "line 3: #include <torch/extension.h> — candidates may not use PyTorch/ATen/c10 or Python; write plain CUDA C++"
    )


@pytest.mark.parametrize("header", ["<ATen/ATen.h>", '"c10/cuda/CUDAStream.h"', "<pybind11/pybind11.h>", "<Python.h>"])
def test_every_pytorch_and_python_header_is_forbidden(header: str) -> None:
    assert rules(candidate(f"#include {header}")) == ["pytorch_include"]


@pytest.mark.parametrize(
    ("header", "library"),
    [("<cublas_v2.h>", "cublas"), ("<cublasLt.h>", "cublas"), ("<cudnn.h>", "cudnn"),
     ("<cutlass/gemm/device/gemm.h>", "cutlass"), ("<cute/tensor.hpp>", "cutlass")],
)  # fmt: skip
def test_library_headers_are_forbidden_unless_allowed(header: str, library: str) -> None:
    source = candidate(f"#include {header}")
    assert rules(source) == [f"library:{library}"]
    assert rules(source, frozenset({library})) == []


def test_library_violation_says_how_to_allow_it() -> None:
    [violation] = check_source(candidate("#include <cublas_v2.h>"))
    assert "--allow cublas" in violation.message


def test_allowing_cublas_does_not_allow_cudnn() -> None:
    assert rules(candidate("#include <cublas_v2.h>", "#include <cudnn.h>"), frozenset({"cublas"})) == ["library:cudnn"]


def test_an_unknown_library_in_the_allow_list_is_a_user_error() -> None:
    with pytest.raises(UserFacingError, match="unknown library 'cublass'"):
        check_source(candidate(), frozenset({"cublass"}))


def test_curand_device_header_is_allowed_but_the_host_api_header_is_not() -> None:
    assert rules(candidate("#include <curand_kernel.h>")) == []
    assert rules(candidate("#include <curand.h>")) == ["library:curand"]


@pytest.mark.parametrize(
    ("code", "rule"),
    [
        ('FILE* f = fopen("ref.bin", "rb");', "file_io"),
        ('std::ifstream in("ref.bin");', "file_io"),
        ("int c = getchar();", "file_io"),
        ('int r = system("nvidia-smi");', "process"),
        ('FILE* p = popen("ls", "r");', "process"),
        ("pid_t pid = fork();", "process"),
        ('execvp("sh", argv);', "process"),
        ('const char* v = getenv("KB_REF");', "environment"),
        ('setenv("A", "1", 1);', "environment"),
        ("char** e = environ;", "environment"),
        ("std::thread worker(run);", "threads"),
        ("pthread_create(&t, nullptr, run, nullptr);", "threads"),
        ("auto f = std::async(run);", "threads"),
        ('void* h = dlopen("libtorch.so", RTLD_NOW);', "dynamic_loading"),
        ('void* s = dlsym(h, "sym");', "dynamic_loading"),
        ("cudaIpcOpenMemHandle(&p, handle, 0);", "ipc"),
        ('int fd = shm_open("/x", 0, 0);', "ipc"),
        ("cudaProfilerStart();", "profiler_control"),
        ("cudaProfilerStop();", "profiler_control"),
        ("cudaDeviceReset();", "device_control"),
        ("cudaSetDevice(1);", "device_control"),
        ("cudaMallocManaged(&p, 64);", "managed_memory"),
        ("__managed__ float total;", "managed_memory"),
        ("cublasAlloc(64, sizeof(float), &p);", "library_allocation"),
        ("#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1", "default_stream"),
    ],
)
def test_each_forbidden_api_family_is_caught(code: str, rule: str) -> None:
    assert rules(candidate(code)) == [rule]


@pytest.mark.parametrize("header", ["<fstream>", "<thread>", "<dlfcn.h>", "<cuda_profiler_api.h>", "<sys/shm.h>"])
def test_headers_that_only_serve_a_forbidden_family_are_reported(header: str) -> None:
    assert len(rules(candidate(f"#include {header}"))) == 1


def test_api_violation_names_the_call_and_the_rule() -> None:
    [violation] = check_source(candidate('  const char* v = getenv("KB_REF");'))
    assert violation.line == 2
    assert violation.message == (
        'line 2: const char* v = getenv("KB_REF"); — getenv: candidates may not read or change environment variables'
    )


def test_rules_mentioned_in_comments_and_strings_are_not_violations() -> None:
    source = candidate(
        "// never call fopen() or getenv() here; #include <torch/extension.h> is not allowed",
        '/* system("ls"); std::thread t;',
        "   cudaDeviceReset(); */",
        'const char* note = "fopen(\\"x\\") and popen()";',
        'const char* raw = R"doc(dlopen("lib") " still raw)doc";',
        "const char quote = '\"'; int big = 1'000'000; // getenv(",
    )
    assert check_source(source) == []


def test_member_functions_named_like_forbidden_calls_are_not_flagged() -> None:
    assert rules(candidate("void f(Pipe p, Writer* w) { p.system(); w->fork(); }")) == []


def test_a_line_comment_continued_by_a_backslash_stays_a_comment() -> None:
    assert rules(candidate("// a long note \\", "fopen(path, mode) is still in the comment")) == []


def test_line_numbers_count_lines_of_the_original_source_after_block_comments() -> None:
    source = candidate("/* one", "two", "three */", 'auto v = getenv("X");')
    [violation] = check_source(source)
    assert violation.line == 5


def test_missing_kb_forward_is_a_violation() -> None:
    source = '#include "kb_problem.h"\n__global__ void k() {}\n'
    [violation] = check_source(source)
    assert violation.rule == "missing_kb_forward"
    assert violation.line is None
    assert 'define extern "C" int kb_forward(' in violation.message


def test_a_lone_surrogate_is_refused_alone_naming_its_line_and_quoting_no_text() -> None:
    # A str from a JSON "\\ud800" escape: no file can hold it, and the other rules quote the lines they refuse.
    source = candidate("// fine", 'auto v = getenv("X"); // \ud800')
    [violation] = check_source(source)
    assert violation.rule == "not_text" and violation.line == 3 and violation.text == ""
    assert "U+D800" in violation.message
    violation.model_dump_json()


def test_a_kb_forward_declaration_or_comment_does_not_count_as_its_definition() -> None:
    source = (
        '#include "kb_problem.h"\n'
        "// kb_forward(inputs, params, outputs, stream) { is defined below }\n"
        'extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t);\n'
    )
    assert rules(source) == ["missing_kb_forward"]


def test_stripping_keeps_every_position_and_newline() -> None:
    source = 'int a; // note\nconst char* s = "x/*y*/";\n/* b\n c */ int d;\n'
    stripped = strip_comments_and_strings(source)
    assert len(stripped.code) == len(source)
    assert stripped.code.count("\n") == source.count("\n")
    assert "note" not in stripped.code and "x/*y*/" not in stripped.code
    assert '"x/*y*/"' in stripped.without_comments


@pytest.mark.parametrize("directive", ['#line 5 "/usr/include/stdio.h"', '# 7 "kb_problem.h"', '%:line 3',
                                       '#\\\nline 9', '\f#line 4 "x.fatbin.c"', '\v# 4 "/usr/include/cpuid.h"',
                                       '\0#line 4', '/* c */ # 4 "x.h"', '#\\  \nline 9', '#\\\rline 9'],
                         ids=["line", "gnu_marker", "digraph", "spliced", "form_feed", "vertical_tab", "nul",
                              "comment_before", "spliced_after_spaces", "spliced_by_carriage_return"])
def test_a_line_directive_is_refused_at_its_line_however_spelled(directive: str) -> None:
    violations = check_source(candidate(directive))
    assert [(v.rule, v.line) for v in violations] == [("line_directive", 2)]


def test_a_quote_after_a_number_that_does_not_continue_it_opens_a_character_literal() -> None:
    # Read as a digit separator, the quote in 0x1'"' made the rules see a comment from "/*" on, hiding the
    # directive after it.
    hidden = ['#define KB_IGNORE(...)', 'static const int n = KB_IGNORE(0x1\'"\' "/*") 1;', '#line 4 "x.fatbin.c"',
              'static const char* m = KB_IGNORE("*/") "";']
    assert "line_directive" in rules(candidate(*hidden))


def test_a_line_directive_after_a_lone_carriage_return_is_refused() -> None:
    assert [v.rule for v in check_source(candidate('int a = 1;\r#line 4 "x.fatbin.c"'))] == ["line_directive"]


def test_a_line_directive_after_a_byte_order_mark_is_refused() -> None:
    assert [v.rule for v in check_source('\ufeff#line 4 "x.h"\n' + candidate())] == ["line_directive"]


def test_a_hash_followed_by_a_number_in_a_comment_or_string_is_not_a_directive() -> None:
    assert check_source(candidate('// # 3 "x"', 'const char* note = "# 3";')) == []
