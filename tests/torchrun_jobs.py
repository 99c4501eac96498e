"""Several trainings in one torchrun launch, for tests that check what a multi-process run
trains, not how it is launched (not a test itself). A launch of 2 CPU processes costs three
process starts (torchrun, then each worker importing torch, transformers and TRL: 8-20 CPU-s
each on a 2-core CI machine), more than a toy run's training; so the test side (`launch`) hands
a worker script a JSON list of jobs and the worker (`serve`) runs them one after another in the
same processes, resetting between jobs what a fresh process would start without. Used by
fsdp_cpu_worker.py (test_fsdp.py) and train_cpu_worker.py (test_distributed.py)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

JOB_LINE = "torchrun_jobs: "  # rank 0's report of a finished job: this prefix, then its JSON


def launch(worker: Path, args: list[str], jobs: list[dict], env: dict, processes: int = 2,
           timeout: int = 1200) -> list[tuple[dict, str]]:
    """Run `jobs` in one launch of `worker args` on `processes` processes: for each job, in order,
    what rank 0 reported and the launch's output from the end of the previous job to it. A job
    that waits for ever on a collective fails at `timeout` rather than stall the suite."""
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc-per-node={processes}", str(worker), *args],
                         env={**env, "JOBS": json.dumps(jobs)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-6000:]
    done, text = [], []
    for line in run.stdout.splitlines():
        if line.startswith(JOB_LINE):
            done.append((json.loads(line[len(JOB_LINE):]), "\n".join(text)))
            text = []
        else:
            text.append(line)
    assert len(done) == len(jobs), run.stdout[-6000:]
    return done


def serve(run: Callable[[dict], dict | None]) -> None:
    """In each process of a launch: start the processes' communication as `boundary train`'s
    workers do (training/launch.py), then `run` each job of $JOBS in turn; rank 0 prints what
    `run` returned on its own line (JOB_LINE). One process group serves every job: accelerate's
    end_training (the train stage's last call) would end it, so here it leaves it up (the next
    job's Accelerator then takes it, as a first job takes the one start_processes made)."""
    import torch.distributed as dist
    from accelerate.state import PartialState

    from boundary.training.launch import die_with_launcher, start_processes, stop_processes

    die_with_launcher()
    start_processes()
    PartialState.destroy_process_group = lambda self, group=None: None
    environ = dict(os.environ)
    for job in json.loads(os.environ["JOBS"]):
        result = run(job)
        if dist.get_rank() == 0:
            print(JOB_LINE + json.dumps(result), flush=True)
        fresh_state(environ)
    stop_processes(finished=True)


def fresh_state(environ: dict) -> None:
    """What a new process would start from: no accelerate state (the next job's Accelerator
    takes its own plugins; the process group stays up) and the environment as launched (the
    training arguments and accelerate export settings into it)."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    os.environ.clear()
    os.environ.update(environ)
    # What outlives a job (the modules it imported, their caches) out of the cyclic collector's
    # reach, as conftest.pytest_runtest_setup does: the next job's gc.collect() calls (the
    # trainer's, accelerate's) then walk that job's objects only.
    gc.collect()
    gc.freeze()
