"""Find the CUDA toolkit's programs (ncu, compute-sanitizer): the path in the tool's environment variable,
else PATH, else the toolkit's `bin` folder. A tool that is not there is a `ToolUnavailable` value, so the
step that needs it is reported as unavailable and the evaluation goes on.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pydantic import BaseModel

from kernelblaster.tools.errors import UserFacingError

# Where the CUDA toolkit lives when CUDA_HOME is unset; its tools are often installed there but not on PATH.
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")


class ToolUnavailable(BaseModel):
    """A CUDA tool (ncu, compute-sanitizer) is not on this machine; its step is reported as unavailable and
    the evaluation goes on."""

    reason: str


def find_cuda_tool(executable: str, env_var: str) -> Path | ToolUnavailable:
    """Find a CUDA toolkit program: the path in `env_var`, else PATH, else $CUDA_HOME/bin, /usr/local/cuda/bin.

    An `env_var` naming a missing file is an error (the user asked for that file), not "unavailable".
    The path is resolved, as `tools.nvcc.find_nvcc`'s is: a sandbox shows the toolkit at its real place.
    """
    configured = os.environ.get(env_var)
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UserFacingError(f"{env_var}={configured} is not an executable file")
        return path.resolve()
    on_path = shutil.which(executable)
    if on_path:
        return Path(on_path).resolve()
    cuda_homes = [Path(os.environ["CUDA_HOME"])] if os.environ.get("CUDA_HOME") else []
    toolkit_dirs = [home / "bin" for home in [*cuda_homes, DEFAULT_CUDA_HOME]]
    for directory in toolkit_dirs:
        candidate = directory / executable
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.resolve()
    searched = ", ".join(str(d) for d in toolkit_dirs)
    return ToolUnavailable(reason=f"{executable} not found (set {env_var}, or put it on PATH; also looked in "
                                 f"{searched})")


def tool_installation(executable: Path) -> tuple[Path, ...]:
    """What a sandbox must show for a toolkit program to run: the program, and the folder it is installed in,
    which for a program in a toolkit's bin/ is the whole toolkit (compute-sanitizer and ncu keep their
    libraries and helpers in folders of their own beside bin/)."""
    home = executable.resolve().parent
    return (executable, home.parent if home.name == "bin" else home)
