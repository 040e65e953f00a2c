"""A trusted process of its own for the checker attacks: runs one call of the driver's protocol double under
the compute-sanitizer stand-in (both named by the environment it is started with) and prints the result as
JSON. A process of its own, because what a link to /proc/self/environ would leak is the environment a
process started with, which a test cannot change in its own process.

Usage: python trusted_process.py TOOL TIMEOUT_S REPORT_LIMIT_BYTES [SANDBOX_VIEW_PATH ... WRITABLE_PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path

from kernelblaster.harness import sanitize_run
from kernelblaster.tools.driver_process import IpcTensor, TensorSet
from kernelblaster.tools.sandbox import SandboxView, require_sandbox
from kernelblaster.tools.sanitizer import SanitizerTool

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "fake_driver_protocol.py"


def main(argv: list[str]) -> None:
    tool, timeout_s, limit = SanitizerTool(argv[0]), float(argv[1]), int(argv[2])
    sanitize_run.REPORT_LIMIT_BYTES = limit
    sandboxed = len(argv) > 3
    view = SandboxView(read_only=tuple(map(Path, argv[3:-1])), writable=(Path(argv[-1]),), gpu=True) if sandboxed \
        else SandboxView()
    x = IpcTensor(handle_hex="ab" * 64, offset=0, dtype=0, shape=[4, 8], strides=[8, 1])
    call = sanitize_run.SanitizedCall(
        command=[sys.executable, str(FAKE_DRIVER)], view=view, device=0, flush_bytes=0, timeout_s=timeout_s,
        tensor_set=TensorSet(inputs=[x], params=[], outputs=[x.model_copy(update={"offset": 512})]),
        sandbox=require_sandbox(False) if sandboxed else None)
    print(sanitize_run.sanitize_call(call, tool).model_dump_json())


if __name__ == "__main__":
    main(sys.argv[1:])
