"""Manifest of the seed KB's snippet candidates: each snippet with a problem's kb_forward appended to it.

Plain data, no tests. `tests/fixtures/snippets/SNIPPET/PROBLEM.cu` holds the kb_forward (and any
problem-specific kernel) that uses snippet SNIPPET for the problem PROBLEM.py (examples/problems first, then
tests/fixtures/problems, then KernelBench's level-1 problems at their own sizes, tests/fixtures/kernelbench/level1);
the candidate the harness sees is the snippet's source followed by that file. The
CPU tests compile every candidate; the GPU tests verify each through the harness.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelblaster.kb.snippets import load_snippet

REPO_ROOT = Path(__file__).resolve().parents[2]
GLUE_DIR = REPO_ROOT / "tests" / "fixtures" / "snippets"
KERNELBENCH_DIR = REPO_ROOT / "tests" / "fixtures" / "kernelbench" / "level1"
PROBLEM_DIRS = (REPO_ROOT / "examples" / "problems", REPO_ROOT / "tests" / "fixtures" / "problems", KERNELBENCH_DIR)


@dataclass(frozen=True)
class SnippetCase:
    """A snippet, the problem it is verified on, and the file with that problem's kb_forward."""

    snippet: str
    problem: Path
    glue: Path

    @property
    def at_kernelbench_size(self) -> bool:
        """Whether the problem is KernelBench's own (its full size: the GPU test times it against PyTorch)."""
        return self.problem.parent == KERNELBENCH_DIR

    @property
    def id(self) -> str:
        return f"{self.snippet}/{self.problem.stem}"

    def candidate_source(self) -> str:
        return f"{load_snippet(self.snippet).source}\n{self.glue.read_text()}"


def _problem_named(stem: str) -> Path:
    """The first PROBLEM_DIRS entry holding STEM.py."""
    for directory in PROBLEM_DIRS:
        if (directory / f"{stem}.py").is_file():
            return directory / f"{stem}.py"
    raise FileNotFoundError(f"no problem {stem}.py in {', '.join(str(d) for d in PROBLEM_DIRS)}")


SNIPPET_CASES: tuple[SnippetCase, ...] = tuple(
    SnippetCase(snippet=glue.parent.name, problem=_problem_named(glue.stem), glue=glue)
    for glue in sorted(GLUE_DIR.glob("*/*.cu"))
)
