"""The check of a compiled candidate (its object and its linked library), and the catalogue of forbidden API
families that names the reasons.

The boundary is an allowlist (tools/allowed_imports.py): the object and its library may import only what
is listed there (or belongs to a library the run allows), so a glibc function nobody thought of is refused
like a listed one. The object may not carry code that runs when its library loads (init, fini and preinit
arrays by section type or name, IFUNC resolvers), except nvcc's own registration constructor (and, before
GCC 13, <iostream>'s initialiser; what both do is checked in the host compiler's assembly,
tools/host_code.py), nor define names the harness reserves or the trusted code linked with it calls; its
sections are code, data and constants alone (an allowlist of names and flags); the library exports
kb_forward alone.

The catalogue lists the API families candidates may not use (files, processes and signals, raw system
calls, environment, threads, dynamic loading and symbol lookup, IPC, profiler control, device control,
host callbacks, managed memory, a changed default stream) and the libraries a run may allow. It is the
readable early warning: the source check (harness/static_check.py) applies it to the source text, and a
refused import that it knows gets its reason (also under glibc's internal aliases, `__libc_system`,
`_IO_popen`, `__open64_2`); for header-only libraries the symbols the object defines give them away.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from kernelblaster.tools.allowed_imports import ALLOWED_WORDS, LINK_IMPORTS, is_listed, plain_name
from kernelblaster.tools.elf import (
    SHF_ALLOC,
    SHF_EXECINSTR,
    SHF_WRITE,
    SHT_FINI_ARRAY,
    SHT_GROUP,
    SHT_INIT_ARRAY,
    SHT_NOBITS,
    SHT_NOTE,
    SHT_NULL,
    SHT_PREINIT_ARRAY,
    SHT_PROGBITS,
    SHT_RELA,
    SHT_STRTAB,
    SHT_SYMTAB,
    SHT_SYMTAB_SHNDX,
    SHT_X86_64_UNWIND,
    STB_LOCAL,
    STT_COMMON,
    STT_GNU_IFUNC,
    STT_OBJECT,
    STT_SECTION,
    STT_TLS,
    ElfFile,
    Relocation,
)
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.host_code import LOAD_TIME_CALLS
from kernelblaster.tools.nvcc import demangle


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
        rule="library_allocation",
        message="allocate device memory through a library (the legacy cublasAlloc): the workspace wrappers do not "
                "poison it; allocate workspace with cudaMalloc or cudaMallocAsync",
        functions=_words("cublasAlloc"),
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
    # cuBLAS's legacy allocator is not the library's to allow (`library_allocation`).
    Library("cublas", "cuBLAS", r"^cublas\w*\.h$", r"^cublas(?!Alloc$)", ("cublas", "cublasLt"), "cublas_v2.h"),
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
    """A symbol or section of the candidate's object or library that breaks a rule."""

    rule: str
    symbol: str
    message: str


# Names the trusted parts of the link define or use: a candidate defining one would take the place of the
# harness's own (its workspace wrappers, the driver's poison flag and entry, the C runtime's _init/_fini).
_RESERVED = re.compile(r"^(?:kb_poison_workspace|kb_driver_main|__wrap_\w+|__real_\w+|_init|_fini)$")
# Names of the implementation (`__x`, `_X`; C++'s mangled `_Z...` are the compiler's names for the candidate's
# own): the C library's static parts and the C runtime's start-up files linked into every library call some
# (libc_nonshared.a's atexit calls __cxa_atexit, crtbeginS.o __cxa_finalize), and a definition would take them.
_IMPLEMENTATION_NAME = re.compile(r"^(?:__|_[A-Y])")
# nvcc registers the fatbinary and kernels from one static constructor of its own in every object.
_NVCC_CONSTRUCTORS = frozenset({"_ZL24__sti____cudaRegisterAllv", "__sti____cudaRegisterAll"})
# Before GCC 13, `#include <iostream>` gives every object a static std::ios_base::Init and the initialiser that
# constructs it and registers its destructor; an initialiser that refers to nothing else is that alone.
_IOSTREAM_INIT_REFERENCES = frozenset({"_ZNSt8ios_base4InitC1Ev", "_ZNSt8ios_base4InitD1Ev", "__cxa_atexit",
                                       "__dso_handle", "_ZStL8__ioinit"})
