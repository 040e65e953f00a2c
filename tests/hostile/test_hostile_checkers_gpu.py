"""The checker and trusted-process attacks of the hostile suite on a GPU, beyond the verdicts every hostile
candidate gets in tests/hostile/test_hostile_gpu.py: under compute-sanitizer, a report replaced, flooded or
forged from inside the sandbox gives the kernel's own verdict and nothing of the trusted process; memcheck
on demand (`diagnose`, as `optimize` runs it on a crash) likewise; and when the trusted side runs out of GPU
memory all the same, a candidate that held it is blamed and an honest one is not."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch
from hostile.containment import Tripwires
from hostile.hostile_cases import CHECKER_CASES, HOSTILE_CASES, PROFILED_CASES, SWISH, HostileCase
from hostile.unchecked import rules_switched_off

from kernelblaster.harness import evaluate as evaluate_module
from kernelblaster.harness.buffers import SharedSet
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.result import EvalResult
from kernelblaster.harness.verify import Verification, VerificationContext, verify_candidate
from kernelblaster.tools.driver_process import DriverSession
from kernelblaster.tools.sanitizer import SanitizerTool

pytestmark = pytest.mark.gpu
# What the sandbox passes on, and so may appear in a sandboxed program's own output.
SANDBOX_VARIABLES = {"PATH", "HOME", "TMPDIR", "LANG", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH"}
HOARDER = next(case for case in HOSTILE_CASES if case.name == "hoard_gpu_memory_wrong")
HONEST = next(case for case in HOSTILE_CASES if case.name == "checker_log_fifo")  # correct without a checker


def trusted_environment() -> list[str]:
    """NAME=value entries this process started with (what a link to /proc/self/environ read by it shows)."""
    entries = Path("/proc/self/environ").read_bytes().decode(errors="replace").split("\0")
    return [entry for entry in entries
            if "=" in entry and entry.split("=", 1)[0] not in SANDBOX_VARIABLES and len(entry.split("=", 1)[1]) >= 8]


def assert_nothing_trusted_in(text: str, tripwires: Tripwires) -> None:
    leaked = [entry.split("=", 1)[0] for entry in trusted_environment() if entry in text]
    assert not leaked, f"the trusted process's environment reached the result: {leaked}"
    tripwires.assert_untouched([text], [])


@contextmanager
def past_the_rules(case: HostileCase) -> Iterator[None]:
    """Build `case` as it runs: without the build's rules where they refuse it (its raw system calls reach the
    checker's files and the reply pipe only past them: the rules are the early warning, not the boundary)."""
    with rules_switched_off() if case.refused_by else nullcontext():
        yield


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-checkers-gpu-cache")


def sanitized_evaluator(cache_dir: Path, tool: str) -> CandidateEvaluator:
    return CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False,
                                                               sanitize=(SanitizerTool(tool),)))


@pytest.mark.parametrize("case", CHECKER_CASES, ids=lambda c: c.name)
def test_an_attack_on_the_checkers_report_gives_the_kernels_own_verdict(case: HostileCase, cache_dir: Path,
                                                                       tripwires: Tripwires) -> None:
    assert case.sanitized is not None
    tool, verdicts = case.sanitized
    with past_the_rules(case):
        result = sanitized_evaluator(cache_dir, tool).evaluate(case.candidate_source(), case.name)
    assert result.verdict in verdicts, f"{case.what_it_tries}\n{result.verdict}: {result.summary}"
    (report,) = result.sanitizer
    if result.verdict == "ok":
        assert report.status == "clean", report
    elif case.name == "checker_log_flood":
        assert report.findings[0].headline.startswith("the report grew past"), report
    else:
        assert any(f.headline.startswith("Invalid __global__ read") for f in report.findings), report
    assert_nothing_trusted_in(result.model_dump_json(), tripwires)


def test_memcheck_on_demand_reads_the_checkers_own_report_past_a_replaced_one(cache_dir: Path,
                                                                             tripwires: Tripwires) -> None:
    case = next(case for case in CHECKER_CASES if case.name == "checker_log_symlink")
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False))
    with past_the_rules(case):
        built = evaluator.build(case.candidate_source(), case.name)
    report = evaluator.diagnose(built)
    assert report is not None and report.status == "clean", report
    assert_nothing_trusted_in(report.model_dump_json(), tripwires)


@pytest.mark.parametrize("case", PROFILED_CASES, ids=lambda c: c.name)
def test_an_attack_on_ncus_report_leaves_a_profile_of_ncus_own_or_none(case: HostileCase, cache_dir: Path,
                                                                        tripwires: Tripwires) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False,
                                                                    profile=True))
    with past_the_rules(case):
        result = evaluator.evaluate(case.candidate_source(), case.name)
    expected = case.unchecked_verdicts if case.refused_by else case.verdicts
    assert result.verdict in expected, f"{case.what_it_tries}\n{result.verdict}: {result.summary}"
    assert result.profile is not None
    assert_nothing_trusted_in(result.model_dump_json(), tripwires)
    builds = [path for path in (cache_dir / "builds").iterdir() if path.is_dir()]
    assert not [link for build in builds for link in build.rglob("*") if link.is_symlink()], \
        "a link the candidate made was left in a build folder"


def evaluate_running_out_after_verification(case: HostileCase, cache_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> EvalResult:
    """The candidate's evaluation, with the trusted side running out of GPU memory right after verification
    while the driver still runs (an allocation no GPU has)."""
    def then_out_of_memory(session: DriverSession, shared: SharedSet, context: VerificationContext) -> Verification:
        verification = verify_candidate(session, shared, context)
        torch.empty(1 << 50, dtype=torch.uint8, device=f"cuda:{context.references.gpu}")
        return verification

    monkeypatch.setattr(evaluate_module, "verify_candidate", then_out_of_memory)
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir, baseline=False))
    with past_the_rules(case):
        return evaluator.evaluate(case.candidate_source(), case.name)


def test_running_out_of_memory_a_hoarding_candidate_held_is_its_own_failure(cache_dir: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    result = evaluate_running_out_after_verification(HOARDER, cache_dir, monkeypatch)
    assert result.verdict == "incorrect", result.summary
    assert result.summary.startswith("failed check 'runs': the candidate's process held"), result.summary


def test_running_out_of_memory_beside_an_honest_candidate_is_the_harnesss_failure(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = evaluate_running_out_after_verification(HONEST, cache_dir, monkeypatch)
    assert result.verdict == "harness_error", result.summary
    assert "OutOfMemoryError" in result.summary
