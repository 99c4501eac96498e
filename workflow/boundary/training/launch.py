"""How `boundary train` starts its processes: one per GPU under torchrun (stages/train.py runs them).

TRL's GRPOTrainer refuses a single process that sees several GPUs (`Trainer` would wrap the
model in nn.DataParallel), so `train.gpus: N > 1` starts N processes under torchrun, one per
device (accelerate binds process LOCAL_RANK to device LOCAL_RANK), and a run on one GPU or the
CPU is shown at most one device. `--processes N` with `gpus: 0` runs N CPU processes
(gloo): how the tests check, without a GPU, that a multi-process run trains as one process does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass

from boundary.core.errors import BoundaryError


@dataclass(frozen=True)
class Launch:
    processes: int
    devices: tuple[str, ...]  # CUDA_VISIBLE_DEVICES of every process; () on CPU


def launch_plan(gpus: int, processes: int | None, devices: list[str]) -> Launch:
    """How many processes train, and which devices they see. `devices`: those visible."""
    if gpus == 0:
        return Launch(processes or 1, ())
    if processes not in (None, gpus):
        raise BoundaryError(f"--processes {processes}: with train.gpus = {gpus} training runs "
                            "one process per GPU (set train.gpus instead)")
    if len(devices) < gpus:
        from boundary.core.gpus import describe

        raise BoundaryError(f"train.gpus: {gpus} GPU(s) asked for, this job sees {describe(devices)}")
    return Launch(gpus, tuple(devices[:gpus]))


def torchrun(processes: int, argv: list[str]) -> list[str]:
    """The command that runs `boundary train argv` in `processes` processes on this machine
    (`--standalone`: a free local port for the rendezvous, so concurrent jobs never meet)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={processes}", "-m", "boundary.cli", "train", *argv]


def _run(command: list[str], env: dict) -> int:
    """Run the launcher; a SIGTERM or SIGINT to this process (SLURM, Snakemake) stops it, and
    torchrun stops its workers."""
    child = subprocess.Popen(command, env=env)
    forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
