"""Time a problem's PyTorch eager forward under each setting of the backend flags that change it (TF32 in
cuDNN and in matmuls, cuDNN's autotuner): to find why an eager time differs from a published one.

Run on a GPU: `python benchmarks/baseline_flags.py PROBLEM.py [PROBLEM.py ...] [--repeats N]`. Each variant is
warmed up, then timed with CUDA events over `--repeats` calls on one input set (the same for every variant, so
the variants compare with one another; the harness's flushed, rotated protocol times them differently). Prints
the median and the spread (min-max) in ms per variant, with the cuDNN version.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelblaster.harness.problem import ProblemInstance, instantiate, load_problem


@dataclass(frozen=True)
class Flags:
    """One setting of PyTorch's backend flags; the first is PyTorch's default."""

    name: str
    cudnn_tf32: bool = True
    matmul_tf32: bool = False
    cudnn_benchmark: bool = False


VARIANTS = (
    Flags("pytorch default"),
    Flags("cudnn autotuner", cudnn_benchmark=True),
    Flags("no tf32 anywhere", cudnn_tf32=False),
    Flags("tf32 in matmuls too", matmul_tf32=True),
)
WARM_UP_CALLS = 5


@contextmanager
def backend_flags(flags: Flags) -> Iterator[None]:
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.allow_tf32 = flags.cudnn_tf32
    torch.backends.cuda.matmul.allow_tf32 = flags.matmul_tf32
    torch.backends.cudnn.benchmark = flags.cudnn_benchmark
    try:
        yield
    finally:
        (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.benchmark) = saved


def call_times_ms(instance: ProblemInstance, repeats: int) -> list[float]:
    """Milliseconds of each of `repeats` forward calls, after a warm-up (the autotuner chooses during it)."""
    with torch.no_grad():
        for _ in range(WARM_UP_CALLS):
            instance.model(*instance.args)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        for start, end in events:
            start.record()
            instance.model(*instance.args)
            end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=30)
    options = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("baseline_flags: needs a CUDA GPU")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print(f"{'problem':<60} {'variant':<22} {'median ms':>10} {'min-max ms':>18}")
    for path in options.problems:
        instance = instantiate(load_problem(path), seed=0, device="cuda")
        for flags in VARIANTS:
            with backend_flags(flags):
                times = call_times_ms(instance, options.repeats)
            spread = f"{min(times):.3f}-{max(times):.3f}"
            print(f"{path.stem:<60} {flags.name:<22} {statistics.median(times):>10.3f} {spread:>18}")
        del instance
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
