"""`boundary train`: the training stage, in one process per GPU.

TRL's GRPOTrainer refuses a single process that sees several GPUs (`Trainer` would wrap the
model in nn.DataParallel), so `train.gpus: N > 1` starts N processes under torchrun, one per
device (accelerate binds process LOCAL_RANK to device LOCAL_RANK), and a run on one GPU or the
CPU is shown at most one device. `--processes N` with `gpus: 0` runs N CPU processes
(gloo): how the tests check, without a GPU, that a multi-process run trains as one process does.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from boundary.errors import BoundaryError


@dataclass(frozen=True)
class Launch:
    processes: int
    devices: tuple[str, ...]  # CUDA_VISIBLE_DEVICES of every process; () on CPU


def plan(gpus: int, processes: int | None, devices: list[str]) -> Launch:
    """How many processes train, and which devices they see. `devices`: those visible."""
    if gpus == 0:
        return Launch(processes or 1, ())
    if processes not in (None, gpus):
        raise BoundaryError(f"--processes {processes}: with train.gpus = {gpus} training runs "
                            "one process per GPU (set train.gpus instead)")
    if len(devices) < gpus:
        from boundary.gpus import describe

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


def main_train(argv=None):
    from boundary.config import load_stage_settings

    argv = list(sys.argv[1:] if argv is None else argv)
    if "WORLD_SIZE" in os.environ:  # a worker of a launch: train here
        from boundary import train

        return train.main(argv)
    parser = argparse.ArgumentParser(add_help=False)  # train.main documents both
    parser.add_argument("--settings")
    parser.add_argument("--processes", type=int)
    known, _ = parser.parse_known_args(argv)
    if known.processes is not None and known.processes < 1:
        raise BoundaryError(f"--processes: {known.processes} is not a process count")
    gpus = int(load_stage_settings(known.settings).get("gpus", 0)) if known.settings else 0
    from boundary.gpus import visible

    launch = plan(gpus, known.processes, visible() if gpus else [])
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(launch.devices)
    if launch.processes == 1:
        from boundary import train

        return train.main(argv)
    env = dict(os.environ)
    # The job's CPU threads are shared by its processes.
    threads = int(env.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    env["OMP_NUM_THREADS"] = str(max(1, threads // launch.processes))
    where = f"GPUs {','.join(launch.devices)}" if launch.devices else "CPU (gloo)"
    print(f"train: {launch.processes} processes on {where}", flush=True)
    code = _run(torchrun(launch.processes, argv), env)
    if code:
        raise BoundaryError(f"train: a process of {launch.processes} failed (exit {code}); "
                            "its error is above in this log")
