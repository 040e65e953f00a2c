"""Symbol check of a compiled candidate object (`nm -C`), with the catalogue it enforces.

The catalogue lists the API families candidates may not use (files, processes and signals, raw system
calls, environment, threads, dynamic loading and symbol lookup, IPC, profiler control, device control,
host callbacks, managed memory, a changed default stream) and the libraries a run may allow. The object
check catches uses that a macro hides from the source check (harness/static_check.py applies the same
catalogue to the source text): the functions the object needs from elsewhere, weak
references included (`nm` prints them `w`/`v`), also under glibc's internal aliases (`__libc_system`,
`_IO_popen`, `__open64_2`), and, for header-only libraries, the symbols the object defines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from kernelblaster.tools.errors import UserFacingError


def _words(names: str) -> tuple[str, ...]:
    return tuple(names.split())


@dataclass(frozen=True)
class ForbiddenApi:
    """A family of calls candidates may not make, with what gives each one away in source and object."""

    rule: str
    message: str  # completes "candidates may not ..."
    functions: tuple[str, ...]  # C functions: flagged as calls in the source and as undefined symbols
    object_only_functions: tuple[str, ...] = ()  # names too common (a device `write`) to flag in source
    headers: tuple[str, ...] = ()  # includes whose only purpose is the family
    source_patterns: tuple[str, ...] = ()  # regexes for C++ facilities in comment- and string-free source
    symbol_patterns: tuple[str, ...] = ()  # regexes searched in demangled undefined symbols


@dataclass(frozen=True)
class Library:
    """A library a run may allow (`--allow NAME`); otherwise its headers and symbols are violations."""

    name: str
    display_name: str
    include_pattern: str  # regex matched against the path inside #include <...>
    symbol_pattern: str  # regex searched in every demangled symbol (defined ones give header-only libraries away)
    link_names: tuple[str, ...]  # -l names when allowed
    header: str  # the header a program using it includes (to check that it is installed)


FORBIDDEN_APIS: tuple[ForbiddenApi, ...] = (
    ForbiddenApi(
        rule="file_io",
        message="touch files, file descriptors or standard input (the driver's protocol)",
        functions=_words(
            "fopen freopen fdopen opendir creat mkdir rmdir unlink dprintf vdprintf mmap "
            "truncate ftruncate mkstemp tmpfile scanf getchar gets"
        ),
        object_only_functions=_words(
            "open openat openat2 read write pread pwrite readv writev close dup dup2 dup3 remove "
            "rename fcntl ioctl lseek"
        ),
        headers=("fstream", "filesystem"),
        source_patterns=(
            r"\b(?:basic_)?[io]?fstream\b",
            r"\bfilebuf\b",
            r"\bstd\s*::\s*filesystem\b",
            r"\bstdin\b",
            r"\bstd\s*::\s*w?cin\b",
        ),
        symbol_patterns=(
            r"^std::(?:__cxx11::)?basic_(?:[io]?fstream|filebuf)",
            r"^std::__basic_file",
            r"^std::filesystem::",
            r"^(?:stdin|std::w?cin)$",
        ),
    ),
    ForbiddenApi(
        rule="process",
        message="start or signal processes",
        functions=_words(
            "system popen fork vfork execl execle execlp execv execve execveat execvp execvpe fexecve posix_spawn "
            "posix_spawnp memfd_create killpg sigqueue pidfd_open pidfd_send_signal proc_open"
        ),
        object_only_functions=_words("kill tgkill tkill waitpid clone clone3 ptrace prctl"),
        headers=("spawn.h", "sys/wait.h"),
    ),
    ForbiddenApi(
        rule="system_call",
        message="make system calls directly (syscall(), or the syscall/svc instruction)",
        functions=("syscall",),
    ),
    ForbiddenApi(
        rule="environment",
        message="read or change environment variables",
        functions=_words("getenv secure_getenv setenv unsetenv putenv clearenv"),
        source_patterns=(r"\b_*environ\b",),
        symbol_patterns=(r"^_*environ$",),
    ),
    ForbiddenApi(
        rule="threads",
        message="start threads",
        functions=_words("pthread_create thrd_create"),
        headers=("thread", "future", "pthread.h", "threads.h", "omp.h"),
        source_patterns=(r"\bstd\s*::\s*j?thread\b", r"\bstd\s*::\s*async\b"),
        symbol_patterns=(r"^std::j?thread::", r"^std::__future_base", r"^GOMP_", r"^omp_"),
    ),
    ForbiddenApi(
        rule="dynamic_loading",
        message="load code or look up functions at run time",
        functions=_words(
            "dlopen dlmopen dlsym dlvsym dladdr dlinfo dl_iterate_phdr getauxval cudaGetDriverEntryPoint "
            "cudaGetDriverEntryPointByVersion cuGetProcAddress"
        ),
        headers=("dlfcn.h", "link.h", "elf.h", "sys/auxv.h"),
        source_patterns=(r"\b_r_debug\b", r"\b_DYNAMIC\b", r"\blink_map\b", r"\bElfW\s*\(", r"\bElf(?:32|64)_\w+"),
        symbol_patterns=(r"^_r_debug$", r"^_DYNAMIC$"),
    ),
    ForbiddenApi(
        rule="ipc",
        message="use inter-process communication (CUDA IPC, shared memory, sockets)",
        functions=_words("shm_open shmget shmat mq_open socket socketpair"),
        object_only_functions=_words("pipe connect bind"),
        headers=("sys/shm.h", "sys/ipc.h", "sys/socket.h", "mqueue.h"),
        source_patterns=(r"\bcudaIpc\w*", r"\bcuIpc\w*"),
        symbol_patterns=(r"^cudaIpc", r"^cuIpc"),
    ),
    ForbiddenApi(
        rule="profiler_control",
        message="start or stop the profiler (the harness decides what is profiled)",
        functions=_words("cudaProfilerStart cudaProfilerStop cuProfilerStart cuProfilerStop"),
        headers=("cuda_profiler_api.h", "cudaProfiler.h"),
    ),
    ForbiddenApi(
        rule="device_control",
        message="reset or select devices or contexts (the harness owns the device)",
        functions=_words(
            "cudaDeviceReset cudaThreadExit cudaSetDevice cudaSetDeviceFlags "
            "cudaSetValidDevices cudaInitDevice cuCtxCreate cuCtxDestroy cuCtxSetCurrent "
            "cuCtxPushCurrent cuDevicePrimaryCtxReset cuDevicePrimaryCtxRelease"
        ),
        symbol_patterns=(r"^cuCtx(?:Create|Destroy)_v\d+$",),
    ),
    ForbiddenApi(
        rule="host_callbacks",
        message="run host code from the GPU's work queue (host functions, stream callbacks, host graph nodes)",
        functions=_words(
            "cudaLaunchHostFunc cudaStreamAddCallback cudaGraphAddHostNode cudaGraphHostNodeSetParams "
            "cudaGraphExecHostNodeSetParams cuLaunchHostFunc cuStreamAddCallback cuGraphAddHostNode "
            "cuGraphHostNodeSetParams cuGraphExecHostNodeSetParams"
        ),
        source_patterns=(r"\bcudaGraphNodeTypeHost\b", r"\bCU_GRAPH_NODE_TYPE_HOST\b", r"\bcudaHostNodeParams\b"),
    ),
    ForbiddenApi(
        rule="managed_memory",
        message="use managed (unified) memory; allocate workspace with cudaMalloc or cudaMallocAsync",
        functions=_words("cudaMallocManaged cuMemAllocManaged"),
        source_patterns=(r"\b__managed__\b",),
        symbol_patterns=(r"^__cudaRegisterManagedVar",),
    ),
    ForbiddenApi(
        rule="default_stream",
        message="change the default stream (launch on the stream kb_forward is given)",
        functions=(),
        source_patterns=(r"\bCUDA_API_PER_THREAD_DEFAULT_STREAM\b",),
        symbol_patterns=(r"^cu\w*_pt(?:sz|ds)$",),
    ),
)

LIBRARIES: tuple[Library, ...] = (
    Library("cublas", "cuBLAS", r"^cublas\w*\.h$", r"^cublas", ("cublas", "cublasLt"), "cublas_v2.h"),
    Library("cudnn", "cuDNN", r"^cudnn\w*\.h$", r"^cudnn", ("cudnn",), "cudnn.h"),
    Library("cutlass", "CUTLASS/CuTe", r"^(?:cutlass|cute)/", r"\b(?:cutlass|cute)::", (), "cutlass/cutlass.h"),
    Library("cufft", "cuFFT", r"^cufft\w*\.h$", r"^cufft", ("cufft",), "cufft.h"),
    Library("curand", "cuRAND host API", r"^curand\.h$", r"^curand(?!_)", ("curand",), "curand.h"),
    Library("cusparse", "cuSPARSE", r"^cusparse\w*\.h$", r"^cusparse", ("cusparse",), "cusparse.h"),
    Library("cusolver", "cuSOLVER", r"^cusolver\w*\.h$", r"^cusolver", ("cusolver",), "cusolverDn.h"),
)


def validate_allow(allow: Iterable[str]) -> frozenset[str]:
    """The allowed library names, or a UserFacingError naming an unknown one."""
    known = {library.name for library in LIBRARIES}
    unknown = sorted(set(allow) - known)
    if unknown:
        raise UserFacingError(f"unknown library {unknown[0]!r} to allow; known: {', '.join(sorted(known))}")
    return frozenset(allow)


def link_libraries(allow: frozenset[str]) -> list[str]:
    """The -l names that the allowed libraries need."""
    return [name for library in LIBRARIES if library.name in allow for name in library.link_names]


class SymbolViolation(BaseModel):
    """A forbidden function or library symbol the candidate object refers to."""

    rule: str
    symbol: str
    message: str


def object_symbols(object_path: Path) -> list[tuple[str, str]]:
    """(nm type letter, demangled name) of every symbol in the object (`nm -C`)."""
    nm = shutil.which("nm")
    if nm is None:
        raise UserFacingError("nm not found: install binutils (it checks what a compiled candidate calls)")
    completed = subprocess.run([nm, "-C", str(object_path)], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise UserFacingError(f"nm could not read {object_path}: {completed.stderr.strip()}")
    # Lines read "<value or blanks> T name"; demangled C++ names contain spaces, so split after the type.
    symbols = []
    for line in completed.stdout.splitlines():
        match = re.match(r"^(?:[0-9a-fA-F]+| *) (?P<type>\S) (?P<name>.+)$", line)
        if match:
            symbols.append((match["type"], match["name"]))
    return symbols


def undefined_symbols(object_path: Path) -> list[str]:
    """Demangled names the object needs from elsewhere, weak references (`w`, `v`) included."""
    return _needed_and_defined(object_path)[0]


_UNDEFINED = frozenset("Uwv")


def _needed_and_defined(object_path: Path) -> tuple[list[str], list[str]]:
    symbols = object_symbols(object_path)
    return ([name for kind, name in symbols if kind in _UNDEFINED],
            [name for kind, name in symbols if kind not in _UNDEFINED])


def check_object_symbols(object_path: Path, allow: frozenset[str]) -> list[SymbolViolation]:
    """Violations in what a compiled candidate object calls, and library code it was built from."""
    needed, defined = _needed_and_defined(object_path)
    violations = find_symbol_violations(needed, allow)
    seen = {v.rule for v in violations}
    for name in defined:
        violation = _library_violation(name, allow)
        if violation is not None and violation.rule not in seen:
            seen.add(violation.rule)
            violations.append(violation)
    return violations


def find_symbol_violations(symbols: Iterable[str], allow: frozenset[str]) -> list[SymbolViolation]:
    """Violations among undefined symbols, one per symbol, in the order given."""
    violations: list[SymbolViolation] = []
    for symbol in symbols:
        violation = _api_violation(symbol) or _library_violation(symbol, allow)
        if violation is not None:
            violations.append(violation)
    return violations


def _api_violation(symbol: str) -> SymbolViolation | None:
    name = _plain_function_name(symbol)
    for api in FORBIDDEN_APIS:
        if name in api.functions or name in api.object_only_functions or _search_any(api.symbol_patterns, symbol):
            return SymbolViolation(
                rule=api.rule, symbol=symbol, message=f"the object calls {symbol}: candidates may not {api.message}"
            )
    return None


def _library_violation(symbol: str, allow: frozenset[str]) -> SymbolViolation | None:
    for library in LIBRARIES:
        if library.name in allow:
            continue
        if re.search(library.symbol_pattern, symbol):
            return SymbolViolation(
                rule=f"library:{library.name}",
                symbol=symbol,
                message=f"the object calls {symbol} from {library.display_name}, which this run does not allow "
                f"(allow it with --allow {library.name})",
            )
    return None


def _plain_function_name(symbol: str) -> str:
    """The C function behind glibc's fortified, large-file, cancellation-free and internal variants
    (`__open64_2` -> `open`, `__libc_system` -> `system`, `_IO_popen` -> `popen`)."""
    name = symbol.split("@", 1)[0]
    fortified = re.fullmatch(r"__(\w+?)_(?:chk|2)", name)
    if fortified:
        name = fortified[1]
    name = re.sub(r"^(?:__libc_|_IO_|_+)", "", name).removesuffix("_nocancel")
    return name.removesuffix("64") if name.endswith("64") and name[:-2] else name


def _search_any(patterns: Iterable[str], text: str) -> bool:
    return any(re.search(pattern, text) for pattern in patterns)
