"""Manifest of the seed KB's snippet candidates: each snippet with a problem's kb_forward appended to it.

Plain data, no tests. `tests/fixtures/snippets/SNIPPET/PROBLEM.cu` holds the kb_forward (and any
problem-specific kernel) that uses snippet SNIPPET for the problem PROBLEM.py (examples/problems first, then
tests/fixtures/problems); the candidate the harness sees is the snippet's source followed by that file. The
CPU tests compile every candidate; the GPU tests verify each through the harness.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelblaster.kb.snippets import load_snippet

REPO_ROOT = Path(__file__).resolve().parents[2]
GLUE_DIR = REPO_ROOT / "tests" / "fixtures" / "snippets"
PROBLEM_DIRS = (REPO_ROOT / "examples" / "problems", REPO_ROOT / "tests" / "fixtures" / "problems")


@dataclass(frozen=True)
class SnippetCase:
    """A snippet, the problem it is verified on, and the file with that problem's kb_forward."""

    snippet: str
    problem: Path
    glue: Path

    @property
    def id(self) -> str:
        return f"{self.snippet}/{self.problem.stem}"

    def candidate_source(self) -> str:
        return f"{load_snippet(self.snippet).source}\n{self.glue.read_text()}"


def _problem_named(stem: str) -> Path:
    """examples/problems/STEM.py, else tests/fixtures/problems/STEM.py."""
    for directory in PROBLEM_DIRS:
        if (directory / f"{stem}.py").is_file():
            return directory / f"{stem}.py"
    raise FileNotFoundError(f"no problem {stem}.py in {', '.join(str(d) for d in PROBLEM_DIRS)}")


SNIPPET_CASES: tuple[SnippetCase, ...] = tuple(
    SnippetCase(snippet=glue.parent.name, problem=_problem_named(glue.stem), glue=glue)
    for glue in sorted(GLUE_DIR.glob("*/*.cu"))
)
