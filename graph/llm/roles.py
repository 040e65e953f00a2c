"""The LLM roles of a run and how each is asked: the answer protocol and the structured-output method."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

Role = Literal[
    "lowering",
    "state_extractor",
    "state_matcher",
    "soft_verifier",
    "policy_evaluation",
    "perf_gap_analysis",
    "parameter_update",
]
ROLES: tuple[Role, ...] = get_args(Role)
Provider = Literal["openai", "human", "replay"]
ModelName = Annotated[str, Field(min_length=1)]
# How a schema-shaped answer is asked for, from the most to the least enforced by the endpoint; `text` asks
# for the JSON in the prompt alone. A server that refuses one falls back to the next (`graph.llm.endpoint`).
StructuredOutputMethod = Literal["function_calling", "json_schema", "json_mode", "text"]
STRUCTURED_OUTPUT_METHODS: tuple[StructuredOutputMethod, ...] = get_args(StructuredOutputMethod)
# schema: a structured answer (StructuredOutputMethod); text: plain text (code in a fenced block, or JSON
# written out for roles whose answer has no text form).
AnswerProtocol = Literal["schema", "text"]
# Models write worse code when it must be escaped inside a JSON string, so the role writing CUDA answers
# in text by default; the short analytic roles answer with schemas.
DEFAULT_PROTOCOLS: dict[Role, AnswerProtocol] = {"lowering": "text"}
