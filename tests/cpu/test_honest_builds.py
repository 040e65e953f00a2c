"""No honest kernel is refused by the link and object rules: every example kernel (correct, unusual, and the
labelled cheaters and sanitizer cases, which must reach the check they target) and every KB snippet candidate
builds all the way (compile, host assembly, the import allowlist, load-time code, its own library) in the
sandbox, as an evaluation builds it. The hostile side is tests/hostile."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from gpu import cases, snippet_cases

from kernelblaster.harness.analysis import spec_for_problem
from kernelblaster.harness.build import build_candidate
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.problem import load_problem
from kernelblaster.tools.sandbox import Sandbox

ARCH = "sm_90"

KERNELS: list[tuple[str, str, Path]] = [
    *((f"{e.id}/{kernel.stem}", kernel.read_text(), e.problem) for e in cases.EXAMPLES for kernel in (e.naive, e.fast)),
    *((f"unusual/{c.id}", c.candidate.read_text(), c.problem) for c in cases.ACCEPTED),
    *((f"cheaters/{c.id}", c.candidate.read_text(), c.problem) for c in cases.REJECTED),
    *((f"sanitizer/{c.id}", c.candidate.read_text(), c.problem) for c in cases.SANITIZED),
    *((f"snippet/{c.id}", c.candidate_source(), c.problem) for c in snippet_cases.SNIPPET_CASES),
]


@functools.cache
def header_for(problem: Path) -> str:
    return generate_header(spec_for_problem(load_problem(problem), gpu=None))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("honest-cache")


@pytest.mark.parametrize(("source", "problem"), [pytest.param(s, p, id=i) for i, s, p in KERNELS])
def test_an_honest_kernel_builds_its_own_library_past_every_rule(source: str, problem: Path, tmp_path: Path,
                                                                 cache_dir: Path, sandbox: Sandbox) -> None:
    built = build_candidate(source, header_for(problem), tmp_path, arch=ARCH, allow=frozenset(), cache_dir=cache_dir,
                            sandbox=sandbox)
    assert built.stage == "ok", [v.message for v in built.violations] or built.log
    assert built.program is not None and built.program.library.is_file()
