"""`boundary train` starts one process per GPU, and a process never sees several GPUs (TRL
refuses nn.DataParallel): checked without a GPU by faking the device count torch reports."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from conftest import pythonpath

from boundary.core.errors import BoundaryError
from boundary.stages import train as launch


def unset(monkeypatch, name):
    """Unset for the test, and unset again after it, whatever the test sets."""
    monkeypatch.setenv(name, "")
    monkeypatch.delenv(name)


@pytest.fixture
def eight_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)


@pytest.fixture
def started(monkeypatch):
    """What `boundary train` would run: in this process (train.main) or under torchrun."""
    for name in ("CUDA_VISIBLE_DEVICES", "WORLD_SIZE", "OMP_NUM_THREADS"):
        unset(monkeypatch, name)
    runs = []
    monkeypatch.setattr("boundary.stages.train.run", lambda argv, full=None, stop=None: runs.append(
        {"processes": 1, "devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "argv": argv}) or {})

    def torchrun(command, env):
        nproc = [a for a in command if a.startswith("--nproc-per-node=")]
        runs.append({"processes": int(nproc[0].split("=")[1]), "devices": env["CUDA_VISIBLE_DEVICES"],
                     "command": command, "threads": env["OMP_NUM_THREADS"]})
        return 0

    monkeypatch.setattr(launch, "run_launcher", torchrun)
    return runs


def train_argv(gpus, *extra, **settings):
    run = {"gpus": gpus, "steps": 1, "lr": 1e-4, "num_generations": 8, "prompts_per_step": 8}  # what a run needs
    return ["--model", "m", "--train-split", "s", "--settings", json.dumps({**run, **settings}),
            "--seed", "0", "--out", "o", "--checkpoint-dir", "c", *extra]


@pytest.mark.parametrize("gpus,devices", [(1, "0"), (0, "")])
def test_one_process_never_sees_several_gpus(eight_gpus, started, gpus, devices):
    """8 GPUs visible, training asks for 1 (or 0): its single process is shown that many."""
    launch.main(train_argv(gpus))
    assert started == [{"processes": 1, "devices": devices, "argv": train_argv(gpus)}]


def test_n_gpus_start_n_processes_one_per_gpu(eight_gpus, started, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    launch.main(train_argv(8))
    (run,) = started
    assert run["processes"] == 8 and run["devices"] == "0,1,2,3,4,5,6,7"
    assert run["threads"] == "2"  # the job's CPU threads shared by its processes
    assert run["command"][-len(train_argv(8)) - 1:] == ["train", *train_argv(8)]
    assert "--standalone" in run["command"]


def test_a_job_uses_the_gpus_it_was_given(eight_gpus, started, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")  # e.g. claimed by `boundary --gpus`
    launch.main(train_argv(2))
    assert started[0]["processes"] == 2 and started[0]["devices"] == "3,5"


def test_too_few_gpus_or_a_process_count_with_gpus_is_one_line(eight_gpus, started, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(BoundaryError, match=r"train.gpus: 8 GPU\(s\) asked for, this job sees 2 GPU"):
        launch.main(train_argv(8))
    with pytest.raises(BoundaryError, match="--processes 4: with train.gpus = 2"):
        launch.main(train_argv(2, "--processes", "4"))
    assert started == []


def test_cpu_processes_run_under_torchrun(started):
    launch.main(train_argv(0, "--processes", "2"))
    assert started[0]["processes"] == 2 and started[0]["devices"] == ""


def test_a_worker_trains_in_place_then_ends_its_group_and_leaves(started, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "8")  # set by torchrun for each worker
    monkeypatch.setattr(launch, "die_with_launcher", lambda: None)  # not this test process
    monkeypatch.setattr(launch, "start_processes", lambda: None)  # no process group here
    ends = []
    monkeypatch.setattr(launch, "stop_processes", lambda finished: ends.append(("stop", finished)))
    monkeypatch.setattr(launch, "leave", lambda code=0: ends.append(("leave", code)))  # not os._exit here
    launch.main(train_argv(8))
    assert started[0]["processes"] == 1 and started[0]["argv"] == train_argv(8)
    assert ends == [("stop", True), ("leave", 0)]


def test_a_failed_worker_ends_its_group_without_waiting_for_the_others(started, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(launch, "die_with_launcher", lambda: None)  # not this test process
    monkeypatch.setattr(launch, "start_processes", lambda: None)
    monkeypatch.setattr(launch, "run", lambda argv, stop=None: 1 / 0)
    ends = []
    monkeypatch.setattr(launch, "stop_processes", lambda finished: ends.append(("stop", finished)))
    monkeypatch.setattr(launch, "leave", lambda code=0: ends.append(("leave", code)))
    with pytest.raises(ZeroDivisionError):
        launch.main(train_argv(2))
    assert ends == [("stop", False)]  # the error is raised (a traceback, exit 1): torchrun stops the rest


@pytest.mark.parametrize("finished", [True, False])
def test_stop_processes_waits_for_all_only_after_a_finished_run_then_ends_the_group(monkeypatch, finished):
    """A 1-process gloo group in this process: ended either way; the barrier (rank 0's writes
    done before anyone leaves) only after a finished run."""
    import torch.distributed as dist

    from boundary.training import launch as plan

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    barriers = []
    real = dist.barrier
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: (barriers.append(1), real(*a, **k)))
    plan.stop_processes(finished)
    assert not dist.is_initialized() and barriers == ([1] if finished else [])
    plan.stop_processes(finished)  # ended already (by the trainer's end_training): nothing to do


def test_a_failed_process_fails_the_job(started, monkeypatch):
    monkeypatch.setattr(launch, "run_launcher", lambda command, env: 1)
    with pytest.raises(BoundaryError, match="a process of 2 failed"):
        launch.main(train_argv(0, "--processes", "2"))


def test_gpus_that_do_not_divide_the_batch_are_one_line_before_any_process(eight_gpus, started):
    """3 GPUs cannot share 16 prompts x G=4 = 64 completions evenly: refused by the launcher,
    naming train.gpus, before torchrun starts (not once per worker)."""
    with pytest.raises(BoundaryError, match=r"^train.gpus: 3 processes do not divide .* = 64 completions"):
        launch.main(train_argv(3, prompts_per_step=16, num_generations=4))
    with pytest.raises(BoundaryError, match=r"3 processes do not divide .* into 2 accumulation steps"):
        launch.main(train_argv(0, "--processes", "3", prompts_per_step=16, num_generations=4,
                               gradient_accumulation_steps=2))
    launch.main(train_argv(4, prompts_per_step=16, num_generations=4))
    assert [r["processes"] for r in started] == [4]


def test_fsdp_without_gpus_is_refused_not_run_unsharded(started):
    """accelerate drops its FSDP plugin on a CPU (the processes would train as DDP over gloo):
    the launcher says so in one line instead."""
    with pytest.raises(BoundaryError, match=r"^train.sharding: fsdp needs GPUs .* 2 process\(es\)"):
        launch.main(train_argv(0, "--processes", "2", sharding="fsdp"))
    assert started == []


def test_a_sharding_the_installed_accelerate_lacks_is_one_line(eight_gpus, started, monkeypatch):
    from accelerate.utils import FullyShardedDataParallelPlugin

    fields = {k: v for k, v in FullyShardedDataParallelPlugin.__dataclass_fields__.items() if k != "fsdp_version"}
    monkeypatch.setattr(FullyShardedDataParallelPlugin, "__dataclass_fields__", fields)  # an accelerate < 1.6
    with pytest.raises(BoundaryError, match=r"^train.sharding: fsdp needs FSDP2, which the installed accelerate"):
        launch.main(train_argv(2, sharding="fsdp"))
    with pytest.raises(BoundaryError, match=r"^--settings: train settings: sharding: 'zero3' is not one of"):
        launch.main(train_argv(2, sharding="zero3"))
    launch.main(train_argv(2, sharding="ddp"))
    assert [r["processes"] for r in started] == [2]


def test_a_worker_error_is_the_launch_s_one_line(started, monkeypatch, tmp_path):
    """A worker's BoundaryError (here: its process group failing to start) is relayed to the
    launcher's last line, naming the process."""
    def failing(command, env):
        monkeypatch.setenv("BOUNDARY_TRAIN_ERRORS", env["BOUNDARY_TRAIN_ERRORS"])
        monkeypatch.setenv("RANK", "1")
        from boundary.training.launch import relay_error
        relay_error(BoundaryError("NCCL failed to start between the 2 training processes"))
        return 1

    monkeypatch.setattr(launch, "run_launcher", failing)
    with pytest.raises(BoundaryError, match=r"^train: process 1: NCCL failed to start between the 2"):
        launch.main(train_argv(0, "--processes", "2"))


