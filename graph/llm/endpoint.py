"""Sending one request to an OpenAI-compatible endpoint (`EndpointLink`): in the form the method asks for,
through the endpoint's request gate, with transient failures retried.

Connection errors, timeouts, 408/409/429 and 5xx are transient: retried `retries` times, waiting what the
server's `Retry-After` (or `retry-after-ms`) asks, cut to `max_wait_s`, else an exponential backoff; the
request's gate slot is given up while waiting. An endpoint that still refuses connections after them, and
has for `outage_s`, stops the run. A 400 to a form of request the server does not support (tools, a response
format, a temperature, `max_completion_tokens`) is a `RequestRefused` for the agent to adapt to. Errors no
retry can fix (a wrong key, an unknown model, an exhausted quota) stop the run too; a run stopped like this
says why in one line (`UserFacingError`) and resumes once the cause is fixed. A prompt longer than the
model's context fails the request.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import openai
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable

from kernelblaster.graph.llm.answers import one_line
from kernelblaster.graph.llm.budget import RequestGate
from kernelblaster.graph.llm.exchange import ExchangeRequest, Reply, RequestFailed, RequestRefused
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.tools.errors import UserFacingError

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({408, 409, 429})
REFUSAL_STATUSES = frozenset({400, 422})
CONFIGURATION_STATUSES = frozenset({401, 403, 404})
FIRST_WAIT_S = 0.5
MAX_CAUSES = 8  # how deep the chain of wrapped errors is searched for the transport's own


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` of a transient failure, each after a wait of at most `max_wait_s`; an endpoint that refuses
    connections is retried until it has refused them for `outage_s` too, then the run stops."""

    retries: int
    max_wait_s: float
    outage_s: float = 0.0

    def wait_s(self, error: Exception, retry: int) -> float:
        asked = retry_after_s(error)
        if asked is not None:
            return min(asked, self.max_wait_s)
        # Jitter spreads the retries of parallel trajectories hit by the same outage.
        return min(FIRST_WAIT_S * 2.0**retry, self.max_wait_s) * random.uniform(0.75, 1.0)


class EndpointLink:
    """Requests to one model at one endpoint."""

    def __init__(self, model: BaseChatModel, gate: RequestGate, policy: RetryPolicy, endpoint: str) -> None:
        self.model = model
        self.gate = gate
        self.policy = policy
        self.endpoint = endpoint

    def send(self, request: ExchangeRequest) -> Reply:
        runnable = self._shaped(request)
        retry, refused_since = 0, None
        while True:
            try:
                with self.gate.slot():
                    start = time.monotonic()
                    message = runnable.invoke(request.messages)
                    return _reply(request, message, time.monotonic() - start)
            except Exception as error:
                self._raise_unless_transient(error, request)
                refused_since = (refused_since or time.monotonic()) if connection_refused(error) else None
                self._raise_if_final(error, retry + 1, refused_since)
                wait = self.policy.wait_s(error, retry)
                log.info("%s: %s; retrying in %.1f s (try %d)", self.endpoint, _describe(error), wait, retry + 2)
                time.sleep(wait)
                retry += 1

    def _raise_if_final(self, error: Exception, tries: int, refused_since: float | None) -> None:
        """After the last retry the request has failed; an endpoint refusing connections (since `refused_since`)
        is waited for until the outage has lasted `outage_s`, then stops the run: the kernel being worked on is
        not at fault, and every other request would fail the same way."""
        refused_s = time.monotonic() - refused_since if refused_since is not None else None
        if tries <= self.policy.retries or (refused_s is not None and refused_s < self.policy.outage_s):
            return
        if refused_s is not None:
            raise UserFacingError(f"the LLM endpoint {self.endpoint} cannot be reached ({_describe(error)}; "
                                  f"{tries} tries over {refused_s:.0f} s); the run stopped: resume it once the "
                                  "endpoint answers") from None
        raise RequestFailed(f"no answer after {tries} tries ({_describe(error)})") from error

    def _shaped(self, request: ExchangeRequest) -> Runnable[Any, Any]:
        """The model asked for the answer the way `request.method` says, with the request's parameters."""
        body: dict[str, Any] = dict(request.parameters.as_body())
        runnable: Runnable[Any, Any] = self.model
        if request.method == "function_calling":
            runnable = self.model.bind_tools([request.answer_schema], tool_choice=request.answer_schema.__name__)
        elif request.method == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": request.answer_schema.__name__, "schema": request.answer_schema.model_json_schema()}}
        elif request.method == "json_mode":
            body["response_format"] = {"type": "json_object"}
        # Sent as given: ChatOpenAI would rename max_tokens, and its parse path for response formats raises on
        # an answer cut off at the limit instead of returning it.
        return runnable.bind(extra_body=body) if body else runnable

    def _raise_unless_transient(self, error: Exception, request: ExchangeRequest) -> None:
        if isinstance(error, openai.APIConnectionError):  # timeouts included
            return
        if not isinstance(error, openai.APIStatusError):
            raise error
        status = error.status_code
        if (status in TRANSIENT_STATUSES and _code(error) != "insufficient_quota") or status >= 500:
            return
        what = f"the LLM endpoint {self.endpoint} refused the {request.role} request: {_describe(error)}"
        if status in CONFIGURATION_STATUSES or status == 429:
            raise UserFacingError(what) from None
        if isinstance(error, ContextOverflowError):
            raise RequestFailed(f"the prompt is longer than the model's context ({_describe(error)})") from error
        if status in REFUSAL_STATUSES:
            raise _refusal(error, request) from error
        raise RequestFailed(what) from error


