"""Child process profiled by ncu for the PyTorch baseline: one eager call between cudaProfilerStart/Stop.

Run as `python -m kernelblaster.harness.profile.baseline_target PROBLEM.py --gpu N --precision P`.
"""

from __future__ import annotations

import argparse

import torch

from kernelblaster.harness.precision import PRECISION_POLICIES, torch_precision
from kernelblaster.harness.problem import instantiate, load_problem

WARMUP_CALLS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("problem")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--precision", choices=PRECISION_POLICIES, default="strict")
    args = parser.parse_args()
    instance = instantiate(load_problem(args.problem), 0, f"cuda:{args.gpu}")
    with torch_precision(args.precision), torch.no_grad():
        for _ in range(WARMUP_CALLS):
            instance.model(*instance.args)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        instance.model(*instance.args)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
