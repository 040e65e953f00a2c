"""Benchmark: where a cold full evaluation spends its time, stage by stage (issue 27).

Each evaluation is a fresh `kernelblaster eval PROBLEM CANDIDATE --json` process, as a user's would be, on a
copy of a machine cache warmed once (the driver library and launcher, the GPU's peaks: what a machine pays
once), so every candidate compiles anew. The cases are the examples' fast kernels
(examples/candidates/*/fast.cu on examples/problems/*.py) and one candidate the source rules refuse. Prints,
per stage (the result's `stages`, harness/stages.py) and for the process's wall time, the median of the
repeats with their spread (fastest-slowest), one column per case; the GPU and the commit come first.
Stages overlap (references are computed while the candidate compiles), so they need not add up to the wall.

The machine cache is warmed with each problem's naive kernel, so it also holds what is made once per problem
(the problem's analysis, harness/analysis.py, and the trusted null candidate's build): the figures are those of a
later candidate of a problem. With --first-candidate each copy loses the problems' analyses, so every evaluation
analyses its problem again, as the first candidate of a problem does (the null candidate's build stays warm).

Run on a GPU machine:  python benchmarks/eval_stages.py [--repeats 5] [--baseline] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelblaster.harness.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ROOT / "examples" / "problems"
REFUSED = ROOT / "tests" / "hostile" / "candidates" / "raw_syscall_asm.cu"
WALL = "wall (process)"


@dataclass(frozen=True)
class Case:
    name: str
    problem: Path
    candidate: Path
    verdict: str  # what the evaluation must give: a case that gives another verdict stops the benchmark


@dataclass
class Samples:
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def add(self, stage: str, value: float) -> None:
        self.seconds.setdefault(stage, []).append(value)


def cases() -> list[Case]:
    fast = [Case(folder.name, PROBLEMS / f"{folder.name}.py", folder / "fast.cu", "ok")
            for folder in sorted((ROOT / "examples" / "candidates").iterdir()) if (folder / "fast.cu").is_file()]
    return [*fast, Case("refused (source rules)", PROBLEMS / "elementwise_swish_scale.py", REFUSED,
                        "static_violation")]


def command() -> list[str]:
    entry = shutil.which("kernelblaster")
    return [entry] if entry else [sys.executable, "-m", "kernelblaster.graph"]


def evaluate(case: Case, cache: Path, baseline: bool) -> tuple[float, dict[str, object]]:
    """One evaluation in a fresh process: its wall seconds and its JSON result."""
    argv = [*command(), "eval", str(case.problem), str(case.candidate), "--json",
            *([] if baseline else ["--no-baseline"])]
    env = {**os.environ, "KERNELBLASTER_CACHE": str(cache)}
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"eval_stages: {case.name}: no JSON result (exit {done.returncode}): "
                         f"{done.stderr.strip()[-300:]}") from None
    if result["verdict"] != case.verdict:
        raise SystemExit(f"eval_stages: {case.name}: verdict {result['verdict']}, expected {case.verdict}: "
                         f"{result['summary']}")
    return wall, result


def warm_machine_cache(cache: Path, baseline: bool) -> None:
    """The driver library and launcher, the GPU's peaks (and, with --baseline, the baselines): one throw-away
    evaluation of each problem's naive kernel into `cache`."""
    for case in cases():
        if case.verdict == "ok":
            naive = case.candidate.with_name("naive.cu")
            evaluate(Case(case.name, case.problem, naive if naive.is_file() else case.candidate, "ok"), cache,
                     baseline)


def cell(values: list[float] | None) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def print_table(columns: list[str], samples: list[Samples], stages: list[str]) -> None:
    width = max(len(cell(values)) for column in samples for values in column.seconds.values())
    width = max(width, *(len(name) for name in columns))
    label = max(len(stage) for stage in stages)
    print(" " * label + "  " + "  ".join(name.rjust(width) for name in columns))
    for stage in stages:
        print(stage.ljust(label) + "  " + "  ".join(cell(column.seconds.get(stage)).rjust(width)
                                                    for column in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh-process evaluations per case (5)")
    parser.add_argument("--baseline", action="store_true",
                        help="time the PyTorch baselines too (warmed into the machine cache first)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--first-candidate", action="store_true",
                        help="drop the problems' analyses from each copy of the cache (see the module docstring)")
    arguments = parser.parse_args()
    gpu = _gpu_name()
    if gpu is None:
        print("eval_stages: no CUDA GPU is visible (nvidia-smi lists none); run this on a GPU machine",
              file=sys.stderr)
        raise SystemExit(2)
    which = ("a problem's first candidate: its analysis made anew" if arguments.first_candidate else
             "a later candidate of each problem: its analysis read back from the cache")
    print(f"GPU: {gpu}; commit {_commit()}; {arguments.repeats} fresh processes per case, each on a copy of a "
          f"warm machine cache (its candidate compiles anew; {which}); seconds: median (fastest-slowest)")
    with tempfile.TemporaryDirectory(prefix="kb-eval-stages-") as scratch:
        machine = Path(scratch) / "machine"
        warm_machine_cache(machine, arguments.baseline)
        chosen = cases()
        samples = [Samples() for _ in chosen]
        for _ in range(arguments.repeats):
            for case, sample in zip(chosen, samples, strict=True):  # cases interleaved: a drift hits them all
                cache = Path(scratch) / "run"
                shutil.copytree(machine, cache)
                if arguments.first_candidate:
                    shutil.rmtree(cache / "analysis", ignore_errors=True)
                wall, result = evaluate(case, cache, arguments.baseline)
                shutil.rmtree(cache)
                sample.add(WALL, wall)
                stages = result.get("stages", {})
                assert isinstance(stages, dict)
                for stage, seconds in stages.items():
                    sample.add(stage, float(seconds))
    ran = list(dict.fromkeys(stage for sample in samples for stage in sample.seconds if stage != WALL))
    order: list[str] = list(STAGES)
    print_table([case.name for case in chosen], samples, [*sorted(ran, key=order.index), WALL])
    if arguments.json is not None:
        arguments.json.write_text(json.dumps({"gpu": gpu, "commit": _commit(), "repeats": arguments.repeats,
                                              "cases": {case.name: sample.seconds
                                                        for case, sample in zip(chosen, samples, strict=True)}},
                                             indent=1))


def _gpu_name() -> str | None:
    """The first GPU nvidia-smi lists (no CUDA context in this process: the evaluations are the ones timed)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    done = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                          check=False)
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else None


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return (done.stdout.strip() or "unknown") + ("+changes" if dirty else "")


if __name__ == "__main__":
    main()
