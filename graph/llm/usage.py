"""Token usage of LLM answers, by role and node, as the endpoint reports it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TokenUsage(BaseModel):
    """Tokens one LLM answer cost, by role and node. Cached prompt tokens are part of `input_tokens` and
    reasoning tokens part of `output_tokens`, as the endpoint reports them (0 where it does not). Immutable,
    as the graph's state values are (it is one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str
    node: str
    input_tokens: int
    output_tokens: int
    model: str = ""
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

    def plus(self, other: TokenUsage) -> TokenUsage:
        return self.model_copy(update={
            "input_tokens": self.input_tokens + other.input_tokens,
            "output_tokens": self.output_tokens + other.output_tokens,
            "cached_input_tokens": self.cached_input_tokens + other.cached_input_tokens,
            "reasoning_tokens": self.reasoning_tokens + other.reasoning_tokens,
        })

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens
