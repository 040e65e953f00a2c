"""The graph's state: small serialisable values (paths relative to the run directory, hashes, metrics).

Kernel sources, evaluation results and the learning notes live as files in the run directory
(`graph.core.run_files`); the state points at them. `OptimizationState` is the whole run; each trajectory of
an iteration runs in the trajectory subgraph with its own `TrajectoryState`, and what it returns
(`TrajectoryOutput`) is merged into the run by the reducers declared here. A node returns the fields it
changes as a `RunUpdate` or a `TrajectoryUpdate`, so a misspelt key, which LangGraph would drop without a
word, is a type error.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated, Literal, Self, TypedDict

from pydantic import BaseModel, ConfigDict

from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.harness.gpu_facts import GpuFacts
from kernelblaster.harness.operations import ReducedRows
from kernelblaster.harness.precision_facts import PrecisionFacts
from kernelblaster.harness.profile.outcome import KernelShare
from kernelblaster.harness.result import Roofline
from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.selection import SelectedOptimization

# `harness_error`: the harness could not judge the candidate (twice): in the replay buffer, never in the KB.
StepOutcome = Literal["measured", "suspicious", "compile_failed", "verify_failed", "crashed", "llm_failed",
                      "harness_error"]
# The textual gradient's three stages, each a node asking the role of the same name.
LearningStage = Literal["policy_evaluation", "perf_gap_analysis", "parameter_update"]


class Value(BaseModel):
    """Base of the state's value types: immutable, so a node can only replace them, never edit them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def replace(self, **changes: object) -> Self:
        """A copy with `changes`, checked as a new value is (a misspelt field is an error, not a new one)."""
        return type(self)(**(dict(self) | changes))


class KernelRef(Value):
    """A correct, measured kernel: its source and evaluation result files and its time."""

    label: str
    source: str
    sha256: str
    result: str
    time_ms: float
    speedup: float | None
    technique: str | None = None


class Candidate(Value):
    """CUDA written by the lowering agent and not yet judged; `choice_reason` is why it chose its technique
    among those offered, when it said."""

    label: str
    source: str
    sha256: str
    technique: str | None
    explanation: str
    choice_reason: str | None = None


class Feedback(Value):
    """Why the last candidate failed, as the lowering agent is shown it on a retry: it did not compile, it
    computed a wrong result, or it crashed or hung when run."""

    stage: Literal["compile", "verify", "run"]
    candidate_source: str
    message: str


class StepEnding(Value):
    """How a step's last attempt ended; `after` is set when the candidate was measured."""

    outcome: StepOutcome
    detail: str
    after: KernelRef | None = None


class StepProgress(Value):
    """The step in progress: the optimizations drawn for it, the candidate the lowering agent wrote, its
    attempts and failures so far, its last failure as the agent is shown it, and how the step ended.

    A step starts from an empty one (`StepProgress()`), so nothing of the last step leaks into the next."""

    choices: list[SelectedOptimization] = []
    candidate: Candidate | None = None
    feedback: Feedback | None = None
    attempts: int = 0
    compile_failures: int = 0
    verify_failures: int = 0
    run_failures: int = 0
    ending: StepEnding | None = None


class BaselineSummary(Value):
    """The PyTorch baselines a speedup is measured against, in milliseconds."""

    eager_ms: float
    compile_ms: float | None
    best_ms: float


class RunFacts(Value):
    """What the agents are told about where the run happens and what to beat, gathered once in `setup`: the
    GPU, the PyTorch baselines, the problem's roofline floor on that GPU, PyTorch's own kernels that took
    the most time (None when the baseline was not profiled), and the kinds of operation the problem performs
    (None when not known), which decide the techniques the KB may offer, which cheaper arithmetic in its
    matrix products would pass verification (measured; see harness.precision_facts), and the rows its
    row-family operators reduce (for the first kernel's design)."""

    gpu: GpuFacts
    baseline: BaselineSummary
    roofline: Roofline
    pytorch_kernels: list[KernelShare] | None
    operations: list[OperationKind] | None = None
    precision: PrecisionFacts | None = None  # None in runs made before it was measured
    rows: list[ReducedRows] | None = None  # what its softmaxes, norms, reductions and losses reduce; None: unknown


class ProfiledState(Value):
    """The performance state of a kernel: the profile's numbers and the state extractor's reading of them."""

    kernel_sha256: str
    signature: list[float] | None
    signature_summary: str
    name: str
    primary_bottleneck: str
    secondary: list[str]
    description: str


class MatchedState(Value):
    """The KB state a kernel was matched to, or discovered as."""

    kernel_sha256: str
    state_id: str
    name: str
    distance: float | None
    discovered: bool


