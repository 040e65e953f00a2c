"""What the lowering agent is told about a failed attempt: a long compiler log (from the real nvcc) keeps
its first error and its end within a budget."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.graph.core.state import Candidate
from kernelblaster.harness.result import EvalResult
from kernelblaster.nodes.kernels import COMPILE_LOG_CHARS, compile_feedback, head_and_tail
from kernelblaster.tools.nvcc import compile_object
from kernelblaster.tools.sandbox import Sandbox

CANDIDATE = Candidate(label="i0-t0-s0-a0", source="kernels/abc.cu", sha256="abc", technique=None, explanation="")
# The root cause on its first line, then enough follow-on errors to pass nvcc's limit of 100.
ROOT_CAUSE = "struct Tile { flaot values[32]; };\n"
FOLLOW_ON = "".join(f"__device__ float value_{i}(Tile t) {{ return t.values[{i}] * missing_scale_{i}; }}\n"
                    for i in range(150))


def _failed_build(log: str) -> EvalResult:
    return EvalResult(verdict="compile_error", summary="compile error: see the log", problem="p.py",
                      problem_sha256="0", candidate="c.cu", source_sha256="0", arch="sm_90", precision="strict",
                      compiled=False, compile_log=log)


def test_a_long_compiler_log_keeps_its_first_error_and_its_last_lines_within_the_budget(
        tmp_path: Path, sandbox: Sandbox) -> None:
    source = tmp_path / "candidate.cu"
    source.write_text(ROOT_CAUSE + FOLLOW_ON)
    log = compile_object(source, tmp_path / "candidate.o", arch="sm_90", include_dirs=[], cache_dir=None,
                         sandbox=sandbox).log.strip()
    assert len(log) > 2 * COMPILE_LOG_CHARS
    message = compile_feedback(CANDIDATE, _failed_build(log)).message
    shown = message.split("Compiler output:\n", 1)[1]
    assert 'candidate.cu(1): error: identifier "flaot" is undefined' in shown
    assert log.splitlines()[-1] in shown
    assert "characters left out) ..." in shown
    assert len(shown) <= COMPILE_LOG_CHARS + 60


def test_a_log_within_the_budget_is_shown_whole() -> None:
    log = "candidate.cu(3): error: expected a \";\"\n1 error detected in the compilation of \"candidate.cu\"."
    assert compile_feedback(CANDIDATE, _failed_build(log)).message.endswith(f"Compiler output:\n{log}")


def test_cutting_keeps_whole_lines_at_both_ends() -> None:
    text = "\n".join(f"line {n:03d} " + "x" * 40 for n in range(100))
    cut = head_and_tail(text, 1000, 0.6)
    head, tail = cut.split("\n... (")
    assert head.splitlines()[0] == text.splitlines()[0] and all(line in text.splitlines() for line in head.splitlines())
    assert tail.splitlines()[-1] == text.splitlines()[-1]
    assert all(line in text.splitlines() for line in tail.splitlines()[1:])
