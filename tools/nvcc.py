"""Thin wrapper of nvcc: compile a CUDA source to an object and link objects into a shared library.

Keeps the full compiler log, parses it into typed messages, per-kernel ptxas resource usage and the
files the preprocessor read, times each step and caches compiled objects by content hash. Results are
pydantic models that go into reports.

A candidate's source is untrusted input to the compiler (`#include` and the assembler's `.incbin` read
any file the compiler can see), so every nvcc run takes a `sandbox` (tools/sandbox.py): it sees the
toolkit, the host compiler and system headers, the folders it is given read-only and its output folder,
with stdin empty, no network, an emptied environment and resource limits. `sandbox=None` is the
--unsafe-no-sandbox path: nvcc runs as a plain child with the same emptied environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from kernelblaster.tools import host_code
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import write_atomically
from kernelblaster.tools.host_code import inline_assembly
from kernelblaster.tools.sandbox import (
    ResourceLimits,
    Sandbox,
    SandboxView,
    memory_share,
    prepare,
    sandbox_environment,
)

NVCC_ENV_VAR = "KERNELBLASTER_NVCC"
COMPILE_TIMEOUT_S = 300.0
LINK_TIMEOUT_S = 120.0
# Backstops against sources that make the toolchain write or hold huge files (`.incbin` in a loop).
COMPILE_LIMITS = ResourceLimits(file_bytes=1 << 30, tasks=512, data_bytes=memory_share())
# The largest object a candidate's build may make: three lines of host code (`const char big[N] = {1};`) make
# an object of N bytes in two seconds, kept three times over (the object, its library, the compile cache's
# copy) for every candidate of a run. The build refuses a larger one (harness/build.py, `object_size`) and the
# compile cache, which unlike a build folder is never cleared, keeps none. Honest kernels, templates and
# CUTLASS instantiations included, are far below it.
MAX_OBJECT_BYTES = 256 << 20

# The candidate's workspace allocations are routed through the trusted poisoning wrappers linked into its
# library (harness/driver/kb_workspace.cu); only the candidate's undefined references are redirected by --wrap.
WRAPPED_ALLOCATORS = ("cudaMalloc", "cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaMallocPitch", "cudaMallocHost",
                      "cudaHostAlloc")

Severity = Literal["error", "warning", "remark", "note"]


class CompilerMessage(BaseModel):
    """One diagnostic from nvcc, its host compiler, ptxas or the linker."""

    file: str | None
    line: int | None
    severity: Severity
    text: str

    def render(self) -> str:
        """One line such as `candidate.cu:12: error: identifier "x" is undefined`."""
        where = f"{self.file}:{self.line}: " if self.file and self.line else ""
        return f"{where}{self.severity}: {self.text.splitlines()[0] if self.text else ''}"


class KernelResources(BaseModel):
    """What ptxas reports for one kernel (entry function) compiled for one arch."""

    name: str
    mangled_name: str
    arch: str
    registers: int
    shared_memory_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int

    def render(self) -> str:
        """One line such as `scale(float*): 10 registers, 1024 B smem, 0 B spilled, 0 B stack`."""
        spilled = self.spill_store_bytes + self.spill_load_bytes
        return (
            f"{self.name}: {self.registers} registers, {self.shared_memory_bytes} B smem, "
            f"{spilled} B spilled, {self.stack_frame_bytes} B stack"
        )


class AssemblyBlock(BaseModel):
    """One inline assembly statement (or top-level asm) in host code, where the source put it."""

    file: str
    line: int
    text: str


class CompileResult(BaseModel):
    """The outcome of one nvcc invocation (compile or link)."""

    ok: bool
    command: list[str]
    log: str
    messages: list[CompilerMessage]
    kernels: list[KernelResources]
    duration_s: float
    cached: bool = False
    timed_out: bool = False
    output: Path | None
    # Every file the preprocessor read, from nvcc -MD: relative to the source's folder when inside it (so a
    # cached result holds for the same source in another folder), else absolute.
    dependencies: list[str] = []
    # With `inspect_host_code`: every inline assembly block in the host code, as the host compiler emitted it.
    host_assembly: list[AssemblyBlock] = []

    @property
    def errors(self) -> list[CompilerMessage]:
        return [m for m in self.messages if m.severity == "error"]


def find_nvcc() -> Path:
    """The nvcc to use: $KERNELBLASTER_NVCC, else nvcc on PATH, else the one under $CUDA_HOME.

    The path is resolved: nvcc finds its toolkit (headers, cicc, ptxas) relative to the path it was
    started by, and the compile sandbox shows the toolkit only at its real location, not through links
    such as /usr/local/cuda -> /etc/alternatives/cuda -> /usr/local/cuda-13.0.
    """
    configured = os.environ.get(NVCC_ENV_VAR)
    if configured:
        if not (Path(configured).is_file() and os.access(configured, os.X_OK)):
            raise UserFacingError(f"{NVCC_ENV_VAR}={configured} does not name an nvcc executable")
        return Path(configured).resolve()
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path).resolve()
    cuda_home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if (cuda_home / "bin" / "nvcc").is_file():
        return (cuda_home / "bin" / "nvcc").resolve()
    raise UserFacingError(
        f"nvcc not found: install the CUDA toolkit and put nvcc on PATH, or set {NVCC_ENV_VAR}=/path/to/nvcc"
    )


@cache
def nvcc_version(nvcc: Path) -> str:
    """nvcc's version banner; part of the cache key, so a toolkit upgrade never reuses old objects."""
    completed = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False)
    return completed.stdout.strip()


