"""`kernelblaster optimize`, `resume` and `answer`: the command line over `graph.api`.

Progress is printed as the run goes; at the end the run directory holds `best.cu` and `report.md`. A run
with `--llm human` stops at each prompt, writes it to `RUN_DIR/question.md`, and goes on when answered.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernelblaster.graph import api
from kernelblaster.graph.context import ROLES, RunContext
from kernelblaster.graph.progress import ProgressDisplay
from kernelblaster.graph.run_files import RunFiles, write_text_atomically
from kernelblaster.tools.errors import UserFacingError

# Flag -> RunContext field, for the flags that set one directly.
CONTEXT_FLAGS = {
    "iterations": "iterations", "trajectories": "trajectories", "depth": "depth", "top_k": "top_k",
    "model": "model", "base_url": "base_url", "llm": "llm", "kb": "kb_path", "run_dir": "run_dir",
    "gpus": "gpus", "precision": "precision", "allow": "allow", "seed": "seed",
}


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add `optimize`, `resume` and `answer`, each with `func(args) -> int`."""
    optimize = subparsers.add_parser("optimize", help="make a PyTorch problem fast with CUDA written by LLM agents")
    optimize.add_argument("problem", help="KernelBench-style problem file (Model, get_inputs, get_init_inputs)")
    optimize.add_argument("--init", metavar="FILE", help="start from this CUDA file instead of one the LLM writes")
    _add_search_flags(optimize)
    _add_agent_flags(optimize)
    optimize.add_argument("--kb", metavar="PATH", help="knowledge base file (default: $KERNELBLASTER_KB, ...)")
    optimize.add_argument("--run-dir", metavar="DIR", help="run directory (default: runs/<problem>-<time>)")
    optimize.add_argument("--gpus", type=_gpu_list, metavar="0,1", help="CUDA devices sharing the GPU work")
    optimize.add_argument("--precision", choices=("strict", "tf32", "fp16"), help="numerical freedom (strict)")
    optimize.add_argument("--allow", type=_name_list, metavar="LIBS", help="libraries candidates may use")
    optimize.add_argument("--seed", type=int, help="seed of the optimization sampling")
    optimize.set_defaults(func=run_optimize)

    resume = subparsers.add_parser("resume", help="continue a run after a crash, a kill or Ctrl-C")
    resume.add_argument("run_dir", help="the run directory")
    resume.set_defaults(func=run_resume)

    answer = subparsers.add_parser("answer", help="answer the prompt a --llm human run is waiting on")
    answer.add_argument("run_dir", help="the run directory")
    answer.add_argument("--file", required=True, type=Path, help="the answer: JSON of the schema, or CUDA code")
    answer.add_argument("--question", metavar="ID", help="which pending question (default: the first)")
    answer.set_defaults(func=run_answer)


def _add_search_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iterations", type=int, metavar="N", help="learning iterations")
    parser.add_argument("--trajectories", type=int, metavar="W", help="trajectories per iteration")
    parser.add_argument("--depth", type=int, metavar="L", help="optimization steps per trajectory")
    parser.add_argument("--top-k", type=int, metavar="K", help="optimizations sampled from the KB per step")


def _add_agent_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llm", choices=("openai", "human"), help="who answers the prompts (openai)")
    parser.add_argument("--model", metavar="M", help="model of every role (default gpt-4.1)")
    parser.add_argument("--role-model", action="append", default=[], metavar="ROLE=MODEL",
                        help=f"a different model for one role ({', '.join(ROLES)}); repeatable")
    parser.add_argument("--base-url", metavar="URL", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")


def run_optimize(args: argparse.Namespace) -> int:
    run = api.Run.create(args.problem, context_from_flags(args), init=args.init)
    print(f"run directory: {run.files.root}")
    return _advance(run, lambda display: run.advance(display.show))


def run_resume(args: argparse.Namespace) -> int:
    run = api.Run.open(args.run_dir)
    return _advance(run, lambda display: run.advance(display.show))


def run_answer(args: argparse.Namespace) -> int:
    try:
        text = args.file.read_text()
    except OSError as error:
        raise UserFacingError(f"{args.file}: cannot read the answer ({error.strerror or error})") from None
    run = api.Run.open(args.run_dir)
    return _advance(run, lambda display: run.answer(text, args.question, display.show))


def context_from_flags(args: argparse.Namespace) -> RunContext:
    """The run context the flags ask for; every flag left out keeps RunContext's default."""
    settings: dict[str, Any] = {field: getattr(args, flag) for flag, field in CONTEXT_FLAGS.items()
                                if getattr(args, flag) is not None}
    if args.role_model:
        settings["role_models"] = dict(_role_model(text) for text in args.role_model)
    try:
        return RunContext(**settings)
    except ValidationError as error:
        first = error.errors()[0]
        flag = next((f for f, field in CONTEXT_FLAGS.items() if field == first["loc"][0]), str(first["loc"][0]))
        raise UserFacingError(f"--{flag.replace('_', '-')}: {first['msg']}") from None


def _role_model(text: str) -> tuple[str, str]:
    role, _, model = text.partition("=")
    if role not in ROLES or not model:
        raise UserFacingError(f"--role-model {text}: expected ROLE=MODEL with ROLE one of {', '.join(ROLES)}")
    return role, model


def _advance(run: api.Run, drive: Callable[[ProgressDisplay], api.RunOutcome]) -> int:
    try:
        outcome = drive(ProgressDisplay(sys.stdout))
    except KeyboardInterrupt:
        print(f"kernelblaster: stopped; continue with `kernelblaster resume {run.files.root}`", file=sys.stderr)
        raise
    return _report(outcome)


def _report(outcome: api.RunOutcome) -> int:
    if outcome.status == "waiting_for_answer":
        question_file = write_questions(RunFiles(outcome.run_dir), outcome.questions)
        print(f"waiting for your answer: read {question_file}, then run "
              f"`kernelblaster answer {outcome.run_dir} --file ANSWER`")
        return 0
    if outcome.status == "stopped":
        print(f"the run stopped before finishing; continue with `kernelblaster resume {outcome.run_dir}`")
        return 1
    if outcome.best_source is None:
        print(f"no correct CUDA kernel was found; see {outcome.report}")
        return 1
    speedup = f" ({outcome.best_speedup:.2f}x vs the faster PyTorch baseline)" if outcome.best_speedup else ""
    print(f"best kernel: {outcome.best_source}{speedup}\nreport: {outcome.report}")
    return 0


def write_questions(files: RunFiles, questions: list[api.PendingQuestion]) -> Path:
    """Write the pending prompts to `question.md`, first to be answered first."""
    parts = []
    for pending in questions:
        question = pending.question
        problem = (f"\n**Your previous answer could not be used:** {question.previous_answer_problem}\n"
                   if question.previous_answer_problem else "")
        parts.append(f"# Question {pending.id} ({question.role}, node {question.node})\n{problem}\n"
                     f"## Instructions\n\n{question.instructions}\n\n## Prompt\n\n{question.prompt}\n\n"
                     f"## Answer format\n\n{question.answer_format}\n")
    write_text_atomically(files.question, "\n\n".join(parts))
    return files.question


def _gpu_list(text: str) -> tuple[int, ...]:
    try:
        gpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected GPU indices like 0,1") from None
    if not gpus or min(gpus) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected GPU indices like 0,1")
    return gpus


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(name.strip().lower() for name in text.split(",") if name.strip())
