"""What the LLM client needs of a run's configuration (`LLMSettings`), so it never sees the run itself.

`RunContext` (`graph.core.context`) holds these fields among the run's others, under the same names, and
hands them over with `RunContext.llm_settings()`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kernelblaster.graph.llm.roles import DEFAULT_PROTOCOLS, AnswerProtocol, Provider, Role, StructuredOutputMethod


class LLMSettings(BaseModel):
    """Who answers each role, at which endpoint, how requests are made and how often they are retried.
    The fields are validated, with their descriptions, where they are set: `RunContext`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    llm: Provider
    replay_from: str | None
    model: str
    role_models: dict[Role, str]
    base_url: str | None
    structured_output: StructuredOutputMethod
    role_protocols: dict[Role, AnswerProtocol]
    temperature: float | None
    max_output_tokens: int | None
    llm_retries: int
    llm_max_wait_s: float
    llm_outage_s: float
    max_concurrent_requests: int
    token_limit: int | None
    answer_retries: int
    llm_timeout_s: float

    def model_for(self, role: Role) -> str:
        return self.role_models.get(role, self.model)

    def protocol_for(self, role: Role) -> AnswerProtocol:
        return self.role_protocols.get(role, DEFAULT_PROTOCOLS.get(role, "schema"))
