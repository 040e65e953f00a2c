"""Benchmark: one suite of six problems with scripted agents, run on one GPU, then on two (and with `--ray`, on
a local Ray cluster of this host's GPUs); wall times side by side, with how busy each GPU was.

The agents are scripted (tests/fixtures/suite/gpu_suite.py: the lowering agent writes each problem's known
kernels, the examples' naive then fast one, one correct kernel for two KernelBench fixtures); the harness,
nvcc, the driver, the graph and the KB are real. A warm-up suite on both GPUs first fills the caches all
later suites share (the driver build, the compiled candidates, the PyTorch baselines, the GPU's peaks), so
the timed suites differ only in how many problems run at once: what scales is the GPU work (verification,
timing, profiling), which is what a second GPU buys. GPU busy is the share of
`nvidia-smi`'s samples (every 0.5 s) in which the GPU reported any utilisation.

Run on a machine with two GPUs:  python benchmarks/suite_scaling.py [--repeats N] [--ray]
(`--ray` starts `ray start --head` on this host for its suites and stops it after; needs Ray installed.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the scripted agents are the GPU suite test's (one source of truth)

from fixtures.suite.gpu_suite import SCALING_PROBLEMS, gpu_services  # noqa: E402
from fixtures.suite.scripted_suite import suite_config  # noqa: E402

from kernelblaster.eval.problems import select_problems  # noqa: E402
from kernelblaster.eval.results import DATABASE_NAME, ProblemRow, ResultsDB  # noqa: E402
from kernelblaster.eval.runner import start_suite  # noqa: E402
from kernelblaster.harness.result import EvalResult  # noqa: E402

CONTEXT = {"iterations": 1, "trajectories": 1, "depth": 1}


class BusySampler:
    """`nvidia-smi` sampling every GPU's utilisation in the background while a suite runs."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "500"],
            stdout=subprocess.PIPE, text=True)

    def shares(self) -> dict[int, float]:
        """Per GPU index, the share of samples with any utilisation (stops the sampling)."""
        self.process.terminate()
        output, _ = self.process.communicate()
        samples: dict[int, list[bool]] = {}
        for line in output.splitlines():
            index, _, busy = line.partition(",")
            if index.strip().isdigit() and busy.strip().isdigit():
                samples.setdefault(int(index), []).append(int(busy) > 0)
        return {gpu: sum(busy) / len(busy) for gpu, busy in sorted(samples.items())}


def run_suite(root: Path, gpus: tuple[int, ...], ray_address: str | None) -> tuple[float, dict[int, float], str]:
    """One suite in `root`; its wall seconds, each GPU's busy share and the verdicts' and problems' summary."""
    listing = root.parent / f"{root.name}.txt"
    listing.write_text("".join(f"{problem}\n" for problem in SCALING_PROBLEMS))
    config = suite_config(select_problems(listing), window=len(gpus), gpus=gpus, context=CONTEXT)
    sampler = BusySampler()
    started = time.perf_counter()
    start_suite(root, config, gpu_services, ray_address=ray_address)
    wall = time.perf_counter() - started
    busy = sampler.shares()
    db = ResultsDB.open(root / DATABASE_NAME)
    rows = db.problems()
    db.close()
    verdicts = [row.result.verdict if row.result else row.status for row in rows]
    return wall, busy, f"{verdicts.count('ok')}/{len(verdicts)} ok; {problem_times(rows)}"


def problem_times(rows: list[ProblemRow]) -> str:
    """Each problem's wall seconds and GPU slot, and the Nsight Compute seconds of its candidates' profiles with
    the seconds they waited for the host's profiler (one profile per host at a time): where the suite's time
    went, and what a second GPU cannot shorten."""
    parts = []
    for row in rows:
        stages = [EvalResult.model_validate_json(path.read_bytes()).stages
                  for path in sorted(Path(row.run_dir or "-").glob("results/*.measure.json"))]
        profile = sum(s.profile or 0.0 for s in stages)
        waited = sum(s.profile_wait or 0.0 for s in stages)
        slot, wall = (row.result.gpu, row.result.wall_s or 0.0) if row.result else ("?", 0.0)
        parts.append(f"{Path(row.path).stem[:12]} {slot} {wall:.0f} s (ncu {profile:.0f} s, waited {waited:.0f} s)")
    return "; ".join(parts)


@contextmanager
def local_ray(gpus: int) -> Iterator[str]:
    """A Ray head on this host with `gpus` GPUs, for the duration."""
    if shutil.which("ray") is None:
        raise SystemExit("suite_scaling: --ray needs Ray (pip install 'kernelblaster[cluster]')")
    subprocess.run(["ray", "start", "--head", f"--num-gpus={gpus}", "--disable-usage-stats"], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        yield "auto"
    finally:
        subprocess.run(["ray", "stop", "--force"], check=False, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="timed suites per setting (default 1)")
    parser.add_argument("--ray", action="store_true", help="also the suite on a local Ray cluster of both GPUs")
    args = parser.parse_args()
    if torch.cuda.device_count() < 2:
        raise SystemExit(f"suite_scaling: needs two GPUs, found {torch.cuda.device_count()}")
    work = Path(tempfile.mkdtemp(prefix="kb-suite-scaling-"))
    os.environ["KERNELBLASTER_CACHE"] = str(work / "cache")  # shared by every suite: warmed once
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    print(f"GPUs: {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}; commit {commit}; "
          f"{len(SCALING_PROBLEMS)} problems, {CONTEXT}")
    wall, _, verdicts = run_suite(work / "warmup", (0, 1), None)
    print(f"warm-up on both GPUs: {wall:.1f} s, {verdicts}")
    settings: list[tuple[str, tuple[int, ...], bool]] = [("one GPU", (0,), False), ("two GPUs", (0, 1), False)]
    if args.ray:
        settings.append(("two GPUs, Ray", (0, 1), True))
    walls: dict[str, list[float]] = {name: [] for name, _, _ in settings}
    for repeat in range(args.repeats):
        for name, gpus, on_ray in settings:  # interleaved, so drift over the session touches each alike
            root = work / f"{name.replace(' ', '_').replace(',', '')}-{repeat}"
            if on_ray:
                with local_ray(len(gpus)) as address:
                    wall, busy, verdicts = run_suite(root, gpus, address)
            else:
                wall, busy, verdicts = run_suite(root, gpus, None)
            walls[name].append(wall)
            shares = ", ".join(f"GPU {gpu} busy {share:.0%}" for gpu, share in busy.items())
            print(f"{name:14} run {repeat + 1}: {wall:7.1f} s  {verdicts}  ({shares})")
    one = statistics.median(walls["one GPU"])
    for name, values in walls.items():
        median = statistics.median(values)
        print(f"{name:14} median {median:7.1f} s (min {min(values):.1f}, max {max(values):.1f}), "
              f"{median / one:.2f}x the one-GPU suite's wall time")


if __name__ == "__main__":
    main()
