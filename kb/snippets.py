"""The verified CUDA snippets shipped with the seed KB, and the starting point for a problem's first kernel.

A snippet is one file, `kb/seed/snippets/NAME.cu`: short, self-contained device code (no kb_problem.h) for
one core pattern, whose leading `//` comment says what it does and how to use it. Techniques refer to
snippets by NAME; the prompt slice shows the snippet of the top offered technique. Each snippet compiles on
its own and, appended with a problem's kb_forward, passes the harness on a small problem (tests/).

`starting_points_for(pytorch_source, precision)` gives the snippet a first kernel of a GEMM- or
convolution-shaped problem should build on (a tiled kernel, not the naive loop), with the catalogue technique
such a kernel applies (so that selection need not offer it again), then the alternative the precision policy
admits beside it (under `strict`, a GEMM's 3xTF32 tensor-core snippet); none for other problems.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Literal

from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.precision import PrecisionPolicy

SNIPPET_SUFFIX = ".cu"

ProblemKind = Literal["gemm", "convolution"]
# (snippet, the seed technique a kernel built on it applies) for each kind of problem.
STARTING_POINTS: dict[ProblemKind, tuple[str, str]] = {
    "gemm": ("tiled_sgemm", "tiled_sgemm_fp32"),
    "convolution": ("tiled_conv2d", "direct_conv_tiling"),
}
# Faster arithmetic a policy admits for a kind, offered beside its default: 3xTF32 stays within strict's fp32
# tolerance at up to 2-3x the FFMA throughput on large GEMMs.
ALTERNATIVE_STARTING_POINTS: dict[tuple[ProblemKind, PrecisionPolicy], tuple[str, str]] = {
    ("gemm", "strict"): ("gemm_3xtf32", "tf32x3_split"),
}

# Matched against the PyTorch source with comments and docstrings removed. Transposed convolutions are no
# direct convolution (their starting point would be a gather, which no snippet shows yet), so they match neither;
# nor do recurrent layers, whose time loop matters more than their matrix products.
_RECURRENT = re.compile(r"\bnn\.(?:LSTM|GRU|RNN)\b")
_CONVOLUTION = re.compile(r"\bnn\.Conv[123]d\b|\b(?:F|functional|torch)\.conv[123]d\s*\(")
_GEMM = re.compile(
    r"\bnn\.Linear\b|\b(?:F|functional)\.linear\s*\(|\btorch\.(?:matmul|mm|bmm|addmm|baddbmm|einsum)\s*\("
    r"|\.(?:matmul|mm|bmm)\s*\(|[\w)\]][ \t]*@[ \t]*[\w(]"
)
_COMMENT_OR_DOCSTRING = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|#[^\n]*')


@dataclass(frozen=True)
class Snippet:
    """A shipped snippet: its name, the first line of its comment (what it is), and its full source."""

    name: str
    summary: str
    source: str


def _snippet_directory() -> Traversable:
    return resources.files("kernelblaster.kb").joinpath("seed", "snippets")


@functools.cache
def snippet_names() -> frozenset[str]:
    """The names of every shipped snippet (file stems under kb/seed/snippets/)."""
    return frozenset(
        entry.name.removesuffix(SNIPPET_SUFFIX) for entry in _snippet_directory().iterdir()
        if entry.name.endswith(SNIPPET_SUFFIX)
    )


@functools.cache
def load_snippet(name: str) -> Snippet:
    """The snippet called `name`; KBLookupError if none is shipped under that name."""
    if name not in snippet_names():
        raise KBLookupError(f"no shipped snippet named {name!r} (known: {', '.join(sorted(snippet_names()))})")
    source = _snippet_directory().joinpath(name + SNIPPET_SUFFIX).read_text(encoding="utf-8")
    return Snippet(name=name, summary=source.splitlines()[0].removeprefix("//").strip(), source=source)


@dataclass(frozen=True)
class StartingPoint:
    """What a first kernel of a problem kind builds on: the snippet, and the technique that kernel applies."""

    kind: ProblemKind
    technique: str
    snippet: Snippet


def problem_kind(pytorch_source: str) -> ProblemKind | None:
    """What a KernelBench-style problem mostly computes, judged from its source: None for a recurrent layer,
    else convolution (any forward nn.ConvNd or conv call), else GEMM (Linear, matmul, mm, bmm, einsum, @),
    else None."""
    code = _COMMENT_OR_DOCSTRING.sub("", pytorch_source)
    if _RECURRENT.search(code):
        return None
    if _CONVOLUTION.search(code):
        return "convolution"
    if _GEMM.search(code):
        return "gemm"
    return None


def starting_point(kind: ProblemKind) -> StartingPoint:
    """What a first kernel of a problem of this kind starts from."""
    snippet, technique = STARTING_POINTS[kind]
    return StartingPoint(kind=kind, technique=technique, snippet=load_snippet(snippet))


def starting_points(kind: ProblemKind, precision: PrecisionPolicy) -> list[StartingPoint]:
    """The starting point of this kind, then the alternative the policy admits beside it, if any."""
    points = [starting_point(kind)]
    alternative = ALTERNATIVE_STARTING_POINTS.get((kind, precision))
    if alternative is not None:
        snippet, technique = alternative
        points.append(StartingPoint(kind=kind, technique=technique, snippet=load_snippet(snippet)))
    return points


def starting_points_for(pytorch_source: str, precision: PrecisionPolicy) -> list[StartingPoint]:
    """The starting points for the problem whose PyTorch source this is under `precision` (empty if its kind
    has none): the default first, then the policy's alternative."""
    kind = problem_kind(pytorch_source)
    return [] if kind is None else starting_points(kind, precision)
