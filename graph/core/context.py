"""The run configuration (`RunContext`): everything a run needs to know that is not its evolving state.

It is the graph's `context_schema`, so LangGraph Studio shows it as a form, and `kernelblaster optimize`
fills it from flags. The defaults follow the paper's tuning (search depth about 4-8, breadth about 8,
10 iterations) scaled down so that a first run finishes in minutes. Three switches reproduce the paper's
ablations (`memory`, `profile_feedback`, `agent`); the defaults are the full method.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kernelblaster.graph.core.cost import ModelPrice
from kernelblaster.graph.llm.roles import (
    AnswerProtocol,
    ModelName,
    Provider,
    Role,
    StructuredOutputMethod,
)
from kernelblaster.graph.llm.settings import LLMSettings
from kernelblaster.kb.precision import PrecisionPolicy
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import (
    KEY_VALUE_PAIRS,
    EndpointUrl,
    GpuIndices,
    Libraries,
    PathText,
    SanitizerTools,
    Seconds,
    describe_settings_error,
)

Memory = Literal["learn", "frozen", "none"]
ProfileFeedback = Literal["full", "cycles-only"]
AgentShape = Literal["full", "minimal"]


class RunContext(BaseModel):
    """How one optimization run is carried out: agents, search shape, limits, GPUs and files."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    llm: Provider = Field(
        default="openai",
        description="openai: any OpenAI-compatible endpoint; human: every prompt pauses for a person's answer; "
                    "replay: answers come from the llm.jsonl of a recorded run (replay_from)",
    )
    replay_from: PathText | None = Field(
        default=None, description="Run directory whose llm.jsonl answers (llm=replay)"
    )
    model: ModelName = Field(default="gpt-4.1", description="Model of every role that has no model of its own")
    role_models: Annotated[dict[Role, ModelName], KEY_VALUE_PAIRS] = Field(
        default_factory=dict, description="A different model for some roles"
    )
    base_url: EndpointUrl | None = Field(
        default=None, description="Endpoint URL (default: $OPENAI_BASE_URL, else OpenAI)"
    )
    structured_output: StructuredOutputMethod = Field(
        default="function_calling",
        description="How the endpoint is first asked for schema-shaped answers (a refusal falls back once per run)",
    )
    role_protocols: Annotated[dict[Role, AnswerProtocol], KEY_VALUE_PAIRS] = Field(
        default_factory=dict, description="schema or text answers for some roles (default: text for lowering)"
    )
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False,
                                      description="Sampling temperature (default: the server's; reasoning models "
                                                  "accept none)")
    max_output_tokens: int | None = Field(default=None, ge=1, description="Longest answer, reasoning included, "
                                          "sent as max_completion_tokens (default: the server's limit)")
    llm_retries: int = Field(default=3, ge=0, le=10, description="Retries of transient transport errors per call")
    llm_max_wait_s: Seconds = Field(default=60.0, description="Longest wait before a retry (a longer "
                                    "Retry-After is cut to this)")
    llm_outage_s: Seconds = Field(default=60.0, description="How long an endpoint that refuses connections is "
                                  "retried before the run stops (resumable)")
    max_concurrent_requests: int = Field(default=8, ge=1, le=1024, description="Requests in flight to one "
                                         "endpoint from this process, across runs, roles and trajectories")
    token_limit: int | None = Field(default=None, ge=1, description="Tokens (input + output) the run may spend; "
                                    "the run then ends cleanly, its report saying so")
    prices: dict[str, ModelPrice] = Field(default_factory=dict, description="USD per million tokens, by model")
    answer_retries: int = Field(
        default=2, ge=0, le=10, description="Retries of an answer that has no code or does not fit its schema"
    )
    llm_timeout_s: Seconds = Field(default=600.0, description="Seconds one LLM request may take")

    iterations: int = Field(default=2, ge=1, le=100, description="Learning iterations (paper: 10)")
    trajectories: int = Field(default=2, ge=1, le=64, description="Trajectories per iteration, W (paper: about 8)")
    depth: int = Field(default=3, ge=1, le=64, description="Optimization steps per trajectory, L (paper: 4-8)")
    top_k: int = Field(default=3, ge=1, le=32, description="Optimizations sampled from the KB at each step")
    compile_retries: int = Field(default=2, ge=0, le=10, description="Re-lowerings after a compile error")
    verify_retries: int = Field(default=2, ge=0, le=10, description="Re-lowerings after a wrong result")
    crash_retries: int = Field(default=2, ge=0, le=10, description="Re-lowerings after a crash or a hang, shown "
                               "the error (and compute-sanitizer's report, where it runs)")
    initial_retries: int = Field(default=3, ge=0, le=10, description="Fixes of the initial CUDA before giving up")
    max_failed_steps: int = Field(
        default=2, ge=1, le=64, description="Consecutive failed steps after which a trajectory stops early"
    )

    gpus: GpuIndices = Field(default=(0,), description="CUDA devices that share the GPU work")
    precision: PrecisionPolicy = Field(default="strict", description="Numerical freedom of candidates and baselines")
    allow: Libraries = Field(default=(), description="Libraries candidates may use (cublas, cudnn, ...)")
    seeds: int = Field(default=5, ge=1, le=100, description="Seeds of fresh inputs each candidate is verified on")
    kernel_timeout_s: Seconds = Field(default=20.0, description="Seconds one kernel call may take")
    profile: bool = Field(default=True, description="Profile kernels with Nsight Compute (the state comes from it)")
    sanitize: SanitizerTools = Field(
        default=(), description="compute-sanitizer checkers (memcheck, racecheck, initcheck) every verified kernel "
        "is run under once; an error is a wrong result (sanitizer_error)"
    )
    soft_verify: bool = Field(
        default=True, description="Ask an LLM whether a verified kernel still does all the model does"
    )
    unsafe_no_sandbox: bool = Field(
        default=False, description="Compile and run candidates without the OS sandbox (only where it cannot start)"
    )

    kb_path: PathText | None = Field(
        default=None, description="An existing knowledge base file (default: $KERNELBLASTER_KB, else the user's KB)"
    )
    kb_slice_tokens: int = Field(default=1500, ge=200, description="Token budget of the KB slice in a prompt")
    run_dir: PathText | None = Field(default=None, description="Run directory (default: runs/<problem>-<time>)")
    seed: int = Field(default=0, ge=0, description="Seed of the optimization sampling")

    @model_validator(mode="after")
    def _replay_has_a_recording(self) -> Self:
        if (self.llm == "replay") != (self.replay_from is not None):
            raise ValueError("replay_from is needed with llm=replay, and only with it")
        return self

    memory: Memory = Field(
        default="learn", description="learn: prompts get KB slices and the run teaches the KB; frozen: KB slices, "
        "nothing written; none: no KB in prompts and nothing written (ablation)",
    )
    profile_feedback: ProfileFeedback = Field(
        default="full", description="full: the Nsight Compute profile and its signature; cycles-only: the elapsed "
        "cycles alone, so states are matched without a signature (ablation)",
    )
    agent: AgentShape = Field(
        default="full", description="full: state extraction, KB matching and learning; minimal: the lowering agent "
        "alone, shown the code, its profile and compile/verify feedback (ablation)",
    )

    def llm_settings(self) -> LLMSettings:
        """The settings the LLM client works from (the fields of the same names)."""
        return LLMSettings.model_validate(self.model_dump(include=set(LLMSettings.model_fields)))

    @property
    def uses_kb(self) -> bool:
        """Whether states are matched in the KB and prompts get KB slices."""
        return self.memory != "none" and self.agent == "full"

    @property
    def writes_kb(self) -> bool:
        """Whether the run teaches the KB: outcomes, discovered states and the learning roles' edits."""
        return self.memory == "learn" and self.agent == "full"


class StudioContext(RunContext):
    """`RunContext` as LangGraph builds it from Studio's form, `StudioContext(**form)`: a bad setting is one
    line naming it, as a bad flag is on the command line, where pydantic would report several lines.

    Only the Studio graph's context is one: pydantic also calls a model's own `__init__` to validate it
    inside another model, where the command line names the flag itself."""

    model_config = ConfigDict(title="RunContext")

    def __init__(self, **settings: Any) -> None:
        try:
            super().__init__(**settings)
        except ValidationError as error:
            raise UserFacingError(describe_settings_error(error)) from None
