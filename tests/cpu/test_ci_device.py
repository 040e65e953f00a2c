"""The GPU machine's scripts (.ci/device/) run the whole GPU specification (every GPU test file is in a part) and
name benchmarks that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _named_in_parts() -> set[str]:
    script = (ROOT / ".ci" / "device" / "gpu_parts.sh").read_text()
    return {path for block in re.findall(r'paths\[\w+\]="([^"]*)"', script) for path in block.split()}


def test_every_gpu_test_file_is_in_a_part_of_the_gpu_run() -> None:
    named = _named_in_parts()
    gpu_files = {str(path.relative_to(ROOT)) for path in (ROOT / "tests" / "gpu").glob("test_*.py")}
    assert gpu_files - named == set()
    assert "tests/hostile" in named


def test_every_path_a_part_names_exists() -> None:
    assert [path for path in _named_in_parts() if not (ROOT / path).exists()] == []


def test_every_benchmark_the_benchmark_script_runs_exists() -> None:
    script = (ROOT / ".ci" / "device" / "gpu_benchmarks.sh").read_text()
    named = set(re.findall(r"benchmarks/\w+\.py", script))
    assert named and [path for path in named if not (ROOT / path).is_file()] == []
