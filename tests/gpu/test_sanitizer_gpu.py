"""GPU specification of compute-sanitizer in the harness, in the OS sandbox: under `--sanitize` a kernel that
passes every check but reads out of bounds (memcheck) or exchanges data through shared memory without a
barrier (racecheck) is `sanitizer_error`, while a clean kernel stays `ok` under every checker; a crash is
explained by memcheck (`diagnose`); and in a whole optimization run a crash and a sanitizer error each go
back to the lowering agent with the report, and the agent's third kernel is measured (agents scripted;
harness, sandbox, compute-sanitizer, graph and KB real).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.graph.scenario import matches_nearest_state, offered_techniques, role_replies
from fixtures.graph.scripted_chat import ScriptedChatModel, ScriptedChatModels
from gpu.cases import EXAMPLES, SANITIZED, SOFTMAX, SWISH, SanitizerCase
from langchain_core.messages import BaseMessage

from kernelblaster.graph.app.api import Run
from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.services import Services
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import load_problem
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes.kernels import CudaAnswer
from kernelblaster.tools.sanitizer import SanitizerTool

pytestmark = pytest.mark.gpu
TESTS = Path(__file__).resolve().parents[1]
CRASH = TESTS / "fixtures" / "gpu" / "crash_illegal_address.cu"
OUT_OF_BOUNDS = next(case for case in SANITIZED if case.tool == "memcheck").candidate
SOFTMAX_FAST = next(example for example in EXAMPLES if example.problem == SOFTMAX).fast
SWISH_NAIVE, SWISH_FAST = next((example.naive, example.fast) for example in EXAMPLES if example.problem == SWISH)


def quick(cache_dir: Path, sanitize: tuple[SanitizerTool, ...] = ()) -> EvalOptions:
    return EvalOptions(cache_dir=cache_dir, baseline=False, sanitize=sanitize)


@pytest.mark.parametrize("case", SANITIZED, ids=lambda c: c.id)
def test_a_kernel_that_passes_every_check_is_a_sanitizer_error_under_its_checker(case: SanitizerCase,
                                                                                  cache_dir: Path) -> None:
    plain = evaluate_candidate(case.problem, case.candidate, quick(cache_dir))
    assert plain.verdict == "ok", plain.summary
    sanitized = evaluate_candidate(case.problem, case.candidate, quick(cache_dir, sanitize=(SanitizerTool(case.tool),)))
    assert sanitized.verdict == "sanitizer_error", sanitized.summary
    (report,) = sanitized.sanitizer
    assert report.status == "errors" and report.error_count != 0  # None: stopped once it had reported enough
    assert report.findings[0].headline.startswith(case.finding), report.findings[0]
    assert sanitized.timing is None  # never timed, never rewarded


@pytest.mark.parametrize("tool", list(SanitizerTool))
def test_a_clean_kernel_stays_ok_under_every_checker(tool: SanitizerTool, cache_dir: Path) -> None:
    result = evaluate_candidate(SOFTMAX, SOFTMAX_FAST, quick(cache_dir, sanitize=(tool,)))
    assert result.verdict == "ok", result.summary
    assert [(r.tool, r.status) for r in result.sanitizer] == [(tool, "clean")]
    sanitizer_check = next(check for check in result.checks if check.name == "sanitizer")
    assert sanitizer_check.passed and result.timing is not None


def test_eval_sanitize_on_the_command_line_exits_1_with_the_verdict(tmp_path: Path) -> None:
    env = os.environ | {"KERNELBLASTER_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "kernelblaster.graph", "eval", str(SWISH), str(OUT_OF_BOUNDS),
                           "--json", "--no-baseline", "--sanitize", "memcheck"],
                          capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 1, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["verdict"] == "sanitizer_error"
    assert "Invalid __global__ read" in result["summary"] and "swish_scale_lookahead" in result["summary"]


def test_a_crash_is_explained_by_memcheck_naming_the_kernel(cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), quick(cache_dir))
    built = evaluator.build(CRASH.read_text(), str(CRASH))
    assert evaluator.verify(built).verdict == "crash"
    report = evaluator.diagnose(built)
    assert report is not None and report.status == "errors", report
    assert report.findings[0].headline.startswith("Invalid __global__ write"), report.findings[0]
    assert any("scribble" in detail for detail in report.findings[0].details), report.findings[0]


# ---- a whole run: crash -> retry with memcheck's report -> sanitizer error -> retry -> measured --------------


def _lowering(messages: list[BaseMessage]) -> CudaAnswer:
    prompt = str(messages[1].content)
    if "## The current CUDA" not in prompt:
        return CudaAnswer(explanation="one thread per element", cuda_source=SWISH_NAIVE.read_text())
    technique = offered_techniques(messages)[0]
    if "check 'sanitizer' failed" in prompt:
        return CudaAnswer(technique=technique, explanation="no table at all", cuda_source=SWISH_FAST.read_text())
    if "crashed or hung when run" in prompt:
        return CudaAnswer(technique=technique, explanation="with a lookahead table",
                          cuda_source=OUT_OF_BOUNDS.read_text())
    return CudaAnswer(technique=technique, explanation="writes far away", cuda_source=CRASH.read_text())


def test_a_run_retries_a_crash_and_a_sanitizer_error_with_their_reports(tmp_path: Path) -> None:
    models = {role: ScriptedChatModel(then=reply)
              for role, reply in role_replies(_lowering, matches_nearest_state).items()}
    kb_path = tmp_path / "kb" / "kb.json"
    KnowledgeBase.create(kb_path)
    context = RunContext(iterations=1, trajectories=1, depth=1, kb_path=str(kb_path), run_dir=str(tmp_path / "run"),
                         sanitize=(SanitizerTool.MEMCHECK,), profile=False)
    run = Run.create(SWISH, context, services=Services(chat_models=ScriptedChatModels(models)))
    for _ in run.progress():
        pass
    step_prompts = [str(p[1].content) for p in models["lowering"].prompts if "## The current CUDA" in str(p[1].content)]
    assert len(step_prompts) == 3
    assert "Invalid __global__ write" in step_prompts[1] and "scribble" in step_prompts[1]
    assert "check 'sanitizer' failed" in step_prompts[2] and "Invalid __global__ read" in step_prompts[2]
    (step,) = json.loads((tmp_path / "run" / "report.json").read_text())["steps"]
    assert (step["outcome"], step["attempts"]) == ("measured", 3)
