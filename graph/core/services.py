"""The outside world the graph talks to — chat models and the GPU evaluation harness — and the per-run
objects the nodes share in one process (`RunResources`).

`Services` is what a caller may replace: tests and the scripted end-to-end run pass their own chat models
(and, on CPU, an evaluator that replays recorded results); everyone else gets `ChatOpenAI` and the harness.
A suite runner passes the `TokenBudget` its runs share.

A run's resources hold GPU memory (the harness keeps reference outputs on the GPU), so they live only
while the run is being advanced: made on the first node that needs them, given back by `release` when the
run ends (the `finish` node), stops on an error, or pauses for a person's answer (`graph.app.api` releases
them whenever it stops advancing a run; a `with Services() as services:` block releases every run it
served, which is how `graph.graph.studio_graph` scopes each request of `langgraph dev`). A run advanced
again gets them anew.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

from langchain_core.language_models import BaseChatModel
from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.gpu_pool import GpuPool
from kernelblaster.graph.core.run_files import RunFiles, default_run_dir, source_sha256
from kernelblaster.graph.llm.agents import Agent, Answer, AnswerJournal, Question, T
from kernelblaster.graph.llm.budget import TokenBudget, gate_for
from kernelblaster.graph.llm.chat import ChatAgent, RunAgents, chat_model, check_endpoint, endpoint_url
from kernelblaster.graph.llm.endpoint import EndpointLink, RetryPolicy
from kernelblaster.graph.llm.exchange import Link
from kernelblaster.graph.llm.human import HumanAgent
from kernelblaster.graph.llm.quirks import EndpointQuirks
from kernelblaster.graph.llm.recording import ExchangeRecorder, ReplayLink, recorded_tokens
from kernelblaster.graph.llm.roles import Role
from kernelblaster.graph.llm.settings import LLMSettings
from kernelblaster.harness.evaluate import EvalOptions
from kernelblaster.harness.gpu_facts import GpuFacts
from kernelblaster.harness.precision_facts import PrecisionFacts
from kernelblaster.harness.problem import Problem, load_problem
from kernelblaster.harness.profile.outcome import ProfileOutcome
from kernelblaster.harness.requirements import missing_for_run
from kernelblaster.harness.result import BaselineTiming, EvalResult, Roofline
from kernelblaster.kb.edits import EditResult, KBEdit
from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.journal import ChangeId, KBChange, append_change
from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.outcomes import OutcomeEvent
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.sanitizer import SanitizerResult


class BuiltCandidate(Protocol):
    """A build of one candidate: `result` says why it failed (static violation, compile error) if not `ok`."""

    @property
    def ok(self) -> bool: ...

    @property
    def result(self) -> EvalResult | None: ...


BuiltT = TypeVar("BuiltT", bound=BuiltCandidate)


class Evaluator(Protocol[BuiltT]):
    """The harness bound to one problem, one GPU and one set of options (`harness.evaluate.CandidateEvaluator`).

    `verify` and `measure` take builds of the evaluator's own kind (`BuiltT`), which any evaluator of the
    same factory accepts."""

    header: str

    def build(self, source: str, label: str) -> BuiltT: ...

    def verify(self, built: BuiltT) -> EvalResult: ...

    def measure(self, built: BuiltT, verified: EvalResult, profile: bool) -> EvalResult: ...

    def diagnose(self, built: BuiltT) -> SanitizerResult | None:
        """compute-sanitizer memcheck's report of a candidate that crashed; None without compute-sanitizer."""

    def baseline(self, remeasure: bool = False) -> BaselineTiming: ...

    def profile_baseline(self) -> ProfileOutcome: ...

    def gpu_facts(self) -> GpuFacts: ...

    def roofline_floor(self) -> Roofline: ...

    def precision_facts(self) -> PrecisionFacts:
        """Which cheaper arithmetic in the matrix products would pass the problem's verification (or why that
        was not measured)."""

    def operation_kinds(self) -> list[OperationKind] | None:
        """The kinds of operation the problem's forward pass performs; None where the pass ran untracked."""

    def close(self) -> None:
        """Give back what the evaluator holds on its GPU; it is not used again."""


class ChatModels(Protocol):
    """Where each role's chat model comes from."""

    def check(self, settings: LLMSettings) -> None:
        """Raise a one-line `UserFacingError` if no model can be reached with this configuration."""

    def for_role(self, settings: LLMSettings, role: Role) -> BaseChatModel: ...


