"""benchmarks/prompt_sizes.py renders any problem's prompts through the real graph on CPU; every role's prompt
stays within its token budget, and a written prompt says it is a CPU rendering of a stand-in's figures."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
KERNELBENCH = REPO.parent / "shared" / "kernelbench"
PROBLEM = KERNELBENCH / "level2" / "12_Gemm_Multiply_LeakyReLU.py"


@pytest.mark.skipif(not PROBLEM.is_file(), reason="KernelBench is not at ../shared/kernelbench")
def test_every_role_of_a_gemm_problem_stays_within_its_budget_and_is_labelled(prompt_sizes: ModuleType,
                                                                               tmp_path: Path) -> None:
    prompts = prompt_sizes.render_problem(PROBLEM, prompt_sizes.H100_DATASHEET, (1.0, 0.8))
    shown = prompt_sizes.shown_prompts(prompts)
    assert {label for label, _ in shown} >= {"lowering/write_initial", "lowering/lower",
                                              "soft_verifier/check_initial", "parameter_update/parameter_update"}
    for label, prompt in shown:
        assert prompt.tokens <= prompt_sizes.budget_for(prompt), label
    assert prompt_sizes.print_prompts("level2", PROBLEM.name, prompts, tmp_path) == []
    written = sorted(tmp_path.glob("*.md"))
    assert len(written) == len(shown)
    assert all(path.read_text().startswith("<!-- Rendered on CPU by benchmarks/prompt_sizes.py") for path in written)


def test_a_role_without_a_budget_is_refused(prompt_sizes: ModuleType) -> None:
    prompt = prompt_sizes.RenderedPrompt(role="lowering", node="new_node", text="", sections={"x": 1})
    with pytest.raises(SystemExit, match="no token budget for the prompt lowering/new_node"):
        prompt_sizes.budget_for(prompt)
