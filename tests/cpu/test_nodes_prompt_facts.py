"""What the agents that write CUDA are shown (issue 13): the GPU and its limits, the precision contract in
words, the targets with the roofline fraction, the trajectory's earlier steps, the choice among the offered
optimizations with its reason, and, for GEMM and convolution problems, verified tiled code to start from.

One run of three steps (faster, wrong, faster) of the scenario problem is shared by most tests; the GPU is
the recorded evaluator, whose facts are named as a test double's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import (
    REPO,
    Finished,
    chat_models,
    initial_kernel,
    kernel,
    offered_techniques,
    run_graph,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import ScriptedChatModel
from langchain_core.messages import BaseMessage

from kernelblaster.graph.core.state import RunFacts
from kernelblaster.harness.profile.outcome import KernelShare
from kernelblaster.kb.journal import read_changes
from kernelblaster.kb.snippets import ALTERNATIVE_STARTING_POINTS
from kernelblaster.nodes.briefing import briefing_text, gpu_section, precision_section, pytorch_kernels_line
from kernelblaster.nodes.kernels import CudaAnswer

GEMM_PROBLEM = REPO / "examples" / "problems" / "gemm_bias_relu.py"
REASON = "the profile shows scalar loads stalling on DRAM, which this addresses first"


def _chooses_the_last_offered(marker: str) -> Callable[[list[BaseMessage]], CudaAnswer]:
    """A lowering reply that takes the last optimization offered, with its reason."""
    return lambda messages: CudaAnswer(technique=offered_techniques(messages)[-1], explanation="applied",
                                       cuda_source=kernel(marker), choice_reason=REASON)


@dataclass
class ThreeSteps:
    """The run: a faster step, a wrong one, a faster one; every prompt the lowering agent was shown."""

    finished: Finished
    run_dir: Path
    log: EvaluationLog
    lowering: ScriptedChatModel

    @property
    def initial_prompt(self) -> str:
        return str(self.lowering.prompts[0][1].content)

    def step_prompt(self, step: int) -> list[BaseMessage]:
        return self.lowering.prompts[1 + step]

    def step_user_prompt(self, step: int) -> str:
        return str(self.step_prompt(step)[1].content)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ThreeSteps:
    tmp_path = tmp_path_factory.mktemp("three-steps")
    models = chat_models([initial_kernel(), _chooses_the_last_offered("ok 0.5"),
                          _chooses_the_last_offered("incorrect"), _chooses_the_last_offered("ok 0.4")])
    log = EvaluationLog()
    finished = run_graph(services_for(models, log), small_context(tmp_path, depth=3, verify_retries=0))
    return ThreeSteps(finished, tmp_path / "run", log, models["lowering"])


def _prompt_of(run: ThreeSteps, node: str) -> str:
    return run.initial_prompt if node == "write_initial" else run.step_user_prompt(0)


@pytest.mark.parametrize("node", ["write_initial", "lower"])
def test_every_cuda_writing_prompt_names_the_gpu_and_its_limits(run: ThreeSteps, node: str) -> None:
    prompt = _prompt_of(run, node)
    for fact in ("## The GPU (a test double's figures, not a GPU's)", "Recorded H100 (test double): 132 SMs",
                 "built for sm_90a", "228 KiB shared memory, 65,536 32-bit registers, 2,048 threads",
                 "48 KiB shared memory, up to 227 KiB after cudaFuncSetAttribute", "L2 cache 50 MiB",
                 "3,000 GB/s DRAM copy bandwidth", "50.0 TFLOP/s fp32", "-gencode=arch=compute_90a,code=sm_90a",
                 "no --use_fast_math", "cp.async available; TMA (cp.async.bulk) available; wgmma available",
                 "which products pass this problem's bounds is measured in the precision contract",
                 "thread-block clusters available (portable size 8 blocks; distributed shared memory",
                 "cooperative launch available (grid-wide sync", "at most 32 blocks per SM",
                 "CUDA toolkit 13.0.88 (nvcc)"):
        assert fact in prompt, fact


@pytest.mark.parametrize("node", ["write_initial", "lower"])
def test_every_cuda_writing_prompt_states_the_precision_contract(run: ThreeSteps, node: str) -> None:
    prompt = _prompt_of(run, node)
    for fact in ("## Precision contract (policy: strict)", "on 5 seeds",
                 "|out - ref| <= 0.0001 * rms(ref) + 0.001 * |ref|", "relative L2 error of each whole output must "
                 "also be at most 0.0001", "scaled by 1000, scaled by 0.0001, negated, and with NaN, +Inf and -Inf",
                 "fmaxf/fminf return the other operand when one is NaN"):
        assert fact in prompt, fact


def test_the_precision_contract_states_each_policys_own_tolerance() -> None:
    assert "|out - ref| <= 0.01 * rms(ref) + 0.01 * |ref|" in precision_section("tf32", 5, None)
    assert "at most 0.002" in precision_section("tf32", 5, None)
    kernelbench = precision_section("pytorch-default", 3, None)
    assert "|out - ref| <= 0.01 + 0.01 * |ref|" in kernelbench and "on 3 seeds" in kernelbench
    assert "relative L2" not in kernelbench  # KernelBench's protocol has no L2 bound


def test_the_lowering_prompt_shows_the_targets_and_the_roofline_fraction(run: ThreeSteps) -> None:
    prompt = run.step_user_prompt(1)
    for fact in ("PyTorch eager 1.0000 ms, torch.compile 0.8000 ms: the time to beat is 0.8000 ms",
                 "PyTorch's own kernels (from the stand-in's profile of another problem): scale 0.0497 ms "
                 "(73% of PyTorch's GPU time, 1 launch(es)); rowsum",
                 "Stand-in figures of a test double, not measured.",
                 "Compulsory work: 120 MiB", "Roofline floor on this GPU: 0.0500 ms, bound by memory (3,000 GB/s)",
                 "The initial CUDA: 0.9000 ms per call, 0.89x vs PyTorch, 6% of roofline",
                 "## The current CUDA (0.5000 ms per call, 1.60x vs PyTorch, 1.80x the initial CUDA, 10% of "
                 "roofline)"):
        assert fact in prompt, fact


def test_a_long_pytorch_kernel_name_is_cut_visibly_before_its_time() -> None:
    name = "vectorized_elementwise_kernel<4, unnamed>::launch_clamp_scalar(TensorIteratorBase &, Scalar, Scalar, " \
           "ClampLimits)::[lambda() (instance 1)]"
    line = pytorch_kernels_line([KernelShare(name=name, launches=4, time_ms=4.2469, share=1.0)])
    assert line.startswith("vectorized_elementwise_kernel<4, unnamed>::launch_clamp_scalar(")
    assert "… 4.2469 ms (100% of PyTorch's GPU time, 4 launch(es))" in line


def test_the_first_kernel_prompt_shows_the_targets_but_no_initial_time(run: ThreeSteps) -> None:
    assert "the time to beat is 0.8000 ms" in run.initial_prompt
    assert "Roofline floor on this GPU: 0.0500 ms" in run.initial_prompt
    assert "The initial CUDA:" not in run.initial_prompt


def test_the_lowering_prompt_lists_the_earlier_steps_of_its_trajectory_with_outcome_and_why(run: ThreeSteps) -> None:
    prompt = run.step_user_prompt(2)
    history = prompt[prompt.index("## Earlier steps of this trajectory"):prompt.index("## Its performance state")]
    first, second = history.strip().splitlines()[1:]
    assert first.startswith("1. ") and ": measured 1.80x faster; the next step started from it" in first
    assert f"(chosen because: {REASON})" in first
    assert second.startswith("2. ") and ": verify_failed after 1 attempt(s): check 'correct' failed: seed 0: " \
        "1200 of 4096 elements differ" in second


def test_the_first_step_of_a_trajectory_shows_no_history(run: ThreeSteps) -> None:
    assert "## Earlier steps" not in run.step_user_prompt(0)


def test_the_lowering_prompt_asks_for_a_choice_among_the_offered_with_its_reason(run: ThreeSteps) -> None:
    system, user = (str(message.content) for message in run.step_prompt(0))
    assert "Choose ONE of the offered optimizations with the code, its profile and the earlier steps in view" \
        in system
    assert "say in one sentence why you chose it over the others" in system and "normally the first" not in system
    assert "why: one sentence" in system  # the answer form has the line
    assert "Choose the offered optimization that should gain the most on this code" in user


def test_the_reason_for_a_choice_is_kept_in_the_replay_buffer(run: ThreeSteps) -> None:
    assert [step.choice_reason for step in run.finished.state["steps"]] == [REASON] * 3


def test_the_choice_and_its_reason_are_journaled_with_the_outcome_as_kb_evidence(run: ThreeSteps) -> None:
    outcomes = [change.outcome for change in read_changes(run.run_dir / "kb_changes.jsonl") if change.outcome]
    first = outcomes[0]
    assert first.choice is not None and first.choice.reason == REASON
    assert first.technique == first.choice.offered[-1] and len(first.choice.offered) == 3


def test_the_kb_slice_says_how_near_the_state_matched(run: ThreeSteps) -> None:
    assert "Matched at cosine distance 0.000; evidence from the seed KB, not yet from any GPU." \
        in run.step_user_prompt(0)


def test_setup_gathers_the_facts_once_and_keeps_them_in_the_run_directory(run: ThreeSteps) -> None:
    assert len(run.log.labels("gpu_facts")) == 1 and len(run.log.labels("roofline_floor")) == 1
    facts = RunFacts.model_validate_json((run.run_dir / "baseline" / "facts.json").read_text())
    assert facts.gpu.source == "test_double" and facts.roofline.floor_ms == 0.05
    assert [kernel.name for kernel in facts.pytorch_kernels or []] == ["scale", "rowsum"]


def test_setup_keeps_the_kinds_of_operation_the_problem_performs(run: ThreeSteps) -> None:
    facts = RunFacts.model_validate_json((run.run_dir / "baseline" / "facts.json").read_text())
    assert facts.operations == ["several_operations"]  # the swish example: a chain of elementwise operators


def test_no_step_is_offered_a_technique_for_operations_the_problem_lacks(run: ThreeSteps) -> None:
    offers = {name for step in range(3) for name in offered_techniques(run.step_prompt(step))}
    assert offers and not offers & {"welford_norm", "online_softmax_single_pass", "depthwise_conv_tiling"}


def test_a_run_whose_facts_were_not_gathered_says_so() -> None:
    assert "Not known: this run started before KernelBlaster kept them." in gpu_section(None)


def test_the_unguided_lowering_prompt_shows_the_same_facts(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), CudaAnswer(technique="loop_unrolling", explanation="unrolled",
                                                       cuda_source=kernel("ok 0.5"))])
    run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1, memory="none"))
    prompt = str(models["lowering"].prompts[1][1].content)
    assert "Offered optimizations" not in prompt
    for fact in ("## The GPU (", "## Precision contract (policy: strict)", "## Targets",
                 "## The current CUDA (0.9000 ms per call, 0.89x vs PyTorch, 6% of roofline)"):
        assert fact in prompt, fact


def _first_kernel_prompt_of_the_gemm(tmp_path: Path, precision: str) -> str:
    models = chat_models([initial_kernel(), CudaAnswer(technique=None, explanation="x", cuda_source=kernel("ok 0.5"))])
    run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1, precision=precision),
              problem=GEMM_PROBLEM)
    return str(models["lowering"].prompts[0][1].content)


def test_a_gemm_problems_first_kernel_prompt_under_strict_offers_ffma_and_3xtf32_code_and_when_to_pick_which(
        tmp_path: Path) -> None:
    prompt = _first_kernel_prompt_of_the_gemm(tmp_path, "strict")
    assert "## Starting point: verified gemm code" in prompt
    assert "kb snippet `tiled_sgemm` (answer `technique: tiled_sgemm_fp32`)" in prompt
    assert "kb snippet `gemm_3xtf32` (answer `technique: tf32x3_split`)" in prompt
    assert "__global__ void __launch_bounds__(256) sgemm_tiled" in prompt
    assert "__global__ void __launch_bounds__(256) gemm_3xtf32" in prompt
    which = next(line for line in prompt.splitlines() if "Which: " in line)
    assert "faster for large GEMMs" in which and "small or odd shapes" in which


def test_a_gemm_problems_first_kernel_prompt_under_tf32_starts_from_the_ffma_code_alone(tmp_path: Path) -> None:
    prompt = _first_kernel_prompt_of_the_gemm(tmp_path, "tf32")
    assert "(kb snippet `tiled_sgemm`)" in prompt and "answer `technique: tiled_sgemm_fp32`" in prompt
    assert "gemm_3xtf32" not in prompt and "Which: " not in prompt


def test_every_alternative_starting_point_has_its_sentence_on_when_to_pick_which() -> None:
    needed = {f"choice, {kind}, {policy}" for kind, policy in ALTERNATIVE_STARTING_POINTS}
    assert needed <= set(briefing_text().sections)


def test_an_elementwise_problems_first_kernel_prompt_has_no_starting_point(run: ThreeSteps) -> None:
    assert "## Starting point" not in run.initial_prompt


def test_the_first_kernels_prompt_asks_for_correct_first_then_the_targets_speed_by_any_algorithm(
        run: ThreeSteps) -> None:
    system = " ".join(str(run.lowering.prompts[0][0].content).split())
    assert "correct first, then as fast as the targets ask" in system
    assert "any algorithm that stays within it is fine" in system
    assert "not clever" not in system and "use the same formulas" not in system


def test_the_header_is_introduced_as_a_file_the_candidate_must_include(run: ThreeSteps) -> None:
    assert "## kb_problem.h (generated for this problem; your file must #include it)" in run.initial_prompt
    assert "## kb_problem.h (generated for this problem; the file must #include it)" in run.step_user_prompt(0)
    assert "already included" not in run.initial_prompt + run.step_user_prompt(0)


def test_the_first_kernels_technique_line_is_offered_the_catalogues_names(run: ThreeSteps) -> None:
    line = next(line for line in run.initial_prompt.splitlines() if line.startswith("Technique names"))
    names = line.rsplit(": ", 1)[1].rstrip(".").split(", ")
    assert "vectorized_access" in names and names == sorted(names)
    assert "a catalogue name the prompt lists" in str(run.lowering.prompts[0][0].content)


def test_every_cuda_writing_prompt_asks_for_one_answer_form(run: ThreeSteps) -> None:
    for system, user in (run.lowering.prompts[0], run.step_prompt(0)):
        text = " ".join(f"{system.content} {user.content}".split())
        assert "One to three sentences" in text and "one to three sentences" in text
        assert "one or two sentences" not in text and "a short explanation" not in text


def test_the_precision_contract_warns_of_the_online_softmax_trap(run: ThreeSteps) -> None:
    assert "expf(-inf - -inf) = NaN" in run.initial_prompt
