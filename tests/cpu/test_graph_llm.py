"""LLM roles: schema answers and code answered as text, each read strictly with a bad answer sent back saying
what is wrong; reasoning never read as the answer; the answer journal; the protocol each role uses; and
the one-line error when no endpoint is configured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.graph.scripted_chat import ScriptedChatModel, scripted_agent

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.llm.agents import AgentFailed, Question
from kernelblaster.graph.llm.chat import chat_model, check_endpoint
from kernelblaster.graph.llm.settings import LLMSettings
from kernelblaster.nodes.kernels import CudaAnswer, SoftVerdict, check_cuda
from kernelblaster.tools.errors import UserFacingError

ENTRY_POINT = 'extern "C" int kb_forward() { return 0; }'
GOOD_CUDA = CudaAnswer(technique="vectorized_access", explanation="float4 loads", cuda_source=ENTRY_POINT + "\n")
CODE_TEXT = f"technique: vectorized_access\nfloat4 loads\n\n```cuda\n{ENTRY_POINT}\n```\n"


def _verdict_question(key: str = "q") -> Question[SoftVerdict]:
    return Question(role="soft_verifier", node="verify", key=key, schema=SoftVerdict, system="You review kernels.",
                    user="Is it faithful?")


def _code_question() -> Question[CudaAnswer]:
    return Question(role="lowering", node="lower", key="i0-t0-s0-a0.lower", schema=CudaAnswer,
                    system="You write CUDA.", user="Make it fast.", check=check_cuda)


def _last_words(model: ScriptedChatModel, prompt: int = 1) -> str:
    return str(model.prompts[prompt][-1].content)


def test_an_answer_that_does_not_fit_the_schema_is_asked_for_again_with_the_error(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[{"faithfull": True}, SoftVerdict(faithful=True)])
    assert scripted_agent(model, tmp_path).ask(_verdict_question()).value.faithful is True
    assert "does not fit the schema: faithful: Field required" in _last_words(model)


def test_a_reply_with_no_tool_call_is_asked_for_again(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=["Sure! The kernel looks fine.", SoftVerdict(faithful=True)])
    assert scripted_agent(model, tmp_path).ask(_verdict_question()).value.faithful is True
    assert "no call of the SoftVerdict tool" in _last_words(model)


def test_the_agent_gives_up_after_its_answer_retries_and_reports_the_tokens_spent(tmp_path: Path) -> None:
    model = ScriptedChatModel(then={"faithfull": True})
    with pytest.raises(AgentFailed) as failure:
        scripted_agent(model, tmp_path, answer_retries=1).ask(_verdict_question())
    assert len(model.prompts) == 2
    assert failure.value.usage.input_tokens == 200


def test_a_journaled_answer_is_replayed_without_asking_the_model_again(tmp_path: Path) -> None:
    first = scripted_agent(ScriptedChatModel(replies=[SoftVerdict(faithful=False, problems=["no bias"])]), tmp_path)
    asked = first.ask(_verdict_question(key="i0-t0-s0-a0.soft_verify"))
    silent = ScriptedChatModel()
    replayed = scripted_agent(silent, tmp_path).ask(_verdict_question(key="i0-t0-s0-a0.soft_verify"))
    assert replayed == asked
    assert silent.prompts == []


def test_the_code_writing_role_answers_in_text_told_the_form_in_its_instructions(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[CODE_TEXT])
    answer = scripted_agent(model, tmp_path, role="lowering").ask(_code_question())
    assert answer.value == GOOD_CUDA
    system = str(model.prompts[0][0].content)
    assert system.startswith("You write CUDA.") and "technique: NAME" in system and "```cuda" in system


def test_code_without_a_fenced_block_is_sent_back_saying_so(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[f"technique: vectorized_access\n{ENTRY_POINT}\n", CODE_TEXT])
    assert scripted_agent(model, tmp_path, role="lowering").ask(_code_question()).value == GOOD_CUDA
    assert "there is no ```cuda code block" in _last_words(model)
    assert ENTRY_POINT in str(model.prompts[1][-2].content)  # the model sees what it wrote


def test_code_that_fails_the_questions_own_check_is_sent_back_with_the_reason(tmp_path: Path) -> None:
    no_entry_point = CODE_TEXT.replace(ENTRY_POINT, "__global__ void k() {}")
    model = ScriptedChatModel(replies=[no_entry_point, CODE_TEXT])
    assert scripted_agent(model, tmp_path, role="lowering").ask(_code_question()).value == GOOD_CUDA
    assert 'define extern "C" int kb_forward' in _last_words(model)


def test_reasoning_left_in_the_text_is_not_read_as_the_answer(tmp_path: Path) -> None:
    decoy = "<think>Draft:\ntechnique: decoy\n```cuda\n// wrong\n```\n</think>"
    model = ScriptedChatModel(replies=[decoy + CODE_TEXT])
    assert scripted_agent(model, tmp_path, role="lowering").ask(_code_question()).value == GOOD_CUDA


def test_a_role_configured_for_schema_answers_writes_its_code_as_a_tool_call(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[GOOD_CUDA])
    agent = scripted_agent(model, tmp_path, role="lowering", role_protocols={"lowering": "schema"})
    assert agent.ask(_code_question()).value == GOOD_CUDA
    assert "```cuda" not in str(model.prompts[0][0].content)


def test_an_analytic_role_asked_in_text_is_shown_the_schema_and_answers_json_in_text(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=['```json\n{"faithful": false, "problems": ["drops the bias"]}\n```'])
    agent = scripted_agent(model, tmp_path, role_protocols={"soft_verifier": "text"})
    assert agent.ask(_verdict_question()).value.problems == ["drops the bias"]
    assert '"title": "SoftVerdict"' in str(model.prompts[0][0].content)


def test_json_written_with_prose_around_it_is_sent_back(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=['Here you go: {"faithful": true}', '{"faithful": true}'])
    agent = scripted_agent(model, tmp_path, role_protocols={"soft_verifier": "text"})
    assert agent.ask(_verdict_question()).value.faithful is True
    assert "must be one JSON object" in _last_words(model)


def test_every_exchange_is_recorded_with_role_key_messages_answer_and_usage(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[{"faithfull": True}, SoftVerdict(faithful=True)])
    scripted_agent(model, tmp_path).ask(_verdict_question(key="i0-t0-s0-a0.soft_verify"))
    records = [json.loads(line) for line in (tmp_path / "llm.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["unusable", "answer"]
    first, second = records
    assert (first["role"], first["node"], first["key"], first["attempt"]) == (
        "soft_verifier", "verify", "i0-t0-s0-a0.soft_verify", 0)
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert "does not fit the schema" in first["problem"]
    assert json.loads(second["reply"]["tool_calls"][0]["arguments"]) == {"faithful": True, "problems": []}
    assert second["usage"]["input_tokens"] == 100 and second["latency_s"] >= 0


def test_by_default_lowering_answers_in_text_and_the_analytic_roles_with_schemas() -> None:
    llm = RunContext().llm_settings()
    assert llm.protocol_for("lowering") == "text"
    assert {llm.protocol_for(role) for role in ("state_extractor", "soft_verifier", "parameter_update")} == {
        "schema"}


def test_no_endpoint_is_a_one_line_error_naming_the_variables_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UserFacingError) as error:
        check_endpoint(RunContext().llm_settings())
    message = str(error.value)
    assert "\n" not in message
    assert all(name in message for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "--base-url", "--llm human"))


def test_a_base_url_alone_is_an_endpoint_and_a_human_needs_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    check_endpoint(RunContext(base_url="http://127.0.0.1:8000/v1").llm_settings())
    check_endpoint(RunContext(llm="human").llm_settings())


def test_a_malformed_base_url_variable_is_a_one_line_error_like_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "notaurl")
    with pytest.raises(UserFacingError, match=r"^\$OPENAI_BASE_URL 'notaurl': expected an http:// or https:// URL"):
        check_endpoint(RunContext().llm_settings())


def test_the_base_url_flag_stands_in_for_a_malformed_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "notaurl")
    check_endpoint(RunContext(base_url="http://127.0.0.1:8000/v1").llm_settings())


def test_each_role_gets_its_own_model_when_configured() -> None:
    context = RunContext(model="small-model", role_models={"lowering": "big-model"}, base_url="http://127.0.0.1:1/v1")
    assert chat_model(context.llm_settings(), "lowering").model_name == "big-model"
    assert chat_model(context.llm_settings(), "state_extractor").model_name == "small-model"


def test_the_llm_settings_are_the_run_contexts_fields_of_the_same_names() -> None:
    context = RunContext(model="m", role_models={"lowering": "big"}, temperature=0.3, llm_retries=5)
    assert context.llm_settings().model_dump() == context.model_dump(include=set(LLMSettings.model_fields))
    assert context.llm_settings().model_for("lowering") == "big"
