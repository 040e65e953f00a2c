"""`kernelblaster optimize`, `resume` and `answer`: the command line over `graph.app.api`.

Flags are validated into the models below (run settings into `RunContext`) before anything is created;
`graph.app.api` then checks the files and the machine before it writes. Progress is printed as the run goes;
at the end the run directory holds `best.cu` and `report.md`. A run with `--llm human` stops at each
prompt, writes it to `RUN_DIR/question.md`, and goes on when answered; one with `--llm replay --replay-from
RUN_DIR` is answered from that run's recorded `llm.jsonl`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import model_validator

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.cost import load_prices, parse_price
from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.graph.llm.roles import ROLES, STRUCTURED_OUTPUT_METHODS
from kernelblaster.kb.precision import PRECISION_POLICIES
from kernelblaster.tools.files import read_text_file
from kernelblaster.tools.options import Options, PathText, ReadableFile, Subcommands, add_command, nested

# graph.app.api and graph.core.progress import LangGraph and torch: only a command that runs a graph imports them.
if TYPE_CHECKING:
    from kernelblaster.graph.app import api
    from kernelblaster.graph.core.progress import ProgressDisplay


class RunSettings(Options):
    """The flags of `add_run_flags`, as a `RunContext` (shared by `optimize` and `bench run`)."""

    context: RunContext = RunContext()

    @model_validator(mode="before")
    @classmethod
    def _run_settings(cls, flags: Any) -> Any:
        if isinstance(flags, dict):
            if (flags.get("llm") == "replay") != (flags.get("replay_from") is not None):
                raise ValueError("--llm replay and --replay-from RUN_DIR go together (RUN_DIR: the run whose "
                                 "llm.jsonl answers)")
            flags = _with_prices(flags)
        return nested(flags, "context", RunContext)


class OptimizeOptions(RunSettings):
    # Checked by `graph.core.preflight` (a Studio run's by the `setup` node) in the words every entry point uses.
    problem: PathText
    init: PathText | None = None


def _with_prices(flags: dict[str, Any]) -> dict[str, Any]:
    """`--prices FILE`, then each `--price MODEL=IN,OUT[,CACHED]` over it, as the `prices` setting."""
    texts, prices_file = flags.get("price") or [], flags.get("prices_file")
    prices = (load_prices(Path(prices_file)) if prices_file else {}) | dict(parse_price(text) for text in texts)
    settings = {name: value for name, value in flags.items() if name not in ("price", "prices_file")}
    return settings | ({"prices": prices} if prices else {})


class ResumeOptions(Options):
    run_dir: PathText
    restart: bool = False


class AnswerOptions(Options):
    run_dir: PathText
    file: ReadableFile
    question: str | None = None


def add_commands(subparsers: Subcommands) -> None:
    """Add `optimize`, `resume` and `answer`."""
    optimize = add_command(subparsers, "optimize", help="make a PyTorch problem fast with CUDA written by LLM agents",
                           options=OptimizeOptions, run=run_optimize)
    optimize.add_argument("problem", help="KernelBench-style problem file (Model, get_inputs, get_init_inputs)")
    optimize.add_argument("--init", metavar="FILE", help="start from this CUDA file instead of one the LLM writes")
    add_run_flags(optimize)
    _setting(optimize, "--run-dir", "run_dir", metavar="DIR", more="it must be new or empty")

    resume = add_command(subparsers, "resume", help="continue a run after a crash, a kill or Ctrl-C",
                         options=ResumeOptions, run=run_resume)
    resume.add_argument("run_dir", help="the run directory")
    resume.add_argument("--restart", action="store_true",
                        help="start over a run whose checkpoints.sqlite was deleted or emptied")

    answer = add_command(subparsers, "answer", help="answer the prompt a --llm human run is waiting on",
                         options=AnswerOptions, run=run_answer)
    answer.add_argument("run_dir", help="the run directory")
    answer.add_argument("--file", required=True, help="the answer: JSON of the schema, or CUDA code")
    answer.add_argument("--question", metavar="ID", help="which pending question (default: the first)")


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The run settings (`RunSettings`): search shape, agents, endpoint, KB, GPUs and the rules for kernels.
    Each flag's help is its `RunContext` field's description and default, so the two cannot drift apart."""
    _add_search_flags(parser)
    _add_agent_flags(parser)
    _add_endpoint_flags(parser)
    _setting(parser, "--kb", "kb_path", metavar="PATH", more="`kernelblaster kb init PATH` makes a new one")
    _setting(parser, "--gpus", "gpus", metavar="0,1")
    _setting(parser, "--precision", "precision", metavar="|".join(PRECISION_POLICIES))
    _setting(parser, "--allow", "allow", metavar="LIBS")
    parser.add_argument("--no-profile", dest="profile", action="store_const", const=False,
                        help="do not profile with Nsight Compute (states then come from timings alone)")
    _setting(parser, "--sanitize", "sanitize", metavar="memcheck,racecheck")
    _setting(parser, "--seed", "seed", metavar="N")
    _setting(parser, "--unsafe-no-sandbox", "unsafe_no_sandbox", action="store_const", const=True,
             more="README: Security")


