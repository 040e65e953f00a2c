"""Optimize a PyTorch problem from Python, with the API that `kernelblaster optimize` is built on.

    export OPENAI_API_KEY=...                      # and OPENAI_BASE_URL for vLLM, SGLang, Ollama ...
    python examples/optimize_example.py [PROBLEM.py] [RUN_DIR]

Needs an NVIDIA GPU with the CUDA toolkit (nvcc; ncu for profiles). If the run is interrupted, running
the script again with the run directory it printed continues where it stopped.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kernelblaster.graph.api import Run
from kernelblaster.graph.context import RunContext
from kernelblaster.tools.errors import UserFacingError

PROBLEM = Path(__file__).parent / "problems" / "elementwise_swish_scale.py"


def main(argv: list[str]) -> int:
    problem = Path(argv[0]) if argv else PROBLEM
    context = RunContext(
        iterations=1,                                # learning iterations (paper: 10)
        trajectories=2,                              # parallel trajectories per iteration, W
        depth=2,                                     # optimization steps per trajectory, L
        model="gpt-4.1",                             # every role's model ...
        role_models={"lowering": "gpt-5"},           # ... except the agent that writes the CUDA
    )
    try:
        run = Run.open(argv[1]) if len(argv) > 1 else Run.create(problem, context)
        print(f"run directory: {run.files.root}")
        for progress in run.progress():  # one item per thing a node did, while the run goes on
            best = f"{progress.best_speedup:.2f}x" if progress.best_speedup else "-"
            print(f"{progress.note.where():<22} {progress.note.node:<20} best {best:<6} {progress.note.text}")
    except UserFacingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    outcome = run.outcome()
    if outcome.best_source is None:
        print(f"no correct kernel; see {outcome.report}")
        return 1
    print(f"best kernel: {outcome.best_source} ({outcome.best_speedup:.2f}x vs PyTorch); report: {outcome.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
