"""LLM roles over any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama ...) through `ChatOpenAI`.

`ChatAgent` turns a question into an answer: it asks in the role's protocol (code as text for the role
writing CUDA, structured output for the analytic roles, with the structured-output method the endpoint
accepts: `graph.llm.quirks`), makes the reply storable (no lone surrogates, no control characters: the run
records, checkpoints and shows it) and reads it strictly (`graph.llm.answers`), and sends an unusable
answer back with what is wrong, `answer_retries` times. A reply cut off at the output limit is never read:
the model is asked again, told the limit. Every exchange is recorded (`graph.llm.recording`), every token
charged to the run's budget (`graph.llm.budget`); once that is spent, no request is made (`BudgetExhausted`).

Transient transport errors are retried by the link (`graph.llm.endpoint`), `llm_retries` times; after that
the call fails (`AgentFailed`) and the step with it. An endpoint that cannot be reached at all, and errors
that retrying cannot fix (a wrong key, an unknown model), stop the run with a one-line error: it can be
resumed once the cause is fixed.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic

from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr, TypeAdapter, ValidationError

from kernelblaster.graph.llm.agents import (
    Agent,
    AgentFailed,
    Answer,
    AnswerJournal,
    BudgetExhausted,
    Question,
    T,
    no_usage,
)
from kernelblaster.graph.llm.answers import (
    Reading,
    correction,
    cut_off,
    first_messages,
    read_reply,
    storable_message,
)
from kernelblaster.graph.llm.budget import TokenBudget
from kernelblaster.graph.llm.exchange import ExchangeRequest, Link, Reply, RequestFailed, RequestRefused
from kernelblaster.graph.llm.quirks import EndpointQuirks
from kernelblaster.graph.llm.recording import ExchangeOutcome, ExchangeRecorder, recording_to_replay
from kernelblaster.graph.llm.roles import Role, StructuredOutputMethod
from kernelblaster.graph.llm.settings import LLMSettings
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import EndpointUrl

API_KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
OPENAI_URL = "https://api.openai.com/v1"
# Local servers (vLLM, Ollama) accept any key; the client insists on having one.
PLACEHOLDER_KEY = "no-key-needed"


def check_endpoint(settings: LLMSettings) -> None:
    """Raise a one-line error unless an endpoint is configured (or a human answers, or a recording does)."""
    if settings.llm == "replay" and settings.replay_from is not None:
        # Read whole here, with the other checks made before a run directory is created: a damaged
        # recording found only once the run has started would leave a run that can never go on.
        recording_to_replay(Path(settings.replay_from))
    variable_url = os.environ.get(BASE_URL_VARIABLE)
    if settings.llm == "openai" and settings.base_url is None and variable_url:
        _check_url_variable(variable_url)
    if settings.llm == "openai" and not (os.environ.get(API_KEY_VARIABLE) or _base_url(settings)):
        raise UserFacingError(
            f"no LLM endpoint configured: set {API_KEY_VARIABLE} (and {BASE_URL_VARIABLE} for a server other "
            "than OpenAI's), or pass --base-url URL, or answer the prompts yourself with --llm human"
        )


def _check_url_variable(url: str) -> None:
    # Checked as --base-url is: a malformed URL would fail every request at once, and the run would end as
    # if no kernel could be written instead of stopping where it can be resumed.
    try:
        TypeAdapter(EndpointUrl).validate_python(url)
    except ValidationError as error:
        reason = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise UserFacingError(f"${BASE_URL_VARIABLE} {url!r}: {reason}") from None


def chat_model(settings: LLMSettings, role: Role) -> ChatOpenAI:
    """The chat model of `role` at the configured endpoint; retries are the link's (`graph.llm.endpoint`)."""
    return ChatOpenAI(
        model=settings.model_for(role),
        base_url=_base_url(settings),
        api_key=SecretStr(os.environ.get(API_KEY_VARIABLE) or PLACEHOLDER_KEY),
        max_retries=0,
        timeout=settings.llm_timeout_s,
    )


def endpoint_url(settings: LLMSettings) -> str:
    return _base_url(settings) or OPENAI_URL


def _base_url(settings: LLMSettings) -> str | None:
    return settings.base_url or os.environ.get(BASE_URL_VARIABLE) or None


@dataclass(frozen=True)
class RunAgents:
    """What the chat agents of one run share."""

    settings: LLMSettings
    quirks: EndpointQuirks
    recorder: ExchangeRecorder
    budget: TokenBudget
    journal: AnswerJournal


