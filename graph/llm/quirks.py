"""What a run learned about how its endpoint's models accept requests, kept in `RUN_DIR/endpoint.json` so a
resumed run does not probe again.

A server without tool calling (vLLM without a tool parser, many Ollama models) answers 400 to a tools
request: the run falls back to the next structured-output method (function calling -> JSON schema ->
JSON mode -> JSON in text), once per run and model, and says so in the log. Until a method is confirmed by
a reply, questions to that model are asked one at a time, so parallel trajectories do not all probe. A
refused temperature is dropped (reasoning models accept none); a refused `max_completion_tokens` is sent
as `max_tokens` (older servers).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from kernelblaster.graph.llm.exchange import RequestParameters, RequestRefused, TokenParameter
from kernelblaster.graph.llm.roles import STRUCTURED_OUTPUT_METHODS, StructuredOutputMethod
from kernelblaster.graph.llm.settings import LLMSettings
from kernelblaster.tools.files import write_text_atomically

log = logging.getLogger(__name__)


class ModelQuirks(BaseModel):
    """How one model at the run's endpoint accepts requests."""

    method: StructuredOutputMethod
    confirmed: bool = Field(default=False, description="A reply came back for a request made with `method`")
    send_temperature: bool = True
    token_parameter: TokenParameter = "max_completion_tokens"
    learned: list[str] = Field(default_factory=list, description="What the server refused, and what changed")


class _QuirksFile(BaseModel):
    endpoint: str
    models: dict[str, ModelQuirks] = Field(default_factory=dict)


class EndpointQuirks:
    """The run's memory of its endpoint, shared by every agent of the run (thread-safe)."""

    def __init__(self, path: Path, endpoint: str, settings: LLMSettings) -> None:
        self.path = path
        self.endpoint = endpoint
        self.settings = settings
        self._lock = threading.Lock()
        self._probes: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._file = (_QuirksFile.model_validate_json(path.read_text()) if path.exists()
                      else _QuirksFile(endpoint=endpoint))

    def method(self, model: str) -> StructuredOutputMethod:
        return self._quirks(model).method

    def parameters(self, model: str) -> RequestParameters:
        quirks = self._quirks(model)
        return RequestParameters(temperature=self.settings.temperature if quirks.send_temperature else None,
                                 max_output_tokens=self.settings.max_output_tokens,
                                 token_parameter=quirks.token_parameter)

    @contextmanager
    def probing(self, model: str) -> Iterator[None]:
        """Hold while asking `model` a schema question: one at a time until its method is confirmed."""
        if self._quirks(model).confirmed:
            yield
            return
        with self._probes[model]:
            yield

    def confirm(self, model: str, method: StructuredOutputMethod) -> None:
        with self._lock:
            quirks = self._quirks_locked(model)
            if quirks.method == method and not quirks.confirmed:
                quirks.confirmed = True
                self._save()

    def adapt(self, model: str, refused: RequestRefused) -> bool:
        """Change what the next request to `model` looks like after `refused`; False if nothing is left to try."""
        with self._lock:
            quirks = self._quirks_locked(model)
            change = self._change(quirks, refused)
            if change is None:
                return False
            what, instead = change
            note = (f"{self.endpoint} refused {what} for model {model} ({refused.detail[:300]}); "
                    f"{instead} for the rest of this run")
            quirks.learned.append(note)
            self._save()
        log.warning("%s", note)
        return True

    @staticmethod
    def _change(quirks: ModelQuirks, refused: RequestRefused) -> tuple[str, str] | None:
        """What was refused and what is done instead, having changed `quirks` accordingly."""
        if refused.kind == "temperature" and quirks.send_temperature:
            quirks.send_temperature = False
            return "a temperature", "no temperature is sent"
        if refused.kind == "token_parameter" and quirks.token_parameter == "max_completion_tokens":
            quirks.token_parameter = "max_tokens"
            return "max_completion_tokens", "the output limit is sent as max_tokens"
        position = STRUCTURED_OUTPUT_METHODS.index(quirks.method)
        if refused.kind == "method" and not quirks.confirmed and position + 1 < len(STRUCTURED_OUTPUT_METHODS):
            refused_method, quirks.method = quirks.method, STRUCTURED_OUTPUT_METHODS[position + 1]
            return f"structured output by {refused_method}", f"answers are asked for by {quirks.method}"
        return None

    def _quirks(self, model: str) -> ModelQuirks:
        with self._lock:
            return self._quirks_locked(model).model_copy()

    def _quirks_locked(self, model: str) -> ModelQuirks:
        return self._file.models.setdefault(model, ModelQuirks(method=self.settings.structured_output))

    def _save(self) -> None:
        write_text_atomically(self.path, self._file.model_dump_json(indent=1))