class EvaluatorFactory(Protocol):
    """Makes the evaluator of one problem and set of options, and says what it needs from the machine."""

    # Any: the kind of build is the factory's own; a run's builds go only to the evaluators of its factory.
    def __call__(self, problem: Problem, options: EvalOptions) -> Evaluator[Any]: ...

    def missing(self, context: RunContext) -> list[str]:
        """What this machine lacks to evaluate candidates as `context` asks; empty when nothing."""


class OpenAIChatModels:
    """`ChatOpenAI` at the configured OpenAI-compatible endpoint."""

    def check(self, settings: LLMSettings) -> None:
        check_endpoint(settings)

    def for_role(self, settings: LLMSettings, role: Role) -> BaseChatModel:
        return chat_model(settings, role)


class HarnessEvaluators:
    """The GPU harness (`harness.evaluate.CandidateEvaluator`): a GPU for each index, nvcc, ncu to profile,
    compute-sanitizer to sanitize."""

    def __call__(self, problem: Problem, options: EvalOptions) -> Evaluator[Any]:
        from kernelblaster.harness.evaluate import CandidateEvaluator

        return CandidateEvaluator(problem, options)

    def missing(self, context: RunContext) -> list[str]:
        return missing_for_run(context.gpus, context.profile, context.unsafe_no_sandbox, bool(context.sanitize))


harness_evaluator = HarnessEvaluators()


def eval_options(context: RunContext, gpu: int) -> EvalOptions:
    return EvalOptions(seeds=context.seeds, precision=context.precision, allow=frozenset(context.allow), gpu=gpu,
                       profile=context.profile, timeout_s=context.kernel_timeout_s,
                       unsafe_no_sandbox=context.unsafe_no_sandbox, sanitize=context.sanitize)


class RunResources:
    """What the nodes of one run share in this process: agents, the GPU pool of evaluators, builds, the KB.

    Every KB change goes through `record_outcome` and `apply_edits`, which honour the run's memory switch
    and journal the change in the run directory (`kb.journal`)."""

    def __init__(self, context: RunContext, problem: Problem, files: RunFiles, chat_models: ChatModels,
                 evaluators: EvaluatorFactory, suite_budget: TokenBudget | None = None) -> None:
        self.context = context
        self.problem = problem
        self.files = files
        self._chat_models = chat_models
        self.llm = context.llm_settings()
        self.agents = RunAgents(
            settings=self.llm, quirks=EndpointQuirks(files.endpoint, endpoint_url(self.llm), self.llm),
            recorder=ExchangeRecorder(files.llm_log, replayed_from=context.replay_from),
            budget=TokenBudget(context.token_limit, spent=recorded_tokens(files.llm_log), parent=suite_budget),
            journal=AnswerJournal(files.answers))
        self._replay = ReplayLink(Path(context.replay_from)) if context.replay_from is not None else None
        self.pool: GpuPool[Evaluator[Any]] = GpuPool(
            context.gpus, lambda gpu: evaluators(problem, eval_options(context, gpu)))
        self._builds: dict[str, BuiltCandidate] = {}
        self._kb: KnowledgeBase | None = None
        # KnowledgeBase is safe across processes (file lock) but its in-memory document and Chroma handle
        # are not shared safely between the threads that run parallel trajectories.
        self._kb_lock = threading.Lock()

    def ask(self, question: Question[T]) -> Answer[T]:
        """The answer of the question's role (`AgentFailed` if there is none to be had)."""
        return self._agent(question.role).ask(question)

    def _agent(self, role: Role) -> Agent:
        if self.context.llm == "human":
            return HumanAgent(self.context.answer_retries)
        return ChatAgent(role, self._link(role), self.agents)

    def stop_reason(self) -> str | None:
        """Why the run must end now rather than ask more (its token budget is spent), or None."""
        return self.agents.budget.exhausted()

    def _link(self, role: Role) -> Link:
        settings = self.llm
        if self._replay is not None:
            return self._replay
        endpoint = endpoint_url(settings)
        gate = gate_for(endpoint, settings.max_concurrent_requests)
        return EndpointLink(self._chat_models.for_role(settings, role), gate,
                            RetryPolicy(retries=settings.llm_retries, max_wait_s=settings.llm_max_wait_s,
                                        outage_s=settings.llm_outage_s), endpoint)

    @property
    def header(self) -> str:
        return self.pool.any_worker().header

    def build(self, source: str, label: str) -> BuiltCandidate:
        """Build a source (no GPU; safe in parallel); a build of the same source is reused."""
        key = source_sha256(source)
        if key not in self._builds:
            self._builds[key] = self.pool.any_worker().build(source, label)
        return self._builds[key]

    @contextmanager
    def knowledge_base(self) -> Iterator[KnowledgeBase]:
        with self._kb_lock:
            if self._kb is None:
                self._kb = KnowledgeBase.open(self.context.kb_path)
            yield self._kb

    def record_outcome(self, event: OutcomeEvent) -> bool:
        """Teach the KB one step's outcome; False if the run writes no KB (`RunContext.writes_kb`) or the KB
        no longer has the state or technique (merged away meanwhile)."""
        if not self.context.writes_kb:
            return False
        # Journaled first: a kill between the two leaves the change in the journal, never only in the KB.
        append_change(self.files.kb_journal, KBChange.of_outcome(event, datetime.now(UTC).replace(microsecond=0)))
        with self.knowledge_base() as kb:
            try:
                kb.record_outcome(event)
            except KBLookupError:
                return False
        return True

    def apply_edits(self, change_id: ChangeId, edits: Sequence[KBEdit]) -> list[EditResult]:
        """Apply edits to the KB (none if the run writes no KB) and journal them under `change_id`."""
        if not self.context.writes_kb:
            return []
        append_change(self.files.kb_journal, KBChange(id=change_id, at=datetime.now(UTC).replace(microsecond=0),
                                                      edits=list(edits)))
        with self.knowledge_base() as kb:
            return kb.apply_edits(edits)

    def close(self) -> None:
        """Give back the evaluators' GPU memory and forget the builds and the KB; the run is over (for now)."""
        for evaluator in self.pool.take_workers():
            evaluator.close()
        self._builds.clear()
        self._kb = None