class ChatAgent(Agent):
    """A role answered by a model through a link (the live endpoint, or a recording)."""

    def __init__(self, role: Role, link: Link, run: RunAgents) -> None:
        self.link = link
        self.run = run
        self.model = run.settings.model_for(role)
        self.protocol = run.settings.protocol_for(role)

    def ask(self, question: Question[T]) -> Answer[T]:
        recalled = self.run.journal.recall(question)
        if recalled is not None:
            return recalled
        probing = self.run.quirks.probing(self.model) if self.protocol == "schema" else nullcontext()
        with probing:
            answer = _Asking(self, question).answer()
        self.run.journal.keep(question, answer)
        return answer

    def method(self) -> StructuredOutputMethod:
        return self.run.quirks.method(self.model) if self.protocol == "schema" else "text"


class _Asking(Generic[T]):
    """One question being asked: its conversation so far, the tokens it cost, its tries."""

    def __init__(self, agent: ChatAgent, question: Question[T]) -> None:
        self.agent = agent
        self.run = agent.run
        self.question = question
        self.method = agent.method()
        self.messages: list[BaseMessage] = first_messages(question, self.method)
        self.usage: TokenUsage = no_usage(question, agent.model)
        self.requests = 0

    def answer(self) -> Answer[T]:
        problem = "no answer"
        for _ in range(self.run.settings.answer_retries + 1):
            request, reply = self._exchange()
            reading, follow_up = self._read(request, reply)
            if reading.value is not None and reading.problem is None:
                return Answer(value=reading.value, usage=self.usage)
            problem = reading.problem or problem
            self.messages = self.messages + follow_up
        raise AgentFailed(f"{self.question.role}: no usable answer after {self.run.settings.answer_retries + 1} "
                          f"tries ({problem})", self.usage)

    def _exchange(self) -> tuple[ExchangeRequest, Reply]:
        """The next request and its reply, adapting to what the server refuses (a bounded loop: each refusal
        changes the quirks, or fails the question)."""
        while True:
            request = self._request()
            try:
                reply = self.agent.link.send(request)
            except RequestRefused as refused:
                self.run.recorder.record(request, "refused", problem=refused.detail, refused=refused.kind)
                if not self.run.quirks.adapt(self.agent.model, refused):
                    raise AgentFailed(f"{self.question.role}: the endpoint refused the request ({refused.detail})",
                                      self.usage) from refused
                if refused.kind == "method":
                    self.method = self.agent.method()
                    self.messages = first_messages(self.question, self.method)
                continue
            except RequestFailed as failed:
                self.run.recorder.record(request, "failed", problem=str(failed))
                raise AgentFailed(f"{self.question.role}: the LLM request failed: {failed}", self.usage) from failed
            # Made storable once, here, where a reply enters: the recording, the reading, what is sent back
            # to the model, and everything kept from the answer then hold the same text.
            reply = replace(reply, message=storable_message(reply.message))
            self.usage = self.usage.plus(reply.usage)
            self.run.budget.charge(reply.usage.total)
            if self.agent.protocol == "schema":
                self.run.quirks.confirm(self.agent.model, request.method)
            return request, reply

    def _request(self) -> ExchangeRequest:
        exhausted = self.run.budget.exhausted()
        if exhausted is not None:
            raise BudgetExhausted(f"{self.question.role}: no request made: {exhausted}", self.usage)
        request = ExchangeRequest(role=self.question.role, node=self.question.node, key=self.question.key,
                                  attempt=self.requests, model=self.agent.model, method=self.method,
                                  answer_schema=self.question.schema, messages=self.messages,
                                  parameters=self.run.quirks.parameters(self.agent.model))
        self.requests += 1
        return request

    def _read(self, request: ExchangeRequest, reply: Reply) -> tuple[Reading[T], list[BaseMessage]]:
        """The answer in `reply`, or what is wrong with it and the messages that say so to the model."""
        if reply.cut_off:
            limit = request.parameters.max_output_tokens or reply.usage.output_tokens
            follow_up, problem = cut_off(limit)
            self.run.recorder.record(request, "cut_off", reply=reply, problem=problem)
            return Reading(None, problem), follow_up
        reading = read_reply(self.question, self.method, reply.message)
        outcome: ExchangeOutcome = "answer" if reading.problem is None else "unusable"
        self.run.recorder.record(request, outcome, reply=reply, problem=reading.problem)
        follow_up = correction(reply.message, self.method, reading.problem) if reading.problem else []
        return reading, follow_up
