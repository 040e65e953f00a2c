"""The Python API example the README shows runs, and explains what it needs when that is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "optimize_example.py"


def test_the_api_example_names_the_missing_endpoint_in_one_line(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OPENAI_")}
    finished = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, env=environment, capture_output=True,
                              text=True, timeout=120)
    assert finished.returncode == 2
    assert finished.stderr.startswith("error: no LLM endpoint configured") and finished.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()