def _refusal(error: openai.APIStatusError, request: ExchangeRequest) -> Exception:
    """What a 400 refused, judged by what the request carried and what the message names."""
    message = _describe(error)
    lowered = message.lower()
    parameters = request.parameters
    if parameters.temperature is not None and "temperature" in lowered:
        return RequestRefused("temperature", message)
    if parameters.max_output_tokens is not None and parameters.token_parameter in lowered:
        return RequestRefused("token_parameter", message)
    if request.method != "text":
        return RequestRefused("method", message)
    return RequestFailed(f"the endpoint rejected the request ({message})")


def _reply(request: ExchangeRequest, message: AIMessage, latency_s: float) -> Reply:
    metadata = message.usage_metadata or {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    cached = (metadata.get("input_token_details") or {}).get("cache_read") or 0
    reasoning = (metadata.get("output_token_details") or {}).get("reasoning") or 0
    usage = TokenUsage(role=request.role, node=request.node, model=request.model,
                       input_tokens=metadata["input_tokens"], output_tokens=metadata["output_tokens"],
                       cached_input_tokens=cached, reasoning_tokens=reasoning)
    return Reply(message=message, finish_reason=message.response_metadata.get("finish_reason"), usage=usage,
                 latency_s=latency_s)


def connection_refused(error: Exception) -> bool:
    """Whether no connection to the endpoint could be made (refused, no route, no such host): the endpoint is
    down, not struggling with this request. A connection dropped mid-answer is not this; it may be the
    request's own doing. The transport's error is found among the causes (langchain-openai wraps openai's
    error, which wraps the transport's) and matched by name: openai has used httpx and httpx2."""
    if not isinstance(error, openai.APIConnectionError) or isinstance(error, openai.APITimeoutError):
        return False
    cause: BaseException | None = error
    for _ in range(MAX_CAUSES):
        if cause is None:
            return False
        if any(kind.__name__ == "ConnectError" for kind in type(cause).__mro__):
            return True
        cause = cause.__cause__
    return False


def retry_after_s(error: Exception) -> float | None:
    """The wait a response's `retry-after-ms` or `retry-after` header asks for, in seconds."""
    response = getattr(error, "response", None)
    if response is None:
        return None
    headers = response.headers
    milliseconds = _number(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return max(0.0, milliseconds / 1000)
    text = headers.get("retry-after")
    seconds = _number(text)
    if seconds is not None or text is None:
        return None if seconds is None else max(0.0, seconds)
    try:  # an HTTP date
        return max(0.0, (email.utils.parsedate_to_datetime(text) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _code(error: openai.APIStatusError) -> str | None:
    return getattr(error, "code", None)


def _describe(error: Exception) -> str:
    status = getattr(error, "status_code", None)
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return one_line(f"{status}: {text}" if status else text)