_LOAD_TIME_NAMES = re.compile(r"^\.(?:init|fini)$|^\.(?:init_array|fini_array|preinit_array|ctors|dtors)(?:\.|$)")
# The sections a compiled candidate is made of: the host compiler's and nvcc's own, and what a `section` attribute
# may name (code, data, constants, thread-local data). Any other is read by the linker or the loader as
# instructions, not content: data in a `.rela.*` section becomes the library's dynamic relocations (an IRELATIVE
# one calls a function when the library loads, also under the name of a real relocation section, `.rela.text`),
# `.gnu.lto_*` is compiled at link time past every check of the object. Code only in `.text` sections, never
# writable; no data object in them (machine code as data, called through a pointer, is inline assembly by
# another name).
_CONTENT_SECTIONS = re.compile(r"\.(?:text|data|bss|rodata|tdata|tbss|gcc_except_table)(?:\..+)?"
                               r"|\.(?:eh_frame|comment|note\.GNU-stack|nv_fatbin|nvFatBinSegment)|__nv_module_id")
_BOOKKEEPING_SECTIONS = {SHT_SYMTAB: (".symtab",), SHT_STRTAB: (".strtab", ".shstrtab"), SHT_GROUP: (".group",),
                         SHT_SYMTAB_SHNDX: (".symtab_shndx",), SHT_NOTE: (".note.gnu.property",),
                         SHT_X86_64_UNWIND: (".eh_frame",)}
_CODE_SECTIONS = re.compile(r"\.text(?:\..+)?")
_DATA_SYMBOL_TYPES = frozenset({STT_OBJECT, STT_COMMON, STT_TLS})
LOAD_TIME_HINT = ("make the object a function-local static (created on first use) or a plain pointer set up in "
                  "kb_forward")


def undefined_symbols(object_path: Path) -> list[str]:
    """Demangled names the object needs from elsewhere, weak references included."""
    needed = [symbol.name for symbol in ElfFile(object_path).symbols() if symbol.name and not symbol.defined]
    names = demangle(needed)
    return [names[name] for name in needed]


def check_object(object_path: Path, allow: frozenset[str], linked_with: frozenset[str] = frozenset()
                 ) -> list[SymbolViolation]:
    """Violations in a compiled candidate object: imports that are not listed (tools/allowed_imports.py),
    library code it was built from, names reserved for the harness or called by the trusted code linked into
    its library (the C runtime's start-up files' and `linked_with`: the linker would bind their calls to the
    candidate's definition, such as __gmon_start__, which _init calls at load), code that would run when its
    library loads (anything in the init and fini arrays besides nvcc's own registration, whatever the section
    is called; IFUNC resolvers) and sections that are not code, data or constants."""
    elf = ElfFile(object_path)
    symbols = elf.symbols()
    needed = [symbol.name for symbol in symbols if symbol.name and not symbol.defined]
    defined = [symbol for symbol in symbols if symbol.name and symbol.defined]
    names = demangle([*needed, *(symbol.name for symbol in defined)])
    violations = [v for name in needed if (v := import_violation(name, names[name], allow)) is not None]
    seen = {v.rule for v in violations}
    for symbol in defined:
        violation = _library_violation(names[symbol.name], allow)
        if violation is not None and violation.rule not in seen:
            seen.add(violation.rule)
            violations.append(violation)
        if symbol.binding != STB_LOCAL and _RESERVED.match(symbol.name):
            violations.append(SymbolViolation(
                rule="reserved_name", symbol=symbol.name,
                message=f"the object defines {symbol.name}, a name the harness reserves; rename it"))
        elif plain_name(symbol.name) in LOAD_TIME_CALLS or (
                symbol.binding == STB_LOCAL and not symbol.name.startswith("_Z") and is_listed(symbol.name,
                                                                                              names[symbol.name])):
            # A local one too: the assembler binds the object's own calls of a name to a label of it (a top-level
            # asm's `__cudaRegisterFatBinaryEnd: ...` took nvcc's registration's call at load). A global
            # definition of another listed name (`fputs`) changes only the candidate's own calls.
            violations.append(SymbolViolation(
                rule="reserved_name", symbol=symbol.name,
                message=f"the object defines {symbol.name}, a name of the libraries it may call that its own "
                        "load-time or launch code calls; rename it"))
        elif symbol.binding != STB_LOCAL and _IMPLEMENTATION_NAME.match(symbol.name):
            violations.append(SymbolViolation(
                rule="reserved_name", symbol=symbol.name,
                message=f"the object defines {symbol.name}, a name reserved for the C and C++ implementation (the "
                        "toolchain's own objects linked into its library call such names, e.g. atexit calls "
                        "__cxa_atexit); rename it, or make it static"))
        elif symbol.binding != STB_LOCAL and plain_name(symbol.name) in LINK_IMPORTS | linked_with:
            violations.append(SymbolViolation(
                rule="reserved_name", symbol=symbol.name,
                message=f"the object defines {symbol.name}, which the trusted code linked into its library calls "
                        "(the workspace wrappers, the C runtime's start-up files); rename it, or make it static"))
        if symbol.type == STT_GNU_IFUNC:
            violations.append(SymbolViolation(
                rule="load_time_code", symbol=names[symbol.name],
                message=f"{names[symbol.name]} is an IFUNC, whose resolver runs when the library loads; candidates "
                        "may not run code at load time"))
    return violations + load_time_code(elf) + unlisted_sections(elf)


