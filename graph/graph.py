"""The optimization graph: the memory-augmented in-context RL loop of the paper as a LangGraph state machine.

    setup -> write_initial -> check_initial --(failed, tries left)--> write_initial
                                            --(no valid kernel)--> finish
                                            --> start_iteration --(Send x W)--> trajectory
    trajectory -> policy_evaluation -> perf_gap_analysis -> parameter_update --(iterations left)--> start_iteration
                                                                             --> finish -> END
    trajectory --(the run writes no KB: memory frozen or none, minimal agent)--> start_iteration | finish

Each trajectory (a subgraph, one per `Send`, run in parallel) takes up to L steps from the best kernel:

    extract_state -> match_state -> select_optimizations --(nothing to try)--> END
    select_optimizations -> lower --(no code)--> record_step
    lower -> compile --(error, tries left)--> lower;  compile --(out of tries)--> record_step
    compile -> verify --(wrong, tries left)--> lower;  verify --(wrong, out of tries)--> record_step
    verify --(crash / hang)--> diagnose --(tries left)--> lower;  diagnose --(out of tries)--> record_step
    verify -> evaluate -> record_step --(steps left, not failing)--> extract_state, else END

A run whose token budget is spent ends cleanly: its trajectories stop after their current step, and the
initial retries and the iteration loop go to `finish`, whose report says why.

The ablations change the step's first stages: without memory, extract_state -> lower (no matching or
selection); the minimal agent starts each step at lower.

Nodes and routes are given their run's `RunResources` (`graph.core.services`); `finish` gives them back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext, StudioContext
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.core.state import OptimizationInput, OptimizationState, TrajectoryOutput, TrajectoryState
from kernelblaster.graph.routes import (
    after_compile,
    after_diagnosis,
    after_extraction,
    after_initial_check,
    after_learning,
    after_lowering,
    after_selection,
    after_step,
    after_trajectories,
    after_verify,
    fan_out_trajectories,
    first_step,
)
from kernelblaster.nodes.check_initial import check_initial
from kernelblaster.nodes.compile import compile_candidate
from kernelblaster.nodes.diagnose import diagnose
from kernelblaster.nodes.evaluate import evaluate
from kernelblaster.nodes.extract_state import extract_state
from kernelblaster.nodes.finish import finish
from kernelblaster.nodes.lower import lower
from kernelblaster.nodes.match_state import match_state
from kernelblaster.nodes.parameter_update import parameter_update
from kernelblaster.nodes.perf_gap_analysis import perf_gap_analysis
from kernelblaster.nodes.policy_evaluation import policy_evaluation
from kernelblaster.nodes.record_step import record_step
from kernelblaster.nodes.select_optimizations import select_optimizations
from kernelblaster.nodes.setup import setup
from kernelblaster.nodes.start_iteration import start_iteration
from kernelblaster.nodes.verify import verify
from kernelblaster.nodes.write_initial import write_initial

# A 64-step trajectory with 10 compile, 10 verify and 10 crash retries per step stays below this many super-steps.
RECURSION_LIMIT = 10_000

# A node or a route: (state, runtime, *, resources) -> the state update, or where to go next.
Node = Callable[..., Any]

# The graphs' type parameters: state, context, input and output schemas.
TrajectoryGraph = CompiledStateGraph[TrajectoryState, RunContext, TrajectoryState, TrajectoryOutput]
RunGraphBuilder = StateGraph[OptimizationState, RunContext, OptimizationInput, OptimizationState]
RunGraph = CompiledStateGraph[OptimizationState, RunContext, OptimizationInput, OptimizationState]


def build_trajectory_graph(services: Services) -> TrajectoryGraph:
    """One trajectory: up to L optimization steps, each with its compile and verify retries."""
    with_resources = _binder(services)
    graph = StateGraph(TrajectoryState, context_schema=RunContext, output_schema=TrajectoryOutput)
    graph.add_node("extract_state", with_resources(extract_state))
    graph.add_node("match_state", with_resources(match_state))
    graph.add_node("select_optimizations", with_resources(select_optimizations))
    graph.add_node("lower", with_resources(lower))
    graph.add_node("compile", with_resources(compile_candidate))
    graph.add_node("verify", with_resources(verify))
    graph.add_node("diagnose", with_resources(diagnose))
    graph.add_node("evaluate", with_resources(evaluate))
    graph.add_node("record_step", with_resources(record_step))

    graph.add_conditional_edges(START, first_step, ["extract_state", "lower"])
    graph.add_conditional_edges("extract_state", after_extraction, ["match_state", "lower"])
    graph.add_edge("match_state", "select_optimizations")
    graph.add_conditional_edges("select_optimizations", after_selection, ["lower", END])
    graph.add_conditional_edges("lower", after_lowering, ["compile", "record_step"])
    graph.add_conditional_edges("compile", after_compile, ["verify", "lower", "record_step"])
    graph.add_conditional_edges("verify", after_verify, ["evaluate", "lower", "diagnose", "record_step"])
    graph.add_conditional_edges("diagnose", after_diagnosis, ["lower", "record_step"])
    graph.add_edge("evaluate", "record_step")
    graph.add_conditional_edges("record_step", with_resources(after_step), ["extract_state", "lower", END])
    return graph.compile(name="trajectory")


def build_graph(services: Services | None = None, context_schema: type[RunContext] = RunContext) -> RunGraphBuilder:
    """The whole run, uncompiled (compile it with a checkpointer: `graph.app.checkpoint`, `graph.app.api`)."""
    services = services or Services()
    with_resources = _binder(services)
    graph = StateGraph(OptimizationState, context_schema=context_schema, input_schema=OptimizationInput)
    # `setup` checks what the run needs and copies its inputs before the run's resources may exist.
    graph.add_node("setup", functools.partial(setup, services=services))
    graph.add_node("write_initial", with_resources(write_initial))
    graph.add_node("check_initial", with_resources(check_initial))
    graph.add_node("start_iteration", start_iteration)
    graph.add_node("trajectory", build_trajectory_graph(services))
    graph.add_node("policy_evaluation", with_resources(policy_evaluation))
    graph.add_node("perf_gap_analysis", with_resources(perf_gap_analysis))
    graph.add_node("parameter_update", with_resources(parameter_update))
    graph.add_node("finish", _releasing(services, finish))

    graph.add_edge(START, "setup")
    graph.add_edge("setup", "write_initial")
    graph.add_edge("write_initial", "check_initial")
    graph.add_conditional_edges("check_initial", with_resources(after_initial_check),
                                ["start_iteration", "write_initial", "finish"])
    graph.add_conditional_edges("start_iteration", fan_out_trajectories, ["trajectory"])
    graph.add_conditional_edges("trajectory", with_resources(after_trajectories),
                                ["policy_evaluation", "start_iteration", "finish"])
    graph.add_edge("policy_evaluation", "perf_gap_analysis")
    graph.add_edge("perf_gap_analysis", "parameter_update")
    graph.add_conditional_edges("parameter_update", with_resources(after_learning), ["start_iteration", "finish"])
    graph.add_edge("finish", END)
    return graph


def _binder(services: Services) -> Callable[[Node], Node]:
    """Give a node (or a route) its run's resources; LangGraph passes it the state and the runtime."""

    def bind(node: Node) -> Node:
        def with_resources(state: Any, runtime: Runtime[RunContext]) -> Any:
            return node(state, runtime, resources=services.resources(runtime, state))

        return with_resources

    return bind


def _releasing(services: Services, node: Node) -> Node:
    """The run's last node, given its resources and giving them back when it is done, however it ends."""

    def then_release(state: OptimizationState, runtime: Runtime[RunContext]) -> Any:
        resources = services.resources(runtime, state)
        try:
            return node(state, runtime, resources=resources)
        finally:
            services.release(resources.files.root)

    return then_release


def compile_graph(services: Services | None = None, checkpointer: BaseCheckpointSaver[str] | None = None,
                  context_schema: type[RunContext] = RunContext) -> RunGraph:
    """The runnable graph, allowed more steps than the largest run shape takes (LangGraph's default limit
    was 25 before 1.0, which a single deep trajectory exceeds)."""
    graph = build_graph(services, context_schema).compile(checkpointer=checkpointer, name="kernelblaster")
    return graph.with_config(recursion_limit=RECURSION_LIMIT)


@contextmanager
def studio_graph() -> Iterator[RunGraph]:
    """The graph `langgraph dev` serves (see langgraph.json); the server brings its own checkpointer.

    The server enters this for each request and leaves it when the request is done, so a run it drives
    gives its resources back however it ends (finished, failed, interrupted, cancelled)."""
    with Services() as services:
        yield compile_graph(services, context_schema=StudioContext)
