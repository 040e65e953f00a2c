"""The distribution installs one name: everything lives under `kernelblaster`, data files included."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(ROOT)], check=True, capture_output=True)
    (wheel,) = out.glob("kernelblaster-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_wheel_adds_no_top_level_name_but_the_projects(wheel_names: list[str]) -> None:
    top_level = {name.split("/")[0] for name in wheel_names}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"kernelblaster"}


def test_wheel_holds_every_folder_of_the_layout_under_the_project_name(wheel_names: list[str]) -> None:
    for folder in ("graph", "nodes", "tools", "kb", "harness", "eval"):
        assert f"kernelblaster/{folder}/__init__.py" in wheel_names


def test_wheel_carries_the_driver_sources_seed_kb_prompts_and_findings_text(wheel_names: list[str]) -> None:
    assert "kernelblaster/harness/driver/kb_driver.cu" in wheel_names
    assert "kernelblaster/harness/driver/kb_launcher.c" in wheel_names
    assert "kernelblaster/kb/seed/seed_kb.json" in wheel_names
    assert "kernelblaster/nodes/prompts/lower.user.txt" in wheel_names
    assert "kernelblaster/nodes/prompts/answer_cuda.txt" in wheel_names
    assert "kernelblaster/graph/prompts/answer_json.txt" in wheel_names
    assert "kernelblaster/tools/ncu_findings.txt" in wheel_names


def test_wheel_carries_every_kb_snippet(wheel_names: list[str]) -> None:
    prefix = "kernelblaster/kb/seed/snippets/"
    shipped = {name for name in wheel_names if name.startswith(prefix)}
    on_disk = {prefix + path.name for path in (ROOT / "kb" / "seed" / "snippets").glob("*.cu")}
    assert shipped == on_disk and on_disk
