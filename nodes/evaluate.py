"""`evaluate`: time the verified candidate against the PyTorch baselines and profile it, on a GPU.

A time below the roofline floor is `suspicious`: recorded and reported, never rewarded or kept. A result
the harness could not judge (even on a second try) ends the step as `harness_error`, never learned from.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import Candidate, StepEnding, TrajectoryState, TrajectoryUpdate
from kernelblaster.harness.result import EvalResult
from kernelblaster.nodes.kernels import measure_on_gpu, measured_kernel, not_judged, read_result

NODE = "evaluate"


def evaluate(state: TrajectoryState, runtime: Runtime[RunContext], *, resources: RunResources) -> TrajectoryUpdate:
    candidate = state.this_step.candidate
    assert candidate is not None, "lower wrote a candidate"
    files = resources.files
    built = resources.build(files.read(candidate.source), candidate.label)
    verified = read_result(files, files.result_path(candidate.label, "verify"))
    result = measure_on_gpu(resources, built, verified)
    path = files.save(files.result_path(candidate.label, "measure"), result)
    write_note(runtime, trajectory_note(NODE, state, f"{result.verdict}: {result.summary[:200]}"))
    return {"this_step": state.this_step.replace(ending=_ending(candidate, result, path))}


def _ending(candidate: Candidate, result: EvalResult, path: str) -> StepEnding:
    if result.verdict == "ok":
        return StepEnding(outcome="measured", detail=result.summary, after=measured_kernel(candidate, result, path))
    if not_judged(result):
        return StepEnding(outcome="harness_error", detail=result.summary)
    if result.verdict == "suspicious":
        return StepEnding(outcome="suspicious", detail=result.summary, after=measured_kernel(candidate, result, path))
    return StepEnding(outcome="verify_failed", detail=result.summary)
