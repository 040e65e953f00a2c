"""Hostile or malformed text from a model never stops a run, never reaches the operator's terminal as
something it obeys, and never makes a file unwritable: a lone surrogate or a control character (NUL, a
terminal escape sequence) in an answer becomes U+FFFD where the answer enters (`graph.llm.answers`), an
answer over the size limit is refused unread and never sent back, a technique must be a name. Honest text
(non-ASCII identifiers in comments, mathematical symbols in reasons) is kept exactly.

Answers come from scripted chat models (and, once, from a fake OpenAI server over HTTP); the harness is the
recorded stand-in; checkpoints, recording, journal, reports and KB are real.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from fixtures.cli import kernelblaster
from fixtures.graph.fake_openai import CodeAnswer, FakeOpenAI, SeenRequest, kernelblaster_roles, optimize_through
from fixtures.graph.recorded_evaluator import EvaluationLog, SimulatedCrash
from fixtures.graph.scenario import (
    PROBLEM,
    READING,
    applies_first_offered,
    chat_models,
    initial_kernel,
    kernel,
    offered_techniques,
    run_dir_of,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import ScriptedChatModel, ScriptedChatModels, scripted_agent
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import BaseModel

from kernelblaster.graph.app import api
from kernelblaster.graph.app.checkpoint import serializer
from kernelblaster.graph.core import services
from kernelblaster.graph.core.progress import Progress, ProgressDisplay, ProgressNote
from kernelblaster.graph.core.state import OptimizationInput
from kernelblaster.graph.graph import compile_graph
from kernelblaster.graph.llm.agents import Question
from kernelblaster.graph.llm.recording import read_records
from kernelblaster.kb.edits import AddLesson
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes.kernels import CudaAnswer, SoftVerdict, check_cuda
from kernelblaster.nodes.parameter_update import KBUpdate
from kernelblaster.nodes.policy_evaluation import PolicyEvaluation

OSC_52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # writes the clipboard on terminals that allow it
CLEAR = "\x1b[2J\x1b[31m"
HOSTILE = f"{CLEAR}{OSC_52}"
# What a terminal would obey, raw or as a JSON escape.
OBEYED = ("\x1b", "\x07", "\\u001b", "\\u0007")
FFFD = "\ufffd"
ENTRY_POINT = 'extern "C" int kb_forward() { return 0; }'
CODE_TEXT = f"technique: vectorized_access\nfloat4 loads\n\n```cuda\n{ENTRY_POINT}\n```\n"
FIVE_MB = 5 * 1024 * 1024


def _code_question(node: str = "lower") -> Question[CudaAnswer]:
    return Question(role="lowering", node=node, key=f"i0-t0-s0-a0.{node}", schema=CudaAnswer,
                    system="You write CUDA.", user="Make it fast.", check=check_cuda)


def _verdict_question() -> Question[SoftVerdict]:
    return Question(role="soft_verifier", node="verify", key="q", schema=SoftVerdict, system="You review kernels.",
                    user="Is it faithful?")


def _last_words(model: ScriptedChatModel, prompt: int = 1) -> str:
    return str(model.prompts[prompt][-1].content)


def _with_source(source: str, marker: str = "ok 0.9") -> str:
    return kernel(marker).replace("return 0;", f"{source} return 0;")


# ---- where an answer enters: read, recorded and sent back as storable text ------------------------------


def test_code_holding_a_lone_surrogate_and_a_nul_is_read_with_replacement_characters(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[CODE_TEXT.replace("return 0;", 'const char* s = "\ud800\x00"; return 0;')])
    answer = scripted_agent(model, tmp_path, role="lowering").ask(_code_question())
    assert f'const char* s = "{FFFD}{FFFD}";' in answer.value.cuda_source


def test_a_reply_holding_a_lone_surrogate_is_recorded_as_it_was_read(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[CODE_TEXT.replace("float4 loads", "float4 loads \ud800")])
    scripted_agent(model, tmp_path, role="lowering").ask(_code_question())
    (record,) = read_records(tmp_path / "llm.jsonl")
    assert record.outcome == "answer" and record.reply is not None
    assert f"float4 loads {FFFD}" in record.reply.content


def test_escape_sequences_written_as_json_escapes_do_not_reach_the_answer(tmp_path: Path) -> None:
    escaped = json.dumps({"faithful": False, "problems": [f"drops the bias {OSC_52}"]})
    model = ScriptedChatModel(replies=[escaped])
    agent = scripted_agent(model, tmp_path, role_protocols={"soft_verifier": "text"})
    assert agent.ask(_verdict_question()).value.problems == [f"drops the bias {FFFD}]52;c;ZWNobyBwd25lZA=={FFFD}"]


def test_escape_sequences_in_tool_call_arguments_do_not_reach_the_answer(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[{"faithful": False, "problems": [f"x{CLEAR}"]}])
    assert scripted_agent(model, tmp_path).ask(_verdict_question()).value.problems == [f"x{FFFD}[2J{FFFD}[31m"]


def test_an_answer_over_the_size_limit_is_refused_unread_and_not_sent_back(tmp_path: Path) -> None:
    huge = CODE_TEXT.replace(ENTRY_POINT, ENTRY_POINT + "\n" + "// padding\n" * (FIVE_MB // 11))
    model = ScriptedChatModel(replies=[huge, CODE_TEXT])
    answer = scripted_agent(model, tmp_path, role="lowering").ask(_code_question())
    assert answer.value.cuda_source == ENTRY_POINT + "\n"
    assert "characters long, more than the 262144 an answer may have" in _last_words(model)
    assert sum(len(str(message.content)) for message in model.prompts[1]) < 10_000


def test_an_answer_over_the_size_limit_is_kept_whole_in_the_recording(tmp_path: Path) -> None:
    huge = CODE_TEXT.replace(ENTRY_POINT, ENTRY_POINT + "\n" + "// padding\n" * (FIVE_MB // 11))
    scripted_agent(ScriptedChatModel(replies=[huge, CODE_TEXT]), tmp_path, role="lowering").ask(_code_question())
    first, _ = read_records(tmp_path / "llm.jsonl")
    assert first.outcome == "unusable" and first.reply is not None and first.reply.content == huge


def test_an_oversized_tool_call_is_answered_without_its_arguments(tmp_path: Path) -> None:
    huge = {"technique": None, "explanation": "big", "cuda_source": ENTRY_POINT + "/" * FIVE_MB}
    model = ScriptedChatModel(replies=[huge, CudaAnswer(explanation="small", cuda_source=ENTRY_POINT)])
    agent = scripted_agent(model, tmp_path, role="lowering", role_protocols={"lowering": "schema"})
    assert agent.ask(_code_question()).value.explanation == "small"
    sent_back, told = model.prompts[1][-2:]
    assert isinstance(sent_back, AIMessage) and [call["args"] for call in sent_back.tool_calls] == [{}]
    assert told.type == "tool" and "more than the 262144" in str(told.content)


def test_a_technique_that_is_not_a_name_is_sent_back_saying_what_a_name_is(tmp_path: Path) -> None:
    hostile = {"technique": f"tech{OSC_52}", "explanation": "x", "cuda_source": ENTRY_POINT}
    model = ScriptedChatModel(replies=[hostile, CudaAnswer(technique="vectorized_access", explanation="x",
                                                           cuda_source=ENTRY_POINT)])
    agent = scripted_agent(model, tmp_path, role="lowering", role_protocols={"lowering": "schema"})
    assert agent.ask(_code_question()).value.technique == "vectorized_access"
    assert "technique: Value error, the technique must be a name like vectorized_access" in _last_words(model)


def test_a_technique_written_in_capitals_is_read_as_the_kbs_lower_case_name(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[{"technique": "Vectorized_Access", "explanation": "x",
                                        "cuda_source": ENTRY_POINT}])
    agent = scripted_agent(model, tmp_path, role="lowering", role_protocols={"lowering": "schema"})
    assert agent.ask(_code_question()).value.technique == "vectorized_access"


def test_a_technique_line_too_long_for_a_name_is_sent_back(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[CODE_TEXT.replace("vectorized_access", "v" * 80), CODE_TEXT])
    assert scripted_agent(model, tmp_path, role="lowering").ask(_code_question()).value.technique == "vectorized_access"
    assert "the answer does not fit the schema: technique:" in _last_words(model)


def _answered_as_studio_does(tmp_path: Path, answer: dict[str, str]) -> dict[str, object]:
    """The question a `--llm human` graph asks after its first prompt is answered with the JSON value `answer`."""
    graph = compile_graph(services.Services(), InMemorySaver(serde=serializer()))
    config: RunnableConfig = {"configurable": {"thread_id": "studio"}}
    context = small_context(tmp_path, llm="human")
    (first,) = graph.invoke(OptimizationInput(problem_path=str(PROBLEM)), config, context=context)["__interrupt__"]
    (second,) = graph.invoke(Command(resume={first.id: answer}), config, context=context)["__interrupt__"]
    return dict(second.value)


@pytest.mark.usefixtures("recorded_harness")
def test_a_persons_answer_is_made_storable_as_a_models_is(tmp_path: Path) -> None:
    answered = {"explanation": f"by hand {CLEAR}", "cuda_source": _with_source(f"// {OSC_52}")}
    assert _answered_as_studio_does(tmp_path, answered)["node"] == "check_initial"
    (stored,) = (tmp_path / "run" / "kernels").glob("*.cu")
    assert f"// {FFFD}]52;c;ZWNobyBwd25lZA=={FFFD}" in stored.read_text()


@pytest.mark.usefixtures("recorded_harness")
def test_a_persons_answer_holding_a_lone_surrogate_is_asked_for_again_saying_why(tmp_path: Path) -> None:
    again = _answered_as_studio_does(tmp_path, {"explanation": "x", "cuda_source": _with_source('"\ud800";')})
    assert again["node"] == "write_initial"
    assert "could not be read" in str(again["previous_answer_problem"])


# ---- whole runs: they finish, checkpoint, resume and report ----------------------------------------------


def test_a_run_whose_first_kernel_holds_a_lone_surrogate_and_a_nul_finishes(tmp_path: Path) -> None:
    hostile = CudaAnswer(explanation="x", cuda_source=_with_source('const char* s = "\ud800\x00";'))
    models = chat_models([hostile, applies_first_offered("ok 0.5")])
    context = small_context(tmp_path, depth=1)
    outcome = api.optimize(PROBLEM, context, services=services_for(models, EvaluationLog()))
    assert outcome.status == "finished" and outcome.best_speedup == pytest.approx(1.6)
    assert json.loads((tmp_path / "run" / "report.json").read_text())["status"] == "optimized"


def test_a_run_killed_after_a_hostile_answer_resumes_from_its_checkpoints_without_asking_again(
        tmp_path: Path) -> None:
    hostile = CudaAnswer(explanation=f"first {HOSTILE} \ud800", cuda_source=_with_source('const char* s = "\ud800";'))
    models = chat_models([hostile, applies_first_offered("ok 0.5")])
    context = small_context(tmp_path, depth=1)
    with pytest.raises(SimulatedCrash):
        api.optimize(PROBLEM, context, services=services_for(models, EvaluationLog(crash_at_measurement=2)))

    outcome = api.resume(run_dir_of(context), services=services_for(models, EvaluationLog()))

    assert outcome.status == "finished"
    assert len(models["lowering"].prompts) == 2  # the initial kernel and the step's, each asked once


def test_a_schema_answer_whose_technique_is_not_a_name_does_not_stop_the_run(tmp_path: Path) -> None:
    # A first kernel's technique becomes the next step's `previous_technique` in the KB, which takes only names.
    named_loosely = {"technique": "Vectorized Loads", "explanation": "x", "cuda_source": kernel("ok 0.9")}
    models = chat_models([named_loosely, initial_kernel(), applies_first_offered("ok 0.5")])
    context = small_context(tmp_path, depth=1, role_protocols={"lowering": "schema"})
    outcome = api.optimize(PROBLEM, context, services=services_for(models, EvaluationLog()))
    assert outcome.status == "finished" and outcome.best_speedup == pytest.approx(1.6)


def test_a_five_megabyte_answer_costs_one_refusal_and_the_run_goes_on(tmp_path: Path) -> None:
    huge = CudaAnswer(explanation="big", cuda_source=kernel("ok 0.9") + "// padding\n" * (FIVE_MB // 11))
    models = chat_models([huge, initial_kernel(), applies_first_offered("ok 0.5")])
    outcome = api.optimize(PROBLEM, small_context(tmp_path, depth=1), services=services_for(models, EvaluationLog()))
    assert outcome.status == "finished"
    assert max(sum(len(str(m.content)) for m in prompt) for prompt in models["lowering"].prompts) < 100_000


def test_an_endpoint_reply_with_an_escaped_lone_surrogate_does_not_stop_the_run(tmp_path: Path) -> None:
    def with_surrogate(seen: SeenRequest) -> BaseModel:
        answer = kernelblaster_roles(seen)
        if isinstance(answer, CodeAnswer):  # JSON-escaped on the wire (\ud800), a lone surrogate once parsed
            return answer.model_copy(update={"cuda_source": answer.cuda_source.replace("return 0;",
                                                                                       '"\ud800"; return 0;')})
        return answer

    with FakeOpenAI(with_surrogate) as server:
        outcome = optimize_through(server, tmp_path)
    assert outcome.status == "finished" and outcome.best_source is not None
    assert FFFD in outcome.best_source.read_text()


def test_an_honest_answer_with_non_ascii_comments_and_math_symbols_is_kept_exactly(tmp_path: Path) -> None:
    source = _with_source("// größe: 行数 × 列数, λ ≤ 0.5 ✓\n", "ok 0.5")
    reason = "the bound is ≤ ∑ bytes ÷ 3.35 TB/s ≈ 0.04 ms: √n blocks → fewer stalls"

    def honest(messages: list[BaseMessage]) -> CudaAnswer:
        return CudaAnswer(technique=offered_techniques(messages)[0], explanation="λ-scaled float4 loads",
                          cuda_source=source, choice_reason=reason)

    models = chat_models([initial_kernel(), honest])
    api.optimize(PROBLEM, small_context(tmp_path, depth=1), services=services_for(models, EvaluationLog()))
    (step,) = json.loads((tmp_path / "run" / "report.json").read_text())["steps"]
    assert (step["choice_reason"], step["explanation"]) == (reason, "λ-scaled float4 loads")
    assert (tmp_path / "run" / step["candidate_source"]).read_text() == source


# ---- what the operator sees, and what the run keeps ------------------------------------------------------


@pytest.fixture
def hostile_cli_run(fresh_cli_directory: Path, recorded_harness: EvaluationLog, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """`kernelblaster optimize` run to its end with escape sequences in every role's prose; the run directory
    and what the command printed."""
    first = CudaAnswer(explanation=f"first {HOSTILE}", cuda_source=_with_source(f"/* {HOSTILE} */"),
                       choice_reason=f"why {HOSTILE}")

    def step(messages: list[BaseMessage]) -> CudaAnswer:
        return CudaAnswer(technique=offered_techniques(messages)[0], explanation=f"applied {HOSTILE}",
                          cuda_source=_with_source(f"// {HOSTILE}", "ok 0.5"), choice_reason=f"because {HOSTILE}")

    lesson = AddLesson(state_id="memory_bandwidth_bound", technique="vectorized_access",
                       lesson=f"float4 loads need a tail {HOSTILE}")
    models = chat_models([first, step], policy_evaluation=PolicyEvaluation(summary=f"summary {HOSTILE}"),
                         state_extractor=READING.model_copy(update={"name": f"state {OSC_52}",
                                                                    "primary_bottleneck": f"dram {CLEAR}"}),
                         parameter_update=KBUpdate(edits=[lesson], rationale=f"rationale {HOSTILE}"))
    scripted: Callable[[], ScriptedChatModels] = lambda: ScriptedChatModels(models)  # noqa: E731
    monkeypatch.setattr(services, "OpenAIChatModels", scripted)
    KnowledgeBase.create(fresh_cli_directory / "kb.json")
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--kb", "kb.json", "--iterations", "1", "--trajectories",
                             "1", "--depth", "1", "--run-dir", "run")
    assert finished.status == 0, finished.err
    return fresh_cli_directory, finished.out + finished.err


def test_escape_sequences_in_answers_never_reach_the_terminal(hostile_cli_run: tuple[Path, str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    root, printed = hostile_cli_run
    report = kernelblaster(capsys, "report", root / "run")
    assert f"state {FFFD}]52;c;" in printed  # the extractor's reading is shown, made inert
    assert [escape for escape in OBEYED[:2] if escape in printed + report.out + report.err] == []


def test_escape_sequences_in_answers_never_reach_the_reports_the_recording_or_the_kb(
        hostile_cli_run: tuple[Path, str]) -> None:
    root, _ = hostile_cli_run
    kept = ["run/report.md", "run/report.json", "run/llm.jsonl", "run/kb_changes.jsonl", "kb.json",
            *(str(path.relative_to(root)) for path in root.glob("run/kernels/*.cu")),
            *(str(path.relative_to(root)) for path in root.glob("run/answers/*.json"))]
    holding = [name for name in kept if any(escape in (root / name).read_text() for escape in OBEYED)]
    assert holding == []
    assert f"float4 loads need a tail {FFFD}[2J" in (root / "kb.json").read_text()


def test_the_progress_line_writes_out_control_characters_a_note_quotes() -> None:
    out = StringIO()
    note = ProgressNote(node="compile", text=f"build failed: candidate.cu(3): error near '{OSC_52}'\rbest 99x")
    ProgressDisplay(out).show(Progress(note=note, best_speedup=None, tokens=0))
    assert "'\\x1b]52;c;ZWNobyBwd25lZA==\\x07'\\rbest 99x" in out.getvalue()
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_the_report_command_writes_out_control_characters_a_report_quotes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    context = small_context(tmp_path, depth=1)
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")])
    api.optimize(PROBLEM, context, services=services_for(models, EvaluationLog()))
    report = tmp_path / "run" / "report.md"
    report.write_text(report.read_text() + f"\ncompiler output: {CLEAR}\n")  # as a quoted compiler log could
    printed = kernelblaster(capsys, "report", tmp_path / "run").out
    assert printed.endswith("compiler output: \\x1b[2J\\x1b[31m\n") and "\x1b" not in printed


def test_a_one_line_error_writes_out_control_characters_it_quotes(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "report", tmp_path / f"run{CLEAR}")
    assert finished.status != 0 and "\x1b" not in finished.err
    assert "run\\x1b[2J\\x1b[31m: not a run directory" in finished.error_line


def test_kb_show_writes_out_escape_sequences_a_kb_taught_earlier_holds(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.create(tmp_path / "kb.json")
    kb.apply_edits([AddLesson(state_id="memory_bandwidth_bound", technique="vectorized_access",
                              lesson=f"float4 loads need a tail {CLEAR}")])  # as a run before this fix taught it
    printed = kernelblaster(capsys, "kb", "show", "memory_bandwidth_bound", "--kb", tmp_path / "kb.json").out
    assert "float4 loads need a tail \\x1b[2J\\x1b[31m" in printed and "\x1b" not in printed
