"""Problem files that misbehave get one line and a non-zero exit from every command: one that exits while
loading (`SystemExit`, or `os._exit` at import, in get_inputs or in forward), one that waits forever (stopped
at the step time limit), one whose spec would need a huge CPU run, one with an integer constant no kernel can
receive (issue 9, item 11)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from fixtures.cli import kernelblaster

from kernelblaster.harness import problem

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"
CANDIDATE = Path(__file__).resolve().parents[2] / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu"


STEP_S = 1.0

# A problem that ends the process with os._exit(3) where the placeholder stands.
OS_EXIT_PROBLEM = """
import os
import torch
import torch.nn as nn
{at_import}

class Model(nn.Module):
    def forward(self, x):
        {in_forward}
        return x


def get_inputs():
    {in_get_inputs}
    return [torch.randn(8)]


def get_init_inputs():
    return []
"""
OS_EXIT_STEPS = {"at_import": "importing it", "in_get_inputs": "building the model or its inputs",
                 "in_forward": "the reference forward pass"}


def os_exit_problem(folder: Path, where: str) -> Path:
    """A problem file calling os._exit(3) `where` (a key of OS_EXIT_STEPS)."""
    placeholders = dict.fromkeys(OS_EXIT_STEPS, "pass") | {where: "os._exit(3)"}
    path = folder / f"exits_{where}.py"
    path.write_text(OS_EXIT_PROBLEM.format(**placeholders))
    return path


@pytest.fixture
def one_second_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(problem, "PROBLEM_STEP_TIMEOUT_S", STEP_S)


@pytest.mark.parametrize("command", ["header", "eval"])
def test_a_problem_that_exits_while_loading_is_one_line_and_exit_status_2(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = PROBLEMS / "broken_exits_at_import.py"
    finished = kernelblaster(capsys, command, path, *([CANDIDATE] if command == "eval" else []))
    assert finished.status == 2 and finished.out == ""
    assert finished.error_line == (f"{path}: importing it called exit(0); a problem file must define its "
                                   "functions, not end the program")


@pytest.mark.parametrize("where", OS_EXIT_STEPS)
def test_a_problem_that_calls_os_exit_is_one_line_and_exit_status_2(where: str, tmp_path: Path) -> None:
    path = os_exit_problem(tmp_path, where)
    # In a fresh interpreter: were os._exit to get through, it would end this test run too.
    finished = subprocess.run([sys.executable, "-m", "kernelblaster.graph", "header", str(path)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, check=False)
    assert finished.returncode == 2 and finished.stdout == ""
    assert finished.stderr == (f"kernelblaster: {path}: {OS_EXIT_STEPS[where]} called os._exit(3); a problem file "
                               "must define its functions, not end the program\n")


def test_os_exit_is_itself_again_after_a_step_that_called_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def ends_the_process(status: int) -> None:
        """Stands in for os._exit, so that without the refusal this test fails rather than ends the run."""

    monkeypatch.setattr(os, "_exit", ends_the_process)
    with pytest.raises(problem.ProblemError), problem.problem_code(Path("p.py"), "importing it"):
        os._exit(3)
    assert os._exit is ends_the_process


def test_os_exit_from_another_thread_during_a_step_still_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)  # stands in for ending the process
    with problem.problem_code(Path("p.py"), "importing it"):
        worker = threading.Thread(target=os._exit, args=(4,))
        worker.start()
        worker.join()
    assert exits == [4]


def test_a_child_forked_during_a_step_exits_with_the_status_it_gives() -> None:
    with problem.problem_code(Path("p.py"), "importing it"):
        child = os.fork()
        if child == 0:
            os._exit(7)  # were it refused, the child would go on running this test
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 7


def test_os_exit_kept_past_its_step_ends_the_process_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)  # stands in for ending the process
    with problem.problem_code(Path("p.py"), "importing it"):
        kept = os._exit  # as `from os import _exit` at a problem's import keeps it
    kept(5)
    assert exits == [5]


@pytest.mark.parametrize(("name", "step"), [("broken_sleeps_at_import.py", "importing it"),
                                            ("broken_sleeps_in_get_inputs.py", "building the model or its inputs")])
def test_a_problem_that_waits_forever_is_stopped_at_the_step_time_limit(
        name: str, step: str, one_second_steps: None, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    finished = kernelblaster(capsys, "header", PROBLEMS / name)
    assert time.monotonic() - started < 2 * STEP_S  # waited out once, not once per device the spec could try
    assert finished.status == 2
    assert finished.error_line == (f"{PROBLEMS / name}: {step} took longer than 1 s; a problem must not wait or "
                                   "loop without end")


@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the behaviour without a GPU")
def test_a_data_dependent_problem_too_big_for_a_cpu_run_is_refused_without_allocating_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finished = kernelblaster(capsys, "header", PROBLEMS / "data_dependent_huge.py")
    assert finished.status == 2
    assert "cannot run on shapes alone" in finished.error_line
    assert "4.0 GiB of inputs and parameters (more than 1 GiB); run this on a GPU" in finished.error_line
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 512 * 1024


def test_an_integer_constant_beyond_64_bits_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    path = PROBLEMS / "broken_constant_too_large.py"
    finished = kernelblaster(capsys, "header", path)
    assert finished.status == 2
    assert finished.error_line == (f"{path}: Model.__init__ argument 'modulus' = {10**30} does not fit in a 64-bit "
                                   "integer, the type a candidate receives it as")


def test_a_small_data_dependent_problem_still_gets_its_spec_from_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "header", PROBLEMS / "data_dependent_mask.py")
    assert finished.status == 0 and "kb_forward" in finished.out