class StepRecord(Value):
    """One rollout step in the replay buffer: what was tried where, what was predicted and what happened.
    `candidate_source` and `explanation` are the last attempt's code and the lowering agent's account of it
    (None when no code was written)."""

    iteration: int
    trajectory: int
    step: int
    state_id: str | None
    state_name: str | None
    discovered_state: bool
    technique: str | None
    predicted_speedup: float | None
    outcome: StepOutcome
    attempts: int
    detail: str
    before: KernelRef
    after: KernelRef | None
    speedup: float | None
    kb_updated: bool
    choice_reason: str | None = None
    candidate_source: str | None = None
    explanation: str | None = None


class LearningNote(Value):
    """The outcome of one learning stage of an iteration, with the file holding its full text."""

    iteration: int
    stage: LearningStage
    summary: str
    path: str | None


def faster_kernel(current: KernelRef | None, new: KernelRef | None) -> KernelRef | None:
    """Reducer of `best`: keep the faster kernel; trajectories finishing together each offer theirs."""
    if current is None:
        return new
    if new is None or new.time_ms >= current.time_ms:
        return current
    return new


@dataclass(kw_only=True)
class OptimizationInput:
    """What a run is started with."""

    problem_path: str
    init_kernel: str | None = None


@dataclass(kw_only=True)
class OptimizationState(OptimizationInput):
    """The whole run: baselines, the initial and best kernels, the replay buffer, learning and tokens."""

    run_dir: str = ""
    run_id: str = ""
    baseline: BaselineSummary | None = None
    facts: RunFacts | None = None
    draft: Candidate | None = None
    initial_feedback: Feedback | None = None
    initial_attempts: int = 0
    initial: KernelRef | None = None
    best: Annotated[KernelRef | None, faster_kernel] = None
    iteration: int = -1
    steps: Annotated[list[StepRecord], operator.add] = field(default_factory=list)
    learning: Annotated[list[LearningNote], operator.add] = field(default_factory=list)
    token_usage: Annotated[list[TokenUsage], operator.add] = field(default_factory=list)
    report: str | None = None
    ended_early: str | None = None


@dataclass(kw_only=True)
class TrajectoryOutput:
    """What a finished trajectory hands back to the run."""

    best: KernelRef
    steps: Annotated[list[StepRecord], operator.add] = field(default_factory=list)
    token_usage: Annotated[list[TokenUsage], operator.add] = field(default_factory=list)


@dataclass(kw_only=True)
class TrajectoryState(TrajectoryOutput):
    """One trajectory: the kernel it stands on and what it knows of it, the step in progress (`this_step`),
    and what its steps so far tell the next one (techniques tried on this kernel, failed steps in a row).
    `facts` and `initial` are the run's, for the prompts (None in a run started before they were kept)."""

    run_dir: str
    run_id: str
    problem_path: str
    iteration: int
    trajectory: int
    current: KernelRef
    facts: RunFacts | None = None
    initial: KernelRef | None = None
    step: int = 0
    profiled: ProfiledState | None = None
    matched: MatchedState | None = None
    this_step: StepProgress = field(default_factory=StepProgress)
    tried: list[str] = field(default_factory=list)
    failed_steps: int = 0

    @property
    def step_label(self) -> str:
        """Names the step's journal entries; unique within the run."""
        return f"i{self.iteration}-t{self.trajectory}-s{self.step}"

    @property
    def next_attempt_label(self) -> str:
        """Names the next lowering attempt's files and journal entries."""
        return f"{self.step_label}-a{self.this_step.attempts}"


class RunUpdate(TypedDict, total=False):
    """What a node of the run graph changes in `OptimizationState`; the same fields, each optional."""

    problem_path: str
    init_kernel: str | None
    run_dir: str
    run_id: str
    baseline: BaselineSummary | None
    facts: RunFacts | None
    draft: Candidate | None
    initial_feedback: Feedback | None
    initial_attempts: int
    initial: KernelRef | None
    best: KernelRef | None
    iteration: int
    steps: list[StepRecord]
    learning: list[LearningNote]
    token_usage: list[TokenUsage]
    report: str | None
    ended_early: str | None


class TrajectoryUpdate(TypedDict, total=False):
    """What a node of the trajectory subgraph changes in `TrajectoryState`; the same fields, each optional."""

    best: KernelRef
    steps: list[StepRecord]
    token_usage: list[TokenUsage]
    run_dir: str
    run_id: str
    problem_path: str
    iteration: int
    trajectory: int
    current: KernelRef
    facts: RunFacts | None
    initial: KernelRef | None
    step: int
    profiled: ProfiledState | None
    matched: MatchedState | None
    this_step: StepProgress
    tried: list[str]
    failed_steps: int
