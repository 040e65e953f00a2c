"""harness/semantics.py: the settings a forward pass depends on beyond its arguments (PyTorch defaults
included) are read from one reference pass on the meta device and shown in kb_problem.h's comment block."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.harness.analysis import analyse_problem
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.semantics import render_value

KERNELBENCH = Path(__file__).resolve().parents[3] / "shared" / "kernelbench"
needs_kernelbench = pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="KernelBench is not at ../shared/kernelbench")


def settings_of(relative: str) -> list[str]:
    matches = sorted((KERNELBENCH / relative.split("/")[0]).glob(relative.split("/")[1] + "_*.py"))
    assert matches, f"no KernelBench problem {relative}"
    analysis = analyse_problem(load_problem(matches[0]), None)
    assert analysis.device == "meta"
    return analysis.spec.semantics


def settings_of_source(tmp_path: Path, body: str, inputs: str) -> list[str]:
    path = tmp_path / "problem.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
                    f"class Model(nn.Module):\n{body}\n\n"
                    f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return []\n")
    return analyse_problem(load_problem(path), None).spec.semantics


@needs_kernelbench
def test_layer_norm_shows_its_default_eps_and_affine_flags() -> None:
    assert settings_of("level1/40") == ["self.ln = nn.LayerNorm(normalized_shape=(64, 256, 256), eps=1e-05, "
                                        "elementwise_affine=True, bias=True)"]


@needs_kernelbench
def test_cross_entropy_shows_its_default_reduction_and_ignore_index() -> None:
    assert settings_of("level1/95") == ["F.cross_entropy(ignore_index=-100, reduction='mean', label_smoothing=0.0)"]


@needs_kernelbench
def test_leaky_relu_shows_the_slope_it_runs_with_given_or_default() -> None:
    assert "self.leaky_relu = nn.LeakyReLU(negative_slope=0.1)" in settings_of("level2/12")
    assert settings_of("level1/20") == ["F.leaky_relu(negative_slope=0.01)"]


@needs_kernelbench
def test_batch_norm_shows_momentum_eps_affine_and_training_mode() -> None:
    [line] = settings_of("level1/33")
    assert line.startswith("self.bn = nn.BatchNorm2d(num_features=64, eps=1e-05, momentum=0.1, affine=True, "
                           "track_running_stats=True")
    assert line.endswith("mode='training')")


@needs_kernelbench
def test_convolution_shows_padding_mode_and_its_bias_flag() -> None:
    [line] = settings_of("level1/54")
    assert "padding_mode='zeros'" in line and "bias=False" in line and "dilation=(1, 1, 1)" in line


@needs_kernelbench
def test_a_builtin_call_shows_the_arguments_it_was_given() -> None:
    assert settings_of("level1/23") == ["torch.softmax(dim=1)"]


@needs_kernelbench
def test_a_plain_matrix_product_has_no_hidden_settings_and_no_settings_block() -> None:
    problem = next((KERNELBENCH / "level1").glob("1_*.py"))
    spec = analyse_problem(load_problem(problem), None).spec
    assert spec.semantics == []
    assert "Settings the forward pass" not in generate_header(spec)


@needs_kernelbench
def test_the_header_lists_the_settings_in_its_comment_block() -> None:
    problem = next((KERNELBENCH / "level1").glob("95_*.py"))
    header = generate_header(analyse_problem(load_problem(problem), None).spec)
    comment, code = header.split("#pragma once")
    assert "//   F.cross_entropy(ignore_index=-100, reduction='mean', label_smoothing=0.0)" in comment
    assert "cross_entropy" not in code


def test_interpolate_shows_align_corners_left_at_its_default(tmp_path: Path) -> None:
    settings = settings_of_source(tmp_path, "    def forward(self, x):\n"
                                  "        return F.interpolate(x, scale_factor=2.0, mode='bilinear')",
                                  "[torch.rand(1, 2, 4, 4)]")
    assert len(settings) == 1 and "mode='bilinear'" in settings[0] and "align_corners=None" in settings[0]


def test_calls_inside_a_pytorch_module_are_not_listed_again(tmp_path: Path) -> None:
    settings = settings_of_source(tmp_path, "    def __init__(self):\n        super().__init__()\n"
                                  "        self.seq = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.ReLU())\n"
                                  "    def forward(self, x):\n        return self.seq(x)",
                                  "[torch.rand(2, 4)]")
    assert settings == ["self.seq.0 = nn.Linear(in_features=4, out_features=4, bias=True)",
                        "self.seq.1 = nn.GELU(approximate='none')"]


def test_shape_and_storage_calls_are_not_settings(tmp_path: Path) -> None:
    settings = settings_of_source(tmp_path, "    def forward(self, x):\n"
                                  "        return x.view(2, 8).permute(1, 0).contiguous().sum(dim=0)",
                                  "[torch.rand(4, 4)]")
    assert settings == ["Tensor.sum(dim=0, keepdim=False)"]


def test_values_render_as_python_spells_them_and_tensors_not_at_all() -> None:
    import torch
    assert [render_value(v) for v in (1e-5, (3,), [1, 2], "mean", None, True, float("inf"))] == [
        "1e-05", "(3,)", "[1, 2]", "'mean'", "None", "True", "float('inf')"]
    assert render_value(torch.zeros(1)) is None


@needs_kernelbench
@pytest.mark.parametrize(("relative", "said"), [
    ("level1/96", "F.smooth_l1_loss(reduction='mean', beta=1.0)"),
    ("level1/98", "F.kl_div(reduction='batchmean', log_target=False)"),
    ("level1/99", "reduction='mean')"),
    ("level1/34", "affine=False, track_running_stats=False"),
])
def test_every_loss_and_norm_names_the_defaults_it_runs_with(relative: str, said: str) -> None:
    assert any(said in line for line in settings_of(relative))
