"""Training in several processes (torchrun, gloo on CPU) trains as one process does: the same
per-prompt actions, every anchor and the drop sampler, metrics over every process, outputs
written once, and a resumed run that repeats the uninterrupted one.

What must agree between 2 processes and 1, exactly: the per-prompt actions (actions.parquet:
each step's prompts, anchor weights and rollout source are functions of (seed, step, prompt)),
and the log columns that follow from them (step, learning_rate, protected_fraction), and no
base rollout drawn outside the bulk draws. What cannot agree value by value: every number
computed from sampled rollouts (reward, loss, anchor_loss, kl, grad_norm, lengths). Each
process samples its slice of the batch from its own random stream (TRL seeds process r with
seed + r), so the runs see different policy rollouts: they agree in distribution only, and the
test asks them to be finite and to train. (The base rollouts are the same blocks, seeded by
(seed, epoch, block), whatever the process count; a run that reads them from the base_rollouts
stage trains exactly as one that draws them in place.)
The arithmetic that turns one batch into one update is checked exactly instead, in process:
a batch's loss is the mean of its halves' losses, which is what DDP's gradient average needs.
FSDP against DDP: test_fsdp.py.

How the runs are made: a launch of 2 processes is three process starts (the launcher, torchrun,
2 workers importing torch, transformers and TRL), more than a toy run trains. The command
itself (`boundary train --processes 2`) runs where its launch is what is tested: one plain
2-process run (the reference of the others) and processes that cannot connect (the command's
resume of a 2-process launch: test_lora.py's SIGTERM test). The other 2-process runs, the
resume from the plain run's checkpoint among them, are made by the train stage's own code in
one launch of train_cpu_worker.py (`batch`), one job after another; the one-process runs and the
base_rollouts stage's draws run in this process, on one thread as the launched processes run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import ROOT, one_thread, pythonpath
from test_train import G, P, alternate, first_batch, make_trainer, model_dir, perturb, split  # noqa: F401
from torchrun_jobs import launch

from boundary.core import settings as stage_settings
from boundary.core.config import validate_config
from boundary.stages import base_rollouts as base_rollouts_stage
from boundary.stages import pretrain as pretrain_stage
from boundary.stages import train as train_stage
from boundary.tasks.testbed import TestbedTask, make_prompts

SMOKE = validate_config(yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text()))
TIMING = ("step_time", "base_draw_seconds", "generate_seconds")


def smoke_settings(method: str, **override) -> dict:
    """A smoke method's `--settings`, as the train rule passes them (the settings layer's key)."""
    return {**stage_settings.train_key(SMOKE, method), **override}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke config's pretrained testbed base, train split and a mask anchoring every
    third prompt in both refresh epochs."""
    root = tmp_path_factory.mktemp("smoke_train")
    testbed = SMOKE["testbed"]
    pretrain = {k: testbed[k] for k in ("task", "model", "pretrain")}
    with one_thread():  # the stage's own code; its process start is not what is tested
        pretrain_stage.main(["--settings", json.dumps(pretrain), "--out", str(root / "base")])
    split = make_prompts(TestbedTask(**testbed["task"]), {"train": testbed["splits"]["train"]})["train"]
    split.to_parquet(root / "train.parquet")
    epochs = stage_settings.refresh_epochs(SMOKE["train"]["steps"], SMOKE["gate"]["refresh_steps"])
    pd.DataFrame([{"prompt_id": p, "epoch": e, "weight": float(i % 3 == 0),
                   "action": "anchor" if i % 3 == 0 else "sharpen"}
                  for i, p in enumerate(split["prompt_id"]) for e in range(epochs)]
                 ).to_parquet(root / "mask.parquet")
    return root


