"""Run one launch (torchrun and its workers, or one process) for a benchmark: its output kept in
a log file, its progress lines echoed as they come, and on a timeout the whole launch stopped
(it runs in a process group of its own) with what it printed still there to show, and the
stacks of its workers (SIGUSR1) after it."""

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
                    stop_launch(job)
                    code = why
            seen = _echo(log, seen, echo, label)
    if wrote is not None and isinstance(code, int):
        print(f"{label}exited {time.monotonic() - wrote:.1f} s after its output was written", flush=True)
    return code


def workers(pid: int) -> list[int]:
    """The training processes below `pid`: torchrun's children. torchrun starts them in
    sessions of their own, so the launch's process group does not reach them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            runner = b"torch.distributed.run" in Path(f"/proc/{parent}/cmdline").read_bytes()
        except OSError:
            runner = False
        kids = children.get(parent, [])
        found += kids if runner else []
        todo += [] if runner else kids
    return found


def stop_launch(job: subprocess.Popen) -> None:
    """Stop a launch started in a session of its own: its workers first print their stacks into
    its log (those that have set the handler: launch.stacks_on_sigusr1; one still importing
    would die of the signal), then the launch goes, and the workers die with their torchrun."""
    for pid in workers(job.pid):
        try:
            caught = next(int(line.split()[1], 16) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                          if line.startswith("SigCgt:"))
            if caught >> (signal.SIGUSR1 - 1) & 1:
                os.kill(pid, signal.SIGUSR1)
        except (OSError, StopIteration):
            pass
    time.sleep(2)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def _echo(log: Path, seen: int, echo: str, label: str) -> int:
    text = log.read_text(errors="replace")
    done = text.rfind("\n") + 1  # whole lines only
    for line in text[seen:done].splitlines():
        if line.startswith(echo):
            print(f"{label}{line}", flush=True)
    return max(seen, done)


# The vLLM engine options every front-end and the worker take, once: flag -> (the train setting
# it sets, argparse keywords). `--sleep on|off` is the boolean vllm_enable_sleep_mode.
ENGINE_OPTIONS = {
    "--vllm-mem": ("vllm_gpu_memory_utilization", {"type": float}),
    "--vllm-tp": ("vllm_tensor_parallel_size", {"type": int}),
    "--sleep": ("vllm_enable_sleep_mode", {"choices": ("on", "off")}),
    "--vllm-is": ("vllm_importance_sampling", {"help": "vllm_importance_sampling: one of TRL's modes (default: "
                                               "the schema's, none; figures before issue 39's fix had TRL's "
                                               "sequence_mask)"}),
    "--vllm-capture": ("vllm_cudagraph_capture_size", {"type": int, "help": "vllm_cudagraph_capture_size "
                                                       "(default: vLLM's, at most 512)"}),
    "--check-every": ("vllm_check_every", {"type": int, "help": "vllm_check_every (default here: 1, a check "
                                           "every step, timed as its own phase; the configs': 50)"}),
}


def _given(args) -> dict:
    """{flag: value} of the engine options set on the command line."""
    values = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in ENGINE_OPTIONS}
    return {flag: value for flag, value in values.items() if value is not None}


def add_engine_options(p) -> None:
    """The engine options on a front-end's or the worker's parser (unset: the schema's default)."""
    for flag, (setting, kwargs) in ENGINE_OPTIONS.items():
        p.add_argument(flag, **{"help": f"{setting} (default: the schema's)", **kwargs})


def engine_options(args) -> list[str]:
    """The worker's (multi_gpu_steps.py) engine options that a front-end was given."""
    return [x for flag, value in _given(args).items() for x in (flag, str(value))]


def engine_settings(args) -> dict:
    """The train settings the worker's engine options set."""
    return {ENGINE_OPTIONS[flag][0]: value == "on" if flag == "--sleep" else value
            for flag, value in _given(args).items()}
