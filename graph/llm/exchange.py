"""One request to a model and what came of it, as the agents (`graph.llm.chat`), the live endpoint
(`graph.llm.endpoint`) and the replay of a recording (`graph.llm.recording`) all see it.

A `Link` sends an `ExchangeRequest` and returns the `Reply`, or raises `RequestRefused` (the server does
not accept this form of request: tools, a response format, a parameter; the agent adapts and asks again)
or `RequestFailed` (the endpoint stayed unreachable or rejected the request for good).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel, ConfigDict

from kernelblaster.graph.llm.roles import Role, StructuredOutputMethod
from kernelblaster.graph.llm.usage import TokenUsage

TokenParameter = Literal["max_completion_tokens", "max_tokens"]
# What a server refused: the way the answer's structure was asked for, the temperature, or the name of the
# output-limit parameter.
RefusalKind = Literal["method", "temperature", "token_parameter"]


class RequestParameters(BaseModel):
    """The sampling parameters a request carries (None: left to the server)."""

    model_config = ConfigDict(frozen=True)

    temperature: float | None = None
    max_output_tokens: int | None = None
    token_parameter: TokenParameter = "max_completion_tokens"

    def as_body(self) -> dict[str, float | int]:
        body: dict[str, float | int] = {}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_output_tokens is not None:
            body[self.token_parameter] = self.max_output_tokens
        return body


class ExchangeHead(BaseModel):
    """Which request this is: the `attempt`-th (0, 1, ...) made for one question, how and to which model."""

    model_config = ConfigDict(frozen=True)

    role: Role
    node: str
    key: str
    attempt: int
    model: str
    method: StructuredOutputMethod
    parameters: RequestParameters

    def head(self) -> ExchangeHead:
        return ExchangeHead(**{name: getattr(self, name) for name in ExchangeHead.model_fields})


class ExchangeRequest(ExchangeHead):
    """A request: its head, the schema of the answer asked for, and the conversation so far."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    answer_schema: type[BaseModel]
    messages: list[BaseMessage]


@dataclass(frozen=True)
class Reply:
    message: AIMessage
    finish_reason: str | None
    usage: TokenUsage
    latency_s: float

    @property
    def cut_off(self) -> bool:
        """Stopped by the output limit: the answer is incomplete, whatever it looks like."""
        return self.finish_reason == "length"


class RequestRefused(Exception):
    """The server answered 400 to this form of request; `kind` says what it refused."""

    def __init__(self, kind: RefusalKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class RequestFailed(Exception):
    """No reply: the endpoint stayed unreachable past the retries, or rejected the request for good."""


class Link(Protocol):
    def send(self, request: ExchangeRequest) -> Reply: ...