def arch_problem(arch: str) -> str | None:
    """Why the nvcc in use cannot compile for `arch`, or None; asked before compiling, so an arch nvcc does not
    know is the user's error, never a candidate's compile error."""
    nvcc = find_nvcc()
    if _arch_supported(nvcc, arch):
        return None
    release = re.search(r"release (\d+\.\d+)", nvcc_version(nvcc))
    problem = f"{f'nvcc {release[1]}' if release else 'nvcc'} cannot compile for {arch}"
    known = _listed_archs(nvcc)
    return f"{problem}; it supports {', '.join(known)}" if known else problem


# How nvcc refuses an architecture it does not know: CUDA 12 on, then CUDA 10-11.
_UNKNOWN_ARCH = re.compile(r"Unsupported gpu architecture|is not defined for option 'gpu-architecture'")


@cache
def _arch_supported(nvcc: Path, arch: str) -> bool:
    """False only when nvcc refuses `arch` itself (a dry run of an empty source with the flags a compile uses
    compiles nothing: it takes milliseconds and sees no candidate); any other failure is left to the compile."""
    # The compile's own environment: nvcc also reads flags from NVCC_APPEND_FLAGS and NVCC_PREPEND_FLAGS,
    # which a compile never sees, so an arch left there by another project must not decide here.
    dry_run = subprocess.run([str(nvcc), "--dryrun", "-c", "-x", "cu", *arch_flags(arch), os.devnull,
                              "-o", os.devnull], capture_output=True, text=True, check=False,
                             env=sandbox_environment())
    return dry_run.returncode == 0 or not _UNKNOWN_ARCH.search(dry_run.stdout + dry_run.stderr)


@cache
def _listed_archs(nvcc: Path) -> tuple[str, ...]:
    """The real architectures nvcc lists (`--list-gpu-code`, CUDA 11 on), in numeric order; empty if none."""
    listed = subprocess.run([str(nvcc), "--list-gpu-code"], capture_output=True, text=True, check=False)
    names = re.findall(r"^sm_\d+$", listed.stdout, re.MULTILINE) if listed.returncode == 0 else []
    return tuple(sorted(names, key=lambda name: int(name[3:])))


# What every object (candidates, the driver) is compiled with besides its arch: no --use_fast_math, so expf,
# division and sqrt are IEEE-accurate unless a kernel calls the intrinsics itself. The stack protector is
# named, not left to the host compiler's default: Ubuntu's GCC turns it on and Debian's does not, and the
# load-time check reads the host assembly it changes (a launch stub then calls __stack_chk_fail); at 404fc51
# that difference refused every honest kernel on the GPU machine while every CPU test passed.
# CODE_FLAGS decide what the code is (an export builds with them too); COMPILE_FLAGS add an object's `-c` and
# ptxas's resource report.
CODE_FLAGS = ("-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC,-fstack-protector-strong")
COMPILE_FLAGS = ("-c", *CODE_FLAGS, "-Xptxas", "-v")
FAST_MATH_FLAGS = frozenset({"--use_fast_math", "-use_fast_math"})


