"""Build one candidate: source checks, compile, file, assembly and object checks, then its own shared library.

The candidate and the test driver are two link units. The driver library is built once per GPU arch and
the launcher once per machine (the compile cache keeps both); each candidate costs one `nvcc -c` (itself
cached by content) and one link of its object, with the trusted workspace wrappers (kb_workspace.cu),
into a library that exports kb_forward alone and that the launcher loads after the driver. nvcc runs in
the sandbox it is given, so a source can only read the toolkit, the system headers, the project's headers
and its own folder; the files the build read, or tried to read, outside those are static violations naming
them. The object and the library are then held to the allowlist of imports (tools/allowed_imports.py), may
carry no load-time code but nvcc's own, and the host code no inline assembly. The result says which stage
stopped the build.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kernelblaster.harness.stages import Stage, StageClock
from kernelblaster.harness.static_check import StaticViolation, check_source
from kernelblaster.tools.driver_process import DriverProgram
from kernelblaster.tools.elf import ElfFile
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import directory_problem
from kernelblaster.tools.host_code import HEADER_FILE, LOAD_TIME_FILE, RENAMED_LINES_FILE
from kernelblaster.tools.nvcc import (
    MAX_OBJECT_BYTES,
    AssemblyBlock,
    CompileResult,
    CompilerMessage,
    KernelResources,
    compile_host_program,
    compile_object,
    cudart_dirs,
    find_nvcc,
    host_include_dirs,
    link_shared_library,
    nvcc_version,
    toolkit_root,
)
from kernelblaster.tools.sandbox import Sandbox, library_dirs
from kernelblaster.tools.symbols import (
    LIBRARIES,
    LOAD_TIME_HINT,
    SymbolViolation,
    check_library,
    check_object,
    link_libraries,
    validate_allow,
)

DRIVER_DIR = Path(__file__).resolve().parent / "driver"
DRIVER_SOURCE = DRIVER_DIR / "kb_driver.cu"
WORKSPACE_SOURCE = DRIVER_DIR / "kb_workspace.cu"  # the trusted allocation wrappers in every candidate's library
DRIVER_VERSION_SCRIPT = DRIVER_DIR / "kb_driver.map"
CANDIDATE_VERSION_SCRIPT = DRIVER_DIR / "kb_candidate.map"
DRIVER_SONAME = "libkb_driver.so"  # the driver library's own name
LAUNCHER_SOURCE = DRIVER_DIR / "kb_launcher.c"
SOURCE_NAME = "candidate.cu"
HEADER_NAME = "kb_problem.h"
OBJECT_NAME = "candidate.o"
LIBRARY_NAME = "candidate.so"
CACHE_VARIABLE = "KERNELBLASTER_CACHE"  # where the cache is (else ~/.cache/kernelblaster)

# Compiler and assembler messages about a file they could not open, and the path they name.
_MISSING_FILE = re.compile(
    r"fatal error: (?P<include>.+?): No such file or directory"
    r"|Error: file not found: (?P<incbin>.+)"
    r"|Error: can't open (?P<asm_include>.+?) for reading"
    r"|cannot open source file \"(?P<front_end>[^\"]+)\""
)

BuildOutcome = Literal["static_violation", "compile_error", "link_error", "ok"]


class BuildResult(BaseModel):
    """What building one candidate produced, and the stage that stopped it (`ok` when none did)."""

    stage: BuildOutcome
    violations: list[StaticViolation]  # source rules, then what the object and its library break
    compile: CompileResult | None
    link: CompileResult | None
    source_path: Path
    header_path: Path
    program: DriverProgram | None  # the launcher and the two libraries, when the build got that far
    stage_seconds: dict[Stage, float] = {}  # wall seconds of static_check, compile and link, those that ran

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
    source: str, header: str, workdir: Path, *, arch: str, allow: frozenset[str], cache_dir: Path,
    sandbox: Sandbox | None, on_compile: Callable[[], None] | None = None,
) -> BuildResult:
    """Write the candidate and its header into `workdir` and build its driver library there; `on_compile` is
    called once nvcc runs on the candidate (not on a cache hit)."""
    allow = validate_allow(allow)
    make_cache_folder(workdir)
    make_cache_folder(cache_dir)
    source_path, header_path = workdir / SOURCE_NAME, workdir / HEADER_NAME
    source_path.write_text(source, encoding="utf-8", errors="replace")  # a lone surrogate is refused below
    header_path.write_text(header)
    clock = StageClock()
    result = BuildResult(
        stage="static_violation",
        violations=clock.run("static_check", lambda: check_source(source, allow)),
        compile=None,
        link=None,
        source_path=source_path,
        header_path=header_path,
        program=None,
    )
    if not result.violations:
        with clock.timing("compile"):
            checked = _compile_and_check(result, source_path, workdir, arch=arch, allow=allow, cache_dir=cache_dir,
                                         sandbox=sandbox, on_compile=on_compile)
        if checked is not None:
            with clock.timing("link"):
                _link(result, checked, workdir, arch=arch, allow=allow, cache_dir=cache_dir, sandbox=sandbox)
    result.stage_seconds = clock.seconds
    return result


def source_refusal(source: str, allow: frozenset[str], workdir: Path) -> BuildResult | None:
    """The build as the source rules leave it when they refuse `source`, else None: no compiler runs and no
    header is needed, so a refusal can come before the problem's spec. The source is kept in `workdir` for the
    record; `header_path` names where a header would go, and is not written."""
    clock = StageClock()
    violations = clock.run("static_check", lambda: check_source(source, validate_allow(allow)))
    if not violations:
        return None
    make_cache_folder(workdir)
    (workdir / SOURCE_NAME).write_text(source, encoding="utf-8", errors="replace")  # the rules say what it held
    return BuildResult(stage="static_violation", violations=violations, compile=None, link=None,
                       source_path=workdir / SOURCE_NAME, header_path=workdir / HEADER_NAME, program=None,
                       stage_seconds=clock.seconds)


def _compile_and_check(result: BuildResult, source_path: Path, workdir: Path, *, arch: str, allow: frozenset[str],
                       cache_dir: Path, sandbox: Sandbox | None,
                       on_compile: Callable[[], None] | None = None) -> Path | None:
    """Compile the candidate's object and check what the compile read, its host assembly and its imports: the
    object, or None when the build stops here (`result` says why)."""
    result.compile = compile_object(source_path, workdir / OBJECT_NAME, arch=arch, include_dirs=[workdir, DRIVER_DIR],
                                    cache_dir=cache_dir, sandbox=sandbox, inspect_host_code=True, on_start=on_compile)
    result.violations = files_read_outside(result.compile, workdir)
    if result.violations:
        return None
    if not result.compile.ok or result.compile.output is None:
        result.stage = "compile_error"
        return None
    oversized = object_size_violation(result.compile.output)
    if oversized is not None:
        result.violations = [oversized]
        return None
    in_object = [_from_symbol(v) for v in check_object(result.compile.output, allow,
                                                       linked_imports(arch, cache_dir, sandbox))]
    in_assembly = host_assembly_violations(result.compile.host_assembly)
    if any(v.rule == "load_time_code" for v in in_object):  # the object already names the load-time code
        in_assembly = [v for v in in_assembly if v.rule != "load_time_code"]
    result.violations = [*in_assembly, *in_object]
    return None if result.violations else result.compile.output


def _link(result: BuildResult, candidate: Path, workdir: Path, *, arch: str, allow: frozenset[str],
          cache_dir: Path, sandbox: Sandbox | None) -> None:
    """Link the candidate's object with the trusted allocation wrappers into its own library (which needs
    nothing from the driver's), and check what the library imports and exports; `result` says how far it
    got."""
    driver = driver_library(arch, cache_dir, sandbox)
    libraries = link_libraries(allow)
    workspace = trusted_object(WORKSPACE_SOURCE, arch, cache_dir, sandbox).output
    assert workspace is not None
    result.link = link_shared_library([candidate, workspace], workdir / LIBRARY_NAME, arch=arch,
                                      libraries=libraries, sandbox=sandbox,
                                      version_script=CANDIDATE_VERSION_SCRIPT, wrap_allocators=True)
    if result.link.output is None:
        result.stage = "link_error"
        return
    result.violations = [_from_symbol(v) for v in check_library(result.link.output, allow)]
    if result.violations:
        return
    result.stage = "ok"
    result.program = DriverProgram(launcher=driver_launcher(cache_dir, sandbox), driver=driver,
                                   library=result.link.output,
                                   library_dirs=tuple(dict.fromkeys([*library_dirs(libraries), *cudart_dirs()])))


def object_size_violation(candidate: Path) -> StaticViolation | None:
    """The refusal of an object larger than MAX_OBJECT_BYTES (the object is deleted), else None."""
    size = candidate.stat().st_size
    if size <= MAX_OBJECT_BYTES:
        return None
    candidate.unlink(missing_ok=True)
    return StaticViolation(
        rule="object_size", line=None, text=f"{size >> 20} MiB",
        message=f"the compiled object is {size >> 20} MiB, more than the {MAX_OBJECT_BYTES >> 20} MiB a candidate's "
                "may be: compute large tables at run time (or in device memory) rather than initialising them in "
                "the source")


def host_assembly_violations(blocks: list[AssemblyBlock]) -> list[StaticViolation]:
    """Inline assembly in the candidate's host code (top-level asm included): host code may not use asm, in
    whatever spelling; the toolkit's and the system's headers may. Device code's asm is not host code. Also
    what nvcc's registration or a translation unit's initialiser does at load beyond its own job (found in the
    host compiler's assembly, tools/host_code.py): candidate code reached from load-time code."""
    trusted = [toolkit_root(find_nvcc()), *host_include_dirs(), DRIVER_DIR]
    violations = []
    for block in blocks:
        if block.file == LOAD_TIME_FILE:
            violations.append(StaticViolation(
                rule="load_time_code", line=None, text=block.text,
                message=f"{block.text} when the library loads: candidates may not run code at load time (a global "
                        "object's constructor, a __device__ variable whose type overloads unary &); "
                        f"{LOAD_TIME_HINT}"))
            continue
        if block.file == RENAMED_LINES_FILE:
            violations.append(StaticViolation(
                rule="line_directive", line=None, text=block.text,
                message=f"{block.text}: candidates may not rename their lines (#line directives, however spelled)"))
            continue
        if block.file == HEADER_FILE:
            violations.append(StaticViolation(
                rule="host_assembly", line=None, text=block.text,
                message=f"host code contains assembly in a header's line ({block.text}), put there by a macro the "
                        "candidate defines: only device code (__global__ and __device__ functions) may use asm"))
            continue
        if block.file.startswith("/") and any(Path(block.file).resolve().is_relative_to(root) for root in trusted):
            continue
        where = f"line {block.line}: " if block.line else ""
        violations.append(StaticViolation(
            rule="host_assembly", line=block.line or None, text=block.text,
            message=f"{where}host code contains inline assembly ({block.text[:80]}): only device code (__global__ "
                    "and __device__ functions) may use asm"))
    return violations


# The trusted pieces (driver, launcher, workspace wrappers) go to fixed paths, through temporary files named by
# the process: two threads of one process (a candidate's build and the null candidate's, in the background)
# build them one at a time. Reentrant: the driver's library builds its object.
_TRUSTED_BUILD_LOCK = threading.RLock()


def make_cache_folder(folder: Path) -> None:
    """Create `folder` of the cache, or raise a one-line error saying why it cannot be (the cache set to a file,
    or to a place nothing can be created, such as /proc) and, where it is, the variable that set it."""
    problem = directory_problem(folder)
    if problem is None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return
        except OSError as error:  # directory_problem cannot foresee every refusal (/proc, a full disk)
            problem = f"cannot be created ({error.strerror or error})"
    configured = os.environ.get(CACHE_VARIABLE)
    if configured and folder.is_relative_to(configured):
        raise UserFacingError(f"{CACHE_VARIABLE}={configured}: the cache folder {folder} {problem}")
    raise UserFacingError(f"the cache folder {folder} {problem} (set {CACHE_VARIABLE} to use another cache)")


def trusted_object(source: Path, arch: str, cache_dir: Path, sandbox: Sandbox | None) -> CompileResult:
    """A trusted source of the driver folder compiled for `arch` (once; later calls are cache hits).

    A failure here is the installation's fault, not the candidate's, so it is raised, not reported.
    """
    with _TRUSTED_BUILD_LOCK:
        compiled = compile_object(source, cache_dir / "driver" / f"{source.stem}_{arch}.o", arch=arch,
                                  include_dirs=[DRIVER_DIR], cache_dir=cache_dir, sandbox=sandbox)
    if not compiled.ok or compiled.output is None:
        first_error = next((m.text for m in compiled.errors), compiled.log.strip()[-300:])
        raise UserFacingError(f"{source} does not compile for {arch}: {first_error}")
    return compiled


def linked_imports(arch: str, cache_dir: Path, sandbox: Sandbox | None) -> frozenset[str]:
    """What the trusted workspace wrappers linked into every candidate's library call (`__real_cudaMalloc` is
    cudaMalloc once wrapped): a candidate that defined one would take their calls (a no-op cudaMemset, and no
    workspace is poisoned)."""
    workspace = trusted_object(WORKSPACE_SOURCE, arch, cache_dir, sandbox).output
    assert workspace is not None  # trusted_object raises otherwise
    needed = {symbol.name for symbol in ElfFile(workspace).symbols() if symbol.name and not symbol.defined}
    return frozenset(name.removeprefix("__real_") for name in needed)


def driver_object(arch: str, cache_dir: Path, sandbox: Sandbox | None) -> CompileResult:
    """The test driver compiled for `arch` (once; later calls are cache hits)."""
    return trusted_object(DRIVER_SOURCE, arch, cache_dir, sandbox)


def driver_library(arch: str, cache_dir: Path, sandbox: Sandbox | None) -> Path:
    """The test driver's own shared library for `arch`, linked once per driver object, version script and nvcc;
    later calls find it. It exports kb_driver_main alone (kb_driver.map)."""
    with _TRUSTED_BUILD_LOCK:
        return _driver_library(arch, cache_dir, sandbox)


def _driver_library(arch: str, cache_dir: Path, sandbox: Sandbox | None) -> Path:
    driver = driver_object(arch, cache_dir, sandbox).output
    assert driver is not None  # trusted_object raises otherwise
    key = hashlib.sha256(driver.read_bytes() + DRIVER_VERSION_SCRIPT.read_bytes()
                         + nvcc_version(find_nvcc()).encode()).hexdigest()[:20]
    library = cache_dir / "driver" / f"kb_driver_{arch}_{key}.so"
    if library.is_file():
        return library
    linked = link_shared_library([driver], library, arch=arch, libraries=[], sandbox=sandbox,
                                 version_script=DRIVER_VERSION_SCRIPT, soname=DRIVER_SONAME)
    if not linked.ok or linked.output is None:
        first_error = next((m.text for m in linked.errors), linked.log.strip()[-300:])
        raise UserFacingError(f"the test driver ({DRIVER_SOURCE}) does not link for {arch}: {first_error}")
    return linked.output


def driver_launcher(cache_dir: Path, sandbox: Sandbox | None) -> Path:
    """The launcher built for this machine (once per launcher source and nvcc; later calls find it)."""
    with _TRUSTED_BUILD_LOCK:
        return _driver_launcher(cache_dir, sandbox)


def _driver_launcher(cache_dir: Path, sandbox: Sandbox | None) -> Path:
    nvcc = find_nvcc()
    key = hashlib.sha256(LAUNCHER_SOURCE.read_bytes() + nvcc_version(nvcc).encode()).hexdigest()[:20]
    launcher = cache_dir / "driver" / f"kb_launcher_{key}"
    if os.access(launcher, os.X_OK):
        return launcher
    built = compile_host_program(LAUNCHER_SOURCE, launcher, sandbox=sandbox)
    if not built.ok:
        first_error = next((m.text for m in built.errors), built.log.strip()[-300:])
        raise UserFacingError(f"the driver launcher ({LAUNCHER_SOURCE}) does not build: {first_error}")
    return launcher


def files_read_outside(compiled: CompileResult, workdir: Path) -> list[StaticViolation]:
    """Files the build read, or tried to read, outside the toolkit, the system headers, the project's
    headers and the candidate's folder (an `#include` or `.incbin` of a host file)."""
    allowed = [toolkit_root(find_nvcc()), *host_include_dirs(), DRIVER_DIR, workdir.resolve()]
    tried = [next(path for path in match.groups() if path) for match in _MISSING_FILE.finditer(compiled.log)]
    violations = []
    for path, verb in [*((p, "reads") for p in compiled.dependencies), *((p, "tried to read") for p in tried)]:
        read = Path(os.path.realpath(workdir / path))
        if not any(read.is_relative_to(root) for root in allowed):
            violations.append(StaticViolation(
                rule="outside_file", line=None, text=path,
                message=f"the build {verb} {path}: a candidate may include only the CUDA toolkit's, the system's "
                        f"and its own headers ({HEADER_NAME})"))
    return list({v.text: v for v in violations}.values())


def check_libraries_installed(allow: frozenset[str], arch: str, cache_dir: Path, sandbox: Sandbox | None) -> None:
    """Raise a UserFacingError for an allowed library that nvcc cannot compile or link against (in the sandbox
    candidates build in): an incomplete installation, which must not become a compile error blamed on a
    candidate that may never call it."""
    for name in sorted(validate_allow(allow)):
        problem = _library_problem(name, arch, cache_dir, sandbox)
        if problem:
            raise UserFacingError(f"--allow {name}: {problem}; install it, or run without allowing it")


@cache
def _library_problem(name: str, arch: str, cache_dir: Path, sandbox: Sandbox | None) -> str | None:
    """Why a tiny program using the library does not build here, or None when it does."""
    library = next(library for library in LIBRARIES if library.name == name)
    workdir = cache_dir / "library-probes" / name
    make_cache_folder(workdir)
    source = workdir / "probe.cu"
    source.write_text(f"#include <{library.header}>\nint main() {{ return 0; }}\n")
    compiled = compile_object(source, workdir / "probe.o", arch=arch, include_dirs=[], cache_dir=None, sandbox=sandbox)
    if not compiled.ok or compiled.output is None:
        return f"{library.display_name} is not installed where nvcc looks ({_first_error(compiled)})"
    if not library.link_names:
        return None
    linked = link_shared_library([compiled.output], workdir / "probe.so", arch=arch,
                                 libraries=list(library.link_names), sandbox=sandbox,
                                 version_script=CANDIDATE_VERSION_SCRIPT)
    if not linked.ok:
        return f"{library.display_name} cannot be linked with this CUDA toolkit ({_first_error(linked)})"
    return None


def _first_error(result: CompileResult) -> str:
    lines = [m.text.strip().splitlines()[0] for m in result.errors if m.text.strip()] or result.log.strip().splitlines()
    return lines[0] if lines else "no compiler output"


def _from_symbol(violation: SymbolViolation) -> StaticViolation:
    return StaticViolation(rule=violation.rule, line=None, text=violation.symbol, message=violation.message)