def unlisted_sections(elf: ElfFile) -> list[SymbolViolation]:
    """Sections of the object that are not code, data, constants or the compiler's bookkeeping (init, fini and
    preinit arrays are load_time_code's), code sections by another name or writable, and data objects defined
    in code sections."""
    violations = []
    for section in elf.sections:
        if section.type in (SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY) or _LOAD_TIME_NAMES.match(section.name):
            continue
        if not _listed_section(elf, section.index):
            violations.append(SymbolViolation(
                rule="object_section", symbol=section.name,
                message=f"the object has a section {section.name} (type {section.type}), which the linker or the "
                        "loader would read as instructions: candidates may place code and data only in .text*, "
                        ".data*, .rodata* and .bss* sections"))
        elif section.flags & SHF_EXECINSTR and (section.flags & SHF_WRITE
                                                or not _CODE_SECTIONS.fullmatch(section.name)):
            violations.append(SymbolViolation(
                rule="object_section", symbol=section.name,
                message=f"the object has executable code in {section.name}, which is not a read-only .text section: "
                        "candidates may not make data executable"))
    for symbol in elf.symbols():
        if (symbol.type in _DATA_SYMBOL_TYPES and 0 < symbol.section < len(elf.sections)
                and elf.sections[symbol.section].flags & SHF_EXECINSTR):
            where = elf.sections[symbol.section].name
            violations.append(SymbolViolation(
                rule="object_section", symbol=symbol.name,
                message=f"the object puts the data {symbol.name} in the code section {where}: candidates may not "
                        "run data as machine code (host code may not contain assembly in any spelling)"))
    return violations


def _listed_section(elf: ElfFile, index: int) -> bool:
    """Whether section `index` is one a compiled candidate is made of (a relocation section: of such a section)."""
    section = elf.sections[index]
    if section.type == SHT_NULL:
        return index == 0
    if section.type in (SHT_PROGBITS, SHT_NOBITS):
        return _CONTENT_SECTIONS.fullmatch(section.name) is not None
    if section.type == SHT_RELA:
        target = elf.sections[section.info] if 0 < section.info < len(elf.sections) else None
        if target is None or target.type == SHT_RELA:
            return False
        # The assembler's relocations are not loaded; a loaded one (data named `.rela.text`) joins the library's
        # dynamic relocations.
        return (section.name == f".rela{target.name}" and not section.flags & SHF_ALLOC
                and (target.type in (SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY)
                     or _LOAD_TIME_NAMES.match(target.name) is not None or _listed_section(elf, target.index)))
    return section.name in _BOOKKEEPING_SECTIONS.get(section.type, ())


