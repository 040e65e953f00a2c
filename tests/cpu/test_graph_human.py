"""`--llm human`: a run pauses at each prompt, and `kernelblaster answer` drives it to completion.

The harness is the recorded stand-in (no GPU here); everything else — CLI, API, graph, checkpoints,
interrupts, the KB — is real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.graph.scenario import ANALYSIS, EVALUATION, NO_EDITS, PROBLEM, READING, kernel, small_context
from gpu.human_run import ANSWERS_BY_ROLE
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import BaseModel

from kernelblaster.graph.app import api
from kernelblaster.graph.app.checkpoint import serializer
from kernelblaster.graph.app.cli import main
from kernelblaster.graph.core import services
from kernelblaster.graph.core.state import OptimizationInput
from kernelblaster.graph.graph import compile_graph
from kernelblaster.graph.llm.human import parse_answer
from kernelblaster.graph.llm.roles import ROLES
from kernelblaster.nodes.extract_state import StateReading
from kernelblaster.nodes.kernels import SoftVerdict
from kernelblaster.nodes.match_state import MatchDecision
from kernelblaster.nodes.parameter_update import KBUpdate
from kernelblaster.nodes.perf_gap_analysis import GapAnalysis
from kernelblaster.nodes.policy_evaluation import PolicyEvaluation

pytestmark = pytest.mark.usefixtures("recorded_harness")


def _start(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    assert main(["kb", "init", str(tmp_path / "kb.json")]) == 0
    assert main(["optimize", str(PROBLEM), "--llm", "human", "--run-dir", str(run_dir), "--kb",
                 str(tmp_path / "kb.json"), "--iterations", "1", "--trajectories", "1", "--depth", "1"]) == 0
    return run_dir


def _pending(run_dir: Path) -> api.PendingQuestion:
    return api.Run.open(run_dir).outcome().questions[0]


def _answer(tmp_path: Path, run_dir: Path, text: str) -> int:
    answer_file = tmp_path / "answer.txt"
    answer_file.write_text(text)
    return main(["answer", str(run_dir), "--file", str(answer_file)])


def _expert_answer(question: api.PendingQuestion) -> str:
    """What a person would answer, by role (code as plain text, the rest as JSON)."""
    role, node = question.question.role, question.question.node
    if role == "lowering":
        return kernel("ok 0.9") if node == "write_initial" else "// technique applied: first offered\n" + \
            kernel("ok 0.5")
    return {"soft_verifier": '{"faithful": true}', "state_extractor": READING.model_dump_json(),
            "policy_evaluation": EVALUATION.model_dump_json(), "perf_gap_analysis": ANALYSIS.model_dump_json(),
            "parameter_update": NO_EDITS.model_dump_json()}[role]


def test_a_human_run_waits_at_its_first_prompt_with_the_question_written_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _start(tmp_path)
    pending = _pending(run_dir)
    assert (pending.question.role, pending.question.node) == ("lowering", "write_initial")
    assert "class Model" in (run_dir / "question.md").read_text()
    assert "kernelblaster answer" in capsys.readouterr().out


def test_answering_every_prompt_drives_a_human_run_to_its_best_kernel(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _start(tmp_path)
    asked = []
    while (outcome := api.Run.open(run_dir).outcome()).status == "waiting_for_answer":
        question = outcome.questions[0]
        asked.append(question.question.node)
        assert _answer(tmp_path, run_dir, _expert_answer(question)) == 0
    assert asked == ["write_initial", "check_initial", "extract_state", "lower", "verify", "policy_evaluation",
                     "perf_gap_analysis", "parameter_update"]
    assert "RECORDED: ok 0.5" in (run_dir / "best.cu").read_text()
    assert "[iter 1 traj 0 step 1" in capsys.readouterr().out


def test_an_unusable_answer_is_asked_for_again_with_the_reason(tmp_path: Path) -> None:
    run_dir = _start(tmp_path)
    _answer(tmp_path, run_dir, "__global__ void not_the_entry_point() {}")
    pending = _pending(run_dir)
    assert pending.question.node == "write_initial"
    assert "kb_forward" in (pending.question.previous_answer_problem or "")
    assert "could not be used" in (run_dir / "question.md").read_text()


def test_an_unusable_answer_exits_non_zero_with_one_line_saying_why(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _start(tmp_path)
    capsys.readouterr()
    assert _answer(tmp_path, run_dir, "__global__ void not_the_entry_point() {}") == 2
    output = capsys.readouterr()
    assert output.err.count("\n") == 1 and "your answer could not be used: " in output.err
    assert "kb_forward" in output.err and "waiting for your answer" not in output.out


def test_answering_a_run_that_waits_for_nothing_is_a_one_line_error(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _start(tmp_path)
    while (outcome := api.Run.open(run_dir).outcome()).status == "waiting_for_answer":
        _answer(tmp_path, run_dir, _expert_answer(outcome.questions[0]))
    capsys.readouterr()
    assert _answer(tmp_path, run_dir, "{}") == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_an_answer_given_as_a_json_value_as_studio_sends_it_is_accepted(tmp_path: Path) -> None:
    graph = compile_graph(services.Services(), InMemorySaver(serde=serializer()))
    config: RunnableConfig = {"configurable": {"thread_id": "studio"}}
    context = small_context(tmp_path, llm="human")
    (first,) = graph.invoke(OptimizationInput(problem_path=str(PROBLEM)), config, context=context)["__interrupt__"]
    answer = {"explanation": "straightforward", "cuda_source": kernel("ok 0.9")}
    (second,) = graph.invoke(Command(resume={first.id: answer}), config, context=context)["__interrupt__"]
    assert (first.value["node"], second.value["node"]) == ("write_initial", "check_initial")


def test_a_human_question_shows_the_models_answer_form_with_its_why_line(tmp_path: Path) -> None:
    question = (_start(tmp_path) / "question.md").read_text()
    assert "technique: NAME\nwhy: one sentence" in question
    assert "the .cu file alone" in question


def test_a_human_answer_opening_with_a_technique_line_is_read_as_strictly_as_a_models(tmp_path: Path) -> None:
    run_dir = _start(tmp_path)
    assert _answer(tmp_path, run_dir, f"technique: none\n```cuda\n{kernel('ok 0.9')}```\n```cuda\n```\n") == 2
    pending = _pending(run_dir)
    assert pending.question.node == "write_initial"
    assert "code blocks" in (pending.question.previous_answer_problem or "")


ANSWER_SCHEMAS: dict[str, type[BaseModel]] = {
    "soft_verifier": SoftVerdict, "state_extractor": StateReading, "state_matcher": MatchDecision,
    "policy_evaluation": PolicyEvaluation, "perf_gap_analysis": GapAnalysis, "parameter_update": KBUpdate}


def test_the_gpu_human_run_answers_every_role_but_lowering_in_json() -> None:
    assert set(ANSWERS_BY_ROLE) == set(ANSWER_SCHEMAS) == set(ROLES) - {"lowering"}


@pytest.mark.parametrize("role", ANSWER_SCHEMAS)
def test_the_gpu_human_runs_answers_fit_their_roles_schemas(role: str) -> None:
    # The GPU run (tests/gpu) asserts each answer is taken; checked here too, so CI catches a stale one.
    parse_answer(json.dumps(ANSWERS_BY_ROLE[role]), ANSWER_SCHEMAS[role])
