"""Manifest of the hand-written example kernels and what the harness must decide about each.

Plain data, no tests: GPU tests evaluate every case on a real GPU, CPU tests check that every file named here
exists and compiles. Paths are absolute (resolved from this file), so the manifest works from any directory.

- `EXAMPLES`: each example problem with a naive and a fast correct candidate.
- `REJECTED`: cheating kernels; `expected_checks` holds the verification check(s) allowed to be the *first* to
  fail (checks run in `CHECK_ORDER` and stop at the first failure).
- `ACCEPTED`: unusual but correct kernels that must pass every check.
- `SANITIZED`: kernels that pass every check but one compute-sanitizer checker finds at fault (`--sanitize`).

KernelBench is read from $KERNELBLASTER_KERNELBENCH (default: ../shared/kernelbench beside the repository).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
KERNELBENCH = Path(os.environ.get("KERNELBLASTER_KERNELBENCH", REPO_ROOT.parent / "shared" / "kernelbench"))
EXAMPLES_DIR = REPO_ROOT / "examples"
PROBLEMS_DIR = EXAMPLES_DIR / "problems"

# The harness's verification checks, in the order it runs them (harness/result.py CHECK_ORDER).
CHECK_ORDER: tuple[str, ...] = (
    "static", "compile", "runs", "outputs_written", "correct", "inputs_unchanged", "deterministic",
    "no_caching", "special_values", "sanitizer", "stream_escape", "timed_outputs", "extra_verification", "roofline",
)


def _problem(name: str) -> Path:
    return PROBLEMS_DIR / f"{name}.py"


SWISH = _problem("elementwise_swish_scale")
SOFTMAX = _problem("softmax_rows")
GEMM = _problem("gemm_bias_relu")
BATCHNORM = _problem("batchnorm_train")


@dataclass(frozen=True)
class ExampleCase:
    """A problem with a simple correct candidate and a faster correct one."""

    problem: Path
    naive: Path
    fast: Path

    @property
    def id(self) -> str:
        return self.problem.stem


@dataclass(frozen=True)
class CheatCase:
    """A kernel the harness must reject, first failing one of `expected_checks`."""

    candidate: Path
    problem: Path
    expected_checks: frozenset[str]
    description: str

    @property
    def id(self) -> str:
        return self.candidate.stem


@dataclass(frozen=True)
class AcceptCase:
    """An unusual but correct kernel the harness must accept."""

    candidate: Path
    problem: Path
    description: str

    @property
    def id(self) -> str:
        return self.candidate.stem


@dataclass(frozen=True)
class SanitizerCase:
    """A kernel that passes verification, which compute-sanitizer's `tool` must find at fault, its report's
    first finding starting with `finding`."""

    candidate: Path
    problem: Path
    tool: str
    finding: str
    description: str

    @property
    def id(self) -> str:
        return self.candidate.stem


def _example(problem: Path) -> ExampleCase:
    directory = EXAMPLES_DIR / "candidates" / problem.stem
    return ExampleCase(problem=problem, naive=directory / "naive.cu", fast=directory / "fast.cu")


def _cheat(name: str, problem: Path, expected: set[str], description: str) -> CheatCase:
    return CheatCase(EXAMPLES_DIR / "cheaters" / f"{name}.cu", problem, frozenset(expected), description)


def _accept(name: str, problem: Path, description: str) -> AcceptCase:
    return AcceptCase(EXAMPLES_DIR / "unusual" / f"{name}.cu", problem, description)


EXAMPLES: tuple[ExampleCase, ...] = tuple(_example(problem) for problem in (SWISH, SOFTMAX, GEMM, BATCHNORM))

REJECTED: tuple[CheatCase, ...] = (
    _cheat("unwritten_output", SWISH, {"outputs_written"},
           "launches nothing; the output keeps the poison pattern"),
    _cheat("partial_output", SWISH, {"outputs_written"},
           "writes only the first half of the output"),
    _cheat("cached_output", SWISH, {"no_caching"},
           "computes the first call's result, then copies that cached result on every later call"),
    _cheat("constant_output", SOFTMAX, {"correct"},
           "fills every element with 1/cols (rows sum to 1, input ignored)"),
    _cheat("zero_output", GEMM, {"correct"},
           "memsets the ReLU output to zero"),
    _cheat("input_mutation", SWISH, {"inputs_unchanged"},
           "correct output, but also overwrites the input x with the result"),
    _cheat("side_stream_escape", GEMM, {"stream_escape"},
           "correct GEMM on a private stream never joined back to `stream`; events on `stream` miss it"),
    _cheat("stale_workspace", SWISH, {"deterministic", "no_caching"},
           "later calls copy a new cudaMallocAsync allocation into the output, hoping for the first call's bytes"),
    _cheat("data_race", SOFTMAX, {"correct", "deterministic"},
           "row sum accumulated into one shared float by unsynchronised read-modify-writes (loses most terms)"),
    _cheat("wrong_for_special_values", SOFTMAX, {"special_values"},
           "softmax without max subtraction: exp overflows for inputs scaled by 1e3"),
    _cheat("nan_dropping_relu", GEMM, {"special_values"},
           "ReLU as fmaxf(v, 0), which turns NaN into 0 where torch.relu keeps NaN"),
    _cheat("degrades_after_warmup", SWISH, {"timed_outputs"},
           "correct for the calls verification makes, then writes half the output in the timed calls"),
)

ACCEPTED: tuple[AcceptCase, ...] = (
    _accept("two_streams_joined", SWISH,
            "half the work on a side stream, forked from and joined back to `stream` with events"),
    _accept("dynamic_shared_memory", SOFTMAX,
            "two rows per block staged in 64 KB of extern __shared__ memory (cudaFuncSetAttribute opt-in)"),
    _accept("async_workspace", SOFTMAX,
            "row statistics in cudaMallocAsync workspace, fully written before read, freed with cudaFreeAsync"),
    _accept("multi_kernel", GEMM,
            "three kernels per call: tiled GEMM, in-place bias add, in-place ReLU"),
)

SANITIZED: tuple[SanitizerCase, ...] = (
    SanitizerCase(EXAMPLES_DIR / "sanitizer" / "out_of_bounds_read.cu", SWISH, "memcheck",
                  "Invalid __global__ read of size 4 bytes",
                  "correct, but the last thread of each block reads one float past its own 1 KiB table"),
    SanitizerCase(EXAMPLES_DIR / "sanitizer" / "racy_shared_memory.cu", SOFTMAX, "racecheck", "Error: Race reported",
                  "correct softmax whose warps exchange partials in shared memory behind a hand-made barrier"),
    SanitizerCase(EXAMPLES_DIR / "sanitizer" / "reads_output_before_writing.cu", SWISH, "initcheck",
                  "Uninitialized __global__ memory read",
                  "correct, but each thread reads the output element it is about to write before writing it"),
)
