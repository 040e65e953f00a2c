"""Write a verified kernel out of KernelBlaster: a PyTorch package or a KernelBench submission file.

`prepare_export` reads a problem and a candidate (the problem is imported and described on the meta device,
so no GPU is needed) into a `KernelExport`; `export_torch` writes a package directory (the kernel source, its
generated `kb_problem.h`, the ABI header, a generated C++ binding, the problem's source, `kernel.json`, and an
`__init__.py` that builds the kernel on first use and registers it as a `torch.library.custom_op`);
`export_kernelbench` writes one file in KernelBench's format (`ModelNew` over `load_inline` sources, the
headers inlined). Both refuse to overwrite what they did not write.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from kernelblaster.harness.header import c_identifier, generate_header
from kernelblaster.harness.precision import PrecisionPolicy, tolerance_for
from kernelblaster.harness.spec import ProblemSpec, TensorSpec
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import read_text_file, write_text_atomically

HERE = Path(__file__).resolve().parent
ABI_HEADER = HERE.parent / "driver" / "kb_abi.h"
EXPORT_FORMATS = ("torch", "kernelbench")
MARKER = "kernelblaster export"  # kernel.json's `exported_by`: a directory --force may replace
# torch.utils.cpp_extension compiles CUDA with these macros defined (it keeps half arithmetic out of its own
# sources, names the extension, relaxes constexpr); the harness compiled the candidate without them, so they are
# undefined again (the flags come after torch's). A kernel that tested them, or the C++ standard (torch's default
# is C++20 where no -std is given), could be correct in the harness and do something else once exported.
UNDEFINE_TORCH_MACROS = ("-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                         "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
                         "-UTORCH_EXTENSION_NAME", "-UTORCH_API_INCLUDE_EXTENSION_H", "-U__CUDACC_RELAXED_CONSTEXPR__")
_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"(kb_problem\.h|kb_abi\.h)"[^\n]*$', re.MULTILINE)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*\n", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
_ARCH = re.compile(r"sm_(\d{2,3})[af]?")
# KernelBench's static checker refuses a submission with these words outside comments (it reads a fallback to
# PyTorch into them); its comments are what follows `#` or `//` on a line.
_KERNELBENCH_REFUSED = re.compile(r"\btry\s*:|\bexcept\s*:|\bexcept\s+\w+|\bpass\b")


class ExportError(UserFacingError):
    """An export that cannot be written as asked: the message names the path or the input."""


@dataclass(frozen=True)
class KernelExport:
    """One kernel, with everything an export writes about it."""

    problem_source: str
    spec: ProblemSpec
    header: str
    source: str
    source_sha256: str
    arch: str
    precision: PrecisionPolicy
    allow: tuple[str, ...]
    # Whether the kernel comes from a run that measured it correct; a candidate file given to export directly
    # was checked by nothing, and its files must not say otherwise.
    verified: bool = False

    @property
    def name(self) -> str:
        return self.spec.problem_name

    @property
    def identifier(self) -> str:
        """Names the op and the built extension: the problem, and the kernel's source and arch (two exports of
        different kernels can be loaded in one process)."""
        return f"kb_{c_identifier(self.name).lower()}_{self.source_sha256[:10]}_{self.arch}"

    @property
    def nvcc_flags(self) -> list[str]:
        from kernelblaster.tools.nvcc import CODE_FLAGS, arch_flags

        # The harness's own flags (optimisation, standard, host compiler's options such as the stack protector,
        # which defines a macro).
        return [*CODE_FLAGS, *arch_flags(self.arch), *UNDEFINE_TORCH_MACROS]

    @property
    def link_flags(self) -> list[str]:
        from kernelblaster.tools.symbols import link_libraries

        return [f"-l{name}" for name in link_libraries(frozenset(self.allow))]


def prepare_export(problem_path: Path, candidate_path: Path, *, arch: str, precision: PrecisionPolicy,
                   allow: tuple[str, ...] = (), verified: bool = False) -> KernelExport:
    """The problem (imported and described on the meta device, or the CPU) and the candidate, ready to write;
    `verified`: the candidate is a run's kernel measured correct."""
    import hashlib

    from kernelblaster.harness.analysis import spec_for_problem
    from kernelblaster.harness.problem import load_problem

    if not _ARCH.fullmatch(arch):
        raise ExportError(f"unknown GPU arch {arch!r}: expected a name like sm_90")
    source = read_text_file(candidate_path, "the candidate", ExportError)
    if not re.search(r"\bkb_forward\b", source):
        raise ExportError(f"{candidate_path}: defines no kb_forward (not a KernelBlaster candidate)")
    problem = load_problem(problem_path)
    spec = spec_for_problem(problem, gpu=None)
    return KernelExport(problem_source=problem.source, spec=spec, header=generate_header(spec), source=source,
                        source_sha256=hashlib.sha256(source.encode()).hexdigest(), arch=arch, precision=precision,
                        allow=allow, verified=verified)


