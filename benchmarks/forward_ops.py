"""Count the PyTorch operators one forward call of a problem dispatches, beside its baseline times: a time of a
few microseconds per operator means the forward is bound by the host issuing them (Python, dispatch, launch),
not by the GPU, so the host's CPU and what else it runs move that time.

Runs without a GPU: models and inputs are built on PyTorch's meta device (shapes only, nothing computed).
`python benchmarks/forward_ops.py BASELINE_DIR KERNELBENCH [--problems 15,19]` reads the times (here and
published) from a `bench baseline` folder, measured elsewhere, and the problems from a KernelBench checkout.
An operator is an ATen call as dispatched on the meta device: on a GPU most launch one kernel, views
(`view`, `t`, `expand`) none and some several, and a recurrent layer (cuDNN's, one operator) many, so RNNs
are marked and their counts are not launch counts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelblaster.eval.problems import parse_ranges
from kernelblaster.eval.results import DATABASE_NAME, BaselineRow, ResultsDB
from kernelblaster.harness.problem import instantiate, load_problem
from kernelblaster.tools.errors import UserFacingError

RECURRENT = (torch.nn.RNNBase,)


class OperatorCount(TorchDispatchMode):
    """Counts the ATen operators dispatched while it is active."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # PyTorch leaves it untyped
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def forward_operators(path: Path) -> tuple[int, bool]:
    """Operators one forward call dispatches, and whether the model holds a recurrent layer."""
    instance = instantiate(load_problem(path), seed=0, device="meta")
    recurrent = any(isinstance(module, RECURRENT) for module in instance.model.modules())
    with torch.no_grad(), OperatorCount() as counter:
        instance.model(*instance.args)
    return counter.count, recurrent


def _per_operator_us(ms: float | None, operators: int) -> str:
    return f"{ms * 1000 / operators:.1f}" if ms is not None and operators else "-"


def _row(baseline: BaselineRow, kernelbench: Path) -> str:
    try:
        operators, recurrent = forward_operators(kernelbench / f"level{baseline.level}" / Path(baseline.path).name)
    except Exception as error:  # a problem the meta device cannot run is a row saying so, not the table's end
        return f"| {baseline.problem_id} | - | - | - | - | not countable on meta: {str(error)[:60]} |"
    note = "recurrent: count is not launches" if recurrent else ""
    ratio = (f"{baseline.eager_ms / baseline.published_eager_ms:.2f}"
             if baseline.eager_ms and baseline.published_eager_ms else "-")
    return (f"| {baseline.problem_id} | {operators} | {ratio} | {_per_operator_us(baseline.eager_ms, operators)} | "
            f"{_per_operator_us(baseline.published_eager_ms, operators)} | {note} |")


def _number(row: BaselineRow) -> int:
    return int(Path(row.path).name.split("_")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline_dir", type=Path, help="a `bench baseline` output folder (results.sqlite)")
    parser.add_argument("kernelbench", type=Path, help="a KernelBench checkout (its level1 ... level3 folders)")
    parser.add_argument("--problems", help="problem numbers in every level the folder holds (15,19,30-42)")
    options = parser.parse_args()
    try:
        wanted = set(parse_ranges(options.problems)) if options.problems else None
        database = ResultsDB.open(options.baseline_dir / DATABASE_NAME)
    except UserFacingError as error:
        raise SystemExit(f"forward_ops.py: {error}") from None
    rows = [row for row in database.baselines() if wanted is None or _number(row) in wanted]
    print("| problem | operators per forward | eager here / published | us per operator here | "
          "us per operator published | note |\n|---|---|---|---|---|---|")
    for baseline in sorted(rows, key=lambda row: (row.level, _number(row))):
        print(_row(baseline, options.kernelbench), flush=True)


if __name__ == "__main__":
    main()
