"""The first kernel's prompt for softmaxes, norms, reductions and losses says, from the problem's own shapes
(recorded by the analysis on the meta device), how many rows it reduces and how long each is, and the design
that fits: long rows split over blocks or held by a cluster, few rows spread over the whole GPU, many short
rows a warp each, strided rows read along their inner dimension. Problems without such rows show none."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from fixtures.graph.recorded_evaluator import GPU_FACTS, ROOFLINE, EvaluationLog
from fixtures.graph.scenario import chat_models, initial_kernel, kernel, run_graph, services_for, small_context

from kernelblaster.graph.core.state import BaselineSummary, RunFacts
from kernelblaster.harness.operations import ReducedRows
from kernelblaster.nodes.briefing import rows_section
from kernelblaster.nodes.kernels import CudaAnswer

REPO = Path(__file__).resolve().parents[2]
KERNELBENCH = REPO / "tests" / "fixtures" / "kernelbench" / "level1"
# KernelBench level1/40 (a copy kept beside the fixture problems: the fixture KernelBench is a five-problem suite)
LAYER_NORM = REPO / "tests" / "fixtures" / "problems" / "layer_norm_kernelbench_40.py"


def _facts(*rows: ReducedRows, clusters: bool = True) -> RunFacts:
    capabilities = GPU_FACTS.capabilities
    assert capabilities is not None
    gpu = GPU_FACTS.model_copy(update={"capabilities": capabilities.model_copy(
        update={"clusters": clusters, "distributed_shared_memory": clusters})})
    return RunFacts(gpu=gpu, baseline=BaselineSummary(eager_ms=1.0, compile_ms=None, best_ms=1.0), roofline=ROOFLINE,
                    pytorch_kernels=None, rows=list(rows))


def _rows(shape: tuple[int, ...], dims: tuple[int, ...], operation: str = "sum") -> ReducedRows:
    return ReducedRows(operation=operation, shape=shape, dims=dims, element_bytes=4)


def test_many_short_rows_are_a_warp_each() -> None:
    section = rows_section(_facts(_rows((65536, 512), (1,))))
    assert "65,536 rows of 512 elements (2 KiB each)" in section and "one warp per row" in section


def test_many_rows_that_fit_a_block_are_a_block_each() -> None:
    assert "One block per row" in rows_section(_facts(_rows((32768, 4096), (1,))))


def test_long_rows_that_a_portable_cluster_holds_are_read_once_by_a_cluster() -> None:
    section = rows_section(_facts(_rows((4096, 393216), (1,), "_softmax")))
    assert "a cluster of 7 blocks holds it in distributed shared memory and reads it once" in section


def test_long_rows_beyond_any_cluster_are_split_over_blocks_with_a_second_pass() -> None:
    section = rows_section(_facts(_rows((896, 2097152), (1,))))
    assert "Long rows: split each row over several blocks" in section and "second pass" in section


def test_long_rows_on_a_gpu_without_clusters_are_split_over_blocks() -> None:
    section = rows_section(_facts(_rows((4096, 393216), (1,)), clusters=False))
    assert "Long rows: split each row" in section and "cluster of" not in section


def test_few_rows_are_spread_over_the_whole_gpu() -> None:
    section = rows_section(_facts(_rows((16, 64, 256, 256), (1, 2, 3))))
    assert "16 rows of 4,194,304 elements (16 MiB each)" in section
    assert "spread each row over about 17 blocks" in section and "grid-wide sync" in section


def test_rows_strided_through_memory_are_read_along_the_inner_dimension() -> None:
    section = rows_section(_facts(_rows((128, 4096, 4095), (1,))))
    assert "524,160 rows of 4,096 elements (16 KiB each, its elements 4,095 apart)" in section
    assert "consecutive threads take consecutive positions of the inner dimensions" in section


def test_a_small_reduction_is_left_to_one_block() -> None:
    assert "Small: one block" in rows_section(_facts(_rows((32768,), (0,), "nll_loss_forward")))


def test_a_problem_without_rows_or_without_facts_has_no_rows_section() -> None:
    assert rows_section(_facts()) == "" and rows_section(None) == ""


def test_more_reductions_than_are_shown_are_counted() -> None:
    section = rows_section(_facts(*(_rows((64, 2 ** k), (1,)) for k in range(4, 10))))
    assert section.count("\n- `sum`") == 4 and "- and 2 more reductions" in section


def _first_kernel_prompt(prompt_sizes: ModuleType, problem: Path) -> str:
    prompts = prompt_sizes.render_problem(problem, prompt_sizes.H100_DATASHEET, (1.0, 0.8))
    return str(next(prompt.text for prompt in prompts if prompt.node == "write_initial"))


def test_kernelbench_softmaxs_first_kernel_prompt_shows_its_long_rows_and_a_cluster(prompt_sizes: ModuleType) -> None:
    prompt = _first_kernel_prompt(prompt_sizes, KERNELBENCH / "23_Softmax.py")
    assert "## Rows this problem reduces (from its shapes; the GPU has 132 SMs)" in prompt
    assert "- `_softmax` of [4096, 393216] over dim 1: 4,096 rows of 393,216 elements (1.5 MiB each)" in prompt
    assert "a cluster of 7 blocks holds it in distributed shared memory" in prompt


def test_kernelbench_layernorms_first_kernel_prompt_shows_its_few_rows_spread_over_the_gpu(
        prompt_sizes: ModuleType) -> None:
    prompt = _first_kernel_prompt(prompt_sizes, LAYER_NORM)
    assert "- `native_layer_norm` of [16, 64, 256, 256] over dims 1, 2, 3: 16 rows of 4,194,304 elements" in prompt
    assert "Few rows: one block per row leaves most SMs idle; spread each row over about 17 blocks" in prompt


def test_kernelbench_matmuls_first_kernel_prompt_shows_no_rows(prompt_sizes: ModuleType) -> None:
    prompt = _first_kernel_prompt(prompt_sizes, KERNELBENCH / "1_Square_matrix_multiplication_.py")
    assert "## Starting point" in prompt and "## Rows" not in prompt


def test_setup_keeps_the_rows_in_the_runs_facts_and_the_first_kernel_is_shown_them(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), CudaAnswer(technique=None, explanation="x", cuda_source=kernel("ok 0.5"))])
    run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1),
              problem=REPO / "examples" / "problems" / "softmax_rows.py")
    facts = RunFacts.model_validate_json((tmp_path / "run" / "baseline" / "facts.json").read_text())
    assert facts.rows is not None and [(found.operation, found.dims) for found in facts.rows] == [("_softmax", (1,))]
    first = facts.rows[0]
    assert f"{first.rows:,} rows of {first.length:,} elements" in str(models["lowering"].prompts[0][1].content)
