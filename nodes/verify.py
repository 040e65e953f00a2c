"""`verify`: run every correctness check of the harness on a GPU, then the LLM soft check that the kernel
still does everything the PyTorch model does.

A wrong result (compute-sanitizer's errors under `--sanitize` included) leaves the failing check's detail as
feedback for the next lowering try, or ends the step when its verify retries are spent. A crash or a hang
leaves the harness's one line as feedback of the `run` stage, which `diagnose` explains further. When the
harness could not judge the candidate even on a second try, the step ends as `harness_error`, which the KB
never learns from.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import Feedback, StepEnding, TrajectoryState, TrajectoryUpdate
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.nodes.kernels import not_judged, soft_verify, verify_feedback, verify_on_gpu

NODE = "verify"


def verify(state: TrajectoryState, runtime: Runtime[RunContext], *, resources: RunResources) -> TrajectoryUpdate:
    candidate = state.this_step.candidate
    assert candidate is not None, "lower wrote a candidate"
    files = resources.files
    result = verify_on_gpu(resources, resources.build(files.read(candidate.source), candidate.label))
    files.save(files.result_path(candidate.label, "verify"), result)
    if not_judged(result):
        write_note(runtime, trajectory_note(NODE, state, f"not judged: {result.summary[:200]}"))
        return {"this_step": state.this_step.replace(ending=StepEnding(outcome="harness_error", detail=result.summary))}
    if result.verdict in ("crash", "timeout"):
        write_note(runtime, trajectory_note(NODE, state, f"{result.verdict}: {result.summary[:200]}"))
        failed = Feedback(stage="run", candidate_source=candidate.source, message=result.summary)
        return {"this_step": state.this_step.replace(feedback=failed)}
    if result.verdict != "ok":
        return _wrong(runtime, state, verify_feedback(candidate, result), [])
    feedback, usage = soft_verify(resources, candidate, NODE, state.facts)
    if feedback is not None:
        return _wrong(runtime, state, feedback, usage)
    write_note(runtime, trajectory_note(NODE, state, "correct"))
    return {"this_step": state.this_step.replace(feedback=None), "token_usage": usage}


def _wrong(runtime: Runtime[RunContext], state: TrajectoryState, feedback: Feedback,
           usage: list[TokenUsage]) -> TrajectoryUpdate:
    failures = state.this_step.verify_failures + 1
    write_note(runtime, trajectory_note(NODE, state, f"wrong ({failures}): {feedback.message[:200]}"))
    ending = (StepEnding(outcome="verify_failed", detail=feedback.message)
              if failures > runtime.context.verify_retries else None)
    return {"this_step": state.this_step.replace(verify_failures=failures, feedback=feedback, ending=ending),
            "token_usage": usage}
