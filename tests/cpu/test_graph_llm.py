"""LLM roles: structured answers, the retry of unusable answers with the error shown, bounded retries of
transient transport errors only (against a local OpenAI-compatible server), the answer journal, and the
one-line error when no endpoint is configured."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fixtures.graph.scripted_chat import ScriptedChatModel
from langchain_core.language_models import BaseChatModel

from kernelblaster.graph.agents import AgentFailed, AnswerJournal, Question
from kernelblaster.graph.context import RunContext
from kernelblaster.graph.llm import ChatAgent, chat_model, check_endpoint
from kernelblaster.nodes.kernels import CudaAnswer, SoftVerdict, check_cuda
from kernelblaster.tools.errors import UserFacingError

GOOD_CUDA = CudaAnswer(explanation="fused", cuda_source='extern "C" int kb_forward() { return 0; }')


def _question(schema: type = SoftVerdict, check: Callable[[Any], str | None] | None = None,
              key: str = "q") -> Question:
    return Question(role="soft_verifier", node="verify", key=key, schema=schema, system="You review kernels.",
                    user="Is it faithful?", check=check)


def _agent(model: BaseChatModel, tmp_path: Path, answer_retries: int = 2) -> ChatAgent:
    return ChatAgent(model, method="function_calling", answer_retries=answer_retries,
                     journal=AnswerJournal(tmp_path / "answers"))


def test_an_answer_that_does_not_fit_the_schema_is_asked_for_again_with_the_error(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[{"faithfull": True}, SoftVerdict(faithful=True)])
    answer = _agent(model, tmp_path).ask(_question())
    assert answer.value.faithful is True
    assert "does not fit the schema" in model.prompts[1][-1].content


def test_an_answer_that_fails_the_questions_own_check_is_asked_for_again_with_the_reason(tmp_path: Path) -> None:
    no_entry_point = CudaAnswer(explanation="fused", cuda_source="__global__ void k() {}")
    model = ScriptedChatModel(replies=[no_entry_point, GOOD_CUDA])
    answer = _agent(model, tmp_path).ask(_question(CudaAnswer, check=check_cuda))
    assert answer.value == GOOD_CUDA
    assert "define extern \"C\" int kb_forward" in model.prompts[1][-1].content


def test_a_reply_with_no_structured_output_is_asked_for_again(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=["Sure! The kernel looks fine.", SoftVerdict(faithful=True)])
    assert _agent(model, tmp_path).ask(_question()).value.faithful is True
    assert "no structured output" in model.prompts[1][-1].content


def test_the_agent_gives_up_after_its_answer_retries_and_reports_the_tokens_spent(tmp_path: Path) -> None:
    model = ScriptedChatModel(then={"faithfull": True})
    with pytest.raises(AgentFailed) as failure:
        _agent(model, tmp_path, answer_retries=1).ask(_question())
    assert len(model.prompts) == 2
    assert failure.value.usage.input_tokens == 200


def test_a_journaled_answer_is_replayed_without_asking_the_model_again(tmp_path: Path) -> None:
    first = _agent(ScriptedChatModel(replies=[SoftVerdict(faithful=False, problems=["drops the bias"])]), tmp_path)
    asked = first.ask(_question(key="i0-t0-s0-a0.soft_verify"))
    silent = ScriptedChatModel()
    replayed = _agent(silent, tmp_path).ask(_question(key="i0-t0-s0-a0.soft_verify"))
    assert replayed == asked
    assert silent.prompts == []


class _FakeOpenAI(BaseHTTPRequestHandler):
    """Answers every chat completion with the server's `status` and `body`, counting the requests."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.server.requests += 1  # type: ignore[attr-defined]
        status, body = self.server.reply  # type: ignore[attr-defined]
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def fake_openai() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    server.requests = 0  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _context_for(server: ThreadingHTTPServer, **settings: object) -> RunContext:
    return RunContext(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", **settings)


def test_chat_openai_answers_are_parsed_and_their_tokens_counted(fake_openai: ThreadingHTTPServer,
                                                                 tmp_path: Path) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "SoftVerdict", "arguments": json.dumps({"faithful": True})}}
    fake_openai.reply = (200, {  # type: ignore[attr-defined]
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 321, "completion_tokens": 12, "total_tokens": 333},
    })
    answer = _agent(chat_model(_context_for(fake_openai), "soft_verifier"), tmp_path).ask(_question())
    assert answer.value.faithful is True
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (321, 12)


def test_transient_server_errors_are_retried_a_bounded_number_of_times_then_fail_the_call(
        fake_openai: ThreadingHTTPServer, tmp_path: Path) -> None:
    fake_openai.reply = (503, {"error": {"message": "overloaded"}})  # type: ignore[attr-defined]
    model = chat_model(_context_for(fake_openai, llm_retries=2), "soft_verifier")
    with pytest.raises(AgentFailed, match="the LLM request failed"):
        _agent(model, tmp_path).ask(_question())
    assert fake_openai.requests == 3  # type: ignore[attr-defined]


def test_a_rejected_key_stops_the_run_with_one_line_and_no_retry(fake_openai: ThreadingHTTPServer,
                                                                 tmp_path: Path) -> None:
    fake_openai.reply = (401, {"error": {"message": "invalid api key"}})  # type: ignore[attr-defined]
    model = chat_model(_context_for(fake_openai, llm_retries=3), "soft_verifier")
    with pytest.raises(UserFacingError) as error:
        _agent(model, tmp_path).ask(_question())
    assert fake_openai.requests == 1  # type: ignore[attr-defined]
    assert "\n" not in str(error.value) and "invalid api key" in str(error.value)


def test_no_endpoint_is_a_one_line_error_naming_the_variables_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UserFacingError) as error:
        check_endpoint(RunContext())
    message = str(error.value)
    assert "\n" not in message
    assert all(name in message for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "--base-url", "--llm human"))


def test_a_base_url_alone_is_an_endpoint_and_a_human_needs_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    check_endpoint(RunContext(base_url="http://127.0.0.1:8000/v1"))
    check_endpoint(RunContext(llm="human"))


def test_each_role_gets_its_own_model_when_configured() -> None:
    context = RunContext(model="small-model", role_models={"lowering": "big-model"}, base_url="http://127.0.0.1:1/v1")
    assert chat_model(context, "lowering").model_name == "big-model"
    assert chat_model(context, "state_extractor").model_name == "small-model"
