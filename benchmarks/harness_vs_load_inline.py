"""Benchmark: a full evaluation through the KernelBlaster harness vs through a load_inline extension.

For each example candidate, both paths do the same work from a cold build cache: compile, verify on
several seeds of fresh inputs, then time the kernel. The harness path is `evaluate_candidate` (driver
process, nvcc -c of the candidate only); the load_inline path is how KernelBench evaluates (a PyTorch C++
extension built per candidate). Prints each path's wall time, their ratio, and the harness's timing spread.

The harness is timed three ways per problem, all in this warm process:
- "first": the problem's first candidate, with a new evaluator, on a cache that knows only the machine (the
  driver, the GPU's peaks), so it pays the per-problem work too (the problem's analysis, the trusted null
  candidate's build);
- "later": a later candidate of the same problem (the same kernel with a comment added, so it compiles anew)
  with a new evaluator, on the cache the first left: what another `eval` of the problem costs;
- "loop": the same, on the evaluator that evaluated the first (not timed): what each further candidate costs
  in `optimize`, which keeps one evaluator per problem and GPU (its calibration and null candidate are warm).

`kernelbench_file_seconds` runs a file `kernelblaster export --format kernelbench` wrote down the same
load_inline path (the file builds its own extension; its ModelNew is verified and timed as above).

Run on a GPU machine:  python benchmarks/harness_vs_load_inline.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernelblaster.harness.analysis import forget_analyses, spec_for_problem
from kernelblaster.harness.build import driver_library
from kernelblaster.harness.compare import compare_output
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, detect_arch, evaluate_candidate
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.precision import PrecisionPolicy, tolerance_for, torch_precision
from kernelblaster.harness.problem import ProblemInstance, instantiate, load_problem
from kernelblaster.harness.result import EvalResult
from kernelblaster.harness.roofline import peaks_for_device
from kernelblaster.harness.timing import time_torch_calls
from kernelblaster.tools.sandbox import require_sandbox

ROOT = Path(__file__).resolve().parent.parent
DRIVER_DIR = ROOT / "harness" / "driver"
SEEDS = 5
EXAMPLES = (
    ("elementwise_swish_scale", "fast"),
    ("softmax_rows", "fast"),
    ("gemm_bias_relu", "fast"),
)
_WRAPPER = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include "kb_abi.h"
extern "C" int kb_forward(const KBTensor*, const KBTensor*, KBTensor*, cudaStream_t);
static KBTensor describe(const torch::Tensor& t) {
  KBTensor d{};
  d.data = t.data_ptr(); d.ndim = t.dim();
  for (int i = 0; i < t.dim(); ++i) { d.shape[i] = t.size(i); d.strides[i] = t.stride(i); }
  return d;
}
void run(std::vector<torch::Tensor> inputs, std::vector<torch::Tensor> params, std::vector<torch::Tensor> outputs) {
  std::vector<KBTensor> in, pa, out;
  for (auto& t : inputs) in.push_back(describe(t));
  for (auto& t : params) pa.push_back(describe(t));
  for (auto& t : outputs) out.push_back(describe(t));
  TORCH_CHECK(kb_forward(in.data(), pa.data(), out.data(), at::cuda::getCurrentCUDAStream()) == 0);
}
"""


def warm_machine_cache(cache: Path) -> None:
    """What a machine or a long-lived process pays once, not per candidate: the driver object for the arch,
    the GPU's peaks, and the first CUDA work of this process (one throw-away evaluation)."""
    driver_library(detect_arch(0), cache / "objects", require_sandbox(unsafe_no_sandbox=False))
    peaks_for_device(0, cache)
    problem_name, _ = EXAMPLES[0]
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(cache, Path(scratch) / "cache")
        harness_seconds(ROOT / "examples" / "problems" / f"{problem_name}.py",
                        ROOT / "examples" / "candidates" / problem_name / "naive.cu", Path(scratch) / "cache")


def first_candidate_seconds(problem: Path, candidate: Path, cache: Path) -> tuple[float, str, float]:
    """The problem's first candidate: nothing of the problem is known to this process or to `cache`."""
    forget_analyses()  # what this process analysed before is a per-problem cost, paid again here
    return harness_seconds(problem, candidate, cache)