def test_the_benchmarks_runner_echoes_progress_and_stops_a_launch_that_outlives_its_output(tmp_path, capsys):
    """benchmarks/launched.py: progress lines echoed as written; a launch whose result file
    exists but which has not exited `grace` s later is stopped, its whole process group with
    it, and said so; one past its timeout likewise."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from launched import run_logged

    result, child = tmp_path / "result.json", tmp_path / "child.pid"
    hangs = ("import os, subprocess, sys, time; print('[multi_gpu_steps] step 1: 0.1 s', flush=True); "
             f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
             f"open({str(child)!r}, 'w').write(str(p.pid)); open({str(result)!r}, 'w').write('{{}}'); time.sleep(60)")
    code = run_logged([sys.executable, "-c", hangs], dict(os.environ), tmp_path / "a.log", timeout=30,
                      label="x: ", written=result, grace=1)
    assert code == "wrote its output, not exited 1 s later"
    assert "x: [multi_gpu_steps] step 1: 0.1 s" in capsys.readouterr().out
    status = Path(f"/proc/{child.read_text()}/status")  # the launch's own children went with it

    def gone():
        try:
            return "zombie" in status.read_text()
        except FileNotFoundError:
            return True

    for _ in range(50):  # SIGKILL is delivered at once, the exit takes a moment
        if gone():
            break
        __import__("time").sleep(0.1)
    assert gone()
    assert run_logged([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                      tmp_path / "b.log", timeout=1) == "timeout after 1 s"
    assert run_logged([sys.executable, "-c", f"open({str(result)!r}, 'w')"], dict(os.environ),
                      tmp_path / "c.log", timeout=30, written=result) == 0


def test_a_worker_dies_with_the_torchrun_that_started_it(tmp_path):
    """torchrun starts workers in sessions of their own: a launch killed outright (SIGKILL to
    its process group) must not leave them running. A stand-in launcher starts a worker the
    same way, then is SIGKILLed: the worker goes too."""
    import signal
    import subprocess
    import sys
    import time

    worker = ("from boundary.training.launch import die_with_launcher; die_with_launcher(); "
              "import time; print('ready', flush=True); time.sleep(60)")
    launcher = ("import subprocess, sys; "
                f"w = subprocess.Popen([sys.executable, '-c', {worker!r}], start_new_session=True); "
                "print(w.pid, flush=True); w.wait()")
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    job = subprocess.Popen([sys.executable, "-c", launcher], env=env, stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    pid = int(job.stdout.readline())
    assert job.stdout.readline().strip() == "ready"  # the worker's line, through the shared pipe
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    status = Path(f"/proc/{pid}/status")
    for _ in range(50):
        try:
            if "zombie" in status.read_text():
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the worker outlived its launcher")


def test_a_worker_prints_its_stacks_on_sigusr1_and_trains_on(tmp_path):
    """A run that waits on a collective is found with `kill -USR1 <worker>`: once its process
    group is up, a worker prints every thread's stack and goes on (the multi-GPU check does it
    to runs it stops at its deadline). The group starts before transformers is imported (a
    failure to start comes first), with accelerate's timeout."""
    import socket
    import subprocess
    import sys

    with socket.socket() as free:  # a port of its own: tests run side by side
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    worker = ("import os, signal, sys; from boundary.training.launch import start_processes; start_processes(); "
              "print('transformers' in sys.modules, flush=True); "
              "os.kill(os.getpid(), signal.SIGUSR1); print('trains on', flush=True)")
    env = {**os.environ, "PYTHONPATH": pythonpath(), "WORLD_SIZE": "1", "RANK": "0",
           "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", worker], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["False", "trains", "on"]
    assert "(most recent call first)" in run.stderr and "<string>" in run.stderr