def _setting(parser: argparse.ArgumentParser, flag: str, field: str, more: str = "", **flag_options: Any) -> None:
    """A flag that sets the `RunContext` field `field`, its help the field's description and default."""
    info = RunContext.model_fields[field]
    description = info.description or field
    # A sentence's capital goes; an acronym's (CUDA, KB) stays.
    text = description if description[1:2].isupper() else description[0].lower() + description[1:]
    default = info.get_default(call_default_factory=True)
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    if shown is not None and not isinstance(shown, bool) and shown not in ("", {}) and "default" not in text:
        text += f" (default: {shown})"
    parser.add_argument(flag, dest=field, help=f"{text}; {more}" if more else text, **flag_options)


def _add_search_flags(parser: argparse.ArgumentParser) -> None:
    _setting(parser, "--iterations", "iterations", metavar="N")
    _setting(parser, "--trajectories", "trajectories", metavar="W")
    _setting(parser, "--depth", "depth", metavar="L")
    _setting(parser, "--top-k", "top_k", metavar="K")


def _add_agent_flags(parser: argparse.ArgumentParser) -> None:
    _setting(parser, "--llm", "llm", metavar="openai|human|replay")
    _setting(parser, "--replay-from", "replay_from", metavar="RUN_DIR")
    _setting(parser, "--model", "model", metavar="M")
    _setting(parser, "--role-model", "role_models", action="append", metavar="ROLE=MODEL",
             more=f"ROLE one of {', '.join(ROLES)}; repeatable")
    _setting(parser, "--role-protocol", "role_protocols", action="append", metavar="ROLE=schema|text",
             more="schema: structured output; text: code in a fenced block; repeatable")


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    _setting(parser, "--base-url", "base_url", metavar="URL")
    _setting(parser, "--structured-output", "structured_output", metavar="|".join(STRUCTURED_OUTPUT_METHODS))
    _setting(parser, "--temperature", "temperature", metavar="T")
    _setting(parser, "--max-output-tokens", "max_output_tokens", metavar="N")
    _setting(parser, "--llm-timeout", "llm_timeout_s", metavar="S")
    _setting(parser, "--max-concurrent-requests", "max_concurrent_requests", metavar="N")
    _setting(parser, "--token-limit", "token_limit", metavar="TOKENS")
    parser.add_argument("--price", action="append", metavar="MODEL=IN,OUT[,CACHED]",
                        help="US dollars per million input, output (and cached input) tokens; repeatable")
    parser.add_argument("--prices", dest="prices_file", metavar="FILE.toml",
                        help="prices of several models ([prices.\"M\"] tables with input, output, cached_input); "
                             "--price overrides")


def run_optimize(options: OptimizeOptions) -> int:
    from kernelblaster.graph.app import api

    run = api.Run.create(options.problem, options.context, init=options.init)
    print(f"run directory: {run.files.root}")
    note_outdated_catalogue(options.context)
    return _advance(run, lambda display: run.advance(display.show))


def note_outdated_catalogue(context: RunContext) -> None:
    """Say on stderr, before a run reads it, that the KB predates the seed's technique catalogue."""
    from kernelblaster.kb.paths import resolve_kb_path
    from kernelblaster.kb.seed_catalogue import catalogue_gaps, describe_gaps
    from kernelblaster.kb.store import read_document

    path = resolve_kb_path(context.kb_path)
    if context.uses_kb and path.exists():
        # Read only: loading would migrate an older KB on disk, which a note has no business doing.
        note = describe_gaps(catalogue_gaps(read_document(path)))
        if note is not None:
            print(f"kernelblaster: note: {note}", file=sys.stderr)


def run_resume(options: ResumeOptions) -> int:
    from kernelblaster.graph.app import api

    run = api.Run.open(options.run_dir, restart=options.restart)
    outcome = run.outcome()
    if outcome.status == "finished":
        print(f"the run {run.files.root} is finished: nothing to resume")
        return _report(outcome, answered=False)
    return _advance(run, lambda display: run.advance(display.show))


def run_answer(options: AnswerOptions) -> int:
    from kernelblaster.graph.app import api

    text = read_text_file(options.file, "the answer")
    run = api.Run.open(options.run_dir)
    return _advance(run, lambda display: run.answer(text, options.question, display.show), answered=True)


def _advance(run: api.Run, drive: Callable[[ProgressDisplay], api.RunOutcome], answered: bool = False) -> int:
    from kernelblaster.graph.core.progress import ProgressDisplay

    try:
        outcome = drive(ProgressDisplay(sys.stdout))
    except KeyboardInterrupt:
        print(f"kernelblaster: stopped; continue with `kernelblaster resume {run.files.root}`", file=sys.stderr)
        raise
    return _report(outcome, answered)


def _report(outcome: api.RunOutcome, answered: bool) -> int:
    rejected = outcome.questions[0].question.previous_answer_problem if answered and outcome.questions else None
    if rejected is not None:
        print(f"kernelblaster: your answer could not be used: {rejected}; {RunFiles(outcome.run_dir).question} "
              "asks again", file=sys.stderr)
        return 2
    if outcome.status == "waiting_for_answer":
        print(f"waiting for your answer: read {RunFiles(outcome.run_dir).question}, then run "
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
