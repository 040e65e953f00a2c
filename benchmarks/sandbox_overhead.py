"""Benchmark: what the OS sandbox costs an evaluation, and whether it moves the kernel's measured time.

One candidate of about 100 us (elementwise_swish_scale/naive by default) is evaluated REPEATS times in
the sandbox and REPEATS times with --unsafe-no-sandbox, interleaved, each a full evaluation with a warm
object cache (link, five-seed verification, timing). Prints per mode the median wall time of an
evaluation and of its stages and the kernel's median CUDA-event time; then what the sandbox adds per
evaluation (target: under 0.3 s) and how far it moves the kernel's median time, as a share of that time
(target: under 2%). Also the start-up of one driver process (bwrap, launcher, library load, ready line)
in the sandbox and without it.

Run on a GPU machine:  python benchmarks/sandbox_overhead.py [--repeats 7] [--problem P.py --candidate C.cu]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.result import EvalResult
from kernelblaster.tools.driver_process import DriverProgram, DriverSession
from kernelblaster.tools.sandbox import Sandbox, require_sandbox

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "examples" / "problems" / "elementwise_swish_scale.py"
CANDIDATE = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu"
MODES = ("sandbox", "unsafe")
STARTS = 20


@dataclass
class Samples:
    """One mode's measurements over the repeats."""

    wall_s: list[float] = field(default_factory=list)
    stage_s: dict[str, list[float]] = field(default_factory=dict)
    event_ms: list[float] = field(default_factory=list)

    def add(self, wall_s: float, result: EvalResult) -> None:
        assert result.verdict == "ok" and result.timing is not None, f"{result.verdict}: {result.summary}"
        self.wall_s.append(wall_s)
        for stage, seconds in result.stages.ran().items():
            self.stage_s.setdefault(stage, []).append(seconds)
        self.event_ms.append(result.timing.event.median_ms)


def options(cache: Path, mode: str) -> EvalOptions:
    return EvalOptions(baseline=False, cache_dir=cache, unsafe_no_sandbox=mode == "unsafe")


def evaluate(problem: Path, candidate: Path, cache: Path, mode: str) -> tuple[float, EvalResult]:
    started = time.perf_counter()
    result = evaluate_candidate(problem, candidate, options(cache, mode))
    return time.perf_counter() - started, result


def startup_ms(program: DriverProgram, sandbox: Sandbox | None) -> float:
    """Median time to start a driver process until its ready line, and to end it."""
    samples = []
    for _ in range(STARTS):
        started = time.perf_counter()
        with DriverSession(program.command(filtered=sandbox is not None), sandbox=sandbox, view=program.view()):
            pass
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _stage_seconds(stage: str) -> Callable[[Samples], list[float]]:
    return lambda samples: samples.stage_s.get(stage, [float("nan")])


def report(samples: dict[str, Samples], starts: dict[str, float]) -> None:
    print(f"{'':24}" + "".join(f"{mode:>14}" for mode in MODES))
    rows: list[tuple[str, Callable[[Samples], list[float]]]] = [("evaluation wall (s)", lambda s: s.wall_s)]
    rows += [(f"  {stage} (s)", _stage_seconds(stage)) for stage in samples["sandbox"].stage_s]
    rows += [("kernel event (us)", lambda s: [x * 1000 for x in s.event_ms])]
    for label, values in rows:
        print(f"{label:24}" + "".join(f"{statistics.median(values(samples[mode])):14.4f}" for mode in MODES))
    print(f"{'driver start-up (ms)':24}" + "".join(f"{starts[mode]:14.1f}" for mode in MODES))
    added_s = statistics.median(samples["sandbox"].wall_s) - statistics.median(samples["unsafe"].wall_s)
    event = {mode: statistics.median(samples[mode].event_ms) for mode in MODES}
    print(f"added per evaluation: {added_s:+.3f} s (target < 0.3 s)")
    print(f"kernel time moved by {(event['sandbox'] / event['unsafe'] - 1) * 100:+.2f}% "
          "(target: under 2% of a 100 us kernel)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--problem", type=Path, default=PROBLEM)
    parser.add_argument("--candidate", type=Path, default=CANDIDATE)
    args = parser.parse_args()
    samples = {mode: Samples() for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="kb-sandbox-bench-") as scratch:
        cache = Path(scratch)
        for mode in MODES:  # warms the driver object, launcher, candidate object and this process's CUDA
            evaluate(args.problem, args.candidate, cache, mode)
        for _ in range(args.repeats):
            for mode in MODES:
                samples[mode].add(*evaluate(args.problem, args.candidate, cache, mode))
        evaluator = CandidateEvaluator(load_problem(args.problem), options(cache, "sandbox"))
        program = evaluator.build(args.candidate.read_text(), str(args.candidate)).program
        assert program is not None
        starts = {"sandbox": startup_ms(program, require_sandbox(False)), "unsafe": startup_ms(program, None)}
    print(f"{args.candidate} on {args.problem.name}, {args.repeats} evaluations per mode, interleaved; medians")
    report(samples, starts)


if __name__ == "__main__":
    main()
