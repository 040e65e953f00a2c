"""Every branch of the optimization graph, each driven by scripted agents and recorded evaluations, with
the path the run took asserted from the streamed node names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fixtures.graph.recorded_evaluator import EvaluationLog, RecordedEvaluators
from fixtures.graph.scenario import (
    FAITHFUL,
    Finished,
    applies_first_offered,
    chat_models,
    initial_kernel,
    kernel,
    run_graph,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import (
    Reply,
    ScriptedChatModel,
    ScriptedChatModels,
    connection_error,
    server_error,
)
from fixtures.kb.lookup import tried_optimization

from kernelblaster.graph.core.services import Services
from kernelblaster.graph.core.state import StepRecord
from kernelblaster.graph.llm.roles import Role
from kernelblaster.kb.edits import Deprecate
from kernelblaster.kb.schema import OutcomeStats
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes.kernels import SoftVerdict
from kernelblaster.tools.errors import UserFacingError


def _run(tmp_path: Path, lowering: list[Reply], log: EvaluationLog | None = None,
         **settings: Any) -> tuple[Finished, dict[Role, ScriptedChatModel]]:
    models = chat_models(lowering, **settings.pop("roles", {}))
    return run_graph(services_for(models, log or EvaluationLog()), small_context(tmp_path, **settings)), models


def _steps(finished: Finished) -> list[StepRecord]:
    steps: list[StepRecord] = finished.state["steps"]
    return steps


def test_a_correct_faster_kernel_becomes_the_best_and_is_written_as_best_cu(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("ok 0.5"),
                                  applies_first_offered("ok 0.45")])
    assert finished.follows("check_initial", "start_iteration")
    assert finished.follows("start_iteration", "trajectory/extract_state")
    assert finished.follows("trajectory/select_optimizations", "trajectory/lower")
    assert finished.follows("trajectory/lower", "trajectory/compile")
    assert finished.follows("trajectory/compile", "trajectory/verify")
    assert finished.follows("trajectory/verify", "trajectory/evaluate")
    assert finished.follows("trajectory/record_step", "trajectory/extract_state")
    assert finished.follows("parameter_update", "finish")
    assert finished.state["best"].time_ms == 0.45
    assert "RECORDED: ok 0.45" in (tmp_path / "run" / "best.cu").read_text()


def test_an_initial_draft_that_fails_to_compile_is_rewritten_with_the_compiler_message(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel("compile_error"), initial_kernel("ok 0.9"),
                                       applies_first_offered("ok 0.5")], depth=1)
    assert finished.follows("check_initial", "write_initial")
    assert finished.state["initial"].label == "initial-a1"
    assert 'identifier "flaot" is undefined' in models["lowering"].prompts[1][1].content


def test_a_run_whose_initial_drafts_all_fail_finishes_without_a_kernel(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel("incorrect"), initial_kernel("incorrect")], initial_retries=1)
    assert finished.follows("check_initial", "finish")
    assert "start_iteration" not in finished.path
    assert finished.state.get("best") is None
    assert not (tmp_path / "run" / "best.cu").exists()
    assert "No correct CUDA kernel" in (tmp_path / "run" / "report.md").read_text()


def test_a_compile_error_sends_the_step_back_to_lower_with_the_compiler_output(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("compile_error"),
                                       applies_first_offered("ok 0.5")], depth=1)
    assert finished.follows("trajectory/compile", "trajectory/lower")
    retry_prompt = models["lowering"].prompts[2][1].content
    assert "did not compile" in retry_prompt and 'identifier "flaot" is undefined' in retry_prompt
    assert _steps(finished)[0].outcome == "measured" and _steps(finished)[0].attempts == 2


def test_compile_errors_past_the_retry_limit_end_the_step_as_a_failed_attempt_in_the_kb(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("compile_error"),
                                  applies_first_offered("compile_error")], depth=1, compile_retries=1)
    assert finished.follows("trajectory/compile", "trajectory/record_step")
    step = _steps(finished)[0]
    assert (step.outcome, step.attempts, step.kb_updated) == ("compile_failed", 2, True)
    stats = _stats(tmp_path, step)
    assert (stats.attempts, stats.compile_failures) == (1, 1)


def test_a_wrong_result_sends_the_step_back_to_lower_with_the_failing_check(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("incorrect"),
                                       applies_first_offered("ok 0.5")], depth=1)
    assert finished.follows("trajectory/verify", "trajectory/lower")
    assert "seed 0: 1200 of 4096 elements differ" in models["lowering"].prompts[2][1].content


def test_wrong_results_past_the_retry_limit_end_the_step_as_verify_failed(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("incorrect")], depth=1, verify_retries=0)
    assert finished.follows("trajectory/verify", "trajectory/record_step")
    assert _steps(finished)[0].outcome == "verify_failed"


def test_a_crash_goes_back_to_lower_with_the_cuda_error_and_memchecks_report(tmp_path: Path) -> None:
    log = EvaluationLog()
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("crash"),
                                       applies_first_offered("ok 0.5")], log=log, depth=1)
    assert finished.follows("trajectory/verify", "trajectory/diagnose")
    assert finished.follows("trajectory/diagnose", "trajectory/lower")
    retry_prompt = models["lowering"].prompts[2][1].content
    assert "crashed when run: cudaErrorIllegalAddress: an illegal memory access was encountered" in retry_prompt
    assert "stderr: kb_driver: CUDA error after kb_forward" in retry_prompt
    assert "compute-sanitizer memcheck: 1 error\n- Invalid __global__ read of size 4 bytes" in retry_prompt
    assert "at swish_scale(const float *, float *, long)+0x70 in candidate.cu:12" in retry_prompt
    assert log.labels("diagnose") == [log.labels("verify")[1]]
    step = _steps(finished)[0]
    assert (step.outcome, step.attempts) == ("measured", 2)


def test_a_hang_goes_back_to_lower_with_the_request_that_got_no_reply_and_no_sanitizer_run(tmp_path: Path) -> None:
    log = EvaluationLog()
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("timeout"),
                                       applies_first_offered("ok 0.5")], log=log, depth=1)
    assert finished.follows("trajectory/diagnose", "trajectory/lower")
    retry_prompt = models["lowering"].prompts[2][1].content
    assert "crashed or hung when run" in retry_prompt
    assert "The kernel hung: no reply to 'run' within 20 s; the driver was killed" in retry_prompt
    assert "Every call must finish within 20 s" in retry_prompt
    assert log.labels("diagnose") == []
    assert _steps(finished)[0].outcome == "measured"


def test_crashes_past_the_retry_limit_end_the_step_as_crashed_without_another_sanitizer_run(tmp_path: Path) -> None:
    log = EvaluationLog()
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("crash"),
                                       applies_first_offered("timeout")], log=log, depth=1, crash_retries=1)
    assert finished.follows("trajectory/diagnose", "trajectory/record_step")
    step = _steps(finished)[0]
    assert (step.outcome, step.attempts, step.kb_updated) == ("crashed", 2, True)
    assert len(log.labels("diagnose")) == 1 and len(models["lowering"].prompts) == 3
    assert _stats(tmp_path, step).crashes == 1


def test_a_crash_where_compute_sanitizer_is_missing_is_retried_with_the_error_alone(tmp_path: Path) -> None:
    log = EvaluationLog()
    models = chat_models([initial_kernel(), applies_first_offered("crash"), applies_first_offered("ok 0.5")])
    services = Services(chat_models=ScriptedChatModels(models),
                        evaluators=RecordedEvaluators(log, compute_sanitizer=False))
    run_graph(services, small_context(tmp_path, depth=1))
    retry_prompt = models["lowering"].prompts[2][1].content
    assert "cudaErrorIllegalAddress" in retry_prompt
    assert "compute-sanitizer is not installed here, so nothing says which access failed" in retry_prompt


def test_an_initial_draft_that_crashes_is_rewritten_shown_memchecks_report(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel("crash"), initial_kernel("ok 0.9"),
                                       applies_first_offered("ok 0.5")], depth=1)
    assert finished.state["initial"].label == "initial-a1"
    fix_prompt = models["lowering"].prompts[1][1].content
    assert "crashed or hung when run" in fix_prompt and "Invalid __global__ read of size 4 bytes" in fix_prompt


def test_a_kernel_memcheck_flags_under_sanitize_is_sent_back_like_a_wrong_result(tmp_path: Path) -> None:
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("sanitizer_error 0.5"),
                                       applies_first_offered("ok 0.6")], depth=1, sanitize=("memcheck",))
    assert finished.follows("trajectory/verify", "trajectory/lower")
    retry_prompt = models["lowering"].prompts[2][1].content
    assert "compiled but failed verification" in retry_prompt
    assert "check 'sanitizer' failed: compute-sanitizer memcheck: 1 error" in retry_prompt
    assert finished.state["best"].time_ms == 0.6


def test_without_sanitize_the_same_kernel_is_measured(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("sanitizer_error 0.5")], depth=1)
    assert _steps(finished)[0].outcome == "measured"
    assert finished.state["best"].time_ms == 0.5


def test_a_soft_verification_finding_is_sent_back_to_lower_like_a_wrong_result(tmp_path: Path) -> None:
    unfaithful = SoftVerdict(faithful=False, problems=["the scale factor is never applied"])
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5"),
                                       applies_first_offered("ok 0.6")], depth=1,
                            roles={"soft_verifier": [FAITHFUL, unfaithful, FAITHFUL]})
    assert finished.follows("trajectory/verify", "trajectory/lower")
    assert "the scale factor is never applied" in models["lowering"].prompts[2][1].content
    assert finished.state["best"].time_ms == 0.6


def test_a_lowering_request_that_keeps_failing_fails_the_step_and_the_run_goes_on(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), server_error(), applies_first_offered("ok 0.5")])
    assert finished.follows("trajectory/lower", "trajectory/record_step")
    first, second = _steps(finished)
    assert (first.outcome, first.kb_updated) == ("llm_failed", False)
    assert second.outcome == "measured"
    assert finished.follows("parameter_update", "finish")


def test_an_endpoint_refusing_connections_for_its_outage_time_stops_the_run_instead_of_failing_the_step(
        tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match=r"^the LLM endpoint \S+ cannot be reached .*; 2 tries over"):
        _run(tmp_path, [initial_kernel(), connection_error(), connection_error()], llm_outage_s=0.01)


def test_a_suspicious_result_is_reported_but_neither_rewarded_nor_kept(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("suspicious 0.01")], depth=1)
    step = _steps(finished)[0]
    assert step.outcome == "suspicious"
    assert finished.state["best"].time_ms == 0.9
    stats = _stats(tmp_path, step)
    assert (stats.suspicious, stats.measured, stats.geomean_speedup) == (1, 0, None)
    assert "Suspicious results" in (tmp_path / "run" / "report.md").read_text()


def test_a_trajectory_that_keeps_failing_stops_before_its_depth(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("crash"), applies_first_offered("crash")],
                       depth=4, max_failed_steps=2, crash_retries=0)
    assert len(_steps(finished)) == 2
    assert finished.follows("trajectory/record_step", "trajectory")


def test_a_trajectory_ends_when_its_state_has_nothing_left_to_try(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb" / "kb.json")
    state = kb.document.states["memory_bandwidth_bound"]
    kb.apply_edits([Deprecate(state_id=state.id, technique=o.technique, reason="retired for this test")
                    for o in state.optimizations])
    finished, models = _run(tmp_path, [initial_kernel()])
    assert finished.follows("trajectory/select_optimizations", "trajectory")
    assert _steps(finished) == [] and len(models["lowering"].prompts) == 1


def test_more_iterations_loop_back_from_learning_to_a_new_iteration(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5"), applies_first_offered("ok 0.4")],
                       iterations=2, depth=1)
    assert finished.follows("parameter_update", "start_iteration")
    assert [step.iteration for step in _steps(finished)] == [0, 1]
    assert _steps(finished)[1].before.time_ms == 0.5


def test_trajectories_fan_out_and_their_steps_and_best_kernels_merge(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("ok 0.7"), applies_first_offered("ok 0.5"),
                                  applies_first_offered("ok 0.6")], trajectories=3, depth=1)
    assert finished.count("trajectory") == 3
    assert sorted(step.trajectory for step in _steps(finished)) == [0, 1, 2]
    assert finished.state["best"].time_ms == 0.5


def test_an_init_file_is_the_first_draft_and_the_agent_is_not_asked_for_one(tmp_path: Path) -> None:
    init = tmp_path / "mine.cu"
    init.write_text(kernel("ok 0.7"))
    models = chat_models([applies_first_offered("ok 0.5")])
    finished = run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1), init_kernel=init)
    assert finished.state["initial"].time_ms == 0.7
    assert len(models["lowering"].prompts) == 1


def test_an_init_file_that_fails_is_fixed_by_the_agent_shown_why(tmp_path: Path) -> None:
    init = tmp_path / "mine.cu"
    init.write_text(kernel("incorrect"))
    models = chat_models([initial_kernel("ok 0.9"), applies_first_offered("ok 0.5")])
    finished = run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1), init_kernel=init)
    assert finished.state["initial"].label == "initial-a1"
    fix_prompt = models["lowering"].prompts[0][1].content
    assert "failed verification" in fix_prompt and "RECORDED: incorrect" in fix_prompt


def test_a_kernel_caught_escaping_its_stream_while_timed_ends_the_step_as_verify_failed(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [initial_kernel("ok 0.9"), applies_first_offered("stream_escape 0.3")], depth=1)
    assert finished.follows("trajectory/evaluate", "trajectory/record_step")
    assert _steps(finished)[0].outcome == "verify_failed"
    assert finished.state["best"].time_ms == 0.9


def _stats(tmp_path: Path, step: StepRecord) -> OutcomeStats:
    return tried_optimization(tmp_path / "kb" / "kb.json", step).stats


def test_a_candidate_the_harness_cannot_judge_is_tried_twice_then_ends_the_step_unlearned(tmp_path: Path) -> None:
    log = EvaluationLog()
    finished, models = _run(tmp_path, [initial_kernel(), applies_first_offered("harness_error")], log=log, depth=1)
    step = _steps(finished)[0]
    assert finished.follows("trajectory/verify", "trajectory/record_step")
    assert (step.outcome, step.kb_updated) == ("harness_error", False)
    assert log.labels("verify").count(log.labels("verify")[-1]) == 2
    assert _stats(tmp_path, step).attempts == 0
    assert len(models["lowering"].prompts) == 2  # no retry prompt blames the kernel


def test_a_harness_failure_that_clears_on_the_second_try_goes_on_to_timing(tmp_path: Path) -> None:
    log = EvaluationLog()
    finished, _ = _run(tmp_path, [initial_kernel(), applies_first_offered("flaky_harness 0.5")], log=log, depth=1)
    step = _steps(finished)[0]
    assert (step.outcome, step.kb_updated) == ("measured", True)
    assert log.labels("verify").count(log.labels("measure")[-1]) == 2
    assert _stats(tmp_path, step).measured == 1


def test_a_run_that_finds_no_gpu_stops_without_teaching_the_kb(tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match="no CUDA GPU is visible"):
        _run(tmp_path, [initial_kernel(), applies_first_offered("no_gpu 0.5")], depth=1)
    kb = KnowledgeBase.load(tmp_path / "kb" / "kb.json")
    assert all(o.stats.attempts == 0 for state in kb.document.states.values() for o in state.optimizations)


def test_an_initial_draft_the_harness_cannot_judge_stops_the_run_without_spending_an_attempt(tmp_path: Path) -> None:
    models = chat_models([initial_kernel("harness_error")])
    with pytest.raises(UserFacingError, match=r"could not judge the initial kernel \(harness_error\)"):
        run_graph(services_for(models, EvaluationLog()), small_context(tmp_path))
    assert len(models["lowering"].prompts) == 1
