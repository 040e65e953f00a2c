"""tools/report_pipe.py: a checker's report through a pipe, kept within a bound by the trusted process."""

from __future__ import annotations

import subprocess
import sys
import time

from kernelblaster.tools.report_pipe import ReportPipe


def write_from_child(pipe: ReportPipe, code: str) -> None:
    """Run `code` in a child process that inherits the pipe's write end and gets its name as argv[1]."""
    subprocess.run([sys.executable, "-c", code, pipe.child_path], pass_fds=(pipe.write_fd,), check=True,
                   timeout=60)


def test_a_report_written_by_name_arrives_whole() -> None:
    pipe = ReportPipe(head_bytes=1024, tail_bytes=1024)
    write_from_child(pipe, "import sys; open(sys.argv[1], 'w').write('========= ERROR SUMMARY: 0 errors\\n')")
    pipe.finish(drain_s=5)
    assert pipe.text() == "========= ERROR SUMMARY: 0 errors\n"


def test_a_large_report_keeps_its_head_and_tail_and_says_what_was_left_out() -> None:
    pipe = ReportPipe(head_bytes=10, tail_bytes=10)
    write_from_child(pipe, "import sys; open(sys.argv[1], 'w').write('H' * 10 + 'x' * 1000000 + 'T' * 10)")
    pipe.finish(drain_s=5)
    assert pipe.total_bytes == 1000020
    assert pipe.text() == "H" * 10 + "\n[... 1000000 bytes of the report left out ...]\n" + "T" * 10


def test_finishing_does_not_wait_for_a_writer_that_never_closes() -> None:
    pipe = ReportPipe(head_bytes=1024, tail_bytes=1024)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(pipe.write_fd,))
    try:
        started = time.monotonic()
        pipe.finish(drain_s=0.5)
        assert time.monotonic() - started < 5
    finally:
        child.kill()
        child.wait()


def test_the_pipe_reaches_no_child_it_was_not_passed_to() -> None:
    pipe = ReportPipe(head_bytes=1024, tail_bytes=1024)
    done = subprocess.run([sys.executable, "-c", "import os, sys; os.fstat(int(sys.argv[1]))", str(pipe.write_fd)],
                          capture_output=True, text=True, timeout=60, check=False)
    pipe.finish(drain_s=1)
    assert done.returncode != 0 and "Bad file descriptor" in done.stderr
