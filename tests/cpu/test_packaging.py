"""The distribution installs one name: everything lives under `kernelblaster`, data files included, in the
wheel and in an editable install."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("graph", "nodes", "tools", "kb", "harness", "eval")
PARENT_PTH = "parent_environment.pth"


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
    for folder in FOLDERS:
        assert f"kernelblaster/{folder}/__init__.py" in wheel_names


def test_wheel_carries_the_driver_sources_seed_kb_prompts_and_findings_text(wheel_names: list[str]) -> None:
    assert "kernelblaster/harness/driver/kb_driver.cu" in wheel_names
    assert "kernelblaster/harness/driver/kb_launcher.c" in wheel_names
    assert "kernelblaster/harness/driver/kb_workspace.cu" in wheel_names
    assert {"kernelblaster/harness/driver/kb_driver.map", "kernelblaster/harness/driver/kb_candidate.map"} <= set(
        wheel_names)
    assert "kernelblaster/kb/seed/seed_kb.json" in wheel_names
    assert "kernelblaster/nodes/prompts/lower.user.txt" in wheel_names
    assert "kernelblaster/nodes/prompts/answer_cuda.txt" in wheel_names
    assert "kernelblaster/graph/llm/prompts/answer_json.txt" in wheel_names
    assert "kernelblaster/harness/profile/findings.txt" in wheel_names
    assert "kernelblaster/harness/export/binding.cpp.txt" in wheel_names
    assert "kernelblaster/harness/export/package_init.py.txt" in wheel_names
    assert "kernelblaster/harness/export/kernelbench.py.txt" in wheel_names


def test_wheel_carries_every_kb_snippet(wheel_names: list[str]) -> None:
    prefix = "kernelblaster/kb/seed/snippets/"
    shipped = {name for name in wheel_names if name.startswith(prefix)}
    on_disk = {prefix + path.name for path in (ROOT / "kb" / "seed" / "snippets").glob("*.cu")}
    assert shipped == on_disk and on_disk


@pytest.fixture(scope="module")
def editable_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with `pip install -e` done. It sees this environment's packages (setuptools among
    them) through a .pth file: `--system-site-packages` would show the base interpreter's instead when the
    tests run in a virtual environment."""
    env = tmp_path_factory.mktemp("editable") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (_site_packages(env) / PARENT_PTH).write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([env / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "-e", str(ROOT)], check=True, capture_output=True)
    return env


def _site_packages(env: Path) -> Path:
    (site_dir,) = env.glob("lib/python*/site-packages")
    return site_dir


def test_an_editable_install_adds_nothing_to_site_packages_but_the_projects(editable_env: Path) -> None:
    added = {path.name for path in _site_packages(editable_env).iterdir()} - {"__pycache__", PARENT_PTH}
    assert added and all("kernelblaster" in name for name in added), added


def test_an_editable_install_imports_the_folders_only_under_the_project_name(editable_env: Path,
                                                                             tmp_path: Path) -> None:
    names = [*FOLDERS, *(f"kernelblaster.{folder}" for folder in FOLDERS)]
    probe = ("import importlib.util, json, sys; "
             "print(json.dumps({n: getattr(importlib.util.find_spec(n), 'origin', None) for n in sys.argv[1:]}))")
    found = json.loads(subprocess.run([editable_env / "bin" / "python", "-c", probe, *names], cwd=tmp_path,
                                      check=True, capture_output=True, text=True).stdout)
    assert {folder: found[folder] for folder in FOLDERS} == dict.fromkeys(FOLDERS)
    assert all(found[f"kernelblaster.{folder}"] == str(ROOT / folder / "__init__.py") for folder in FOLDERS)