def env() -> dict:
    """One CPU thread for every process: a run of 1 process, each of 2 (`train` divides the
    threads among them) and the base_rollouts stage then compute alike, so the runs below that
    must agree to the bit do so by construction (MKL promises equal bits only at equal shapes,
    alignment and thread count). What runs in this process runs on one thread too (`one_thread`)."""
    return {**os.environ, "PYTHONPATH": pythonpath(), "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def train_argv(smoke, name: str, settings: dict, processes: int = 1, base_rollouts=(), extra=()):
    """`boundary train`'s options as the train rule passes them (plus `extra`): (argv, out, checkpoints)."""
    out, ck = smoke / name, smoke / f"{name}_ck"
    args = ["--model", str(smoke / "base"), "--train-split", str(smoke / "train.parquet"),
            "--settings", json.dumps(settings), "--seed", "0", "--out", str(out),
            "--checkpoint-dir", str(ck), *(["--processes", str(processes)] if processes > 1 else []),
            *(["--base-rollouts", *map(str, base_rollouts)] if base_rollouts else []), *extra]
    if settings.get("mask"):
        args += ["--mask", str(smoke / "mask.parquet")]
    return args, out, ck


def train(smoke, name: str, settings: dict, processes: int = 1, base_rollouts=(), extra=()):
    """The `boundary train` command: (out, checkpoints, what it printed)."""
    args, out, ck = train_argv(smoke, name, settings, processes, base_rollouts, extra)
    run = subprocess.run([sys.executable, "-m", "boundary.cli", "train", *args], env=env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert run.returncode == 0, run.stdout[-6000:]
    return out, ck, run.stdout


def train_here(smoke, name: str, settings: dict, base_rollouts=(), extra=()):
    """A one-process run of the train stage's own code (what a `boundary train` process runs),
    in this process on one thread: (out, checkpoints, None)."""
    args, out, ck = train_argv(smoke, name, settings, 1, base_rollouts, extra)
    with one_thread():
        train_stage.run(args)
    return out, ck, None


@pytest.fixture(scope="module")
def pba_runs(smoke):
    """The smoke config's PBA (support anchor, bulk base draws) in 1 process and in 2, their
    checkpoints kept (the resume test below restarts from one). The 2-process run is the
    command's own launch: the torchrun path stays covered, and it is the fresh-process reference
    that the runs of `batch` are compared with."""
    settings, keep = smoke_settings("pba"), ["--keep-checkpoints"]
    return {1: train_here(smoke, "pba_1proc", settings, extra=keep),
            2: train(smoke, "pba_2proc", settings, 2, extra=keep)}


def test_two_processes_train_like_one(pba_runs):
    (one, _, _), (two, _, text) = pba_runs[1], pba_runs[2]
    assert "2 processes on CPU (gloo)" in text and "in 2 process(es)" in text
    assert text.count("train: {") == 1  # one process reports and writes
    actions = pd.read_parquet(one / "actions.parquet")
    pd.testing.assert_frame_equal(actions, pd.read_parquet(two / "actions.parquet"))
    steps = SMOKE["train"]["steps"]
    assert len(actions) == steps * SMOKE["train"]["prompts_per_step"]
    assert set(actions["action"]) == {"anchor", "sharpen"}
    assert (actions["source"] == "base").equals(actions["action"] == "anchor")  # support anchor
    log1, log2 = pd.read_parquet(one / "log.parquet"), pd.read_parquet(two / "log.parquet")
    assert list(log1.columns) == list(log2.columns)
    assert log1["step"].tolist() == log2["step"].tolist() == list(range(1, steps + 1))
    for column in ("learning_rate", "protected_fraction"):
        assert log1[column].tolist() == log2[column].tolist(), column
    # protected_fraction is the anchored share of each step's prompts, over both processes.
    assert log2["protected_fraction"].tolist() == (
        actions.groupby("step")["action"].apply(lambda a: (a == "anchor").mean()).tolist())
    for log in (log1, log2):
        assert log["base_rollouts_on_demand"].fillna(0).eq(0).all()  # each process's bulk draw held its rows
        assert np.isfinite(log[["loss", "reward", "grad_norm"]].to_numpy()).all()
        assert log["anchor_loss"].notna().any() and log["grad_norm"].gt(0).any()  # it trains
    for _n, (out, _, _) in pba_runs.items():
        assert (out / "final" / "model.safetensors").exists() and (out / "step4" / "config.json").exists()


def test_a_resumed_two_process_run_repeats_the_uninterrupted_one(pba_runs, batch):
    """Kill after checkpoint 6 of 8 (here: delete what came after it): the resumed run trains
    steps 7-8 on the same rollouts, per process, as the uninterrupted run did. (The command's
    own resume of a 2-process launch: test_lora.py's SIGTERM test.)"""
    out = pba_runs[2][0]
    (resumed, text), key = batch["pba_resumed_2proc"], batch["resumed_from"]
    assert "in 2 process(es)" in text
    assert f"resuming from {key}/checkpoint-6" in text
    full, again = (pd.read_parquet(p / "log.parquet").drop(columns=list(TIMING)).sort_index(axis=1)
                   for p in (out, resumed))
    pd.testing.assert_frame_equal(full, again)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "actions.parquet"),
                                  pd.read_parquet(resumed / "actions.parquet"))