def load_time_code(elf: ElfFile) -> list[SymbolViolation]:
    """Entries of the object's init, fini and preinit arrays (by section type or name) other than nvcc's own
    registration constructor and <iostream>'s initialiser, and `.init`/`.fini` code."""
    violations = []
    for section in elf.sections:
        by_type = section.type in (SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY)
        if not (by_type or _LOAD_TIME_NAMES.match(section.name)) or section.name.startswith(".rela"):
            continue
        entries = elf.relocations(section)
        targets = [_target_name(elf, relocation) for relocation in entries]
        others = [name for relocation, name in zip(entries, targets, strict=True)
                  if name not in _NVCC_CONSTRUCTORS and not _only_iostream_init(elf, relocation)]
        expected = (section.name == ".init_array" and section.type == SHT_INIT_ARRAY
                    and section.size == 8 * len(entries) and sum(name in _NVCC_CONSTRUCTORS for name in targets) <= 1)
        if expected and not others:
            continue
        functions = [_describe_function(name) for name in others] or [section.name]
        violations.append(SymbolViolation(
            rule="load_time_code", symbol=section.name,
            message=f"{', '.join(functions)} would run when the library loads or unloads (a constructor, "
                    f"destructor or global object with one; section {section.name}): candidates may not run code "
                    f"at load time; {LOAD_TIME_HINT}"))
    return violations


def _only_iostream_init(elf: ElfFile, entry: Relocation) -> bool:
    """Whether an init array entry is the initialiser of <iostream>'s std::ios_base::Init and nothing else."""
    symbol = entry.symbol
    function = elf.function_at(symbol.section, entry.addend) if symbol.type == STT_SECTION else next(
        (s for s in elf.symbols() if s.name == symbol.name and s.defined), None)
    if function is None or not function.name.startswith("_GLOBAL__sub_I_") or function.size == 0:
        return False
    inside = [r for r in elf.relocations(elf.sections[function.section])
              if function.value <= r.offset < function.value + function.size]
    return bool(inside) and all(elf.target(r) in _IOSTREAM_INIT_REFERENCES for r in inside)


def _describe_function(name: str) -> str:
    """A load-time function as a reader knows it: the compiler's initialiser of global objects by what it is."""
    if name.startswith("_GLOBAL__sub_I_"):
        return "the initialisation of a global object with a constructor"
    if name.startswith("_GLOBAL__sub_D_"):
        return "the destruction of a global object"
    return demangle([name])[name]


def _target_name(elf: ElfFile, relocation: Relocation) -> str:
    """The function a relocation points at (through its section symbol and offset when it names no function)."""
    symbol = relocation.symbol
    if symbol.type == STT_SECTION:
        function = elf.function_at(symbol.section, relocation.addend)
        return function.name if function is not None else f"code at {elf.sections[symbol.section].name}+" \
                                                           f"{relocation.addend:#x}"
    return symbol.name


def check_library(library_path: Path, allow: frozenset[str]) -> list[SymbolViolation]:
    """Violations in the candidate's linked shared library: it exports kb_forward alone, and imports nothing
    but the listed symbols and what the trusted parts of the link need."""
    dynamic = [symbol for symbol in ElfFile(library_path).symbols(dynamic=True) if symbol.name]
    exported = sorted({s.name for s in dynamic if s.defined and s.binding != STB_LOCAL} - {"kb_forward"})
    needed = [s.name for s in dynamic if not s.defined and plain_name(s.name) not in LINK_IMPORTS]
    names = demangle(needed)
    violations = [v for name in needed if (v := import_violation(name, names[name], allow)) is not None]
    if exported:
        violations.append(SymbolViolation(
            rule="exports", symbol=exported[0],
            message=f"the candidate's library exports {', '.join(exported[:5])}: it may export kb_forward alone"))
    return violations


def import_violation(name: str, demangled: str, allow: frozenset[str]) -> SymbolViolation | None:
    """Why importing `name` is refused, or None when it is listed; a name in the catalogue of forbidden API
    families gets its family's reason, a library's symbol the --allow that permits it."""
    patterns = tuple(library.symbol_pattern for library in LIBRARIES if library.name in allow)
    if is_listed(name, demangled, patterns):
        return None
    shown = plain_name(demangled)
    return (_api_violation(shown) or _library_violation(shown, allow)
            or SymbolViolation(rule="unlisted_import", symbol=shown,
                               message=f"the object calls {shown}, which it does not define and which is not on the "
                                       f"list of what candidates may call ({ALLOWED_WORDS}; tools/allowed_imports.py)"))


def find_symbol_violations(symbols: Iterable[str], allow: frozenset[str]) -> list[SymbolViolation]:
    """Violations among undefined symbols (demangled names), one per symbol, in the order given."""
    return [v for symbol in symbols if (v := import_violation(symbol, symbol, allow)) is not None]


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
