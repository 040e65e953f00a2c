"""Benchmark: the harness at KernelBench's scale. For every problem of a KernelBench-layout directory, the
problem's spec bytes and memory plan, its PyTorch eager baseline, and a full evaluation of a candidate that
writes zeros to every output (benchmarks/zero_output.cu; the expected verdict is `incorrect`), with the peak
GPU memory in use meanwhile (all processes, sampled every 10 ms) and the wall time. Then totals: problems
that reached a verdict, verdicts by kind, harness errors.

Each problem costs a few seconds (one nvcc compile, one reference case, the eager baseline), so a level runs
in chunks that each finish in a few minutes:

    PYTHONUNBUFFERED=1 python benchmarks/kernelbench_memory.py .kernelbench --level 1 --problems 1-50 \\
        --json-out level1-a.json
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, TooLarge
from kernelblaster.harness.memory_plan import GIB
from kernelblaster.harness.problem import load_problem
from kernelblaster.tools.errors import UserFacingError

ZERO_CANDIDATE = Path(__file__).resolve().parent / "zero_output.cu"
SAMPLE_SECONDS = 0.01


@dataclass
class ProblemRow:
    problem: str
    spec_gib: float | None = None  # inputs + params + outputs
    plan: str = ""
    peak_gib: float | None = None  # device memory in use at its highest, over what was in use before
    eager_ms: float | None = None
    verdict: str = ""
    detail: str = ""
    seconds: float = 0.0


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


def measure(path: Path, options: EvalOptions, zero_source: str) -> ProblemRow:
    row = ProblemRow(problem=f"{path.parent.name}/{path.stem}")
    started = time.perf_counter()
    gpu = options.gpu
    try:
        with PeakMemory(gpu) as memory:
            before = memory.in_use()
            evaluator = CandidateEvaluator(load_problem(path), options)
            plan = evaluator.plan
            row.spec_gib = plan.sizes.set_bytes / GIB
            row.plan = f"{plan.rotating_sets} sets, {plan.references}" if plan.fits else "too large"
            row.eager_ms = evaluator.baseline().eager.median_ms
            result = evaluator.evaluate(zero_source, ZERO_CANDIDATE.name)
            row.verdict, row.detail = result.verdict, result.summary
        row.peak_gib = (memory.peak_bytes - before) / GIB
    except TooLarge as error:
        row.verdict, row.detail = "too_large", str(error)
    except UserFacingError as error:
        row.verdict, row.detail = "error", str(error)
    except Exception as error:  # the benchmark counts what escapes the harness: there should be none
        row.verdict, row.detail = "uncaught", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    finally:
        gc.collect()
        torch.cuda.empty_cache()
    row.seconds = time.perf_counter() - started
    return row


def render(row: ProblemRow) -> str:
    spec = f"{row.spec_gib:6.2f} GiB" if row.spec_gib is not None else "       -  "
    peak = f"{row.peak_gib:6.2f} GiB" if row.peak_gib is not None else "       -  "
    eager = f"{row.eager_ms:9.3f} ms" if row.eager_ms is not None else "         - "
    line = f"{row.problem:<58} spec {spec}  peak {peak}  {row.plan:<16} eager {eager}  {row.verdict:<13} " \
           f"{row.seconds:6.1f} s"
    return line if row.verdict in ("incorrect", "ok") else f"{line}\n    {row.detail[:400]}"


def totals(rows: list[ProblemRow]) -> dict[str, object]:
    verdicts = Counter(row.verdict for row in rows)
    reached = sum(n for verdict, n in verdicts.items() if verdict not in ("harness_error", "uncaught", "error"))
    return {"problems": len(rows), "reached_a_verdict": reached, "verdicts": dict(verdicts),
            "harness_errors": verdicts["harness_error"] + verdicts["uncaught"],
            "seconds": round(sum(row.seconds for row in rows), 1)}


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
    rows = []
    for path in paths:
        rows.append(measure(path, options, zero_source))
        print(render(rows[-1]), flush=True)
    summary = totals(rows)
    print(f"reached a verdict: {summary['reached_a_verdict']} / {summary['problems']}; harness errors: "
          f"{summary['harness_errors']}; verdicts: {summary['verdicts']}; {summary['seconds']} s", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(args.gpu), "totals": summary,
                                             "rows": [asdict(row) for row in rows]}, indent=2))
    return 0 if summary["reached_a_verdict"] == summary["problems"] and not summary["harness_errors"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
