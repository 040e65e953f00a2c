"""What a candidate's code may import: the one list the object check holds every candidate to.

A candidate's object, and the shared library built from it, may need from other libraries only the
symbols listed here (plus, for a library the run allows with --allow, that library's own). Anything else,
a glibc function nobody thought of included, is refused before the candidate runs. Each group says why
a kernel needs it. C names are matched exactly (glibc's symbol version, `@GLIBC_2.2.5`, removed); C++
names are matched demangled, by pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def _words(names: str) -> frozenset[str]:
    return frozenset(names.split())


def _with_float_variants(names: str) -> frozenset[str]:
    """Each math function with its float and long double forms (`sin`, `sinf`, `sinl`)."""
    return frozenset(f"{name}{suffix}" for name in names.split() for suffix in ("", "f", "l"))


@dataclass(frozen=True)
class ImportGroup:
    name: str
    why: str
    names: frozenset[str] = frozenset()  # exact C (or mangled) names
    patterns: tuple[str, ...] = ()  # regexes matched against the demangled name


IMPORT_GROUPS: tuple[ImportGroup, ...] = (
    ImportGroup(
        "linker_defined",
        "what the static linker and the C runtime's start-up files define for every shared library: the global "
        "offset table position-independent code reaches data through, and the library's handle that a "
        "function-local static's destructor is registered with",
        _words("_GLOBAL_OFFSET_TABLE_ __dso_handle"),
    ),
    ImportGroup(
        "cuda_launch",
        "nvcc's own code: registering the fatbinary and kernels when the library loads (and unregistering them "
        "at exit), the host stand-ins it writes for device functions (which call exit), and the stubs behind "
        "<<<>>>, cudaLaunchKernel(Ex) and cooperative launches",
        _words("__cudaRegisterFatBinary __cudaRegisterFatBinaryEnd __cudaUnregisterFatBinary __cudaRegisterFunction "
               "__cudaRegisterVar __cudaRegisterTexture __cudaRegisterSurface __cudaInitModule "
               "__cudaPushCallConfiguration __cudaPopCallConfiguration __cudaLaunchKernel __cudaGetKernel "
               "__cudaLaunch atexit exit "
               "cudaLaunchKernel cudaLaunchKernelExC cudaLaunchCooperativeKernel cudaGetKernel cudaGetFuncBySymbol "
               "cudaFuncSetAttribute cudaFuncGetAttributes cudaFuncSetCacheConfig cudaFuncSetSharedMemConfig "
               "cudaFuncGetName cudaOccupancyMaxActiveBlocksPerMultiprocessor "
               "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags cudaOccupancyAvailableDynamicSMemPerBlock "
               "cudaOccupancyMaxPotentialClusterSize cudaOccupancyMaxActiveClusters"),
    ),
    ImportGroup(
        "cuda_memory",
        "workspace on the device (also stream-ordered and from pools: the allocators here are the ones the "
        "workspace wrappers poison, so cudaMalloc3D and cudaMallocArray are left out), pinned host buffers "
        "(poisoned too), "
        "copies, memsets, __constant__ and __device__ symbols, texture and surface objects over linear memory",
        _words("cudaMalloc cudaMallocAsync cudaMallocFromPoolAsync cudaMallocPitch cudaFree "
               "cudaFreeAsync cudaMallocHost cudaHostAlloc cudaFreeHost cudaMemGetInfo cudaPointerGetAttributes "
               "cudaMemcpy cudaMemcpyAsync cudaMemcpy2D cudaMemcpy2DAsync cudaMemcpy3D cudaMemcpy3DAsync "
               "cudaMemcpyPeer cudaMemcpyPeerAsync cudaMemcpyToSymbol cudaMemcpyToSymbolAsync cudaMemcpyFromSymbol "
               "cudaMemcpyFromSymbolAsync cudaMemset cudaMemsetAsync cudaMemset2D cudaMemset2DAsync cudaMemset3D "
               "cudaMemset3DAsync cudaGetSymbolAddress cudaGetSymbolSize cudaDeviceGetDefaultMemPool "
               "cudaDeviceGetMemPool cudaMemPoolCreate cudaMemPoolDestroy cudaMemPoolSetAttribute "
               "cudaMemPoolGetAttribute cudaMemPoolTrimTo cudaCreateChannelDesc cudaCreateTextureObject "
               "cudaDestroyTextureObject "
               "cudaCreateSurfaceObject cudaDestroySurfaceObject"),
    ),
    ImportGroup(
        "cuda_streams",
        "ordering work: streams (joined back to kb_forward's), events, L2 access-policy windows on a stream, "
        "and CUDA graphs of kernel, copy, memset, event and memory-free nodes (no host nodes; no allocation "
        "nodes, whose memory the workspace wrappers cannot poison: cudaMallocAsync in a captured stream is "
        "poisoned)",
        _words("cudaStreamCreate cudaStreamCreateWithFlags cudaStreamCreateWithPriority cudaStreamDestroy "
               "cudaStreamSynchronize cudaStreamQuery cudaStreamWaitEvent cudaStreamGetPriority cudaStreamGetFlags "
               "cudaStreamGetAttribute cudaStreamSetAttribute cudaStreamBeginCapture cudaStreamEndCapture "
               "cudaStreamIsCapturing cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v2 "
               "cudaStreamGetCaptureInfo_v3 cudaThreadExchangeStreamCaptureMode cudaDeviceGetStreamPriorityRange "
               "cudaEventCreate cudaEventCreateWithFlags cudaEventRecord cudaEventRecordWithFlags "
               "cudaEventSynchronize cudaEventQuery cudaEventDestroy cudaEventElapsedTime cudaEventElapsedTime_v2 "
               "cudaCtxResetPersistingL2Cache "
               "cudaGraphCreate cudaGraphDestroy cudaGraphClone cudaGraphInstantiate cudaGraphInstantiateWithFlags "
               "cudaGraphInstantiateWithParams cudaGraphLaunch cudaGraphUpload cudaGraphExecDestroy "
               "cudaGraphExecUpdate cudaGraphAddKernelNode cudaGraphKernelNodeGetParams "
               "cudaGraphKernelNodeSetParams cudaGraphExecKernelNodeSetParams cudaGraphAddMemcpyNode "
               "cudaGraphAddMemcpyNode1D cudaGraphAddMemsetNode cudaGraphAddEmptyNode cudaGraphAddChildGraphNode "
               "cudaGraphAddEventRecordNode cudaGraphAddEventWaitNode "
               "cudaGraphAddMemFreeNode cudaGraphAddDependencies cudaGraphGetNodes cudaGraphNodeGetType"),
    ),
    ImportGroup(
        "cuda_device_queries",
        "choosing a kernel's shape for the GPU it runs on, and reporting errors",
        _words("cudaGetDevice cudaGetDeviceCount cudaGetDeviceProperties cudaGetDeviceProperties_v2 "
               "cudaDeviceGetAttribute cudaDeviceSynchronize cudaGetLastError cudaPeekAtLastError cudaGetErrorString "
               "cudaGetErrorName cudaDeviceGetLimit cudaDeviceSetLimit cudaDeviceGetCacheConfig "
               "cudaDeviceSetCacheConfig cudaDeviceGetSharedMemConfig cudaDeviceSetSharedMemConfig "
               "cudaDriverGetVersion cudaRuntimeGetVersion"),
    ),
    ImportGroup(
        "math",
        "host-side arithmetic (tile sizes, scale factors, reference constants)",
        _with_float_variants(
            "sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh sincos exp exp2 exp10 expm1 log "
            "log2 log10 log1p pow sqrt cbrt hypot fabs fmod remainder remquo floor ceil trunc round lround llround "
            "rint lrint llrint nearbyint fmin fmax fdim fma erf erfc tgamma lgamma frexp ldexp modf scalbn scalbln "
            "ilogb logb copysign nextafter nan") | _words("__isnan __isnanf __isinf __isinff __finite __finitef "
                                                          "__fpclassify __fpclassifyf __signbit __signbitf"),
    ),
    ImportGroup(
        "memory_and_strings",
        "host memory, copies, string handling and number parsing; glibc's checked (_chk) forms are what the "
        "host compiler emits for the same calls",
        _words("malloc calloc realloc free aligned_alloc posix_memalign memcpy memmove memset memcmp memchr strlen "
               "strnlen strcmp strncmp strcpy strncpy strcat strncat strchr strrchr strstr strtol strtoul strtoll "
               "strtoull strtof strtod strtold atoi atol atoll atof abs labs llabs qsort bsearch abort sscanf "
               "__isoc99_sscanf __isoc23_sscanf __isoc23_strtol __isoc23_strtoul __isoc23_strtoll __isoc23_strtoull "
               "__memcpy_chk __memmove_chk __memset_chk __strcpy_chk __strncpy_chk __strcat_chk __strncat_chk "
               "__stack_chk_fail __assert_fail __errno_location __ctype_b_loc __ctype_tolower_loc "
               "__ctype_toupper_loc"),
    ),
    ImportGroup(
        "printing",
        "messages on the standard streams, which the launcher points at stderr (never the protocol); a stream's "
        "own locale, never the process's (std::locale::global, like setlocale, is not listed)",
        _words("printf fprintf vprintf vfprintf puts fputs putchar fputc putc fwrite fflush perror snprintf sprintf "
               "vsnprintf vsprintf __printf_chk __fprintf_chk __vprintf_chk __vfprintf_chk __sprintf_chk "
               "__snprintf_chk __vsprintf_chk __vsnprintf_chk stdout stderr"),
        (r"^std::(?:cout|cerr|clog)$", r"^std::basic_ostream<char", r"^std::ostream::", r"^std::__ostream_insert",
         r"^std::endl<", r"^std::flush<", r"^std::basic_ios<char", r"^std::ios_base::", r"^std::ctype<char>::",
         r"^std::locale::(?!global\()", r"^std::basic_streambuf<char",
         r"^std::__cxx11::basic_(?:o|i)?stringstream<char", r"^std::__cxx11::basic_stringbuf<char",
         r"^(?:VTT|vtable|typeinfo) for std::(?:__cxx11::)?basic_"
         r"(?:o|i)?(?:stringstream|stringbuf|ostream|ios|streambuf)<char"),
    ),
    ImportGroup(
        "cxx_runtime",
        "what C++ templates and language features need from libstdc++ and libgcc: operator new and delete, "
        "exceptions, function-local statics, std::string and the node containers' out-of-line parts, thread-"
        "local variables, locks",
        _words("__cxa_atexit __cxa_guard_acquire __cxa_guard_release __cxa_guard_abort __cxa_allocate_exception "
               "__cxa_free_exception __cxa_throw __cxa_begin_catch __cxa_end_catch __cxa_rethrow __cxa_pure_virtual "
               "__cxa_deleted_virtual __cxa_bad_cast __cxa_bad_typeid __cxa_throw_bad_array_new_length "
               "__cxa_call_terminate __cxa_thread_atexit __gxx_personality_v0 _Unwind_Resume __tls_get_addr "
               "pthread_mutex_lock pthread_mutex_unlock pthread_once __once_proxy"),
        (r"^operator (?:new|delete)(?:\[\])?\(", r"^std::__throw_\w+\(", r"^std::__glibcxx_assert_fail\(",
         r"^std::terminate\(\)$", r"^typeinfo (?:name )?for ", r"^vtable for __cxxabiv1::",
         r"^(?:vtable for )?std::(?:exception|bad_alloc|bad_array_new_length|bad_cast|bad_function_call|"
         r"runtime_error|logic_error|out_of_range|invalid_argument|length_error|overflow_error|range_error|"
         r"domain_error)\b",
         r"^std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::",
         r"^std::__cxx11::to_string\(", r"^std::_Rb_tree_(?:increment|decrement|insert_and_rebalance|"
         r"rebalance_for_erase)\(", r"^std::_Hash_bytes\(", r"^std::__detail::_Prime_rehash_policy::",
         r"^std::__detail::_List_node_base::", r"^std::chrono::_V2::(?:steady|system)_clock::now\(\)$",
         r"^std::__once_call(?:able)?$"),
    ),
)

# What the trusted parts of every candidate's link bring along, whoever wrote the candidate: the C runtime's
# start-up files (weak references the dynamic loader fills or leaves null). The candidate's own object may not
# import them.
LINK_IMPORTS = _words("_ITM_deregisterTMCloneTable _ITM_registerTMCloneTable __gmon_start__ __cxa_finalize")

ALLOWED_WORDS = "the CUDA runtime, math, memory and string functions, printing to stdout/stderr and the C++ runtime"


def plain_name(symbol: str) -> str:
    """The name without its symbol version (`memcpy@GLIBC_2.14` -> `memcpy`)."""
    return symbol.split("@", 1)[0]


def is_listed(name: str, demangled: str, library_patterns: tuple[str, ...] = ()) -> bool:
    """True when a candidate may import `name` (`demangled`: its C++ name, or the name itself), or it belongs
    to a library the run allows (`library_patterns`, searched in the demangled name)."""
    name, demangled = plain_name(name), plain_name(demangled)
    for group in IMPORT_GROUPS:
        if name in group.names or any(re.search(pattern, demangled) for pattern in group.patterns):
            return True
    return any(re.search(pattern, demangled) for pattern in library_patterns)
