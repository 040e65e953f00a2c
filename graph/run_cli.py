"""`kernelblaster optimize`, `resume` and `answer`: the command line over `graph.api`.

Progress is printed as the run goes; at the end the run directory holds `best.cu` and `report.md`. A run
with `--llm human` stops at each prompt, writes it to `RUN_DIR/question.md`, and goes on when answered;
one with `--llm replay --replay-from RUN_DIR` is answered from that run's recorded `llm.jsonl`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernelblaster.graph import api
from kernelblaster.graph.context import ROLES, STRUCTURED_OUTPUT_METHODS, RunContext
from kernelblaster.graph.cost import ModelPrice, load_prices, parse_price
from kernelblaster.graph.progress import ProgressDisplay
from kernelblaster.graph.run_files import RunFiles, write_text_atomically
from kernelblaster.harness.precision import PRECISION_POLICIES
from kernelblaster.tools.errors import UserFacingError

# Flag -> RunContext field, for the flags that set one directly.
CONTEXT_FLAGS = {
    "iterations": "iterations", "trajectories": "trajectories", "depth": "depth", "top_k": "top_k",
    "model": "model", "base_url": "base_url", "llm": "llm", "kb": "kb_path", "run_dir": "run_dir",
    "gpus": "gpus", "precision": "precision", "allow": "allow", "seed": "seed", "replay_from": "replay_from",
    "structured_output": "structured_output", "temperature": "temperature", "max_output_tokens": "max_output_tokens",
    "llm_timeout": "llm_timeout_s", "max_concurrent_requests": "max_concurrent_requests",
    "token_limit": "token_limit",
    "unsafe_no_sandbox": "unsafe_no_sandbox",
}
PROTOCOLS = ("schema", "text")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add `optimize`, `resume` and `answer`, each with `func(args) -> int`."""
    optimize = subparsers.add_parser("optimize", help="make a PyTorch problem fast with CUDA written by LLM agents")
    optimize.add_argument("problem", help="KernelBench-style problem file (Model, get_inputs, get_init_inputs)")
    optimize.add_argument("--init", metavar="FILE", help="start from this CUDA file instead of one the LLM writes")
    _add_search_flags(optimize)
    _add_agent_flags(optimize)
    _add_endpoint_flags(optimize)
    optimize.add_argument("--kb", metavar="PATH", help="knowledge base file (default: $KERNELBLASTER_KB, ...)")
    optimize.add_argument("--run-dir", metavar="DIR", help="run directory (default: runs/<problem>-<time>)")
    optimize.add_argument("--gpus", type=_gpu_list, metavar="0,1", help="CUDA devices sharing the GPU work")
    optimize.add_argument("--precision", choices=PRECISION_POLICIES, help="numerical freedom (strict)")
    optimize.add_argument("--allow", type=_name_list, metavar="LIBS", help="libraries candidates may use")
    optimize.add_argument("--seed", type=int, help="seed of the optimization sampling")
    optimize.add_argument("--unsafe-no-sandbox", action="store_true", default=None,
                          help="compile and run candidates without the OS sandbox (README: Security)")
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
    parser.add_argument("--llm", choices=("openai", "human", "replay"),
                        help="who answers the prompts: an endpoint (openai, the default), you (human), or a "
                             "recorded run (replay, with --replay-from)")
    parser.add_argument("--replay-from", metavar="RUN_DIR", help="--llm replay: the run whose llm.jsonl answers")
    parser.add_argument("--model", metavar="M", help="model of every role (default gpt-4.1)")
    parser.add_argument("--role-model", action="append", default=[], metavar="ROLE=MODEL",
                        help=f"a different model for one role ({', '.join(ROLES)}); repeatable")
    parser.add_argument("--role-protocol", action="append", default=[], metavar="ROLE=schema|text",
                        help="answer as structured output (schema) or as plain text (text: code in a fenced "
                             "block; the default for lowering); repeatable")


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", metavar="URL", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")
    parser.add_argument("--structured-output", choices=STRUCTURED_OUTPUT_METHODS,
                        help="how schema answers are first asked for (function_calling); a server that refuses "
                             "it falls back to the next, once per run")
    parser.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (default: the "
                        "server's; leave it out for reasoning models)")
    parser.add_argument("--max-output-tokens", type=int, metavar="N",
                        help="longest answer, reasoning included (sent as max_completion_tokens)")
    parser.add_argument("--llm-timeout", type=float, metavar="S", help="seconds one LLM request may take (600)")
    parser.add_argument("--max-concurrent-requests", type=int, metavar="N",
                        help="requests in flight to the endpoint from this process (8)")
    parser.add_argument("--token-limit", type=int, metavar="TOKENS",
                        help="tokens the run may spend; it then ends cleanly, the report saying so")
    parser.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT[,CACHED]",
                        help="US dollars per million input, output (and cached input) tokens; repeatable")
    parser.add_argument("--prices", type=Path, metavar="FILE.toml", help="prices of several models ([prices.\"M\"] "
                        "tables with input, output, cached_input); --price overrides")


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
    if (args.llm == "replay") != (args.replay_from is not None):
        raise UserFacingError("--llm replay and --replay-from RUN_DIR go together (RUN_DIR: the run whose "
                              "llm.jsonl answers)")
    settings: dict[str, Any] = {field: getattr(args, flag) for flag, field in CONTEXT_FLAGS.items()
                                if getattr(args, flag) is not None}
    if args.role_model:
        settings["role_models"] = dict(_role_setting("--role-model", text, "MODEL") for text in args.role_model)
    if args.role_protocol:
        settings["role_protocols"] = dict(_role_setting("--role-protocol", text, "schema|text", PROTOCOLS)
                                          for text in args.role_protocol)
    prices = _prices(args)
    if prices:
        settings["prices"] = prices
    try:
        return RunContext(**settings)
    except ValidationError as error:
        first = error.errors()[0]
        flag = next((f for f, field in CONTEXT_FLAGS.items() if field == first["loc"][0]), str(first["loc"][0]))
        raise UserFacingError(f"--{flag.replace('_', '-')}: {first['msg']}") from None


def _role_setting(flag: str, text: str, what: str, allowed: tuple[str, ...] | None = None) -> tuple[str, str]:
    role, _, value = text.partition("=")
    if role not in ROLES or not value or (allowed is not None and value not in allowed):
        raise UserFacingError(f"{flag} {text}: expected ROLE={what} with ROLE one of {', '.join(ROLES)}")
    return role, value


def _prices(args: argparse.Namespace) -> dict[str, ModelPrice]:
    from_file = load_prices(args.prices) if args.prices else {}
    return from_file | dict(parse_price(text) for text in args.price)


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
    if outcome.ended_early:
        print(f"the run ended early: {outcome.ended_early}")
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