def test_the_process_group_waits_as_long_as_accelerate_would():
    """start_processes' timeout is TrainingArguments' ddp_timeout default, which accelerate
    starts the group with when nothing started it first (written once in launch.py so that a
    worker need not import transformers before its group is up)."""
    from transformers import TrainingArguments

    from boundary.training.launch import PROCESS_GROUP_TIMEOUT

    assert PROCESS_GROUP_TIMEOUT == TrainingArguments.__dataclass_fields__["ddp_timeout"].default


def test_the_benchmark_s_phases_sum_to_its_step_and_the_engine_check_is_a_phase_of_its_own(monkeypatch):
    """benchmarks/multi_gpu_steps.py's accounting, on a fake clock: generate holds the weight sync,
    the sync holds the policy's half of the log-prob check, and (sleep mode on) the engine's half
    runs before the next generate; each phase is reported without what ran inside it, and the
    phases add up to the step."""
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import multi_gpu_steps as worker

    now = [0.0]
    monkeypatch.setattr(worker.time, "perf_counter", lambda: now[0])

    def work(seconds, *inner):
        def run():
            now[0] += seconds
            for fn in inner:
                fn()
        return run

    phases = worker.Phases()
    check_policy = worker.timed(phases, "check", work(2.0))
    check_engine = worker.timed(phases, "check", work(3.0))
    weight_sync = worker.timed(phases, "sync", work(5.0, check_policy))
    generate = worker.timed(phases, "generate", work(7.0, weight_sync, check_engine))
    batch = worker.timed(phases, "batch", work(11.0, generate))  # 11 s of scoring after generate
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    phases.on_step_begin(None, state, None)
    batch()
    now[0] += 13.0  # forward and backward
    phases.on_pre_optimizer_step(None, state, None)
    now[0] += 17.0
    phases.on_optimizer_step(None, state, None)
    phases.on_step_end(None, state, None)
    row = phases.rows[0]
    assert row == {"step": 58.0, "generate": 7.0, "sync": 5.0, "check": 5.0, "score": 11.0, "fwd_bwd": 13.0,
                   "optimizer": 17.0}
    assert sum(v for k, v in row.items() if k != "step") == row["step"]


