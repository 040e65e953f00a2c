"""The GPU machine's scripts (.ci/device/) run the whole GPU specification (every GPU test file is in a part) and
name benchmarks that exist."""

from __future__ import annotations

import re
import subprocess
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


def test_starting_streams_returns_while_they_run_even_when_read_through_a_pipe(tmp_path: Path) -> None:
    # A GPU-machine call that starts the streams and pipes the script's output (`... | tail`) must get it back
    # at once; at 5580ae0 the pipe stayed open until the streams ended.
    logdir = tmp_path / "streams"
    started = subprocess.run([str(ROOT / ".ci" / "device" / "gpu_streams.sh"), "start", str(logdir), "0:bench"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=True)
    still_running = not (logdir / "stream-0.done").exists()
    subprocess.run([str(ROOT / ".ci" / "device" / "gpu_streams.sh"), "wait", str(logdir), "300"],
                   capture_output=True, timeout=330, check=False)
    assert "stream on GPU 0: bench" in started.stdout
    assert still_running and (logdir / "stream-0.done").exists()