@pytest.fixture(scope="module")
def pre_drawn(smoke):
    """The smoke PBA run's base rollouts, drawn by the base_rollouts stage in 2 shard jobs
    (the stage's own code, in this process on one thread)."""
    files = [smoke / "pre_drawn" / f"{i}.parquet" for i in range(2)]
    for i, path in enumerate(files):
        args = ["--model", str(smoke / "base"), "--train-split", str(smoke / "train.parquet"),
                "--mask", str(smoke / "mask.parquet"), "--settings", json.dumps(smoke_settings("pba")),
                "--seed", "0", "--shard", f"{i}/2", "--out", str(path)]
        with one_thread():
            base_rollouts_stage.main(args)
    return files


# The methods run in 2 processes besides PBA: the drop sampler, the policy anchor with a global
# KL (base scoring of each process's rows) and the base anchor (bulk draws without log-probs).
METHODS = {"drop": dict(mask="pba", masked_action="drop"),
           "policy_global_kl": dict(mask="pba", anchor="policy", kl_estimator="k2", beta_kl=0.05),
           "base": dict(mask="pba", anchor="base", beta_a=10.0)}


def method_settings(method: str) -> dict:
    return smoke_settings("grpo", steps=4, checkpoints=[4], **METHODS[method])


ENGINE = dict(rollout_engine="vllm", vllm_check_every=1, steps=4, checkpoints=[4])


@pytest.fixture(scope="module")
def batch(smoke, pre_drawn, pba_runs):
    """The 2-process runs whose launch is not what their test checks, each as the train stage
    runs it in `boundary train --processes 2`'s workers, all in one launch of
    train_cpu_worker.py: name -> (out, what the launch printed during that run). PBA on the
    pre-drawn rollouts comes first, so that it trains in processes that have trained nothing
    yet, as the command's run it must equal to the bit does; the engine run, which patches the
    stand-in engine into TRL, comes after the methods; last the resume of the command's PBA run
    from its checkpoint 6 (a copy without checkpoint 8, as a kill after checkpoint 6 leaves it;
    "resumed_from": the checkpoint folder it holds)."""
    copy = smoke / "resumed"
    shutil.copytree(pba_runs[2][1], copy / "ck")
    (key,) = [p for p in (copy / "ck").iterdir()]
    shutil.rmtree(max(key.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])))
    resume = ["--model", str(smoke / "base"), "--train-split", str(smoke / "train.parquet"),
              "--mask", str(smoke / "mask.parquet"), "--settings", json.dumps(smoke_settings("pba")), "--seed", "0",
              "--out", str(copy / "out"), "--checkpoint-dir", str(copy / "ck"), "--processes", "2"]
    jobs = {"pba_pre_2proc": train_argv(smoke, "pba_pre_2proc", smoke_settings("pba"), 2, pre_drawn),
            **{f"{m}_2proc": train_argv(smoke, f"{m}_2proc", method_settings(m), 2) for m in METHODS},
            "pba_engine_2proc": train_argv(smoke, "pba_engine_2proc", smoke_settings("pba", **ENGINE), 2, pre_drawn),
            "pba_resumed_2proc": (resume, copy / "out", copy / "ck")}
    done = launch(ROOT / "tests" / "train_cpu_worker.py", [],
                  [{"argv": args, "standin": name == "pba_engine_2proc"} for name, (args, _, _) in jobs.items()],
                  {**env(), "CUDA_VISIBLE_DEVICES": ""})  # as the command's launcher sets them on a CPU
    return {**{name: (out, text) for (name, (_, out, _)), (_, text) in zip(jobs.items(), done, strict=True)},
            "resumed_from": key}


