"""LLM roles over any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama ...) through `ChatOpenAI`.

Transport errors of the transient kinds (connection, timeout, 408/409/429, 5xx) are retried by the
OpenAI client itself, `llm_retries` times; after that the call fails (`AgentFailed`) and the step with it.
Errors that retrying cannot fix (a wrong key, an unknown model) stop the run with a one-line error: it can
be resumed once the configuration is fixed. An answer that does not fit its schema, or fails the
question's own check, is sent back to the model with the error, `answer_retries` times.
"""

from __future__ import annotations

import os
from typing import Any

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI

from kernelblaster.graph.agents import Agent, AgentFailed, Answer, AnswerJournal, Question, T, no_usage
from kernelblaster.graph.context import Role, RunContext, StructuredOutputMethod
from kernelblaster.graph.state import TokenUsage
from kernelblaster.tools.errors import UserFacingError

API_KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
# Local servers (vLLM, Ollama) accept any key; the client insists on having one.
PLACEHOLDER_KEY = "no-key-needed"

_TRANSIENT = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError, openai.InternalServerError)
_CONFIGURATION = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)


def check_endpoint(context: RunContext) -> None:
    """Raise a one-line error unless an endpoint is configured (or a human answers)."""
    if context.llm == "openai" and not (os.environ.get(API_KEY_VARIABLE) or _base_url(context)):
        raise UserFacingError(
            f"no LLM endpoint configured: set {API_KEY_VARIABLE} (and {BASE_URL_VARIABLE} for a server other "
            "than OpenAI's), or pass --base-url URL, or answer the prompts yourself with --llm human"
        )


def chat_model(context: RunContext, role: Role) -> ChatOpenAI:
    """The chat model of `role` at the configured endpoint."""
    return ChatOpenAI(
        model=context.model_for(role),
        base_url=_base_url(context),
        api_key=os.environ.get(API_KEY_VARIABLE) or PLACEHOLDER_KEY,
        max_retries=context.llm_retries,
        timeout=context.llm_timeout_s,
    )


def _base_url(context: RunContext) -> str | None:
    return context.base_url or os.environ.get(BASE_URL_VARIABLE) or None


class ChatAgent(Agent):
    """A role answered by a chat model with structured output, retried with the error on a bad answer."""

    def __init__(self, model: BaseChatModel, *, method: StructuredOutputMethod, answer_retries: int,
                 journal: AnswerJournal) -> None:
        self.model = model
        self.method = method
        self.answer_retries = answer_retries
        self.journal = journal

    def ask(self, question: Question[T]) -> Answer[T]:
        recalled = self.journal.recall(question)
        if recalled is not None:
            return recalled
        answer = self._ask_model(question)
        self.journal.keep(question, answer)
        return answer

    def _ask_model(self, question: Question[T]) -> Answer[T]:
        structured = self.model.with_structured_output(question.schema, include_raw=True, method=self.method)
        messages: list[BaseMessage] = [SystemMessage(question.system), HumanMessage(question.user)]
        usage = no_usage(question)
        problem = "no answer"
        for _ in range(self.answer_retries + 1):
            reply = self._invoke(structured, messages, question, usage)
            usage = _add_usage(usage, reply["raw"])
            value = reply["parsed"]
            problem = _parse_problem(reply) if value is None else question.problem_with(value)
            if problem is None:
                return Answer(value=value, usage=usage)
            messages += _correction(reply["raw"], problem)
        raise AgentFailed(f"{question.role}: no usable answer after {self.answer_retries + 1} tries ({problem})",
                          usage)

    @staticmethod
    def _invoke(structured: Any, messages: list[BaseMessage], question: Question[T],
                usage: TokenUsage) -> dict[str, Any]:
        try:
            return structured.invoke(messages)
        except _CONFIGURATION as error:
            raise UserFacingError(f"the LLM endpoint refused the {question.role} request: {_one_line(error)}") from None
        except (*_TRANSIENT, openai.BadRequestError) as error:
            raise AgentFailed(f"{question.role}: the LLM request failed: {_one_line(error)}", usage) from error


def _parse_problem(reply: dict[str, Any]) -> str:
    error = reply.get("parsing_error")
    if error is not None:
        return f"the answer does not fit the schema: {_one_line(error)}"
    return "the answer contained no structured output; answer with the requested schema"


def _correction(raw: AIMessage, problem: str) -> list[BaseMessage]:
    """The reply and the error, in the form the endpoint accepts after that reply."""
    text = f"That answer cannot be used: {problem}. Answer again, in full."
    # After a tool call, OpenAI's API requires a tool message answering it before anything else.
    tool_replies = [ToolMessage(content=text, tool_call_id=call["id"]) for call in raw.tool_calls if call.get("id")]
    return [raw, *tool_replies] if tool_replies else [raw, HumanMessage(text)]


def _add_usage(usage: TokenUsage, raw: AIMessage) -> TokenUsage:
    metadata = raw.usage_metadata or {"input_tokens": 0, "output_tokens": 0}
    return usage.model_copy(update={"input_tokens": usage.input_tokens + metadata["input_tokens"],
                                    "output_tokens": usage.output_tokens + metadata["output_tokens"]})


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
