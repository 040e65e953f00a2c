"""On a real GPU, the facts the CUDA-writing prompts show come from the device: its limits from PyTorch, its
peaks measured, and a `--llm human` run's first lowering prompt (its question.md) on a KernelBench problem
(level 1, 19_ReLU: 6 GiB in, 6 GiB out) shows them with the targets and the precision contract. Set
KERNELBLASTER_PROMPT_OUT=DIR to keep that prompt as DIR/lowering.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from gpu.cases import KERNELBENCH
from gpu.human_run import ANSWERS_BY_ROLE, kernelblaster, start_human_run

from kernelblaster.graph.app import api
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, detect_arch
from kernelblaster.harness.gpu_facts import read_gpu_facts
from kernelblaster.harness.problem import load_problem

pytestmark = pytest.mark.gpu
KERNELBENCH_RELU = KERNELBENCH / "level1" / "19_ReLU.py"
RELU_KERNEL = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "relu_grid_stride.cu"

MAX_PROMPTS = 10


def test_the_gpu_facts_are_read_from_the_device(tmp_path: Path) -> None:
    facts = read_gpu_facts(0, detect_arch(0), "strict", tmp_path)
    properties = torch.cuda.get_device_properties(0)
    assert (facts.source, facts.name, facts.sm_count) == ("device", properties.name, properties.multi_processor_count)
    assert facts.shared_memory_per_block_optin is not None
    assert facts.shared_memory_per_block < facts.shared_memory_per_block_optin <= facts.shared_memory_per_sm
    assert facts.registers_per_sm == 65536
    assert facts.bandwidth_gbs > 500 and facts.fp32_tflops > 5
    if facts.arch == "sm_90":
        assert facts.compiler.target == "sm_90a" and facts.instructions.wgmma and facts.instructions.tma
    assert facts.instructions.tensor_core_operands == [] and not facts.compiler.fast_math


def test_the_gpu_reports_clusters_cooperative_launch_and_the_toolkit(tmp_path: Path) -> None:
    facts = read_gpu_facts(0, detect_arch(0), "strict", tmp_path)
    abilities = facts.capabilities
    assert abilities is not None and abilities.cuda_toolkit and abilities.driver
    assert abilities.cooperative_launch and abilities.max_blocks_per_sm in (16, 24, 32)
    if facts.arch.startswith("sm_90"):
        assert abilities.clusters and abilities.distributed_shared_memory and abilities.portable_cluster_size == 8


def _precision_facts(relative: str, tmp_path: Path) -> dict[str, tuple[bool, float]]:
    problem = KERNELBENCH / relative
    if not problem.is_file():
        pytest.skip(f"no KernelBench checkout at {KERNELBENCH} (set KERNELBLASTER_KERNELBENCH)")
    evaluator = CandidateEvaluator(load_problem(problem), EvalOptions(cache_dir=tmp_path, precision="strict"))
    try:
        facts = evaluator.precision_facts()
        assert evaluator.precision_facts() == facts  # once per problem: the second comes from the cache
    finally:
        evaluator.close()
    assert facts.products and facts.reason is None and facts.measured_on == "cuda:0"
    return {outcome.arithmetic: (outcome.passes, outcome.rel_l2) for outcome in facts.outcomes}


def test_the_precision_facts_of_gemm_multiply_leaky_relu_fail_tf32_and_pass_3xtf32(tmp_path: Path) -> None:
    # The measurement: plain TF32 (round to nearest) gives a relative L2 error of 2.8e-4 here.
    outcomes = _precision_facts("level2/12_Gemm_Multiply_LeakyReLU.py", tmp_path)
    assert outcomes["tf32"][0] is False and 1e-4 < outcomes["tf32"][1] < 1e-3
    assert outcomes["3xtf32"][0] is True and outcomes["3xtf32"][1] < 1e-5


def test_the_precision_facts_of_a_square_matmul_of_positive_inputs_pass_tf32(tmp_path: Path) -> None:
    # torch.rand inputs are positive, so every dot product is well conditioned: TF32 lands near 5.7e-6.
    outcomes = _precision_facts("level1/1_Square_matrix_multiplication_.py", tmp_path)
    assert outcomes["tf32"][0] is True and outcomes["tf32"][1] < 2e-5
    assert outcomes["3xtf32"][0] is True


def test_a_human_runs_lowering_prompt_shows_the_gpu_the_contract_and_the_targets(tmp_path: Path) -> None:
    if not KERNELBENCH_RELU.is_file():
        pytest.skip(f"no KernelBench checkout at {KERNELBENCH} (set KERNELBLASTER_KERNELBENCH)")
    run_dir, env = start_human_run(tmp_path, KERNELBENCH_RELU, RELU_KERNEL)
    prompt = _first_lowering_prompt(run_dir, tmp_path, env)
    keep = os.environ.get("KERNELBLASTER_PROMPT_OUT")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "lowering.md").write_text((run_dir / "question.md").read_text())
    for fact in (f"## The GPU (read from this GPU; peaks measured on it)\n{torch.cuda.get_device_name(0)}: ",
                 "## Precision contract (policy: strict)", "## Targets", "PyTorch eager ", "PyTorch's own kernels: ",
                 "Roofline floor on this GPU: ", "The initial CUDA: ", "% of roofline)", "Matched at cosine distance",
                 "thread-block clusters available", "CUDA toolkit ",
                 "The forward pass has no matrix products or convolutions"):
        assert fact in prompt, fact
    assert "not profiled" not in prompt and "Stand-in figures" not in prompt and "stand-in's" not in prompt


def _first_lowering_prompt(run_dir: Path, tmp_path: Path, env: dict[str, str]) -> str:
    """Answer every question before the first lowering prompt of a step, which is returned."""
    for number in range(MAX_PROMPTS):
        question = api.Run.open(run_dir).outcome().questions[0].question
        if question.node == "lower":
            return question.prompt
        answer_file = tmp_path / f"answer-{number}.json"
        answer_file.write_text(json.dumps(ANSWERS_BY_ROLE[question.role]))
        replied = kernelblaster("answer", str(run_dir), "--file", str(answer_file), env=env)
        assert replied.returncode == 0, replied.stderr
    raise AssertionError(f"no lowering prompt among the first {MAX_PROMPTS}")
