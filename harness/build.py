"""Build one candidate: source checks, compile, object symbol check, then link with the test driver.

The driver object is compiled once per GPU arch (the compile cache keeps it); each candidate costs one
`nvcc -c` (itself cached by content) and one link. The result says which stage stopped the build.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kernelblaster.harness.static_check import StaticViolation, check_source
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.nvcc import CompileResult, CompilerMessage, KernelResources, compile_object, link_executable
from kernelblaster.tools.symbols import (
    LIBRARIES,
    SymbolViolation,
    check_object_symbols,
    link_libraries,
    validate_allow,
)

DRIVER_DIR = Path(__file__).resolve().parent / "driver"
DRIVER_SOURCE = DRIVER_DIR / "kb_driver.cu"
SOURCE_NAME = "candidate.cu"
HEADER_NAME = "kb_problem.h"
OBJECT_NAME = "candidate.o"
EXECUTABLE_NAME = "candidate"

BuildStage = Literal["static_violation", "compile_error", "link_error", "ok"]


class BuildResult(BaseModel):
    """What building one candidate produced, and the stage that stopped it (`ok` when none did)."""

    stage: BuildStage
    violations: list[StaticViolation]  # source rules, then forbidden symbols found in the object
    compile: CompileResult | None
    link: CompileResult | None
    source_path: Path
    header_path: Path
    executable: Path | None

    @property
    def log(self) -> str:
        """The compiler's and linker's output, as they printed it."""
        return "".join(step.log for step in (self.compile, self.link) if step is not None)

    @property
    def messages(self) -> list[CompilerMessage]:
        return [m for step in (self.compile, self.link) if step is not None for m in step.messages]

    @property
    def resources(self) -> list[KernelResources]:
        return self.compile.kernels if self.compile is not None else []

    @property
    def seconds(self) -> float:
        return sum(step.duration_s for step in (self.compile, self.link) if step is not None)

    @property
    def cached(self) -> bool:
        """True when the candidate object came from the compile cache."""
        return self.compile is not None and self.compile.cached


def build_candidate(
    source: str, header: str, workdir: Path, *, arch: str, allow: frozenset[str], cache_dir: Path
) -> BuildResult:
    """Write the candidate and its header into `workdir` and build its driver executable there."""
    allow = validate_allow(allow)
    workdir.mkdir(parents=True, exist_ok=True)
    source_path, header_path = workdir / SOURCE_NAME, workdir / HEADER_NAME
    source_path.write_text(source)
    header_path.write_text(header)
    result = BuildResult(
        stage="static_violation",
        violations=check_source(source, allow),
        compile=None,
        link=None,
        source_path=source_path,
        header_path=header_path,
        executable=None,
    )
    if result.violations:
        return result

    result.compile = compile_object(
        source_path, workdir / OBJECT_NAME, arch=arch, include_dirs=[workdir, DRIVER_DIR], cache_dir=cache_dir
    )
    if not result.compile.ok or result.compile.output is None:
        result.stage = "compile_error"
        return result
    result.violations = [_from_symbol(v) for v in check_object_symbols(result.compile.output, allow)]
    if result.violations:
        return result

    driver = driver_object(arch, cache_dir).output
    assert driver is not None
    result.link = link_executable(
        [driver, result.compile.output], workdir / EXECUTABLE_NAME, arch=arch, libraries=link_libraries(allow)
    )
    result.stage = "ok" if result.link.ok else "link_error"
    result.executable = result.link.output
    return result


def driver_object(arch: str, cache_dir: Path) -> CompileResult:
    """The test driver compiled for `arch` (once; later calls are cache hits).

    A failure here is the installation's fault, not the candidate's, so it is raised, not reported.
    """
    compiled = compile_object(
        DRIVER_SOURCE,
        cache_dir / "driver" / f"kb_driver_{arch}.o",
        arch=arch,
        include_dirs=[DRIVER_DIR],
        cache_dir=cache_dir,
    )
    if not compiled.ok or compiled.output is None:
        first_error = next((m.text for m in compiled.errors), compiled.log.strip()[-300:])
        raise UserFacingError(f"the test driver ({DRIVER_SOURCE}) does not compile for {arch}: {first_error}")
    return compiled


def check_libraries_installed(allow: frozenset[str], arch: str, cache_dir: Path) -> None:
    """Raise a UserFacingError for an allowed library that nvcc cannot compile or link against: an incomplete
    installation, which must not become a compile error blamed on a candidate that may never call it."""
    for name in sorted(validate_allow(allow)):
        problem = _library_problem(name, arch, cache_dir)
        if problem:
            raise UserFacingError(f"--allow {name}: {problem}; install it, or run without allowing it")


@cache
def _library_problem(name: str, arch: str, cache_dir: Path) -> str | None:
    """Why a tiny program using the library does not build here, or None when it does."""
    library = next(library for library in LIBRARIES if library.name == name)
    workdir = cache_dir / "library-probes" / name
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "probe.cu"
    source.write_text(f"#include <{library.header}>\nint main() {{ return 0; }}\n")
    compiled = compile_object(source, workdir / "probe.o", arch=arch, include_dirs=[], cache_dir=None)
    if not compiled.ok or compiled.output is None:
        return f"{library.display_name} is not installed where nvcc looks ({_first_error(compiled)})"
    if not library.link_names:
        return None
    linked = link_executable([compiled.output], workdir / "probe", arch=arch, libraries=list(library.link_names))
    if not linked.ok:
        return f"{library.display_name} cannot be linked with this CUDA toolkit ({_first_error(linked)})"
    return None


def _first_error(result: CompileResult) -> str:
    lines = [m.text.strip().splitlines()[0] for m in result.errors if m.text.strip()] or result.log.strip().splitlines()
    return lines[0] if lines else "no compiler output"


def _from_symbol(violation: SymbolViolation) -> StaticViolation:
    return StaticViolation(rule=violation.rule, line=None, text=violation.symbol, message=violation.message)