def compile_flags(arch: str) -> list[str]:
    """nvcc's flags for a source compiled to an object for `arch` (`compile_object` adds the include folders)."""
    return [*COMPILE_FLAGS, *arch_flags(arch)]


def uses_fast_math(flags: Sequence[str]) -> bool:
    return any(flag in FAST_MATH_FLAGS for flag in flags)


def compile_target(arch: str) -> str:
    """The real architecture the code is built for: `sm_90a` for an sm_90 GPU (see `arch_flags`)."""
    return "sm_90a" if arch == "sm_90" else arch


def arch_flags(arch: str) -> list[str]:
    """Code generation flags; on Hopper the arch-specific target so wgmma and setmaxnreg are available."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise UserFacingError(f"unknown GPU arch {arch!r}: expected a name like sm_90")
    if arch == "sm_90":
        return [f"-gencode=arch=compute_90a,code={compile_target(arch)}"]
    return [f"-arch={arch}"]


def compile_object(
    source: Path,
    output: Path,
    *,
    arch: str,
    include_dirs: list[Path],
    extra_flags: Sequence[str] = (),
    cache_dir: Path | None,
    sandbox: Sandbox | None,
    timeout_s: float = COMPILE_TIMEOUT_S,
    inspect_host_code: bool = False,
    on_start: Callable[[], None] | None = None,
) -> CompileResult:
    """`nvcc -c` one source; a cache hit (same source, local headers, flags and nvcc) copies the object.

    nvcc runs in the source's folder on its bare name, so messages say `candidate.cu(12)` whatever the
    work directory, and a cached log reads the same as a fresh one. Objects are position-independent: they
    end up in the shared libraries the driver's launcher loads. With `inspect_host_code`, the host compiler
    also keeps the assembly it generates, and the inline assembly in it is listed (`host_assembly`, cached
    with the object): what the source spelled, after every macro, stringisation and concatenation.
    `on_start` is called once nvcc runs (not on a cache hit).
    """
    nvcc = find_nvcc()
    flags = [*compile_flags(arch), *extra_flags, *(HOST_ASSEMBLY_FLAGS if inspect_host_code else ())]
    unsupported = arch_problem(arch)
    if unsupported is not None:
        raise UserFacingError(unsupported)
    includes = [f"-I{Path(d).resolve()}" for d in include_dirs]
    # The inspection's result is cached with the object: a change in how it inspects is a different key.
    inspection = [f"host-code:{_HOST_CODE_DIGEST}"] if inspect_host_code else []
    cache_key = _cache_key(source, include_dirs, [*flags, *inspection], nvcc_version(nvcc))
    if cache_dir is not None:
        hit = _load_cached(cache_dir, cache_key, output)
        if hit is not None:
            return hit
    output = output.resolve()
    dependency_file = output.with_name(f".{output.name}.{os.getpid()}.d")
    # nvcc keeps its intermediate files in a folder of their own when inspecting, outside the source's (whose
    # files are the candidate's): its first host preprocessing is read for renamed lines (the host compiler's
    # own input has lost the markers' flags by then).
    kept = Path(tempfile.mkdtemp(prefix="kb-nvcc-kept-")) if inspect_host_code else None
    keeping = ["--keep", "--keep-dir", str(kept)] if kept else []
    command = [str(nvcc), *flags, *keeping, *includes, "-MD", "-MF", str(dependency_file), source.name]
    view = SandboxView(read_only=(source.parent, *include_dirs), writable=(kept,) if kept else ())
    try:
        result = _run_nvcc(command, output, arch=arch, timeout_s=timeout_s, cwd=source.parent.resolve(),
                           sandbox=sandbox, view=view, on_start=on_start)
        result.dependencies = _read_dependencies(dependency_file, source.parent.resolve())
        renamed = _renamed_lines(kept / f"{source.stem}.cpp4.ii") if kept else []
    finally:
        if kept:
            # Gone before the host code is read: nvcc's generated files hold the candidate's code, and the
            # host-code check reads a header's own asm from the file a line names.
            shutil.rmtree(kept, ignore_errors=True)
    if kept:
        result.host_assembly = [*_read_host_assembly(output, source.parent.resolve(), kept / f"{source.stem}.fatbin.c"),
                                *renamed]
    if cache_dir is not None and result.ok and result.output is not None \
            and result.output.stat().st_size <= MAX_OBJECT_BYTES:
        _store_cached(cache_dir, cache_key, result)
    return result


def link_shared_library(
    objects: Sequence[Path], output: Path, *, arch: str, libraries: Sequence[str], sandbox: Sandbox | None,
    version_script: Path, soname: str | None = None, wrap_allocators: bool = False,
    timeout_s: float = LINK_TIMEOUT_S,
) -> CompileResult:
    """Link objects (and shared libraries they bind to) into one shared library that exports what
    `version_script` lists and nothing else, with every symbol bound when it loads (-z now) and its own
    references bound to its own definitions (-Bsymbolic). `wrap_allocators` routes the objects' cudaMalloc
    family through the poisoning wrappers (one of `objects` must be kb_workspace.o). The CUDA runtime is the
    shared one, so the driver and the candidate use one runtime (one error state, one set of registrations)."""
    for library in libraries:
        if not re.fullmatch(r"[A-Za-z0-9_+.-]+", library):
            raise UserFacingError(f"bad library name {library!r}")
    wrap_flags = [flag for name in WRAPPED_ALLOCATORS for flag in ("-Xlinker", f"--wrap={name}")]
    linker_flags = [
        "--no-undefined",  # a missing symbol is a link error here, not a failure when the launcher loads it
        "-z", "now", "-z", "relro", "-Bsymbolic", f"--version-script={version_script.resolve()}",
        *(f"-rpath={folder}" for folder in cudart_dirs()),
        *([f"-soname={soname}"] if soname else []),
    ]
    command = [
        str(find_nvcc()),
        "-shared",
        "-cudart", "shared",
        *arch_flags(arch),
        *(str(o) for o in objects),
        *(flag for item in linker_flags for flag in ("-Xlinker", item)),
        *(wrap_flags if wrap_allocators else []),
        *(f"-l{library}" for library in libraries),
    ]
    view = SandboxView(read_only=tuple(dict.fromkeys([*(o.parent for o in objects), version_script.parent])))
    return _run_nvcc(command, output.resolve(), arch=arch, timeout_s=timeout_s, cwd=None, sandbox=sandbox, view=view)


@cache
def cudart_dirs() -> tuple[Path, ...]:
    """The folders of the toolkit's shared CUDA runtime (libcudart.so), where the driver's and candidates'
    libraries find it when they load (their run path, and what the driver's sandbox shows)."""
    dry_run = subprocess.run([str(find_nvcc()), "--dryrun", "-shared", "-cudart", "shared", "-x", "cu", os.devnull,
                              "-o", os.devnull], capture_output=True, text=True, check=False)
    listed = re.findall(r"-L\"?([^\"\s]+)", "\n".join(line for line in (dry_run.stdout + dry_run.stderr).splitlines()
                                                      if "LIBRARIES=" in line))
    folders = [Path(folder).resolve() for folder in listed]
    return tuple(dict.fromkeys(f for f in folders if any(f.glob("libcudart.so*")) and "stubs" not in f.parts))


def compile_host_program(source: Path, output: Path, *, sandbox: Sandbox | None,
                         timeout_s: float = COMPILE_TIMEOUT_S) -> CompileResult:
    """A C program for this machine, built with the host compiler nvcc uses (no CUDA runtime linked)."""
    command = [str(find_nvcc()), "-O2", "-cudart", "none", str(source.resolve())]
    view = SandboxView(read_only=(source.parent,))
    return _run_nvcc(command, output.resolve(), arch="", timeout_s=timeout_s, cwd=None, sandbox=sandbox, view=view)


def _run_nvcc(command: list[str], output: Path, *, arch: str, timeout_s: float, cwd: Path | None,
              sandbox: Sandbox | None, view: SandboxView, on_start: Callable[[], None] | None = None) -> CompileResult:
    """Run `command -o output` via a temporary name, so concurrent builds never see half a file; `on_start` is
    called once the process runs."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    reported_command = [*command, "-o", str(output)]
    argv = [*command, "-o", str(partial)]
    if sandbox is not None:
        argv = [*COMPILE_LIMITS.prlimit_prefix(), *argv]
    launch = prepare(argv, view + SandboxView(read_only=toolchain_paths(), writable=(output.parent,)), sandbox,
                     cwd=cwd)
    started = time.perf_counter()
    # nvcc runs cudafe++, cicc, ptxas and the host compiler as children: its own process group lets a
    # timeout end all of them, not just nvcc (in a sandbox, ending bwrap ends everything inside). Its output
    # quotes the candidate (cudafe++ prints a `#pragma message` string with its escapes resolved, a 0xFF byte
    # as it is): bytes that are not UTF-8 are replaced, never a UnicodeDecodeError in this process.
    process = subprocess.Popen(
        launch.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        encoding="utf-8",
        errors="replace",
        env=launch.env,
        cwd=launch.cwd,
        start_new_session=True,
    )
    if on_start is not None:
        on_start()
    try:
        log, _ = process.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        log, _ = process.communicate()
        log += f"\nnvcc timed out after {timeout_s:g} s\n"
        timed_out = True
    ok = not timed_out and process.returncode == 0 and partial.is_file()
    if ok:
        partial.replace(output)
    else:
        partial.unlink(missing_ok=True)
    return CompileResult(
        ok=ok,
        command=reported_command,
        log=log,
        messages=parse_messages(log),
        kernels=parse_ptxas_resources(log, arch),
        duration_s=time.perf_counter() - started,
        timed_out=timed_out,
        output=output if ok else None,
    )


def toolchain_paths() -> tuple[Path, ...]:
    """What nvcc needs to see besides the system's programs and libraries: itself and the toolkit."""
    nvcc = find_nvcc()
    return (nvcc, toolkit_root(nvcc))


@cache
def toolkit_root(nvcc: Path) -> Path:
    """The CUDA toolkit nvcc belongs to (its TOP, which also holds cicc, ptxas and the CUDA headers)."""
    dry_run = subprocess.run([str(nvcc), "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, check=False)
    match = re.search(r"^#\$ TOP=(.+)$", dry_run.stdout + dry_run.stderr, re.MULTILINE)
    return Path(match[1]).resolve() if match else nvcc.resolve().parent.parent


@cache
def host_include_dirs() -> tuple[Path, ...]:
    """The host C++ compiler's system include folders (where `#include <cstdio>` is found)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return ()
    listing = subprocess.run([compiler, "-x", "c++", "-E", "-v", os.devnull], capture_output=True, text=True,
                             check=False).stderr
    block = listing.partition("#include <...> search starts here:")[2].partition("End of search list.")[0]
    return tuple(Path(line.strip()).resolve() for line in block.splitlines() if line.strip())


# The host compiler keeps its preprocessed input and the assembly it generates next to the object
# (`.candidate.o.123.ii` and `.s` for the object `.candidate.o.123.partial`); tools/host_code.py reads them.
HOST_ASSEMBLY_FLAGS = ("-Xcompiler", "-save-temps=obj")
_HOST_CODE_DIGEST = hashlib.sha256(Path(host_code.__file__).read_bytes()).hexdigest()[:16]


def _read_host_assembly(output: Path, source_dir: Path, fatbinary: Path) -> list[AssemblyBlock]:
    """The inline assembly of the host code the compile of `output` kept (tools/host_code.py); the kept files
    are removed. The candidate's own lines are those of files in `source_dir` (named relatively, as nvcc runs
    there), not nvcc's generated ones (`tmpxft_...`, and `fatbinary`, kept in a folder of its own)."""
    def candidate_file(name: str) -> bool:
        if name.startswith("/"):
            return Path(name).resolve().is_relative_to(source_dir)
        return not name.startswith(("<", "tmpxft_"))

    kept = {path.suffix: path for path in output.parent.glob(f".{output.name}.*") if path.suffix in (".ii", ".s")}
    try:
        preprocessed = kept[".ii"].read_text(errors="replace") if ".ii" in kept else ""
        assembly = kept[".s"].read_text(errors="replace") if ".s" in kept else ""
    finally:
        for path in kept.values():
            path.unlink(missing_ok=True)
    return [AssemblyBlock(file=f.file, line=f.line, text=f.text)
            for f in inline_assembly(preprocessed, assembly, candidate_file, str(fatbinary))]


def _renamed_lines(preprocessed: Path) -> list[AssemblyBlock]:
    """Line directives of the source that renamed its lines (tools/host_code.py `renamed_lines`), as blocks."""
    try:
        text = preprocessed.read_text(errors="replace")
    except OSError:
        return []  # no compile got that far: its errors say why
    return [AssemblyBlock(file=f.file, line=f.line, text=f.text) for f in host_code.renamed_lines(text)]


def _read_dependencies(dependency_file: Path, cwd: Path) -> list[str]:
    """The files a make-style dependency list names, normalised (see `CompileResult.dependencies`); the list
    file is removed."""
    try:
        text = dependency_file.read_text()
    except OSError:
        return []
    dependency_file.unlink(missing_ok=True)
    rule = text.replace("\\\n", " ").partition(":")[2]
    names = [name.replace("\\ ", " ") for name in re.findall(r"(?:\\ |\S)+", rule)]
    paths = [Path(os.path.normpath(cwd / name)) for name in names]
    return list(dict.fromkeys(str(p.relative_to(cwd)) if p.is_relative_to(cwd) else str(p) for p in paths))


# ---------------------------------------------------------------------------------------------------
# Log parsing
# ---------------------------------------------------------------------------------------------------
_FRONTEND = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>error|warning|remark)(?: #[\w-]+)?: (?P<text>.*)$"
)
_HOST_COMPILER = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?P<sev>fatal error|error|warning|note): (?P<text>.*)$"
)
_LD = r"(?:\S*/)?ld(?:\.\w+)?"
_TOOL = re.compile(
    rf"^(?P<tool>ptxas|nvcc|nvlink|fatbinary|collect2|{_LD})(?::\s*|\s+)(?P<sev>fatal error|fatal|error|warning)\s*: "
    r"(?P<text>.*)$"
)
_LINKER_CONTEXT = re.compile(rf"^{_LD}: .*in function [`'](?P<function>[^']+)':$")
_LINKER_AT_OBJECT = re.compile(r"^\S+?:\(\.[^)]*\): (?P<text>.*)$")  # "x.cpp:(.text+0x15): undefined ..."
_LINKER_OTHER = re.compile(rf"^{_LD}: (?P<text>.*)$")  # "ld: cannot find -lcublas: ..."
_SEVERITY: dict[str, Severity] = {
    "fatal error": "error",
    "fatal": "error",
    "error": "error",
    "warning": "warning",
    "remark": "remark",
    "note": "note",
}


