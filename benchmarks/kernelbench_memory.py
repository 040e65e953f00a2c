"""Benchmark: the harness at KernelBench's scale. For every problem of a KernelBench-layout directory, the
problem's spec bytes and memory plan, its PyTorch eager baseline, and the evaluation of a candidate that
writes zeros to every output (benchmarks/zero_output.cu; the expected verdict is `incorrect`, at the
`correct` check, where its evaluation stops), with the peak GPU memory in use meanwhile (all processes,
sampled every 10 ms) and the wall time of the GPU work. Then totals: problems that reached a verdict,
verdicts by kind, harness errors.

The candidates are compiled ahead on the CPU, several at a time, while the GPU works through the problems
one by one; a problem then costs a second or two of GPU time, and a level runs in a few minutes:

    PYTHONUNBUFFERED=1 python benchmarks/kernelbench_memory.py .kernelbench --level 1 --problems 1-50 \\
        --json-out level1-a.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kernelblaster.harness.build import driver_library
from kernelblaster.harness.evaluate import CandidateBuild, CandidateEvaluator, EvalOptions, TooLarge, detect_arch
from kernelblaster.harness.memory_plan import GIB
from kernelblaster.harness.problem import load_problem
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.sandbox import require_sandbox

ZERO_CANDIDATE = Path(__file__).resolve().parent / "zero_output.cu"
SAMPLE_SECONDS = 0.01
BUILD_WORKERS = max(1, min(8, (os.cpu_count() or 2) // 2))


@dataclass
class ProblemRow:
    problem: str
    spec_gib: float | None = None  # inputs + params + outputs
    plan: str = ""
    peak_gib: float | None = None  # device memory in use at its highest, over what was in use before
    eager_ms: float | None = None
    verdict: str = ""
    detail: str = ""
    seconds: float = 0.0  # the GPU work: plan, baseline and evaluation
    build_seconds: float = 0.0  # nvcc, ahead of time on the CPU


class PeakMemory:
    """The most device memory in use (every process) while the block runs, sampled in a thread."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu
        self._stop = threading.Event()
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def in_use(self) -> int:
        free, total = torch.cuda.mem_get_info(self.gpu)
        return total - free

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self.in_use())
            time.sleep(SAMPLE_SECONDS)


def problem_paths(root: Path, levels: list[int], numbers: range | None) -> list[Path]:
    paths = []
    for level in levels:
        folder = root / f"level{level}"
        if not folder.is_dir():
            raise SystemExit(f"kernelbench_memory: {folder} is not a directory (pass a KernelBench-layout directory)")
        for path in sorted(folder.glob("*.py"), key=_number):
            if numbers is None or _number(path) in numbers:
                paths.append(path)
    return paths


def _number(path: Path) -> int:
    found = re.match(r"(\d+)_", path.name)
    return int(found.group(1)) if found else 0


@dataclass
class Prepared:
    """A problem whose evaluator is made and whose candidate is building (or why neither happened)."""

    path: Path
    evaluator: CandidateEvaluator | None
    build: Future[CandidateBuild] | None
    error: str = ""


def prepare(path: Path, options: EvalOptions, zero_source: str, builders: ThreadPoolExecutor) -> Prepared:
    try:
        evaluator = CandidateEvaluator(load_problem(path), options)
    except UserFacingError as error:
        return Prepared(path, None, None, str(error))
    return Prepared(path, evaluator, builders.submit(evaluator.build, zero_source, ZERO_CANDIDATE.name))


def measure(prepared: Prepared) -> ProblemRow:
    row = ProblemRow(problem=f"{prepared.path.parent.name}/{prepared.path.stem}")
    if prepared.evaluator is None or prepared.build is None:
        row.verdict, row.detail = "error", prepared.error
        return row
    evaluator = prepared.evaluator
    built = prepared.build.result()
    row.build_seconds = built.build.seconds
    started = time.perf_counter()
    try:
        with PeakMemory(evaluator.options.gpu) as memory:
            before = memory.in_use()
            plan = evaluator.plan
            row.spec_gib = plan.sizes.set_bytes / GIB
            row.plan = f"{plan.rotating_sets} sets, {plan.references}" if plan.fits else "too large"
            row.eager_ms = evaluator.baseline().eager.median_ms
            result = built.result or evaluator.verify(built)
            row.verdict, row.detail = result.verdict, result.summary
        row.peak_gib = (memory.peak_bytes - before) / GIB
    except TooLarge as error:
        row.verdict, row.detail = "too_large", str(error)
    except UserFacingError as error:
        row.verdict, row.detail = "error", str(error)
    except Exception as error:  # the benchmark counts what escapes the harness: there should be none
        row.verdict, row.detail = "uncaught", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    row.seconds = time.perf_counter() - started
    return row


