"""The seed KB's code snippets: every snippet is shown by a seed technique, stays short enough for a prompt,
and, with a problem's kb_forward appended (tests/gpu/snippet_cases.py), passes the source rules and compiles
without warnings with the real nvcc against that problem's generated header; the snippet comes first in the
file, so this also shows it compiles on its own. The GPU tests verify the same candidates through the harness.
The starting-point API picks the tiled GEMM or convolution snippet from a problem's PyTorch source, and under
`strict` offers a GEMM the 3xTF32 tensor-core snippet beside the FFMA one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gpu import snippet_cases as cases

from kernelblaster.harness.analysis import spec_for_problem
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.static_check import check_source
from kernelblaster.kb.codec import decode
from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.precision import PrecisionPolicy
from kernelblaster.kb.snippets import (
    ALTERNATIVE_STARTING_POINTS,
    ProblemKind,
    load_snippet,
    problem_kind,
    snippet_names,
    starting_point,
    starting_points_for,
)
from kernelblaster.kb.tokens import default_token_counter
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.nvcc import compile_object, find_nvcc
from kernelblaster.tools.sandbox import Sandbox

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER_DIR = REPO_ROOT / "harness" / "driver"
EXAMPLE_PROBLEMS = REPO_ROOT / "examples" / "problems"
# A snippet is short enough to read whole: the largest (GEMM, convolution) are the starting points of first
# kernels, the 3xTF32 GEMM's pipeline the largest of all; the lowering prompt shows one only within half the KB
# slice's budget (`kb.prompt_slice`).
MAX_SNIPPET_TOKENS = 1900

CASES = [pytest.param(case, id=case.id) for case in cases.SNIPPET_CASES]


def nvcc_available() -> bool:
    try:
        find_nvcc()
    except UserFacingError:
        return False
    return True


def test_every_snippet_has_a_candidate_that_verifies_it() -> None:
    assert {case.snippet for case in cases.SNIPPET_CASES} == snippet_names()


def test_every_snippet_is_shown_by_a_seed_technique() -> None:
    seed = decode(Path("seed_kb.json"), seed_kb_bytes()).document
    assert {technique.snippet for technique in seed.techniques.values()} - {None} == snippet_names()


@pytest.mark.parametrize("name", sorted(snippet_names()))
def test_snippet_fits_a_prompt_and_says_what_it_is(name: str) -> None:
    snippet = load_snippet(name)
    assert default_token_counter().count(snippet.source) <= MAX_SNIPPET_TOKENS
    assert len(snippet.summary) > 20 and snippet.source.startswith("// ")


def test_unknown_snippet_is_a_lookup_error_naming_the_known_ones() -> None:
    with pytest.raises(KBLookupError, match="tiled_sgemm"):
        load_snippet("no_such_snippet")


@pytest.mark.parametrize("case", CASES)
def test_snippet_candidate_passes_the_source_rules(case: cases.SnippetCase) -> None:
    assert check_source(case.candidate_source()) == []


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
@pytest.mark.parametrize("case", CASES)
def test_snippet_candidate_compiles_without_warnings_against_its_problem_header(case: cases.SnippetCase,
                                                                             tmp_path: Path, sandbox: Sandbox) -> None:
    (tmp_path / "kb_problem.h").write_text(generate_header(spec_for_problem(load_problem(case.problem), None)))
    source = tmp_path / "candidate.cu"
    source.write_text(case.candidate_source())
    result = compile_object(source, tmp_path / "candidate.o", arch="sm_90", include_dirs=[tmp_path, DRIVER_DIR],
                            cache_dir=None, sandbox=sandbox)
    assert result.ok, result.log
    assert [m.render() for m in result.messages if m.severity == "warning"] == []


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_3xtf32_gemm_compiles_for_ampere_and_hopper_without_spilling_registers(arch: str, tmp_path: Path,
                                                                                   sandbox: Sandbox) -> None:
    case = next(case for case in cases.SNIPPET_CASES if case.snippet == "gemm_3xtf32" and case.at_kernelbench_size)
    (tmp_path / "kb_problem.h").write_text(generate_header(spec_for_problem(load_problem(case.problem), None)))
    source = tmp_path / "candidate.cu"
    source.write_text(case.candidate_source())
    result = compile_object(source, tmp_path / "candidate.o", arch=arch, include_dirs=[tmp_path, DRIVER_DIR],
                            cache_dir=None, sandbox=sandbox)
    assert result.ok, result.log
    assert [m.render() for m in result.messages if m.severity == "warning"] == []
    spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", result.log)  # ptxas -v, one pair per kernel
    assert spills and set(spills) == {"0"}, result.log


@pytest.mark.parametrize(
    ("problem", "snippet"),
    [("gemm_bias_relu", "tiled_sgemm"), ("softmax_rows", None), ("elementwise_swish_scale", None)],
)
def test_starting_point_of_an_example_problem(problem: str, snippet: str | None) -> None:
    found = starting_points_for((EXAMPLE_PROBLEMS / f"{problem}.py").read_text(), "strict")
    assert (found[0].snippet.name if found else None) == snippet


def test_a_gemm_under_strict_is_offered_the_3xtf32_snippet_after_the_ffma_one() -> None:
    source = (EXAMPLE_PROBLEMS / "gemm_bias_relu.py").read_text()
    assert [point.snippet.name for point in starting_points_for(source, "strict")] == ["tiled_sgemm", "gemm_3xtf32"]
    assert [point.technique for point in starting_points_for(source, "strict")] == ["tiled_sgemm_fp32", "tf32x3_split"]


@pytest.mark.parametrize("policy", ["tf32", "fp16", "pytorch-default"])
def test_a_gemm_under_a_looser_policy_is_offered_the_ffma_snippet_alone(policy: PrecisionPolicy) -> None:
    source = (EXAMPLE_PROBLEMS / "gemm_bias_relu.py").read_text()
    assert [point.snippet.name for point in starting_points_for(source, policy)] == ["tiled_sgemm"]


def test_a_problem_without_a_starting_point_has_none_under_any_policy() -> None:
    assert starting_points_for((EXAMPLE_PROBLEMS / "softmax_rows.py").read_text(), "strict") == []


@pytest.mark.parametrize(("kind", "policy"), sorted(ALTERNATIVE_STARTING_POINTS))
def test_every_alternative_starting_point_is_a_seed_technique_valid_under_its_policy_that_shows_its_snippet(
        kind: ProblemKind, policy: PrecisionPolicy) -> None:
    snippet, technique = ALTERNATIVE_STARTING_POINTS[(kind, policy)]
    seed = decode(Path("seed_kb.json"), seed_kb_bytes()).document
    assert seed.techniques[technique].snippet == snippet
    assert seed.techniques[technique].valid_under(policy)


@pytest.mark.parametrize("kind", ["gemm", "convolution"])
def test_starting_point_names_the_seed_technique_that_shows_its_snippet(kind: ProblemKind) -> None:
    point = starting_point(kind)
    seed = decode(Path("seed_kb.json"), seed_kb_bytes()).document
    assert seed.techniques[point.technique].snippet == point.snippet.name
    assert seed.techniques[point.technique].valid_under("strict")


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("self.conv = nn.Conv2d(3, 64, 3)\nself.fc = nn.Linear(64, 10)", "convolution"),
        ("return F.conv1d(x, self.weight, stride=2)", "convolution"),
        ("return torch.bmm(A, B)", "gemm"),
        ("return A @ B.T", "gemm"),
        ("return self.linear(x).relu()  # nn.Linear", None),
        ('"""Uses nn.Conv2d in prose only."""\nreturn torch.cumsum(x, dim=1)', None),
        ("self.up = nn.ConvTranspose2d(8, 8, 3)", None),
        ("self.lstm = nn.LSTM(128, 256, 6)\nself.fc = nn.Linear(256, 10)", None),
        ("super().__init__()\n\n    @torch.no_grad()\n    def forward(self, x):\n        return x.cumsum(1)", None),
        ("return torch.nn.functional.scaled_dot_product_attention(q, k, v)", None),
    ],
)
def test_problem_kind_reads_the_code_not_the_comments(source: str, kind: str | None) -> None:
    assert problem_kind(source) == kind