def check_out(export_format: str, out: Path, force: bool) -> None:
    """Refuse an `--out` the export could not write or must not replace (before any work is done)."""
    if export_format == "torch":
        if not out.name.isidentifier() or keyword.iskeyword(out.name):
            raise ExportError(f"--out {out}: a Python package is named by its directory, and {out.name!r} is not a "
                              "Python name (letters, digits and _, not starting with a digit)")
        _check_replaceable_directory(out, force)
        return
    if out.is_dir():
        raise ExportError(f"--out {out}: is a directory; name the .py file to write")
    if out.exists() and not force:
        raise ExportError(f"--out {out}: exists (add --force to replace it)")


def export_torch(kernel: KernelExport, out: Path, *, force: bool = False) -> list[Path]:
    """Write the package directory `out` (its name is the package's); the files written."""
    package = out.name
    check_out("torch", out, force)
    files = {
        "__init__.py": _render("package_init.py.txt", {
            "PROBLEM": kernel.name, "PACKAGE": package, "OP": kernel_op_name(kernel, package).replace("::", "."),
            "ARCH": kernel.arch, "PRECISION": kernel.precision, "VERIFIED": verification_note(kernel)}),
        "problem.py": kernel.problem_source,
        "kernel.cu": kernel.source,
        "kb_problem.h": kernel.header,
        "kb_abi.h": ABI_HEADER.read_text(),
        "binding.cpp": binding_source(kernel, abi='#include "kb_abi.h"', module=_PYBIND_MODULE),
        "kernel.json": json.dumps(_kernel_record(kernel, package), indent=1) + "\n",
    }
    staging = out.parent / f".{out.name}.export-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        for name, text in files.items():
            (staging / name).write_text(text)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise ExportError(f"--out {out}: cannot be written ({error.strerror or error})") from None
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return [out / name for name in files]


def export_kernelbench(kernel: KernelExport, out: Path, *, force: bool = False) -> Path:
    """Write the KernelBench submission file `out`."""
    check_out("kernelbench", out, force)
    write_text_atomically(out, kernelbench_source(kernel))
    return out


def kernelbench_source(kernel: KernelExport) -> str:
    forward_constants = [(c.origin, c.text) for c in kernel.spec.constants if c.kind == "forward"]
    return _render("kernelbench.py.txt", {
        "PROBLEM": kernel.name, "ARCH": kernel.arch, "PRECISION": kernel.precision,
        "SOURCE_SHA256": kernel.source_sha256, "PROBLEM_SHA256": kernel.spec.problem_sha256,
        "PROBLEM_SOURCE": kernel.problem_source.rstrip("\n"), "VERIFIED": verification_note(kernel),
        "CUDA_SOURCE": _python_literal(inline_headers(kernel.source, kernel.header, ABI_HEADER.read_text())),
        "BINDING_SOURCE": _python_literal(binding_source(kernel, abi=_inlined_abi(), module="")),
        "EXTENSION": kernel.identifier, "NVCC_FLAGS": repr(kernel.nvcc_flags), "LINK_FLAGS": repr(kernel.link_flags),
        "FORWARD_CONSTANTS": repr(forward_constants), "OUTPUT_IS_TUPLE": repr(kernel.spec.output_is_tuple),
        "PROBLEM_LITERAL": repr(kernel.name)})


def verification_note(kernel: KernelExport) -> str:
    """One sentence for the exported files: what checked the kernel, and where it runs (no line breaks)."""
    checked = (f"Verified by KernelBlaster under the '{kernel.precision}' precision policy, in the run it was "
               "exported from." if kernel.verified else
               "Not verified: it was exported from a file, not from a run that measured it correct.")
    return (f"{checked} It runs in your own process, outside KernelBlaster's sandbox, as code a model wrote: "
            "read it before you run it.")


def kernelbench_refused_lines(text: str) -> list[str]:
    """Lines KernelBench's static checker would refuse the file for (`try:`, `except`, `pass` outside comments):
    the problem's own source or the kernel's can hold them."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0].split("//", 1)[0]
        if _KERNELBENCH_REFUSED.search(code):
            found.append(f"line {number}: {line.strip()}")
    return found


def kernel_op_name(kernel: KernelExport, package: str) -> str:
    """The op's name: its package's, so two packages of one kernel can be imported in one process (an op name is
    registered once), and the kernel's source."""
    return f"kernelblaster::{package}_{kernel.source_sha256[:10]}"