def later_candidate_seconds(problem: Path, candidate: Path, cache: Path, scratch: Path) -> tuple[float, str, float]:
    """A later candidate of the same problem on the cache the first left: the same kernel with a comment added, so
    that nvcc compiles it anew."""
    later = scratch / candidate.name
    later.write_text(later_source(candidate, "later"))
    return harness_seconds(problem, later, cache)


def loop_candidate_seconds(problem: Path, candidate: Path, cache: Path) -> tuple[float, str, float]:
    """A later candidate on the evaluator that evaluated the problem's first (that evaluation not timed)."""
    evaluator = CandidateEvaluator(load_problem(problem), eval_options(cache))
    try:
        evaluator.evaluate(candidate.read_text(), str(candidate))
        started = time.perf_counter()
        result = evaluator.evaluate(later_source(candidate, "in the loop"), str(candidate))
        return time.perf_counter() - started, result.verdict, _timing_cv(result)
    finally:
        evaluator.close()


def later_source(candidate: Path, which: str) -> str:
    """The candidate's source with a comment added: the same kernel, which nvcc compiles anew."""
    return candidate.read_text() + f"\n// a {which} candidate ({time.time_ns()})\n"


def harness_seconds(problem: Path, candidate: Path, cache: Path) -> tuple[float, str, float]:
    started = time.perf_counter()
    result = evaluate_candidate(problem, candidate, eval_options(cache))
    return time.perf_counter() - started, result.verdict, _timing_cv(result)


def eval_options(cache: Path) -> EvalOptions:
    return EvalOptions(seeds=SEEDS, baseline=False, cache_dir=cache)


def _timing_cv(result: EvalResult) -> float:
    return result.timing.event.cv if result.timing else float("nan")


