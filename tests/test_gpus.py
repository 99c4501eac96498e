"""GPU slots on a workstation: concurrent jobs get disjoint CUDA_VISIBLE_DEVICES (file locks),
tested without a GPU by faking the device count torch reports."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections import Counter

import pytest
import torch

from boundary.core import gpus
from boundary.core.errors import BoundaryError

FAKE_DEVICES = 4


@pytest.fixture(autouse=True)
def fake_machine(monkeypatch, tmp_path):
    """A machine with FAKE_DEVICES GPUs, nothing restricting them, and its own lock folder."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: FAKE_DEVICES)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv(gpus.LOCK_DIR_ENV, str(tmp_path / "locks"))


def job(n, has, release, devices, own=False):
    """A GPU job (forked, so it sees the fake machine): claim n GPUs, report them, hold them
    until told to finish."""
    with gpus.claim(n, poll_seconds=0.05, own=own) as chosen:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(chosen)
        if own:  # whatever sizes itself by its share of a device sees the whole device
            assert gpus.jobs_per_gpu() == 1
        devices.extend(chosen)
        has.set()
        release.wait(60)


def start(n, manager, own=False):
    has, release, devices = manager.Event(), manager.Event(), manager.list()
    proc = mp.get_context("fork").Process(target=job, args=(n, has, release, devices, own))
    proc.start()
    return proc, has, release, devices


def test_concurrent_jobs_get_disjoint_gpus_and_a_job_waits_for_a_free_one():
    with mp.Manager() as manager:
        a, a_has, a_release, a_dev = start(2, manager)
        b, b_has, b_release, b_dev = start(2, manager)
        assert a_has.wait(60) and b_has.wait(60)
        assert set(a_dev).isdisjoint(b_dev) and set(a_dev) | set(b_dev) == {"0", "1", "2", "3"}
        # Every device is held: a third job can only get one that a finished job gave back.
        c, c_has, c_release, c_dev = start(1, manager)
        a_release.set()
        a.join(60)
        assert c_has.wait(60)
        assert set(c_dev) <= set(a_dev)  # never one B still holds
        for event in (b_release, c_release):
            event.set()
        for proc in (b, c):
            proc.join(60)
        assert all(p.exitcode == 0 for p in (a, b, c))


def test_jobs_per_gpu_lets_one_device_hold_several_jobs(monkeypatch):
    """$BOUNDARY_JOBS_PER_GPU=2 on a one-GPU machine: two jobs share device 0, a third waits
    for a slot; a job's GPUs stay distinct devices; a bad count is one line."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv(gpus.SLOTS_ENV, "2")
    with mp.Manager() as manager:
        a, a_has, a_release, a_dev = start(1, manager)
        b, b_has, b_release, b_dev = start(1, manager)
        assert a_has.wait(60) and b_has.wait(60)
        assert list(a_dev) == list(b_dev) == ["0"]
        c, c_has, c_release, c_dev = start(1, manager)
        assert not c_has.wait(0.5)  # both slots taken
        a_release.set()
        a.join(60)
        assert c_has.wait(60) and list(c_dev) == ["0"]
        for event in (b_release, c_release):
            event.set()
        for proc in (b, c):
            proc.join(60)
        assert all(p.exitcode == 0 for p in (a, b, c))
    with pytest.raises(BoundaryError, match="--gpus 2: this job sees 1 GPU"):
        with gpus.claim(2):
            pass
    monkeypatch.setenv(gpus.SLOTS_ENV, "0")
    with pytest.raises(BoundaryError, match=r"\$BOUNDARY_JOBS_PER_GPU: '0' is not a positive job count"):
        with gpus.claim(1):
            pass


def finish(*jobs):
    for _, _, release, _ in jobs:
        release.set()
    for proc, _, _, _ in jobs:
        proc.join(60)
    assert all(proc.exitcode == 0 for proc, _, _, _ in jobs)


def test_jobs_spread_over_the_least_loaded_devices(monkeypatch):
    """4 devices x 4 slots: one-GPU jobs claimed in turn land one a device, then two each (not
    four on GPU 0); a two-GPU job takes the two least-loaded devices, not the first free."""
    monkeypatch.setenv(gpus.SLOTS_ENV, "4")
    with mp.Manager() as manager:
        jobs = []
        for _ in range(8):
            jobs.append(start(1, manager))
            assert jobs[-1][1].wait(60)
        assert [d for *_, devices in jobs for d in devices] == ["0", "1", "2", "3"] * 2
        finish(jobs[2], jobs[7])  # one job off GPU 2, one off GPU 3: held 2, 2, 1, 1
        pair = start(2, manager)
        assert pair[1].wait(60) and sorted(pair[3]) == ["2", "3"]
        finish(pair)
        finish(jobs[6])  # the other job off GPU 2: held 2, 2, 0, 1
        a = start(1, manager)
        assert a[1].wait(60) and list(a[3]) == ["2"]
        b = start(1, manager)  # GPUs 2 and 3 hold one each: the first of them
        assert b[1].wait(60) and list(b[3]) == ["2"]
        c = start(2, manager)  # held 2, 2, 2, 1: GPU 3, then the first of the rest
        assert c[1].wait(60) and sorted(c[3]) == ["0", "3"]
        finish(a, b, c, *(job for i, job in enumerate(jobs) if i not in (2, 6, 7)))


def test_jobs_started_together_spread_evenly(monkeypatch):
    """Eight jobs (four of one GPU, two of two) claiming at once on 4 devices x 4 slots: each
    device holds two, whatever order they run in; a job's GPUs are distinct devices."""
    monkeypatch.setenv(gpus.SLOTS_ENV, "4")
    with mp.Manager() as manager:
        jobs = [start(n, manager) for n in (1, 2, 1, 2, 1, 1)]
        assert all(has.wait(60) for _, has, _, _ in jobs)
        assert all(len(set(devices)) == len(devices) for *_, devices in jobs)
        assert Counter(d for *_, devices in jobs for d in devices) == dict.fromkeys("0123", 2)
        finish(*jobs)


