"""`kernelblaster optimize / resume / answer`: flags, and bad input answered in one line with nothing lost.

The harness is the recorded stand-in; runs that need an agent use `--llm human`, which needs no endpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fixtures.cli import Finished, kernelblaster
from fixtures.graph.fake_openai import FakeOpenAI, Quirk, kernelblaster_roles
from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import PROBLEM

from kernelblaster.graph.app import api
from kernelblaster.graph.app.cli import build_parser, main
from kernelblaster.graph.core import services
from kernelblaster.graph.core.cost import ModelPrice
from kernelblaster.graph.core.progress import Progress, ProgressDisplay, ProgressNote
from kernelblaster.graph.core.services import HarnessEvaluators
from kernelblaster.kb.store import KnowledgeBase


@pytest.fixture(autouse=True)
def isolated_default_kb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELBLASTER_KB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _human_run(tmp_path: Path, *extra: str) -> list[str]:
    kb_path = tmp_path / "kb.json"
    if not kb_path.exists():
        KnowledgeBase.create(kb_path)
    return ["optimize", str(PROBLEM), "--llm", "human", "--run-dir", str(tmp_path / "run"), "--kb", str(kb_path),
            *extra]


def test_optimize_without_an_endpoint_says_so_in_one_line_before_any_gpu_work(
        tmp_path: Path, recorded_harness: EvaluationLog, no_endpoint: None, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["optimize", str(PROBLEM), "--run-dir", str(tmp_path / "run")])
    error = capsys.readouterr().err
    assert status == 2
    assert error.count("\n") == 1 and "OPENAI_API_KEY" in error
    assert recorded_harness.calls == []
    assert not (tmp_path / "run").exists()


def test_flags_become_the_run_context() -> None:
    args = build_parser().parse_args(["optimize", str(PROBLEM), "--iterations", "3", "--trajectories", "4",
                                      "--depth", "5", "--top-k", "2", "--gpus", "0,1", "--role-model", "lowering=big",
                                      "--allow", "cuBLAS", "--base-url", "http://127.0.0.1:8000/v1", "--no-profile"])
    context = args.command.validate(args).context
    assert (context.iterations, context.trajectories, context.depth, context.top_k) == (3, 4, 5, 2)
    assert context.gpus == (0, 1) and context.allow == ("cublas",)
    llm = context.llm_settings()
    assert llm.model_for("lowering") == "big" and llm.model_for("soft_verifier") == context.model
    assert context.base_url == "http://127.0.0.1:8000/v1" and context.profile is False


def test_endpoint_budget_and_price_flags_become_the_run_context(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices.o3]\ninput = 2\noutput = 8\n[prices."gpt-4.1"]\ninput = 9\noutput = 9\n')
    args = build_parser().parse_args([
        "optimize", "p.py", "--structured-output", "json_mode", "--temperature", "0.2", "--max-output-tokens", "4096",
        "--llm-timeout", "120", "--max-concurrent-requests", "4", "--token-limit", "100000",
        "--role-protocol", "lowering=schema", "--role-protocol", "soft_verifier=text", "--prices", str(prices),
        "--price", "gpt-4.1=2,8,0.5"])
    context = args.command.validate(args).context
    assert (context.structured_output, context.temperature, context.max_output_tokens) == ("json_mode", 0.2, 4096)
    assert (context.llm_timeout_s, context.max_concurrent_requests, context.token_limit) == (120, 4, 100000)
    llm = context.llm_settings()
    assert llm.protocol_for("lowering") == "schema" and llm.protocol_for("soft_verifier") == "text"
    assert context.prices == {"o3": ModelPrice(input=2, output=8),
                              "gpt-4.1": ModelPrice(input=2, output=8, cached_input=0.5)}


@pytest.mark.parametrize("flags", [["--price", "gpt-4.1=2"], ["--role-protocol", "lowering=json"],
                                   ["--llm", "replay"], ["--replay-from", "runs/x"]])
def test_a_malformed_endpoint_flag_is_a_one_line_error_naming_it(flags: list[str], tmp_path: Path,
                                                                 recorded_harness: EvaluationLog,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", str(PROBLEM), "--run-dir", str(tmp_path / "run"), *flags]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and flags[0] in error
    assert not (tmp_path / "run").exists()


def test_a_run_that_ended_early_says_why(tmp_path: Path, recorded_harness: EvaluationLog,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAI(kernelblaster_roles) as server:
        assert main(["kb", "init", str(tmp_path / "kb.json")]) == 0
        assert main(["optimize", str(PROBLEM), "--base-url", server.base_url, "--token-limit", "1", "--run-dir",
                     str(tmp_path / "run"), "--kb", str(tmp_path / "kb.json"), "--depth", "1"]) == 0
    assert "the run ended early: the run's token limit was reached" in capsys.readouterr().out


def test_an_out_of_range_flag_is_a_one_line_error_naming_the_flag(tmp_path: Path, recorded_harness: EvaluationLog,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_human_run(tmp_path, "--depth", "0")) == 2
    error = capsys.readouterr().err
    assert error.startswith("kernelblaster: --depth 0:") and error.count("\n") == 1


def test_a_missing_init_file_is_a_one_line_error(tmp_path: Path, recorded_harness: EvaluationLog,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_human_run(tmp_path, "--init", str(tmp_path / "missing.cu"))) == 2
    assert "--init" in capsys.readouterr().err
    assert recorded_harness.calls == []


def test_a_run_directory_holding_a_run_is_never_overwritten(tmp_path: Path, recorded_harness: EvaluationLog,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_human_run(tmp_path)) == 0
    record = (tmp_path / "run" / "run.json").read_text()
    assert main(_human_run(tmp_path)) == 2
    assert "kernelblaster resume" in capsys.readouterr().err
    assert (tmp_path / "run" / "run.json").read_text() == record


def test_resuming_a_directory_that_is_not_a_run_is_a_one_line_error(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resume", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "not a run directory" in error and error.count("\n") == 1


def test_ctrl_c_stops_with_the_resume_command_and_the_run_resumes(tmp_path: Path, recorded_harness: EvaluationLog,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(self: ProgressDisplay, progress: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(ProgressDisplay, "show", interrupted)
        assert main(_human_run(tmp_path)) == 130
    assert f"kernelblaster resume {tmp_path / 'run'}" in capsys.readouterr().err

    assert main(["resume", str(tmp_path / "run")]) == 0
    assert api.Run.open(tmp_path / "run").outcome().status == "waiting_for_answer"
    assert recorded_harness.labels("baseline") == ["elementwise_swish_scale"]


def test_progress_lines_show_where_the_run_is_the_best_speedup_and_the_tokens(
        capsys: pytest.CaptureFixture[str]) -> None:
    ProgressDisplay(sys.stdout).show(Progress(
        note=ProgressNote(node="evaluate", text="ok: 0.5 ms", iteration=0, trajectory=1, step=2),
        best_speedup=1.6, tokens=12345))
    line = capsys.readouterr().out
    assert "iter 1 traj 1 step 3" in line and "best 1.60x" in line and "12.3k tokens)" in line


def test_a_missing_problem_file_is_a_one_line_error_and_makes_no_run(tmp_path: Path, recorded_harness: EvaluationLog,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    arguments = _human_run(tmp_path)
    arguments[1] = str(tmp_path / "nowhere.py")
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert "nowhere.py" in error and error.count("\n") == 1
    assert not (tmp_path / "run").exists()


def _ended_run(tmp_path: Path, *quirks: Quirk) -> Path:
    """A run against the stand-in server with `quirks`, ended (finished, or failed on an endpoint error)."""
    with FakeOpenAI(kernelblaster_roles, quirks=list(quirks)) as server:
        assert main(["kb", "init", str(tmp_path / "kb.json")]) == 0
        main(["optimize", str(PROBLEM), "--base-url", server.base_url, "--run-dir", str(tmp_path / "run"), "--kb",
              str(tmp_path / "kb.json"), "--depth", "1", "--iterations", "1"])
    return tmp_path / "run"


def _report_again(capsys: pytest.CaptureFixture[str], run: Path, rewritten: dict[str, str | None]) -> Finished:
    """`kernelblaster report RUN` once `report.md` is deleted and each file in `rewritten` is given its text, or
    deleted where it is None."""
    (run / "report.md").unlink()
    for name, text in rewritten.items():
        if text is None:
            (run / name).unlink()
        else:
            (run / name).write_text(text)
    capsys.readouterr()
    return kernelblaster(capsys, "report", run)


def test_report_of_a_finished_run_whose_report_md_was_deleted_prints_it_again_from_report_json(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    run = _ended_run(tmp_path)
    written = (run / "report.md").read_text()
    again = _report_again(capsys, run, {})
    assert again.status == 0 and again.out == written
    assert not (run / "report.md").exists()


def test_report_of_a_failed_run_whose_report_md_was_deleted_prints_its_failure_again(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    run = _ended_run(tmp_path, "bad_key")
    written = (run / "report.md").read_text()
    assert "failed" in written
    again = _report_again(capsys, run, {})
    assert again.status == 0 and again.out == written


def test_report_of_a_finished_run_without_report_md_or_status_json_prints_it_again_from_report_json(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    run = _ended_run(tmp_path)
    written = (run / "report.md").read_text()
    again = _report_again(capsys, run, {"status.json": "{damaged"})
    assert again.status == 0 and again.out == written


def test_report_rebuilt_from_a_damaged_report_json_is_one_line_naming_it(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    run = _ended_run(tmp_path)
    again = _report_again(capsys, run, {"report.json": "{}"})
    assert again.status == 2
    assert f"{run / 'report.json'}, which it can be rebuilt from, cannot be read" in again.error_line


def test_a_rebuilt_report_is_announced_on_stderr_naming_the_missing_file(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    run = _ended_run(tmp_path)
    again = _report_again(capsys, run, {})
    assert again.err == (f"kernelblaster: note: {run / 'report.md'} is missing; this is the report rebuilt from "
                         f"{run / 'report.json'}\n")


def test_report_of_a_finished_run_with_neither_report_file_left_names_the_missing_report(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    run = _ended_run(tmp_path)
    again = _report_again(capsys, run, {"report.json": None})
    assert again.status == 2 and again.error_line.startswith(f"{run / 'report.md'} is missing")


def _finished_run_on_a_bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A finished run, then this machine as it is: the real harness (no GPU here) and no endpoint."""
    run = _ended_run(tmp_path)
    monkeypatch.setattr(services, "harness_evaluator", HarnessEvaluators())
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return run


def test_resume_of_a_finished_run_says_it_is_finished_and_needs_no_endpoint_or_gpu(
        tmp_path: Path, recorded_harness: EvaluationLog, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = _finished_run_on_a_bare_machine(tmp_path, monkeypatch)
    capsys.readouterr()
    finished = kernelblaster(capsys, "resume", run)
    assert finished.status == 0 and finished.err == ""
    assert finished.out.startswith(f"the run {run} is finished: nothing to resume\nbest kernel: {run / 'best.cu'}")


def test_answer_to_a_finished_run_says_it_is_finished_and_needs_no_endpoint_or_gpu(
        tmp_path: Path, recorded_harness: EvaluationLog, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = _finished_run_on_a_bare_machine(tmp_path, monkeypatch)
    (tmp_path / "answer.txt").write_text("an answer")
    capsys.readouterr()
    finished = kernelblaster(capsys, "answer", run, "--file", tmp_path / "answer.txt")
    assert finished.status == 2
    assert finished.error_line == (f"{run}: the run is finished, so no question is waiting for an answer (its report: "
                                   f"{run / 'report.md'})")
