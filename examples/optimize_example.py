"""Optimize a PyTorch problem from Python, with the API that `kernelblaster optimize` is built on.

    export OPENAI_API_KEY=...                      # and OPENAI_BASE_URL for vLLM, SGLang, Ollama ...
    python examples/optimize_example.py [PROBLEM.py] [--base-url URL] [--llm openai|human] [--no-profile]
    python examples/optimize_example.py --resume RUN_DIR

Needs an NVIDIA GPU with the CUDA toolkit (nvcc; ncu for profiles). If the run is interrupted, running
the script again with `--resume` and the run directory it printed continues where it stopped. With
`--llm human` the run stops at each prompt; answer with `kernelblaster answer RUN_DIR --file ANSWER`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from kernelblaster.graph.app.api import Run
from kernelblaster.graph.core.context import RunContext
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import describe_settings_error

PROBLEM = Path(__file__).parent / "problems" / "elementwise_swish_scale.py"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Optimize a problem with the KernelBlaster Python API.")
    parser.add_argument("problem", nargs="?", type=Path, default=PROBLEM)
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")
    parser.add_argument("--llm", choices=("openai", "human"), default="openai")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="run without Nsight Compute profiles (no ncu needed)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue this run instead of starting one")
    args = parser.parse_args(argv)
    try:
        context = RunContext(
            iterations=1,                            # learning iterations (paper: 10)
            trajectories=2,                          # parallel trajectories per iteration, W
            depth=2,                                 # optimization steps per trajectory, L
            model="gpt-4.1",                         # every role's model ...
            role_models={"lowering": "gpt-5"},       # ... except the agent that writes the CUDA
            llm=args.llm,
            base_url=args.base_url,
            profile=args.profile,
        )
        run = Run.open(args.resume) if args.resume else Run.create(args.problem, context)
        print(f"run directory: {run.files.root}")
        for progress in run.progress():  # one item per thing a node did, while the run goes on
            best = f"{progress.best_speedup:.2f}x" if progress.best_speedup else "-"
            print(f"{progress.note.where():<22} {progress.note.node:<20} best {best:<6} {progress.note.text}")
    except ValidationError as error:  # a setting RunContext refuses
        print(f"error: {describe_settings_error(error)}", file=sys.stderr)
        return 2
    except UserFacingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    outcome = run.outcome()
    if outcome.status == "waiting_for_answer":
        print(f"waiting for your answer to {outcome.run_dir / 'question.md'}: "
              f"`kernelblaster answer {outcome.run_dir} --file ANSWER`")
        return 0
    if outcome.best_source is None:
        print(f"no correct kernel; see {outcome.report}")
        return 1
    print(f"best kernel: {outcome.best_source} ({outcome.best_speedup:.2f}x vs PyTorch); report: {outcome.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