def parse_messages(log: str) -> list[CompilerMessage]:
    """Diagnostics in log order; indented lines that follow one (source excerpt, caret, notes) join it."""
    messages: list[CompilerMessage] = []
    linker_function: str | None = None  # ld names the function on the line before its errors
    for raw in log.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        if match := _LINKER_CONTEXT.match(line):
            linker_function = match["function"]
        elif match := _LINKER_AT_OBJECT.match(line):
            where = f" (in {linker_function})" if linker_function else ""
            messages.append(CompilerMessage(file=None, line=None, severity="error", text=f"ld: {match['text']}{where}"))
        elif (message := _parse_message_line(line)) is not None:
            messages.append(message)
        elif raw[:1].isspace() and messages and not line.lstrip().startswith("ptxas"):
            messages[-1].text += "\n" + line
    return messages


def _parse_message_line(line: str) -> CompilerMessage | None:
    for pattern in (_FRONTEND, _HOST_COMPILER):
        if match := pattern.match(line):
            severity = _SEVERITY[match["sev"]]
            return CompilerMessage(file=match["file"], line=int(match["line"]), severity=severity, text=match["text"])
    if match := _TOOL.match(line):
        tool = match["tool"].rsplit("/", 1)[-1]
        return CompilerMessage(file=None, line=None, severity=_SEVERITY[match["sev"]], text=f"{tool}: {match['text']}")
    if match := _LINKER_OTHER.match(line):
        return CompilerMessage(file=None, line=None, severity="error", text=f"ld: {match['text']}")
    return None