def render(row: ProblemRow) -> str:
    spec = f"{row.spec_gib:6.2f} GiB" if row.spec_gib is not None else "       -  "
    peak = f"{row.peak_gib:6.2f} GiB" if row.peak_gib is not None else "       -  "
    eager = f"{row.eager_ms:9.3f} ms" if row.eager_ms is not None else "         - "
    line = f"{row.problem:<58} spec {spec}  peak {peak}  {row.plan:<16} eager {eager}  {row.verdict:<13} " \
           f"{row.seconds:6.1f} s (build {row.build_seconds:.1f} s)"
    return line if row.verdict in ("incorrect", "ok") else f"{line}\n    {row.detail[:400]}"


def totals(rows: list[ProblemRow]) -> dict[str, object]:
    verdicts = Counter(row.verdict for row in rows)
    reached = sum(n for verdict, n in verdicts.items() if verdict not in ("harness_error", "uncaught", "error"))
    return {"problems": len(rows), "reached_a_verdict": reached, "verdicts": dict(verdicts),
            "harness_errors": verdicts["harness_error"] + verdicts["uncaught"],
            "gpu_seconds": round(sum(row.seconds for row in rows), 1)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernelbench", type=Path, help="a directory with level1/ level2/ level3/ problem files")
    parser.add_argument("--level", type=int, choices=(1, 2, 3), action="append", help="level(s) to run (all)")
    parser.add_argument("--problems", type=_range, help="problem numbers, e.g. 1-20 or 19 (all)")
    parser.add_argument("--compile-baseline", action=argparse.BooleanOptionalAction, default=False,
                        help="also time torch.compile (default: eager only, to keep each problem short)")
    parser.add_argument("--seeds", type=int, default=2, help="verification seeds (2)")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one candidate call may take")
    parser.add_argument("--json-out", type=Path, help="write every row and the totals here")
    return parser.parse_args(argv)


def _range(text: str) -> range:
    found = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
    if not found:
        raise argparse.ArgumentTypeError("expected N or N-M")
    first = int(found.group(1))
    return range(first, int(found.group(2) or first) + 1)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("kernelbench_memory: needs an NVIDIA GPU")
    paths = problem_paths(args.kernelbench, args.level or [1, 2, 3], args.problems)
    # The usual cache: the driver is compiled once for all chunks (an eager time cached by an earlier chunk
    # is reused, and its memory not measured again).
    options = EvalOptions(seeds=args.seeds, gpu=args.gpu, compile_baseline=args.compile_baseline,
                          timeout_s=args.timeout)
    zero_source = ZERO_CANDIDATE.read_text()
    print(f"{len(paths)} problems on {torch.cuda.get_device_name(args.gpu)}; cache {options.cache_dir}", flush=True)
    started = time.perf_counter()
    # once, before the parallel builds
    driver_library(detect_arch(args.gpu), options.cache_dir / "objects", require_sandbox(options.unsafe_no_sandbox))
    rows = []
    with ThreadPoolExecutor(BUILD_WORKERS) as builders:
        pending = [prepare(path, options, zero_source, builders) for path in paths]
        while pending:
            rows.append(measure(pending.pop(0)))  # popped: its evaluator (and references) go with it
            gc.collect()
            torch.cuda.empty_cache()
            print(render(rows[-1]), flush=True)
    summary = totals(rows) | {"wall_seconds": round(time.perf_counter() - started, 1)}
    print(f"reached a verdict: {summary['reached_a_verdict']} / {summary['problems']}; harness errors: "
          f"{summary['harness_errors']}; verdicts: {summary['verdicts']}; GPU work {summary['gpu_seconds']} s, "
          f"wall {summary['wall_seconds']} s", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(args.gpu), "totals": summary,
                                             "rows": [asdict(row) for row in rows]}, indent=2))
    return 0 if summary["reached_a_verdict"] == summary["problems"] and not summary["harness_errors"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
