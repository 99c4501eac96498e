"""How `boundary train` starts its processes: one per GPU under torchrun (stages/train.py runs them).

TRL's GRPOTrainer refuses a single process that sees several GPUs (`Trainer` would wrap the
model in nn.DataParallel), so `train.gpus: N > 1` starts N processes under torchrun, one per
device (accelerate binds process LOCAL_RANK to device LOCAL_RANK), and a run on one GPU or the
CPU is shown at most one device. `--processes N` with `gpus: 0` runs N CPU processes
(gloo): how the tests check, without a GPU, that a multi-process run trains as one process does.

A time limit ends a run cleanly: a SIGTERM (to the launcher, to the workers, or to both, as
SLURM's `--signal` sends it) becomes a stop request that every process reads at the next step
boundary (`StopRequest`, agreed by an all-reduce); they save a checkpoint and the launch exits
with RESUME_ME (75), and the rerun resumes from that checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

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
    signals = [f"--signals-to-handle={TORCHRUN_SIGNALS}"] if torchrun_takes_signals() else []
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", *signals,
            f"--nproc-per-node={processes}", "-m", "boundary.cli", "train", *argv]


def torchrun_takes_signals() -> bool:
    """Whether the installed torchrun has `--signals-to-handle` (torch >= 2.9). Without it a
    SIGTERM to torchrun itself ends the workers at once; one to the launcher alone still stops
    them at a step boundary."""
    from importlib.metadata import version

    major, minor = (int(x) for x in version("torch").split(".")[:2])
    return (major, minor) >= (2, 9)


# torchrun's signals (its default adds SIGTERM, on which it ends its workers at once): a SIGTERM
# to every process of a job leaves the stop to the workers (StopRequest).
TORCHRUN_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"


def run_launcher(command: list[str], env: dict) -> int:
    """Run the launcher. A first SIGTERM to this process (a time limit: SLURM's --signal) asks
    the workers to stop at the next step boundary (the stop file, `StopRequest`); a second, or
    a SIGINT, stops torchrun at once, and torchrun its workers (SIGINT). torchrun itself ignores
    SIGTERM, so that one sent to every process of the job leaves it to the workers' own stop."""
    child = subprocess.Popen(command, env=env, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    stop_file = Path(env[STOP_ENV], STOP) if env.get(STOP_ENV) else None
    terms = []

    def on_term(signum, frame):
        terms.append(signum)
        if len(terms) == 1 and stop_file is not None:
            stop_file.touch()
            print("train: SIGTERM: the processes stop at the next step boundary and save a checkpoint "
                  "(another SIGTERM stops them at once)", flush=True)
        else:
            child.send_signal(signal.SIGINT)

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
                signal.SIGINT: signal.signal(signal.SIGINT, lambda signum, frame: child.send_signal(signum))}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# A run stopped at a step boundary (a time limit) exits with this status: "resume me". It is
# sysexits' EX_TEMPFAIL, "a temporary failure; the user is invited to retry"; the rerun (the
# next job, Snakemake's `retries`) resumes from the checkpoint saved at the stop.
RESUME_ME = 75
STOP_ENV = "BOUNDARY_TRAIN_STOP"  # the launcher's folder: the stop file, and the stopped marker
STOP, STOPPED = "stop", "stopped"


class StopRequest:
    """A training process's stop request: set by a SIGTERM to it, or by the launcher's stop
    file (a SIGTERM to the launcher). Every process reads it at each step boundary and they
    agree by an all-reduce (`agreed`), so all stop after the same step."""

    def __init__(self):
        self.signalled = False
        folder = os.environ.get(STOP_ENV)
        self.file = Path(folder, STOP) if folder else None

    def install(self) -> StopRequest:
        def on_term(signum, frame):
            if not self.signalled:
                print(f"train: SIGTERM (process {os.environ.get('RANK', 0)}): stopping at the next step "
                      "boundary with a checkpoint", flush=True)
            self.signalled = True
        signal.signal(signal.SIGTERM, on_term)
        return self

    def requested(self) -> bool:
        return self.signalled or (self.file is not None and self.file.exists())

    def agreed(self, device) -> bool:
        """Whether any process asks to stop (a collective where processes were started)."""
        import torch
        import torch.distributed as dist

        flag = torch.tensor([float(self.requested())], device=device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    @staticmethod
    def mark_stopped() -> None:
        """For the launcher: the run stopped at a boundary, its checkpoint saved."""
        folder = os.environ.get(STOP_ENV)
        if folder:
            Path(folder, STOPPED).touch()

    @staticmethod
    def stopped(folder: str) -> bool:
        return Path(folder, STOPPED).exists()


ERRORS_ENV = "BOUNDARY_TRAIN_ERRORS"  # where the workers of a launch leave their error line


def die_with_launcher() -> None:
    """In a worker: be killed (SIGKILL) when torchrun, which started it, dies. torchrun starts
    each worker in a session of its own, so a launch killed outright (SIGKILL to its process
    group: a timeout, a kill as a node failure would) took torchrun and left the workers
    training on, or waiting forever in a collective for a peer that is gone, on their GPUs.
    Linux only (prctl PR_SET_PDEATHSIG); elsewhere nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) != 0:  # 1: PR_SET_PDEATHSIG
        return
    if os.getppid() != parent:  # torchrun died before the line above: nobody will signal us
        os._exit(1)


def stacks_on_sigusr1() -> None:
    """In a worker: `kill -USR1 <pid>` prints where each of its threads is and the run goes on,
    so a run waiting on a collective says which one."""
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)


# transformers' TrainingArguments.ddp_timeout default (seconds), which accelerate would start the
# process group with. Written here, not read from TrainingArguments: importing that class costs
# a worker about 7 CPU-seconds before its communication starts, and a failure to start is meant
# to come first (test_launch.py checks that the two agree).
PROCESS_GROUP_TIMEOUT = 1800


def start_processes() -> None:
    """In a worker: start the processes' communication before anything is built (NCCL on
    GPUs, gloo on the CPU; accelerate then uses this process group), so a failure to start is
    one line naming it, not a trace from deep inside the first collective."""
    import datetime

    import torch
    import torch.distributed as dist

    stacks_on_sigusr1()
    world, local = int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    timeout = datetime.timedelta(seconds=PROCESS_GROUP_TIMEOUT)
    try:
        if backend == "nccl":
            torch.cuda.set_device(local)
            dist.init_process_group(backend, timeout=timeout, device_id=torch.device("cuda", local))
        else:
            dist.init_process_group(backend, timeout=timeout)
        _barrier()  # NCCL connects here
    except RuntimeError as err:  # DistBackendError and gloo's enforce failures among them
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        where = f"GPUs {os.environ.get('CUDA_VISIBLE_DEVICES', '?')}" if backend == "nccl" else "the CPU"
        raise BoundaryError(f"{backend.upper()} failed to start between the {world} training processes on "
                            f"{where} ({first[:200]}); NCCL_DEBUG=INFO shows NCCL's own account") from None


def _barrier() -> None:
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def stop_processes(finished: bool) -> None:
    """In a worker, on its way out, whatever happened: after a finished run, wait for every
    process (so the main process's writes are done before any process leaves), then end the
    process group (NCCL's communicators and watchdog threads), as accelerate's end_training
    does. After a failure there is no barrier: the other processes may be gone."""
    import faulthandler

    import torch.distributed as dist

    if not dist.is_initialized():  # never started, or ended by the trainer already
        return
    try:
        if finished:
            _barrier()
    finally:
        faulthandler.dump_traceback_later(60)  # an ending that hangs says where, in the log
        try:
            dist.destroy_process_group()
        finally:
            faulthandler.cancel_dump_traceback_later()


def leave(code: int = 0) -> NoReturn:
    """End a worker at once, once its outputs are written and its process group is ended:
    output flushed, the interpreter's teardown skipped. That teardown (every module of torch,
    transformers and TRL collected, then CUDA's and NCCL's destructors) took 2.6-5.8 s per
    process on a loaded 2-core CPU, holds the launch open for nothing, and is where an exit
    can hang; nothing of the run depends on it (writes are atomic and closed)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def relay_error(err: BoundaryError) -> None:
    """In a worker: leave this process's error line for the launcher to report."""
    folder = os.environ.get(ERRORS_ENV)
    if folder:
        with open(os.path.join(folder, f"rank{int(os.environ.get('RANK', 0)):05d}"), "w") as f:
            f.write(str(err))


def relayed_error(folder: str) -> str | None:
    """The lowest-ranked worker's error line, as 'process R: line', or None."""
    names = sorted(os.listdir(folder))
    if not names:
        return None
    with open(os.path.join(folder, names[0])) as f:
        return f"process {int(names[0][4:])}: {f.read()}"