_PTXAS_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PTXAS_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_PTXAS_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"Used (?P<registers>\d+) registers")
_PTXAS_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


@dataclass
class _KernelUsage:
    """ptxas's lines about one entry function, gathered as they appear."""

    arch: str
    registers: int = 0
    shared_memory_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_frame_bytes: int = 0


def parse_ptxas_resources(log: str, arch: str) -> list[KernelResources]:
    """Per-kernel registers, static shared memory, spills and stack from `-Xptxas -v` output."""
    kernels: dict[str, _KernelUsage] = {}
    compiling: str | None = None  # the entry function whose "Used N registers" line comes next
    properties_of: str | None = None  # the function whose stack/spill line comes next
    for line in log.splitlines():
        if match := _PTXAS_ENTRY.search(line):
            compiling = match["name"]
            kernels[compiling] = _KernelUsage(arch=match["arch"])
        elif match := _PTXAS_PROPERTIES.search(line):
            properties_of = match["name"]
        elif (match := _PTXAS_FRAME.search(line)) and properties_of in kernels:
            usage = kernels[properties_of]
            usage.stack_frame_bytes = int(match["stack"])
            usage.spill_store_bytes, usage.spill_load_bytes = int(match["stores"]), int(match["loads"])
            properties_of = None
        elif (match := _PTXAS_USED.search(line)) and compiling is not None:
            smem = _PTXAS_SMEM.search(line)
            kernels[compiling].registers = int(match["registers"])
            kernels[compiling].shared_memory_bytes = int(smem["smem"]) if smem else 0
            compiling = None
    names = demangle(list(kernels))
    return [
        KernelResources(name=names[mangled], mangled_name=mangled, **vars(usage)) for mangled, usage in kernels.items()
    ]


