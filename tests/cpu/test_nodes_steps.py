"""record_step, select_optimizations and finish: what a trajectory learns and keeps, and what the run reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.graph.recorded_evaluator import MACHINE, EvaluationLog
from fixtures.graph.scenario import (
    Finished,
    applies_first_offered,
    chat_models,
    initial_kernel,
    offered_techniques,
    run_graph,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import Reply, ScriptedChatModel
from fixtures.kb.lookup import tried_optimization
from pydantic import ValidationError

from kernelblaster.graph.core.state import StepProgress
from kernelblaster.graph.llm.roles import Role


def _run(tmp_path: Path, lowering: list[Reply], **settings: Any) -> tuple[Finished, dict[Role, ScriptedChatModel]]:
    models = chat_models(lowering)
    return run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, **settings)), models


def test_the_kb_learns_the_speedup_over_the_kernel_the_step_started_from(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("ok 0.5")], depth=1)
    step = finished.state["steps"][0]
    stats = tried_optimization(tmp_path / "kb" / "kb.json", step).stats
    assert step.speedup == pytest.approx(0.9 / 0.5) and stats.geomean_speedup == pytest.approx(0.9 / 0.5)


def test_a_slower_kernel_is_learned_from_but_the_trajectory_stays_on_the_faster_one(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("ok 1.2"),
                                  applies_first_offered("ok 0.6")])
    slower, faster = finished.state["steps"]
    assert slower.outcome == "measured" and slower.speedup == 0.9 / 1.2
    assert faster.before.label == "initial-a0"
    assert finished.state["best"].time_ms == 0.6


def test_the_next_step_is_not_offered_the_technique_just_tried_on_the_same_kernel(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("ok 1.2"),
                                       applies_first_offered("ok 0.6")])
    first = finished.state["steps"][0].technique
    assert first not in offered_techniques(models["lowering"].prompts[2])


def test_the_next_step_is_not_offered_the_technique_that_made_its_kernel(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5"),
                                       applies_first_offered("ok 0.4")])
    first, second = finished.state["steps"]
    assert second.before.technique == first.technique
    assert first.technique not in offered_techniques(models["lowering"].prompts[2])


def test_the_report_gives_speedups_against_eager_compile_and_the_initial_cuda(tmp_path: Path) -> None:
    _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("ok 0.45")], depth=1)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    speedups = report["speedups"]
    assert (speedups["vs_eager"], speedups["vs_compile"], speedups["vs_initial"]) == (1.0 / 0.45, 0.8 / 0.45,
                                                                                     0.9 / 0.45)
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "2.22x vs PyTorch eager" in markdown and "2.00x vs the initial CUDA" in markdown


def test_the_report_names_the_precision_policy_it_was_judged_under(tmp_path: Path) -> None:
    _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("ok 0.5")], depth=1,
         precision="pytorch-default")
    assert json.loads((tmp_path / "run" / "report.json").read_text())["precision"] == "pytorch-default"
    assert "Precision policy: `pytorch-default`" in (tmp_path / "run" / "report.md").read_text()


def test_the_report_names_the_machine_that_measured_its_best_kernel(tmp_path: Path) -> None:
    _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("ok 0.5")], depth=1)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["machine"] == MACHINE.model_dump()
    assert f"Machine: {MACHINE.line()}" in (tmp_path / "run" / "report.md").read_text()
    assert "(test double)" in MACHINE.line()


def test_a_report_without_a_measured_kernel_says_its_machine_was_not_recorded(tmp_path: Path) -> None:
    _run(tmp_path, [initial_kernel("incorrect")] * 4, depth=1)
    assert json.loads((tmp_path / "run" / "report.json").read_text())["machine"] is None
    assert "Machine: not recorded (no kernel was measured" in (tmp_path / "run" / "report.md").read_text()


def test_the_report_lists_each_step_and_the_tokens_of_every_role_and_node(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5")], depth=1)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    step = finished.state["steps"][0]
    tokens = {(t["role"], t["node"]): t["calls"] for t in report["tokens"]}
    assert tokens[("lowering", "write_initial")] == 1 and tokens[("lowering", "lower")] == 1
    assert tokens[("state_extractor", "extract_state")] == 1
    assert f"| 1 | 0 | 1 | {step.state_id} | {step.technique} |" in (tmp_path / "run" / "report.md").read_text()


def test_a_step_after_a_failed_one_starts_without_its_attempts_failures_or_feedback(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("compile_error"),
                                       applies_first_offered("compile_error"), applies_first_offered("ok 0.5")],
                            compile_retries=1)
    failed, next_step = finished.state["steps"]
    assert (failed.outcome, failed.attempts) == ("compile_failed", 2)
    assert (next_step.outcome, next_step.attempts) == ("measured", 1)
    assert "did not compile" not in models["lowering"].prompts[3][1].content


def test_a_retry_prompt_shows_how_the_attempt_failed_with_its_message_and_its_code(tmp_path: Path) -> None:
    _, models = _run(tmp_path, [initial_kernel(), applies_first_offered("compile_error"),
                                applies_first_offered("ok 0.5"), applies_first_offered("ok 0.4")],
                     compile_retries=1)
    retry = models["lowering"].prompts[2][1].content
    assert "## Your previous attempt did not compile\n" in retry
    assert "The previous attempt's code:\n```cuda\n" in retry and "// RECORDED: compile_error" in retry
    assert "```\nFix the problem and answer with the complete corrected file.\n" in retry


def test_a_state_value_refuses_a_misspelt_field() -> None:
    with pytest.raises(ValidationError, match="atempts"):
        StepProgress().replace(atempts=1)