def test_an_owning_job_waits_for_the_jobs_on_its_device_and_keeps_new_ones_off(monkeypatch):
    """One GPU of 4 slots: a job that owns its device (a training job's vLLM engine) waits while
    a shared job runs there; meanwhile a new shared job waits too, though slots are free (the
    owner reserved the device, so the jobs there drain); the owner then holds every slot, and
    the waiting shared job starts only when the owner ends."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv(gpus.SLOTS_ENV, "4")
    with mp.Manager() as manager:
        a = start(1, manager)
        assert a[1].wait(60)
        owner = start(1, manager, own=True)
        assert not owner[1].wait(0.5)  # A is on the device
        b = start(1, manager)
        assert not b[1].wait(0.5)  # 3 slots free, but the owner has reserved the device
        finish(a)
        assert owner[1].wait(60) and list(owner[3]) == ["0"]
        assert not b[1].wait(0.5)  # every slot is the owner's
        finish(owner)
        assert b[1].wait(60) and list(b[3]) == ["0"]
        finish(b)
    assert gpus.jobs_per_gpu() == 4  # the owner's view ends with its block


def test_owning_jobs_take_whole_idle_devices_and_shared_jobs_go_around_them(monkeypatch):
    """4 devices x 2 slots: shared jobs on GPUs 0 and 1; an owner of 2 devices takes the idle
    2 and 3 at once; a new shared job goes to 0 or 1, never under the owner; a second owner of
    2 waits (no two devices idle) without taking the devices of the first."""
    monkeypatch.setenv(gpus.SLOTS_ENV, "2")
    with mp.Manager() as manager:
        shared = [start(1, manager), start(1, manager)]
        assert all(job[1].wait(60) for job in shared)
        assert sorted(d for job in shared for d in job[3]) == ["0", "1"]
        owner = start(2, manager, own=True)
        assert owner[1].wait(60) and sorted(owner[3]) == ["2", "3"]
        c = start(1, manager)
        assert c[1].wait(60) and list(c[3]) in (["0"], ["1"])
        second = start(2, manager, own=True)
        assert not second[1].wait(0.5)
        finish(*shared, c)  # GPUs 0 and 1 drain: the second owner takes them
        assert second[1].wait(60) and sorted(second[3]) == ["0", "1"]
        finish(owner, second)


def test_a_killed_job_gives_its_gpus_back():
    with mp.Manager() as manager:
        everything, has, _, held = start(FAKE_DEVICES, manager)
        assert has.wait(60)
        os.kill(everything.pid, signal.SIGKILL)  # no cleanup code runs: the kernel drops the locks
        everything.join(60)
        nxt, nxt_has, nxt_release, nxt_dev = start(FAKE_DEVICES, manager)
        assert nxt_has.wait(60) and sorted(nxt_dev) == sorted(held)
        nxt_release.set()
        nxt.join(60)


def test_zero_gpus_hides_every_device():
    with gpus.claim(0) as chosen:
        assert chosen == [] and os.environ["CUDA_VISIBLE_DEVICES"] == ""
        assert gpus.visible() == []


def test_only_the_visible_devices_are_handed_out(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5,7")
    with gpus.claim(2) as chosen:
        assert chosen == ["2", "5"] and os.environ["CUDA_VISIBLE_DEVICES"] == "2,5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5,7")
    with pytest.raises(BoundaryError, match=r"--gpus 4: this job sees 3 GPU\(s\) \(CUDA_VISIBLE_DEVICES=2,5,7\)"):
        with gpus.claim(4):
            pass


def test_under_slurm_the_allocation_is_used_as_given(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    with gpus.claim(2) as chosen:
        assert chosen == ["1", "3"]
    assert not (tmp_path / "locks").exists()  # SLURM owns the devices: no workstation locks
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(BoundaryError, match="--gpus 2: this job sees 1 GPU"):
        with gpus.claim(2):
            pass


def test_cli_claims_before_the_stage_runs(monkeypatch, capsys):
    """`boundary --gpus N <stage>`: the stage sees its devices; a bad count is one line."""
    from boundary import cli

    seen = {}
    monkeypatch.setitem(cli.COMMANDS, "probe", ("test_gpus", "test stage"))
    monkeypatch.setattr("test_gpus.main", lambda argv: seen.update(env=os.environ["CUDA_VISIBLE_DEVICES"]),
                        raising=False)
    assert cli.main(["--gpus", "3", "probe"]) == 0 and seen["env"] == "0,1,2"
    monkeypatch.setattr("test_gpus.main", lambda argv: seen.update(env=os.environ["CUDA_VISIBLE_DEVICES"], argv=argv,
                                                                  slots=os.environ.get(gpus.SLOTS_ENV)),
                        raising=False)
    monkeypatch.setenv(gpus.SLOTS_ENV, "4")
    assert cli.main(["--gpus", "2", "--own", "probe", "--x"]) == 0
    assert seen == {"env": "0,1", "argv": ["--x"], "slots": "1"}
    assert cli.main(["--own", "probe"]) == 2
    assert "boundary --gpus N --own <command>" in capsys.readouterr().err
    assert cli.main(["--gpus", "5", "probe"]) == 1
    assert "boundary probe: error: --gpus 5: this job sees 4 GPU(s)" in capsys.readouterr().err
    assert cli.main(["--gpus", "x", "probe"]) == 2
