"""Run one launch (torchrun and its workers, or one process) for a benchmark: its output kept in
a log file, its progress lines echoed as they come, and on a timeout the whole launch stopped
(it runs in a process group of its own) with what it printed still there to show."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def run_logged(cmd: list[str], env: dict, log: Path, timeout: float, echo: str = "[multi_gpu_steps]",
               label: str = "", written: Path | None = None, grace: float = 20.0) -> int | str:
    """The launch's exit code, or why it was stopped: 'timeout after N s', or, when the file
    `written` (its result) exists and the launch has not exited `grace` s later, 'wrote its
    output, not exited N s later' (how an exit that hangs shows). Lines starting with `echo`
    are printed (prefixed by `label`) as they are written."""
    start, seen, wrote = time.monotonic(), 0, None
    with open(log, "w") as f:
        job = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        code: int | str | None = None
        while code is None:
            try:
                code = job.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if wrote is None and written is not None and written.exists():
                    wrote = now
                why = (f"timeout after {timeout:.0f} s" if now - start > timeout else
                       f"wrote its output, not exited {grace:.0f} s later" if wrote and now - wrote > grace else None)
                if why:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
                    code = why
            seen = _echo(log, seen, echo, label)
    if wrote is not None and isinstance(code, int):
        print(f"{label}exited {time.monotonic() - wrote:.1f} s after its output was written", flush=True)
    return code


def _echo(log: Path, seen: int, echo: str, label: str) -> int:
    text = log.read_text(errors="replace")
    done = text.rfind("\n") + 1  # whole lines only
    for line in text[seen:done].splitlines():
        if line.startswith(echo):
            print(f"{label}{line}", flush=True)
    return max(seen, done)
