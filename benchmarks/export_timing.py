"""Benchmark: one kernel timed five ways, side by side: by the harness (`kernelblaster eval`'s timing: the
driver calls kb_forward), as the exported PyTorch op (`kernelblaster export --format torch`: the custom op
called from Python; and its ModelNew, as a user calls it for inference), and as the exported KernelBench file's
ModelNew (`--format kernelbench`: load_inline).

The op and the file are timed by `harness.timing.time_torch_calls`, the harness's method for PyTorch code
(warm-up, an L2 flush and CUDA events around every call, rotating over two input sets; median, IQR and CV),
so the three numbers differ only by what each path does per call. The exported paths add, inside the events,
the host's work per call (the dispatcher, the binding's checks, allocating the outputs; for ModelNew also
the parameter lookup): a few microseconds to tens of microseconds, visible for kernels that short only. The
binding is also timed alone (the extension's forward, without the custom op's dispatch), to tell the two
apart.

Run on a GPU machine:  python benchmarks/export_timing.py [--kernelbench] [--only NAME,NAME]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from kernelblaster.harness.evaluate import EvalOptions, detect_arch, evaluate_candidate
from kernelblaster.harness.export.exporter import export_kernelbench, export_torch, prepare_export
from kernelblaster.harness.problem import instantiate, load_problem
from kernelblaster.harness.stats import TimingStats
from kernelblaster.harness.timing import time_torch_calls

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = tuple((ROOT / "examples" / "problems" / f"{name}.py", ROOT / "examples" / "candidates" / name / "fast.cu")
                 for name in ("elementwise_swish_scale", "softmax_rows", "gemm_bias_relu", "batchnorm_train"))
_FIXTURES = ROOT / "tests" / "fixtures"
KERNELBENCH = (
    (_FIXTURES / "kernelbench" / "level1" / "19_ReLU.py", _FIXTURES / "gpu" / "relu_grid_stride.cu"),
    (_FIXTURES / "kernelbench" / "level1" / "23_Softmax.py", _FIXTURES / "export" / "softmax_wide_rows.cu"),
    (_FIXTURES / "kernelbench" / "level1" / "1_Square_matrix_multiplication_.py",
     _FIXTURES / "export" / "square_matmul.cu"),
    (_FIXTURES / "kernelbench" / "level2" / "1_Conv2D_ReLU_BiasAdd.py",
     _FIXTURES / "export" / "conv2d_relu_bias_add.cu"),
)


def harness_stats(problem: Path, candidate: Path, cache: Path) -> tuple[TimingStats, str]:
    result = evaluate_candidate(problem, candidate, EvalOptions(baseline=False, cache_dir=cache))
    if result.timing is None:
        raise SystemExit(f"{candidate}: the harness gave no timing ({result.verdict}: {result.summary})")
    return result.timing.event, result.verdict


def _import_package(directory: Path) -> ModuleType:
    sys.path.insert(0, str(directory.parent))
    try:
        return importlib.import_module(directory.name)
    finally:
        sys.path.remove(str(directory.parent))


def _instances(problem: Path) -> list[Any]:
    loaded = load_problem(problem)
    return [instantiate(loaded, seed, "cuda") for seed in (0, 1)]


def op_stats(package: ModuleType, problem: Path) -> tuple[TimingStats, TimingStats]:
    """The exported op's times, and the binding's alone (the built extension called without the custom op's
    dispatch), which tells the op's own overhead apart from the binding's."""
    ops: list[Callable[[], Any]] = []
    bindings: list[Callable[[], Any]] = []
    for instance in _instances(problem):
        params = list(instance.initial_state.values())
        ops.append(functools.partial(package.kernel_op, instance.tensor_args, params))
        bindings.append(functools.partial(package.build().forward, instance.tensor_args, params))
    return time_torch_calls(ops, 0), time_torch_calls(bindings, 0)


def model_new_stats(model_class: type[torch.nn.Module], problem: Path) -> TimingStats:
    """A drop-in's times, as a user calls it for inference: its ModelNew under torch.no_grad(), as
    `time_torch_calls` calls everything (the package's ModelNew takes its direct path to the binding)."""
    calls: list[Callable[[], Any]] = []
    for instance in _instances(problem):
        with torch.device("cuda"):
            model = model_class(*instance.init_args)
        model.load_state_dict(instance.initial_state)
        calls.append(functools.partial(model, *instance.args))
    return time_torch_calls(calls, 0)


def kernelbench_model(kernel_file: Path, extensions: Path) -> type[torch.nn.Module]:
    """The KernelBench file's ModelNew (importing the file builds its kernel through load_inline)."""
    os.environ["TORCH_EXTENSIONS_DIR"] = str(extensions)
    spec = importlib.util.spec_from_file_location(f"kernelbench_{kernel_file.stem}", kernel_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model_class: type[torch.nn.Module] = module.ModelNew
    return model_class


def _cell(stats: TimingStats) -> str:
    return f"{stats.median_ms:9.4f} ±{stats.iqr_ms / 2:7.4f} cv {stats.cv * 100:4.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernelbench", action="store_true",
                        help="also the test kernels of four KernelBench problems (inputs of up to 6 GiB)")
    parser.add_argument("--only", default="", metavar="NAMES",
                        help="comma-separated problem names (file stems) to time, of those chosen; default all")
    args = parser.parse_args()
    cases = EXAMPLES + (KERNELBENCH if args.kernelbench else ())
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {problem.stem for problem, _ in cases}
        if unknown:
            parser.error(f"no problem named {', '.join(sorted(unknown))} (known: "
                         f"{', '.join(problem.stem for problem, _ in cases)})")
        cases = tuple(case for case in cases if case[0].stem in wanted)
    if not torch.cuda.is_available():
        raise SystemExit("export_timing: needs a CUDA GPU")
    work = Path(tempfile.mkdtemp(prefix="kb-export-timing-"))
    arch = detect_arch(0)
    print(f"GPU: {torch.cuda.get_device_name(0)} ({arch}); torch {torch.__version__}; median ms ± half the IQR, "
          "CV; ratios are over the harness's median")
    print(f"{'problem':26} {'harness (kb_forward)':>30} {'exported op':>30} {'ModelNew, no_grad':>30} "
          f"{'binding alone':>30} {'KernelBench file':>30} {'op/h':>6} {'new/h':>6} {'bind/h':>6} {'file/h':>6}")
    for number, (problem, candidate) in enumerate(cases):
        harness, verdict = harness_stats(problem, candidate, work / "cache")
        kernel = prepare_export(problem, candidate, arch=arch, precision="strict")
        package = _import_package(export_torch(kernel, work / f"timing_export_{number}")[0].parent)
        package.build()
        op, binding = op_stats(package, problem)
        model_new = model_new_stats(package.ModelNew, problem)
        kernel_file = export_kernelbench(kernel, work / f"{problem.stem}_kernel.py")
        (work / "extensions").mkdir(exist_ok=True)
        file = model_new_stats(kernelbench_model(kernel_file, work / "extensions"), problem)
        ratios = " ".join(f"{stats.median_ms / harness.median_ms:6.3f}" for stats in (op, model_new, binding, file))
        print(f"{problem.stem[:26]:26} {_cell(harness):>30} {_cell(op):>30} {_cell(model_new):>30} "
              f"{_cell(binding):>30} {_cell(file):>30} {ratios}"
              + ("" if verdict == "ok" else f"  (harness verdict: {verdict})"))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