def inline_headers(source: str, header: str, abi: str) -> str:
    """The candidate as one translation unit: its `#include "kb_problem.h"` (or `"kb_abi.h"`) replaced by the
    header's text, each header once."""
    texts = {"kb_abi.h": _PRAGMA_ONCE.sub("", abi).strip("\n"),
             "kb_problem.h": _LOCAL_INCLUDE.sub("", _PRAGMA_ONCE.sub("", header)).strip("\n")}
    emitted: list[str] = []

    def headers_for(name: str) -> str:
        # kb_problem.h includes kb_abi.h: the ABI comes first, whichever the candidate included
        wanted = ["kb_abi.h"] if name == "kb_abi.h" else ["kb_abi.h", "kb_problem.h"]
        new = [n for n in wanted if n not in emitted]
        emitted.extend(new)
        return "\n".join(f"// ---- {n} (inlined) ----\n{texts[n]}" for n in new)

    inlined = _LOCAL_INCLUDE.sub(lambda match: headers_for(match.group(1)) or f"// {match.group(0).strip()}: "
                                 "inlined above", source)
    if not emitted:  # a candidate that declares the ABI itself still gets the constants
        inlined = headers_for("kb_problem.h") + "\n" + inlined
    return inlined


def binding_source(kernel: KernelExport, *, abi: str, module: str) -> str:
    """The C++ binding: `forward(inputs, params) -> outputs`, checking every tensor (see binding.cpp.txt)."""
    match = _ARCH.fullmatch(kernel.arch)
    assert match is not None  # prepare_export checked it
    digits = match.group(1)
    spec = kernel.spec
    return _render("binding.cpp.txt", {
        "PROBLEM": _c_text(kernel.name), "ARCH": kernel.arch, "ARCH_MAJOR": str(int(digits[:-1])),
        "ARCH_MINOR": digits[-1], "ABI": abi, "MODULE": module,
        "INPUTS": _expected_rows("input", spec.inputs), "PARAMS": _expected_rows("parameter/buffer", spec.params),
        "OUTPUTS": _expected_rows("output", spec.outputs)})


# As load_inline declares its functions: wrap_pybind_function turns a c10 error into the Python exception it names
# (TORCH_CHECK_VALUE into ValueError ...), without the C++ backtrace.
_PYBIND_MODULE = """
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", torch::wrap_pybind_function(forward),
        "run the kernel: inputs (forward order), params (state_dict order) -> outputs");
}
"""


def _inlined_abi() -> str:
    return "// ---- kb_abi.h (inlined) ----\n" + _PRAGMA_ONCE.sub("", ABI_HEADER.read_text()).strip("\n")


def _expected_rows(role: str, tensors: list[TensorSpec]) -> str:
    from kernelblaster.harness.dtypes import dtype_info

    rows = []
    for tensor in tensors:
        shape = ", ".join(str(size) for size in tensor.shape)
        rows.append(f'  {{"{role}", "{_c_text(tensor.name)}", {dtype_info(tensor.dtype).code}, {len(tensor.shape)}, '
                    f"{{{shape}}}}},  // {tensor.dtype}")
    return "\n".join(rows)


def _c_text(text: str) -> str:
    """`text` for the inside of a C string literal (json's escapes are C's for these characters)."""
    return json.dumps(text, ensure_ascii=True)[1:-1]


def _python_literal(text: str) -> str:
    """A Python literal of `text`, as a readable raw triple-quoted string where that can hold it."""
    if '"""' not in text and not text.endswith("\\") and "\r" not in text:
        return 'r"""' + text + '"""'
    return repr(text)


def _render(template: str, values: dict[str, str]) -> str:
    text = (HERE / template).read_text()
    missing = sorted(set(_PLACEHOLDER.findall(text)) - set(values))
    assert not missing, f"{template}: no value for {missing}"
    # one pass: text put in (a problem's source, a kernel's) is never read for placeholders
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], text)


def _kernel_record(kernel: KernelExport, package: str) -> dict[str, object]:
    import torch

    from kernelblaster.harness.dtypes import dtype_info

    tolerances = {out.name: tolerance_for(dtype_info(out.dtype).torch_dtype, kernel.precision).model_dump()
                  for out in kernel.spec.outputs}
    return {"exported_by": MARKER, "kernelblaster": _version(), "torch_at_export": torch.__version__,
            "problem": kernel.name, "problem_sha256": kernel.spec.problem_sha256,
            "source_sha256": kernel.source_sha256, "arch": kernel.arch, "precision": kernel.precision,
            "verified_in_run": kernel.verified,
            "tolerances": tolerances, "allow": list(kernel.allow), "op": kernel_op_name(kernel, package),
            "extension": kernel.identifier, "nvcc_flags": kernel.nvcc_flags, "link_flags": kernel.link_flags,
            "spec": kernel.spec.model_dump()}


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("kernelblaster")
    except metadata.PackageNotFoundError:
        return "unknown"


def _check_replaceable_directory(out: Path, force: bool) -> None:
    if not out.exists() and not out.is_symlink():
        return
    if not force:
        raise ExportError(f"--out {out}: exists (add --force to replace it)")
    if out.is_symlink() or not out.is_dir() or not _is_export(out):
        raise ExportError(f"--out {out}: exists and is not a package KernelBlaster exported; not replacing it")


def _is_export(directory: Path) -> bool:
    try:
        record = json.loads((directory / "kernel.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("exported_by") == MARKER
