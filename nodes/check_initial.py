"""`check_initial`: build, verify (numerically, then the soft check) and measure the initial draft.

A draft that passes becomes the initial and best kernel; one that fails leaves feedback for the next
`write_initial` try (for a crash or a hang, what `diagnose` tells a trajectory's agent). The graph decides
from `initial` and `initial_attempts` where to go next. When the harness cannot judge the draft even on a
second try, no draft could be judged: the run stops with why.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import ProgressNote, write_note
from kernelblaster.graph.core.services import BuiltCandidate, RunResources
from kernelblaster.graph.core.state import Candidate, Feedback, OptimizationState, RunUpdate
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.harness.result import EvalResult
from kernelblaster.nodes.kernels import (
    compile_feedback,
    measure_on_gpu,
    measured_kernel,
    not_judged,
    run_failure_feedback,
    soft_verify,
    verify_feedback,
    verify_on_gpu,
)
from kernelblaster.tools.errors import UserFacingError

NODE = "check_initial"


def check_initial(state: OptimizationState, runtime: Runtime[RunContext], *,
                  resources: RunResources) -> RunUpdate:
    draft = state.draft
    if draft is None:
        return _failed(runtime, state, None, "the lowering agent gave no usable initial CUDA", [])
    files = resources.files
    built = resources.build(files.read(draft.source), draft.label)
    if not built.ok:
        assert built.result is not None, "a failed build says why"
        files.save(files.result_path(draft.label, "build"), built.result)
        return _failed(runtime, state, compile_feedback(draft, built.result), built.result.summary, [])
    verified = _judged_or_stop(verify_on_gpu(resources, built))
    files.save(files.result_path(draft.label, "verify"), verified)
    if verified.verdict in ("crash", "timeout"):
        return _failed(runtime, state, run_failure_feedback(resources, draft, verified), verified.summary, [])
    if verified.verdict != "ok":
        return _failed(runtime, state, verify_feedback(draft, verified), verified.summary, [])
    return _soft_check_and_measure(runtime, state, resources, draft, built, verified)


def _soft_check_and_measure(runtime: Runtime[RunContext], state: OptimizationState, resources: RunResources,
                            draft: Candidate, built: BuiltCandidate, verified: EvalResult) -> RunUpdate:
    feedback, usage = soft_verify(resources, draft, NODE, state.facts)
    if feedback is not None:
        return _failed(runtime, state, feedback, feedback.message, usage)
    measured = _judged_or_stop(measure_on_gpu(resources, built, verified))
    path = resources.files.save(resources.files.result_path(draft.label, "measure"), measured)
    if measured.verdict != "ok":
        return _failed(runtime, state, verify_feedback(draft, measured), measured.summary, usage)
    kernel = measured_kernel(draft, measured, path)
    write_note(runtime, ProgressNote(node=NODE, text=f"initial CUDA correct: {measured.summary}"))
    return {"initial": kernel, "best": kernel, "draft": None, "initial_feedback": None, "token_usage": usage}


def _judged_or_stop(result: EvalResult) -> EvalResult:
    if not_judged(result):
        raise UserFacingError(f"the harness could not judge the initial kernel ({result.verdict}): {result.summary}")
    return result


def _failed(runtime: Runtime[RunContext], state: OptimizationState, feedback: Feedback | None, why: str,
            usage: list[TokenUsage]) -> RunUpdate:
    attempts = state.initial_attempts + 1
    write_note(runtime, ProgressNote(node=NODE, text=f"initial CUDA attempt {attempts} failed: {why[:200]}"))
    return {"initial_attempts": attempts, "initial_feedback": feedback, "draft": None, "token_usage": usage}