@pytest.mark.parametrize("processes", [1, 2])
def test_pre_drawn_base_rollouts_train_as_drawn_in_place(smoke, pba_runs, pre_drawn, batch, processes):
    """A PBA run reading the base_rollouts stage's files (drawn in 2 shards) trains exactly as
    the run that draws the same blocks in place: same seed, same schedule, same actions, the same
    log value by value, the same final weights; in one process and in two."""
    from safetensors.torch import load_file

    assert all(len(pd.read_parquet(f)) for f in pre_drawn)
    if processes == 1:
        out = train_here(smoke, "pba_pre_1proc", smoke_settings("pba"), base_rollouts=pre_drawn)[0]
    else:
        out, text = batch["pba_pre_2proc"]
        assert "in 2 process(es)" in text
    place = pba_runs[processes][0]
    pd.testing.assert_frame_equal(pd.read_parquet(out / "actions.parquet"),
                                  pd.read_parquet(place / "actions.parquet"))
    read = pd.read_parquet(out / "log.parquet").drop(columns=list(TIMING))
    drawn = pd.read_parquet(place / "log.parquet").drop(columns=list(TIMING))
    pd.testing.assert_frame_equal(read, drawn)
    assert read["base_rollouts_on_demand"].fillna(0).eq(0).all()
    a, b = load_file(out / "final" / "model.safetensors"), load_file(place / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def planned_actions(smoke, settings) -> pd.DataFrame:
    """The actions a single process plans for these settings (its sampler and weights)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from boundary.core.settings import resolve
    from boundary.training.gate import read_mask
    from boundary.training.schedule import anchor_weights_for
    from boundary.training.trainer import PBATrainer
    from boundary.training.trainer_config import make_config

    split = pd.read_parquet(smoke / "train.parquet")
    cfg = make_config(resolve("train", settings), 0, str(smoke / "plan_ck"))
    weights = anchor_weights_for(read_mask(smoke / "mask.parquet"), split["prompt_id"].tolist(),
                                 -(-cfg.max_steps // cfg.refresh_steps), "mask")
    data = Dataset.from_dict({"prompt": split["problem"].tolist(), "answer": split["answer"].tolist(),
                              "prompt_id": split["prompt_id"].tolist()})
    trainer = PBATrainer(AutoModelForCausalLM.from_pretrained(smoke / "base"), reward_funcs=lambda **k: [],
                         args=cfg, train_dataset=data, anchor_weights=weights,
                         processing_class=AutoTokenizer.from_pretrained(smoke / "base"))
    trainer._get_train_sampler()
    return trainer.actions()


def test_an_engine_run_in_two_processes_takes_the_one_process_run_s_actions(pba_runs, batch):
    """`rollout_engine: vllm` in 2 processes (gloo; the stand-in engine): PBA on the
    base_rollouts stage's files trains every step, takes the actions of the 1-process `generate`
    run, and each sync's engine scores as the policy."""
    from boundary.training import rollout_engine

    out, text = batch["pba_engine_2proc"]
    assert "in 2 process(es)" in text
    pd.testing.assert_frame_equal(pd.read_parquet(out / "actions.parquet"),
                                  pd.read_parquet(pba_runs[1][0] / "actions.parquet").query("step <= 4"))
    log = pd.read_parquet(out / "log.parquet")
    assert log["step"].tolist() == [1, 2, 3, 4]
    diff = log["engine_logp_mean_abs_diff"].to_numpy()
    assert np.isfinite(diff).all() and (diff > 0).all() and (diff <= rollout_engine.LOGP_TOLERANCE).all()
    assert log["base_rollouts_on_demand"].fillna(0).eq(0).all()


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_in_two_processes(smoke, batch, method):
    """The drop sampler, the policy anchor with a global KL (base scoring of each process's
    rows) and the base anchor (bulk draws without log-probs), in 2 processes, steps 1-4 (the
    support anchor: the PBA runs above)."""
    out, text = batch[f"{method}_2proc"]
    assert "in 2 process(es)" in text
    actions = pd.read_parquet(out / "actions.parquet")
    pd.testing.assert_frame_equal(actions, planned_actions(smoke, method_settings(method)))
    log = pd.read_parquet(out / "log.parquet")
    assert log["step"].tolist() == [1, 2, 3, 4]
    assert np.isfinite(log[["loss", "reward", "grad_norm"]].to_numpy()).all()
    anchored = set(pd.read_parquet(smoke / "mask.parquet").query("weight > 0")["prompt_id"])
    if method == "drop":  # protected prompts are never sampled
        assert not anchored & set(actions["prompt_id"]) and (actions["action"] == "sharpen").all()
    else:
        assert (actions["action"] == "anchor").equals(actions["prompt_id"].isin(anchored))
    if method == "policy_global_kl":
        assert log["kl"].notna().all() and (actions["source"] == "policy").all()
    if method == "base":
        assert log["base_rollouts_on_demand"].fillna(0).eq(0).all()
        assert (actions["source"] == "base").equals(actions["action"] == "anchor")


@pytest.mark.parametrize("anchor", ["policy", "support"])
def test_a_batch_loss_is_the_mean_of_its_halves(model_dir, split, tmp_path, anchor):
    """Two processes each take the loss of half the batch and DDP averages their gradients:
    equal to one process's gradient only if a batch's loss is the mean of its halves' losses
    (every term normalised per process, by its own rows), global KL and anchors included."""
    trainer = make_trainer(model_dir, split, tmp_path, alternate(split), mask="m", anchor=anchor,
                           kl_estimator="k2", beta_a=2.0, beta_kl=0.1, support_floor=1.0)
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    out["advantages"] = torch.linspace(-1, 1, P * G)
    perturb(trainer.model)
    whole = trainer._compute_loss(trainer.model, out)
    half = P * G // 2
    parts = [trainer._compute_loss(trainer.model, {k: v[s] if torch.is_tensor(v) and v.dim() else v
                                                   for k, v in out.items()})
             for s in (slice(0, half), slice(half, None))]
    assert torch.allclose(whole, (parts[0] + parts[1]) / 2, atol=1e-6)


def test_processes_that_cannot_connect_fail_in_one_line_and_write_nothing(smoke, tmp_path):
    """The training processes' communication starts before anything is built: gloo (NCCL on
    GPUs) failing to start is the launch's last line, naming it and the process; no output
    or checkpoint folder is left behind."""
    out, ck = tmp_path / "out", tmp_path / "ck"
    args = ["--model", str(smoke / "base"), "--train-split", str(smoke / "train.parquet"),
            "--settings", json.dumps(smoke_settings("grpo")), "--seed", "0", "--out", str(out),
            "--checkpoint-dir", str(ck), "--processes", "2"]
    run = subprocess.run([sys.executable, "-m", "boundary.cli", "train", *args],
                         env={**env(), "GLOO_SOCKET_IFNAME": "no-such-interface0"},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert run.returncode == 1
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("boundary train: error: train: process 0: GLOO failed to start between the 2 "
                           "training processes on the CPU ("), last
    assert "no-such-interface0" in last
    assert not out.exists() and not ck.exists()