def test_the_benchmark_s_engine_options_override_its_check_at_every_sync():
    """benchmarks/multi_gpu_steps.py checks the engine at every sync unless --check-every says
    otherwise (the engine benchmark's row m: 50, as the configs); its other engine options reach the
    run's settings as the train stage names them."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import multi_gpu_steps as worker

    def settings(*flags):
        return worker.train_settings(worker.make_parser().parse_args(["--out", "x", *flags]), 4)

    assert "rollout_engine" not in settings()
    every = settings("--engine", "vllm")
    assert (every["rollout_engine"], every["vllm_check_every"], every["gpus"]) == ("vllm", 1, 4)
    assert every["vllm_max_model_length"] == 128 + 256 + 8
    row_m = settings("--engine", "vllm", "--check-every", "50", "--sleep", "off", "--vllm-mem", "0.3")
    assert row_m["vllm_check_every"] == 50
    assert row_m["vllm_enable_sleep_mode"] is False and row_m["vllm_gpu_memory_utilization"] == 0.3


def _launch(root, name, processes, diff=0.05, action=1, fsdp=False):
    """One launch's files as lease.sh brings them back, for benchmarks/check_engine_launches.py."""
    import pandas as pd

    for method in ("grpo", "pba"):
        run = root / name / "train" / method / "seed0"
        run.mkdir(parents=True)
        pd.DataFrame({"engine_logp_mean_abs_diff": [diff] * 8, "engine_logp_max_abs_diff": [0.5] * 8,
                      "reward": [0.1] * 8, "step_time": [2.0] * 8}).to_parquet(run / "log.parquet")
        pd.DataFrame({"step": range(8), "action": [action] * 8}).to_parquet(run / "actions.parquet")
        (root / name / "logs" / "train" / method).mkdir(parents=True)
        warning = "torch/distributed/fsdp/_fully_shard/_fsdp_state.py:350] ...\n" if fsdp else ""
        (root / name / "logs" / "train" / method / "seed0.log").write_text(
            f"train: {processes} processes on GPUs 0,1\n{warning}")
        (root / name / "benchmarks" / "train" / method).mkdir(parents=True)
        (root / name / "benchmarks" / "train" / method / "seed0.tsv").write_text("s\th:m:s\n90.5\t0:01:30\n")
    (root / name / "base_rollouts.md5").write_text("aa  0.parquet\nbb  1.parquet\n")


def test_the_launch_check_passes_equal_launches_and_names_each_defect(tmp_path, capsys):
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import check_engine_launches as check

    _launch(tmp_path / "ok", "ddp2", 2)
    _launch(tmp_path / "ok", "fsdp4", 4, fsdp=True)
    assert check.main([str(tmp_path / "ok")]) == 0
    assert "PASS: 4 runs" in capsys.readouterr().out
    _launch(tmp_path / "bad", "ddp2", 2)
    _launch(tmp_path / "bad", "ddp4", 2, diff=0.2, action=2)  # asked for 4 processes
    _launch(tmp_path / "bad", "fsdp2", 2)  # no FSDP in its log
    assert check.main([str(tmp_path / "bad")]) == 1
    out = capsys.readouterr().out
    assert "ddp4 grpo: engine 0.2 nats a token; 2 processes, fsdp in log False; actions differ" in out
    assert "fsdp2 pba: 2 processes, fsdp in log False" in out