class RunLocation(Protocol):
    """Where a run's state says it is: its problem and (once `setup` has run) its directory."""

    problem_path: str
    run_dir: str


class Services:
    """Chat models and evaluators for the graph, and the `RunResources` of each run it is advancing."""

    def __init__(self, chat_models: ChatModels | None = None, evaluators: EvaluatorFactory | None = None,
                 token_budget: TokenBudget | None = None) -> None:
        self.chat_models = chat_models or OpenAIChatModels()
        self.evaluators = evaluators or harness_evaluator
        self.token_budget = token_budget
        self._runs: dict[Path, RunResources] = {}
        self._lock = threading.Lock()

    def check(self, context: RunContext) -> None:
        """A one-line error naming everything a run with `context` needs and cannot have here."""
        missing = self.evaluators.missing(context)
        needs = f"the run needs {'; '.join(missing)}" if missing else None
        try:
            self.chat_models.check(context.llm_settings())
        except UserFacingError as no_endpoint:
            raise UserFacingError(f"{no_endpoint}; and {needs}" if needs else str(no_endpoint)) from None
        if needs:
            raise UserFacingError(f"cannot run here: {needs}")

    def resources(self, runtime: Runtime[RunContext], state: RunLocation) -> RunResources:
        """The resources of the run a node is working for (its directory: the context's, else the state's,
        else one for the thread of a run started in Studio without one)."""
        thread = runtime.execution_info.thread_id if runtime.execution_info else None
        run_dir = runtime.context.run_dir or state.run_dir or str(default_run_dir(state.problem_path, thread))
        return self.for_run(runtime.context, state.problem_path, run_dir)

    def for_run(self, context: RunContext, problem_path: str, run_dir: str | Path) -> RunResources:
        """The resources of the run in `run_dir`, made on first use and kept until `release`; a relative
        `problem_path` is the run's own copy, in that directory."""
        files = RunFiles(Path(run_dir).resolve())
        with self._lock:
            if files.root not in self._runs:
                self._runs[files.root] = RunResources(context, load_problem(files.path(problem_path)), files,
                                                      self.chat_models, self.evaluators, self.token_budget)
            return self._runs[files.root]

    def release(self, run_dir: str | Path) -> None:
        """Give back the resources of the run in `run_dir` (nothing if it holds none); call it once nothing
        works for that run any more."""
        with self._lock:
            resources = self._runs.pop(Path(run_dir).resolve(), None)
        if resources is not None:
            resources.close()

    def close(self) -> None:
        """Release every run's resources."""
        with self._lock:
            held = list(self._runs)
        for run_dir in held:
            self.release(run_dir)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
