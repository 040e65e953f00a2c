"""The graph's branch decisions: each returns the next node (or nodes) from the state and the run context.

The nodes decide what happened (the `ending` and `feedback` of `TrajectoryState.this_step`); these
functions only read it, so each branch is one small rule. Every possible target is declared where the
edge is added (`graph.graph`). One fact lives outside the state: whether the run's token budget is spent
(`RunResources.stop_reason`); then the trajectory, the iteration loop and the initial retries end, and the
run goes to `finish`.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Send

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import OptimizationState, TrajectoryState

# A trajectory's routers return "__end__", the value of LangGraph's END, spelled out: END is typed `str`, which
# the Literal return types (the targets `graph.graph` declares) would not accept.


def after_initial_check(state: OptimizationState, runtime: Runtime[RunContext], *,
                        resources: RunResources) -> Literal["start_iteration", "write_initial", "finish"]:
    if resources.stop_reason() is not None:
        return "finish"
    if state.initial is not None:
        return "start_iteration"
    if state.initial_attempts <= runtime.context.initial_retries:
        return "write_initial"
    return "finish"


def fan_out_trajectories(state: OptimizationState, runtime: Runtime[RunContext]) -> list[Send]:
    """W trajectories, each starting from the best kernel so far."""
    assert state.best is not None, "iterations start once a correct kernel exists"
    return [
        Send("trajectory", TrajectoryState(run_dir=state.run_dir, run_id=state.run_id,
                                           problem_path=state.problem_path, iteration=state.iteration,
                                           trajectory=trajectory, current=state.best, best=state.best,
                                           facts=state.facts, initial=state.initial))
        for trajectory in range(runtime.context.trajectories)
    ]


def after_trajectories(state: OptimizationState, runtime: Runtime[RunContext], *,
                       resources: RunResources) -> Literal["policy_evaluation", "start_iteration", "finish"]:
    """The textual gradient runs only when the run teaches the KB; otherwise the next iteration starts."""
    return "policy_evaluation" if runtime.context.writes_kb else after_learning(state, runtime, resources=resources)


def after_learning(state: OptimizationState, runtime: Runtime[RunContext], *,
                   resources: RunResources) -> Literal["start_iteration", "finish"]:
    if resources.stop_reason() is not None:
        return "finish"
    return "start_iteration" if state.iteration + 1 < runtime.context.iterations else "finish"


def step_entry(runtime: Runtime[RunContext]) -> Literal["extract_state", "lower"]:
    """A step reads the kernel's state first, except in the minimal agent, which lowers straight away."""
    return "extract_state" if runtime.context.agent == "full" else "lower"


def first_step(state: TrajectoryState, runtime: Runtime[RunContext]) -> Literal["extract_state", "lower"]:
    return step_entry(runtime)


def after_extraction(state: TrajectoryState, runtime: Runtime[RunContext]) -> Literal["match_state", "lower"]:
    """Without memory the state is only described to the lowering agent, never looked up in the KB."""
    return "match_state" if runtime.context.uses_kb else "lower"


def after_selection(state: TrajectoryState) -> Literal["lower", "__end__"]:
    """A state with nothing left to try ends the trajectory."""
    return "lower" if state.this_step.choices else "__end__"


def after_lowering(state: TrajectoryState) -> Literal["compile", "record_step"]:
    return "record_step" if state.this_step.ending is not None else "compile"


def after_compile(state: TrajectoryState) -> Literal["verify", "lower", "record_step"]:
    if state.this_step.ending is not None:
        return "record_step"
    return "lower" if state.this_step.feedback is not None else "verify"


def after_verify(state: TrajectoryState) -> Literal["evaluate", "lower", "diagnose", "record_step"]:
    """Correct goes on to timing; wrong goes back to lower (tries left) or ends the step; a crash or a hang is
    diagnosed first."""
    step = state.this_step
    if step.ending is not None:
        return "record_step"
    if step.feedback is None:
        return "evaluate"
    return "diagnose" if step.feedback.stage == "run" else "lower"


def after_diagnosis(state: TrajectoryState) -> Literal["lower", "record_step"]:
    """A crash or a hang with tries left goes back to lower with the diagnosis, else ends the step."""
    return "record_step" if state.this_step.ending is not None else "lower"


def after_step(state: TrajectoryState, runtime: Runtime[RunContext], *,
               resources: RunResources) -> Literal["extract_state", "lower", "__end__"]:
    """Go on until the trajectory is L steps deep, or stop early when it keeps failing or the budget is spent."""
    if state.step >= runtime.context.depth or state.failed_steps >= runtime.context.max_failed_steps:
        return "__end__"
    return "__end__" if resources.stop_reason() is not None else step_entry(runtime)