def load_inline_seconds(problem_path: Path, candidate: Path, build_root: Path) -> tuple[float, bool]:
    from torch.utils.cpp_extension import load_inline

    started = time.perf_counter()
    problem = load_problem(problem_path)
    header_dir = build_root / "include"
    header_dir.mkdir(parents=True, exist_ok=True)
    (header_dir / "kb_problem.h").write_text(generate_header(spec_for_problem(problem, gpu=0)))
    build_dir = build_root / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    module = load_inline(name=f"kb_{candidate.parent.name}_{candidate.stem}", cpp_sources=_WRAPPER,
                         cuda_sources=candidate.read_text(), functions=["run"], build_directory=str(build_dir),
                         extra_include_paths=[str(header_dir), str(DRIVER_DIR)],
                         extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"])
    correct = True
    for seed in range(SEEDS):
        instance = instantiate(problem, seed, "cuda")
        reference = instance.reference()
        outputs = [torch.empty_like(r) for r in reference]
        module.run(instance.tensor_args, list(instance.initial_state.values()), outputs)
        torch.cuda.synchronize()
        correct &= all(torch.allclose(o, r, rtol=tolerance_for(r.dtype, "strict").rtol, atol=1e-4)
                       for o, r in zip(outputs, reference, strict=True))

    def call_on(instance: ProblemInstance) -> Callable[[], Any]:
        return lambda: module.run(instance.tensor_args, list(instance.initial_state.values()),
                                  [torch.empty_like(r) for r in reference])

    time_torch_calls([call_on(instantiate(problem, seed, "cuda")) for seed in range(2)], 0)
    return time.perf_counter() - started, correct


def kernelbench_file_seconds(problem_path: Path, kernel_file: Path, build_root: Path,
                             policy: PrecisionPolicy = "strict") -> tuple[float, bool]:
    """The load_inline path for an exported KernelBench file: import it (its load_inline builds the kernel, in
    `build_root`), then, on each seed, its ModelNew with the seed's weights against the problem's reference (by
    the harness's comparison, under `policy`), then time it. Wall seconds, and whether every seed matched."""
    started = time.perf_counter()
    previous = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(build_root)
    try:
        spec = importlib.util.spec_from_file_location(f"kernelbench_file_{kernel_file.stem}", kernel_file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if previous is None:
            os.environ.pop("TORCH_EXTENSIONS_DIR")
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = previous
    problem = load_problem(problem_path)
    correct = True
    models: list[tuple[torch.nn.Module, list[Any]]] = []
    for seed in range(SEEDS):
        instance = instantiate(problem, seed, "cuda")
        with torch.device("cuda"):
            model = module.ModelNew(*instance.init_args)
        model.load_state_dict(instance.initial_state)
        with torch_precision(policy):
            reference = instance.reference()
        with torch.no_grad():
            output = model(*instance.args)
        outputs = list(output) if isinstance(output, tuple) else [output]
        correct &= all(compare_output(o, r, tolerance_for(r.dtype, policy), f"output {i}").passed
                       for i, (o, r) in enumerate(zip(outputs, reference, strict=True)))
        if seed < 2:  # the input sets timed (as load_inline_seconds times two)
            models.append((model, instance.args))
        del instance, reference, outputs, output
    time_torch_calls([functools.partial(model, *args) for model, args in models], 0)
    return time.perf_counter() - started, correct


def one_repeat(problem: Path, candidate: Path, machine_cache: Path) -> dict[str, tuple[float, str, float]]:
    """Each way of evaluating the candidate once, from a copy of the machine's cache: (seconds, verdict, CV)."""
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as build:
        cache = Path(scratch) / "cache"
        shutil.copytree(machine_cache, cache)
        first = first_candidate_seconds(problem, candidate, cache)
        later = later_candidate_seconds(problem, candidate, cache, Path(scratch))
        loop = loop_candidate_seconds(problem, candidate, cache)
        inline_seconds, correct = load_inline_seconds(problem, candidate, Path(build))
        return {"first": first, "later": later, "loop": loop,
                "load_inline": (inline_seconds, "ok" if correct else "incorrect", float("nan"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="cold-cache evaluations per path and candidate")
    args = parser.parse_args()
    machine_cache = Path(tempfile.mkdtemp(prefix="kb-machine-cache-"))
    warm_machine_cache(machine_cache)
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; {SEEDS} seeds; every candidate built "
          "anew (the driver object, GPU peaks and process start-up, paid once per machine, are warm); harness "
          "'first' = the problem's first candidate (its analysis and the null candidate's build included), "
          "'later' = a later candidate of the same problem with a new evaluator (another `eval`), 'loop' = a later "
          "candidate on the evaluator of the first (as `optimize` evaluates)")
    print(f"{'candidate':36} {'first s':>8} {'later s':>8} {'loop s':>7} {'load_inline s':>14} {'ratio first':>12} "
          f"{'ratio later':>12} {'ratio loop':>11} {'verdict':>8} {'timing CV':>9}")
    for problem_name, variant in EXAMPLES:
        problem = ROOT / "examples" / "problems" / f"{problem_name}.py"
        candidate = ROOT / "examples" / "candidates" / problem_name / f"{variant}.cu"
        seconds: dict[str, list[float]] = {"first": [], "later": [], "loop": [], "load_inline": []}
        cvs, verdicts = [], set()
        for _ in range(args.repeats):
            for name, (taken, verdict, cv) in one_repeat(problem, candidate, machine_cache).items():
                seconds[name].append(taken)
                if name != "load_inline":
                    cvs.append(cv)
                    verdicts.add(verdict)
        median = {name: statistics.median(values) for name, values in seconds.items()}
        theirs = median["load_inline"]
        print(f"{problem_name + '/' + variant:36} {median['first']:8.2f} {median['later']:8.2f} {median['loop']:7.2f} "
              f"{theirs:14.2f} {theirs / median['first']:11.1f}x {theirs / median['later']:11.1f}x "
              f"{theirs / median['loop']:10.1f}x {'/'.join(sorted(verdicts)):>8} {statistics.median(cvs) * 100:8.2f}%")
        spread = ", ".join(f"{name} {min(values):.2f}-{max(values):.2f} s" for name, values in seconds.items())
        print(f"{'':36} spread: {spread} over {args.repeats} runs")


if __name__ == "__main__":
    main()