def demangle(names: list[str]) -> dict[str, str]:
    """C++ names for mangled ones via c++filt; a name stays as it is when c++filt is unavailable."""
    cxxfilt = shutil.which("c++filt")
    if not names or cxxfilt is None:
        return {name: name for name in names}
    completed = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, encoding="utf-8",
                               errors="replace", check=False)  # the names are the candidate's
    demangled = completed.stdout.splitlines()
    if completed.returncode != 0 or len(demangled) != len(names):
        return {name: name for name in names}
    return dict(zip(names, demangled, strict=True))


# ---------------------------------------------------------------------------------------------------
# Object cache
# ---------------------------------------------------------------------------------------------------
_HEADER_SUFFIXES = {".h", ".hpp", ".hh", ".cuh", ".inl"}
ELF_MAGIC = b"\x7fELF"  # how every object nvcc -c writes on Linux begins; a cached one that does not is damaged


def _cache_key(source: Path, include_dirs: list[Path], flags: list[str], version: str) -> str:
    """Hash of the source, every header in its folder and the include folders, the flags and nvcc.

    Hashing all local headers (rather than asking the preprocessor which ones are used) can only cause a
    needless miss, never a stale hit; system and CUDA headers are covered by the nvcc version. The work
    directory's path is left out so the same candidate built in another work directory hits; the include
    folders' paths are in, because the cached files-read check names them: a build cached by another
    install (another checkout sharing the cache) read another kb_abi.h, which this one's check refuses.
    """
    digest = hashlib.sha256()
    work_directory = source.parent.resolve()
    installs = [str(folder) for folder in (Path(d).resolve() for d in include_dirs) if folder != work_directory]
    for part in (version, "\0".join(flags), source.name, *installs):
        digest.update(part.encode() + b"\0")
    digest.update(source.read_bytes())
    for folder in dict.fromkeys(Path(d).resolve() for d in [source.parent, *include_dirs]):
        for header in sorted(p for p in folder.iterdir() if p.suffix in _HEADER_SUFFIXES and p.is_file()):
            digest.update(header.name.encode() + b"\0" + header.read_bytes())
    return digest.hexdigest()


def _load_cached(cache_dir: Path, key: str, output: Path) -> CompileResult | None:
    """The cached result of `key`, its object copied to `output`; None on a miss. A damaged entry (a killed
    writer, a full disk, a hand edit) is a miss too: the source is compiled again and the entry replaced."""
    try:
        result = CompileResult.model_validate_json((cache_dir / f"{key}.json").read_bytes())
        object_bytes = (cache_dir / f"{key}.o").read_bytes()
    except (OSError, ValidationError):
        return None
    if not (result.ok and object_bytes.startswith(ELF_MAGIC)):
        return None
    write_atomically(output, object_bytes)
    command = [*result.command[:-1], str(output.resolve())]
    return result.model_copy(update={"cached": True, "duration_s": 0.0, "output": output, "command": command})


def _store_cached(cache_dir: Path, key: str, result: CompileResult) -> None:
    assert result.output is not None
    write_atomically(cache_dir / f"{key}.o", result.output.read_bytes())
    write_atomically(cache_dir / f"{key}.json", result.model_dump_json().encode())

