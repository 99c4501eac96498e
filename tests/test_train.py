"""The PBA trainer: sampler layout, per-prompt actions, where rollouts and frozen-base passes
come from, the loss of each action, the CLI outputs, and resuming a killed job."""

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import benchmark_main, pythonpath, stage_here

from boundary.core.errors import BoundaryError
from boundary.core.settings import resolve
from boundary.stages import train as train_stage
from boundary.stages.train import run_key
from boundary.tasks.testbed import TestbedTask, TinyModelConfig, build_model, build_tokenizer, make_prompts
from boundary.training.anchors import base_cross_entropy, policy_kl, support_floor
from boundary.training.schedule import ActionSampler
from boundary.training.trainer import PBATrainer, length_groups, restorable_on_cpu_processes
from boundary.training.trainer_config import make_config

ROOT = Path(__file__).resolve().parents[1]
TINY = TinyModelConfig(hidden=32, layers=1, heads=2, intermediate=64)
G, P = 4, 4
SETTINGS = dict(steps=4, lr=1e-3, num_generations=G, prompts_per_step=P, max_completion_length=6,
                refresh_steps=2, checkpoints=[2], save_steps=2, bf16="auto")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer()
    build_model(TINY, tok, seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def split():
    return make_prompts(TestbedTask(), {"train": 16})["train"]


def digits_reward(prompts, completions, answer, **kwargs):
    """A cheap stand-in for math-verify in in-process tests."""
    return [float(a in c) for c, a in zip(completions, answer)]


def make_trainer(model_dir, split, tmp_path, weights=None, base_model=None, base_rollouts=None, **method):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = Dataset.from_dict({"prompt": split["problem"].tolist(), "answer": split["answer"].tolist(),
                              "prompt_id": split["prompt_id"].tolist()})
    cfg = make_config(resolve("train", {**SETTINGS, **method}), seed=0, checkpoint_dir=str(tmp_path / "ck"))
    trainer = PBATrainer(AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=digits_reward,
                      args=cfg, train_dataset=data,
                      processing_class=AutoTokenizer.from_pretrained(model_dir),
                      anchor_weights=weights, base_model=base_model, base_rollouts=base_rollouts)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop otherwise
    return trainer


def first_batch(trainer, split):
    """The rollouts of the first P prompts, G each, as TRL's sampler lays them out."""
    trainer.model.train()
    return [trainer.train_dataset[i] for i in range(P) for _ in range(G)]


def alternate(split, epochs=2):
    return np.tile((np.arange(len(split)) % 2).astype(float), (epochs, 1))  # odd rows anchored


# --- sampler ---------------------------------------------------------------------------------

def test_sampler_layout_drop_and_determinism():
    eligible = np.ones((2, 10), dtype=bool)
    eligible[1, :5] = False  # epoch 1 drops prompts 0-4
    sampler = ActionSampler(eligible, prompts_per_step=3, num_generations=2, repeat_count=1,
                            steps=6, refresh_steps=3, seed=0)
    idx = list(sampler)
    assert len(idx) == len(sampler) == 6 * 3 * 2
    assert idx[0::2] == idx[1::2]  # each prompt G times in a row
    batches = list(sampler.batches())
    assert all(len(set(b)) == 3 for b in batches)  # no prompt twice in a step
    assert all(i >= 5 for b in batches[3:] for i in b)  # dropped prompts never drawn
    assert batches == list(sampler.batches())  # a resumed run sees the same batches
    seen = [i for b in batches[:3] for i in b]
    assert len(set(seen)) == 9  # without replacement within a pass


def test_state_saved_by_a_cpu_process_loads_onto_its_indexed_device():
    """A resumed run of several CPU processes: transformers before 5.19 loads the optimizer state
    with map_location "cpu:N", which torch alone refuses; the trainer lets it restore."""
    buf = io.BytesIO()
    torch.save({"exp_avg": torch.arange(3.0)}, buf)
    restorable_on_cpu_processes()
    buf.seek(0)
    state = torch.load(buf, map_location=torch.device("cpu", 1), weights_only=True)
    assert state["exp_avg"].tolist() == [0.0, 1.0, 2.0] and state["exp_avg"].device.type == "cpu"


def test_sampler_refuses_too_few_prompts():
    with pytest.raises(BoundaryError, match="epoch 0"):
        ActionSampler(np.zeros((1, 10), dtype=bool), 3, 2, 1, 4, 2, 0)


# --- actions: rollout source, frozen-base passes, loss ----------------------------------------

def count_base_rows(trainer, decoding=False):
    """The batch width of every forward of the frozen base; with `decoding`, of its one-token
    decode steps only (the rows it samples: a prompt pass runs each distinct prompt once)."""
    rows = []

    def hook(mod, args, kwargs, out):
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        if not decoding or ids.shape[1] == 1:
            rows.append(ids.shape[0])

    trainer.base_model.get_decoder().register_forward_hook(hook, with_kwargs=True)
    return rows


def test_grpo_loads_no_frozen_base(model_dir, split, tmp_path):
    trainer = make_trainer(model_dir, split, tmp_path)
    assert trainer.base_model is None
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    assert "base_per_token_logps" not in out and not out["anchor_weight"].any()


def test_policy_anchor_scores_only_anchored_rows(model_dir, split, tmp_path):
    w = alternate(split)
    trainer = make_trainer(model_dir, split, tmp_path, w, mask="m", anchor="policy", kl_estimator="k2")
    rows = count_base_rows(trainer)
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    anchored = torch.tensor([i % 2 == 1 for i in range(P) for _ in range(G)])
    assert torch.equal(out["anchor_weight"] > 0, anchored) and not out["from_base"].any()
    assert sum(rows) == int(anchored.sum())  # the base ran on the anchored rows only
    assert out["base_per_token_logps"][~anchored].abs().sum() == 0


def test_sharded_the_base_scores_every_row_whenever_a_process_needs_it(model_dir, split, tmp_path):
    """Under FSDP a forward of the sharded base is a collective: each process scores its whole
    batch (the same calls everywhere), and the anchored rows get the values the unsharded
    trainer gives them; a batch with no anchored row on any process makes no base call."""
    w = alternate(split)
    plain = make_trainer(model_dir, split, tmp_path / "plain", w, mask="m", anchor="policy", kl_estimator="k2")
    out = plain._generate_and_score_completions(first_batch(plain, split))
    need = out["anchor_weight"] > 0
    expected = plain._base_logps(out, need, [None] * len(need))
    plain._sharded = True  # what FSDP sets; one process: the any-process flag is this one's
    rows = count_base_rows(plain)
    sharded = plain._base_logps(out, need, [None] * len(need))
    assert rows == [P * G]  # the whole batch, not its anchored half
    assert torch.allclose(sharded[need], expected[need], atol=1e-6) and sharded[~need].abs().sum() == 0
    rows.clear()
    plain._base_logps(out, torch.zeros_like(need), [None] * len(need))
    assert rows == []


def test_sharded_base_sampled_anchors_need_pre_drawn_rollouts(model_dir, split, tmp_path):
    """Drawn in place, the sharded base's generate calls would differ between processes:
    refused in one line naming the method's anchor (the policy anchor trains)."""
    with pytest.raises(BoundaryError, match=r"^method with anchor support: under train.sharding fsdp its base "
                                            r"rollouts must be pre-drawn"):
        make_trainer(model_dir, split, tmp_path, alternate(split), mask="m", anchor="support", sharding="fsdp")
    trainer = make_trainer(model_dir, split, tmp_path, alternate(split), mask="m", anchor="policy", sharding="fsdp")
    assert trainer.args.sharding == "fsdp" and not trainer._sharded  # one CPU process: nothing to shard


@pytest.mark.parametrize("anchor", ["base", "support"])
def test_base_sampled_anchors_draw_anchored_rollouts_from_the_base(model_dir, split, tmp_path, anchor):
    w = alternate(split)
    trainer = make_trainer(model_dir, split, tmp_path, w, mask="m", anchor=anchor, beta_a=10.0)
    rows = count_base_rows(trainer, decoding=True)
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    anchored = torch.tensor([i % 2 == 1 for i in range(P) for _ in range(G)])
    assert torch.equal(out["from_base"], anchored)
    if anchor == "base":
        assert "base_per_token_logps" not in out  # cross-entropy needs no base log-probs
    else:  # the floor reads the base's log-probs of its own rollouts
        assert torch.equal(out["base_scored"], anchored)
        assert out["base_per_token_logps"][~anchored].abs().sum() == 0
    # Off the sampler's schedule: drawn (and scored) on the spot, anchored rows only.
    assert rows and set(rows) == {int(anchored.sum())}


def scheduled_batch(trainer, step):
    trainer.state.global_step = step
    return [trainer.train_dataset[i] for i in trainer._batches[step] for _ in range(G)]


def test_base_anchor_draws_an_epochs_rollouts_in_bulk(model_dir, split, tmp_path):
    w = alternate(split)
    make = lambda: make_trainer(model_dir, split, tmp_path, w, mask="m", anchor="base", beta_a=10.0,
                                base_generation_batch_size=1000)
    trainer = make()
    trainer._get_train_sampler()
    rows = count_base_rows(trainer, decoding=True)
    trainer.model.train()
    epoch = [trainer._batches[s] for s in range(SETTINGS["refresh_steps"])]
    expected = sum(r % 2 == 1 for b in epoch for r in b) * G
    out0 = trainer._generate_and_score_completions(scheduled_batch(trainer, 0))
    assert set(rows) == {expected}  # one generate call for both steps' anchored rows
    rows.clear()
    out1 = trainer._generate_and_score_completions(scheduled_batch(trainer, 1))
    assert rows == []  # step 1 uses the epoch's draws: the base does not run
    for step, out in enumerate((out0, out1)):
        anchored = torch.tensor([r % 2 == 1 for r in trainer._batches[step] for _ in range(G)])
        assert torch.equal(out["from_base"], anchored)
    assert trainer._metrics["train"]["base_rollouts_on_demand"] == [0, 0]
    # Seeded by the epoch: another trainer (a resumed job) draws the same base rollouts.
    torch.manual_seed(123)
    again = make()
    again._get_train_sampler()
    again.model.train()
    redo = again._generate_and_score_completions(scheduled_batch(again, 1))
    base = out1["from_base"]
    assert torch.equal(redo["completion_ids"][base], out1["completion_ids"][base])


@pytest.mark.parametrize("bulk", [True, False])
def test_support_anchor_reads_base_logps_off_the_draw(model_dir, split, tmp_path, bulk):
    """Base rollouts carry the base's log-probs from their own generate call, drawn in bulk or
    on demand: no scoring pass, and the same values a fresh base forward gives."""
    w = alternate(split)
    trainer = make_trainer(model_dir, split, tmp_path, w, mask="m", anchor="support", beta_a=10.0,
                           base_generation_batch_size=1000, temperature=0.7)
    if bulk:
        trainer._get_train_sampler()
    score_with_base = trainer._score_with_base
    trainer._score_with_base = lambda *a: pytest.fail("base rollouts were scored in a second pass")
    trainer.model.train()
    batch = scheduled_batch(trainer, 1) if bulk else first_batch(trainer, split)
    out = trainer._generate_and_score_completions(batch)
    assert trainer._metrics["train"]["base_rollouts_on_demand"][-1] == (0 if bulk else out["from_base"].sum())
    anchored = out["from_base"]
    assert anchored.any() and torch.equal(out["base_scored"], anchored)
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)[anchored]
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)[anchored]
    with torch.no_grad():
        fresh = score_with_base(ids, attn, out["completion_ids"].size(1))
    mask = out["completion_mask"][anchored].bool()
    assert torch.allclose(out["base_per_token_logps"][anchored][mask], fresh[mask], atol=1e-5)


def perturb(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))


@pytest.mark.parametrize("anchor,estimator", [("policy", "k1"), ("policy", "k3"), ("base", "k2"),
                                              ("support", "k2")])
def test_all_anchored_loss_is_the_anchor(model_dir, split, tmp_path, anchor, estimator):
    trainer = make_trainer(model_dir, split, tmp_path, np.ones((2, len(split))), mask="m",
                           anchor=anchor, kl_estimator=estimator, beta_a=2.0, support_floor=1.0)
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    perturb(trainer.model)
    loss = trainer._compute_loss(trainer.model, out)
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attn, out["completion_ids"].size(1))
    if anchor == "base":
        a = base_cross_entropy(logps, out["completion_mask"])
    elif anchor == "support":  # a floor of 1: every base token the policy has less of
        a = support_floor(logps, out["base_per_token_logps"], out["completion_mask"], 1.0)
        assert a.gt(0).any()
    else:
        a = policy_kl(logps, out["base_per_token_logps"], out["completion_mask"], estimator)
    assert torch.allclose(loss, 2.0 * a.mean(), atol=1e-5)


def test_unanchored_loss_is_trl_grpo(model_dir, split, tmp_path):
    from trl import GRPOTrainer

    trainer = make_trainer(model_dir, split, tmp_path, np.zeros((2, len(split))), mask="m",
                           anchor="policy")
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    out["advantages"] = torch.linspace(-1, 1, len(out["advantages"]))
    perturb(trainer.model)
    ours = trainer._compute_loss(trainer.model, out)
    trl = GRPOTrainer._compute_loss(trainer, trainer.model, out)
    assert torch.allclose(ours, trl)


def test_config_errors(tmp_path):
    with pytest.raises(BoundaryError, match="anchor"):
        make_config(resolve("train", {**SETTINGS, "anchor": "both"}), 0, str(tmp_path))
    with pytest.raises(BoundaryError, match="kl_estimator"):
        make_config(resolve("train", {**SETTINGS, "kl_estimator": "k4"}), 0, str(tmp_path))
    with pytest.raises(BoundaryError, match="unknown key"):
        make_config(resolve("train", {**SETTINGS, "learning_rate": 1e-3}), 0, str(tmp_path))
    cfg = make_config(resolve("train", SETTINGS), 0, str(tmp_path))
    assert cfg.loss_type == "grpo" and cfg.per_device_train_batch_size == P * G
    assert cfg.lr_scheduler_type == "cosine" and cfg.max_grad_norm == 1.0 and cfg.beta == 0.0
    assert cfg.bf16 == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert cfg.gradient_checkpointing == torch.cuda.is_available()
    assert cfg.sharding == "ddp" and not cfg.fsdp  # the schema's default
    with pytest.raises(BoundaryError, match="sharding: 'zero3' is not one of"):
        make_config(resolve("train", {**SETTINGS, "sharding": "zero3"}), 0, str(tmp_path))


def test_fsdp_settings_map_onto_accelerate_s_fsdp2_plugin(tmp_path):
    """train.sharding fsdp in several GPU processes: TrainingArguments' FSDP2 settings (decoder
    layers as units, resharded after forward, FSDP's own activation checkpointing, sharded
    checkpoints); in one process or on the CPU nothing is sharded."""
    from boundary.training.sharding import config_args

    args = config_args("fsdp", True)
    assert args["fsdp"] is True and args["gradient_checkpointing"] is False
    assert args["fsdp_config"] == {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                   "reshard_after_forward": True, "activation_checkpointing": True,
                                   "state_dict_type": "SHARDED_STATE_DICT", "cpu_ram_efficient_loading": False}
    assert config_args("ddp", True) == {"gradient_checkpointing": True}
    cfg = make_config(resolve("train", {**SETTINGS, "sharding": "fsdp"}), 0, str(tmp_path))  # one process
    assert cfg.sharding == "fsdp" and not cfg.fsdp


# --- the CLI: outputs, and a killed job resumes ------------------------------------------------

def cli(args, **kwargs):
    env = {**os.environ, "PYTHONPATH": pythonpath(), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "boundary.cli", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def test_a_micro_batch_whose_logits_cannot_fit_the_gpu_is_refused_with_the_accumulation_that_fits():
    """A 1.5B config before gradient_accumulation_steps: 256 completions of 1,024 tokens in
    one micro-batch, Qwen2.5's 151,936-token vocabulary: 159 GB of bf16 logits and gradient on a
    141 GB H200. The hint keeps them to a quarter of it: 8 micro-batches of 32."""
    from types import SimpleNamespace

    from boundary.training.trainer_config import check_micro_batch

    h200, vocab = 141 * 10**9, 151_936
    cfg = SimpleNamespace(per_device_train_batch_size=256, max_completion_length=1024, bf16=True,
                          gradient_accumulation_steps=1)
    with pytest.raises(BoundaryError, match=r"^train.gradient_accumulation_steps: 1: a micro-batch of 256 "
                                            r"completions of up to 1024 tokens needs 148 GiB .* set it to 8$"):
        check_micro_batch(cfg, vocab, h200)
    check_micro_batch(SimpleNamespace(**{**vars(cfg), "per_device_train_batch_size": 32,
                                         "gradient_accumulation_steps": 8}), vocab, h200)
    small = SimpleNamespace(**{**vars(cfg), "per_device_train_batch_size": 1, "max_completion_length": 10**6})
    with pytest.raises(BoundaryError, match="cut max_completion_length$"):
        check_micro_batch(small, vocab, h200)


def test_killed_training_resumes_from_its_last_checkpoint(model_dir, split, tmp_path, capsys):
    split.to_parquet(tmp_path / "train.parquet")
    mask = pd.DataFrame([{"prompt_id": p, "epoch": e, "weight": float(i % 2),
                          "action": "anchor" if i % 2 else "sharpen"}
                         for i, p in enumerate(split["prompt_id"]) for e in range(4)])
    mask.to_parquet(tmp_path / "mask.parquet")
    settings = {**SETTINGS, "steps": 12, "refresh_steps": 4, "save_steps": 2, "checkpoints": [4],
                "mask": "pba", "anchor": "base", "beta_a": 10.0}
    ck, out = tmp_path / "ck", tmp_path / "out"
    args = ["--model", str(model_dir), "--train-split", str(tmp_path / "train.parquet"),
            "--mask", str(tmp_path / "mask.parquet"), "--settings", json.dumps(settings),
            "--seed", "0", "--out", str(out), "--checkpoint-dir", str(ck)]
    first = cli(args, start_new_session=True)
    deadline = time.time() + 120
    while not list(ck.glob("*/checkpoint-6/trainer_state.json")):
        assert first.poll() is None, first.stdout.read()
        assert time.time() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # the job and its verifier workers
    first.wait()
    assert not (out / "final").exists()

    # The rerun: the train stage's own code in this process (the kill needed a process; the
    # resume reads the files it left, whatever runs it).
    capsys.readouterr()
    with stage_here():
        train_stage.run(args)
    log_text = capsys.readouterr().out
    resumed = [line for line in log_text.splitlines() if "resuming from" in line]
    assert resumed, log_text
    step = int(resumed[0].rsplit("checkpoint-", 1)[1].split(";")[0])
    assert 6 <= step < 12
    assert resumed[0].split("resuming from ")[1].startswith(str(ck / ""))
    log = pd.read_parquet(out / "log.parquet")
    assert log["step"].tolist() == list(range(1, 13))  # history before the kill survives
    assert {"loss", "reward", "protected_fraction", "anchor_loss"} <= set(log.columns)
    assert (out / "step4" / "config.json").exists()  # saved before the kill, kept outside out/
    assert (out / "final" / "model.safetensors").exists()
    assert (out / "final" / "tokenizer.json").exists()
    assert not list(ck.iterdir())  # finished: its checkpoints removed (the outputs hold the run)


@pytest.mark.parametrize("keep", [False, True])
def test_the_last_step_writes_no_resumable_checkpoint_unless_checkpoints_are_kept(model_dir, split, tmp_path, keep):
    """A finished run removes its checkpoints, so its last step saves none (save_steps 2 of 4
    steps: step 2 only); with --keep-checkpoints the last step's checkpoint is written and kept."""
    from transformers import TrainerCallback

    from boundary.stages.train import train

    class Saves(TrainerCallback):
        def __init__(self):
            self.steps = []

        def on_save(self, args, state, control, **kwargs):
            self.steps.append(state.global_step)

    saves = Saves()
    settings = {**SETTINGS, "checkpoints": [], "verify_workers": 1}
    train(model_dir, split, settings, 0, tmp_path / "out", tmp_path / "ck", callbacks=[saves], keep_checkpoints=keep)
    assert saves.steps == ([2, 4] if keep else [2])
    assert (tmp_path / "out" / "final" / "config.json").exists()
    kept = sorted(p.name for p in (tmp_path / "ck").glob("*/checkpoint-*"))
    assert kept == (["checkpoint-2", "checkpoint-4"] if keep else [])


def test_run_key_changes_with_every_input_the_run_is_trained_from(model_dir, split, tmp_path,
                                                                  monkeypatch):
    """A job resumes only its own key's checkpoints: a changed gate (mask weights), base,
    prompts, settings, seed or process count starts afresh instead of resuming a stale run."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    prompts = {"prompt": split["problem"].tolist(), "answer": split["answer"].tolist(),
               "prompt_id": split["prompt_id"].tolist()}
    w = alternate(split)
    key = run_key(model_dir, SETTINGS, 0, prompts, w)
    assert key == run_key(model_dir, dict(reversed(SETTINGS.items())), 0, prompts, w.copy())
    other_base = tmp_path / "base"
    shutil.copytree(model_dir, other_base)
    assert key == run_key(other_base, SETTINGS, 0, prompts, w)  # by content, not by path
    (other_base / "config.json").write_text((other_base / "config.json").read_text() + " ")
    changed = [run_key(other_base, SETTINGS, 0, prompts, w),
               run_key(model_dir, {**SETTINGS, "lr": 2e-3}, 0, prompts, w),
               run_key(model_dir, SETTINGS, 1, prompts, w),
               run_key(model_dir, SETTINGS, 0, {**prompts, "answer": prompts["answer"][::-1]}, w),
               run_key(model_dir, SETTINGS, 0, prompts, 1.0 - w),
               run_key(model_dir, SETTINGS, 0, prompts, None)]
    monkeypatch.setenv("WORLD_SIZE", "2")  # a worker of 2 processes (here with train.gpus 0)
    changed.append(run_key(model_dir, SETTINGS, 0, prompts, w))
    monkeypatch.delenv("WORLD_SIZE")
    from boundary.core import sources

    code = tmp_path / "boundary"  # the code the stage runs, as a copy we can edit
    shutil.copytree(sources.PACKAGE, code, ignore=shutil.ignore_patterns("__pycache__"))
    copies = [code / path.relative_to(sources.PACKAGE) for path in train_stage.code_files()]
    monkeypatch.setattr(train_stage, "code_files", lambda: copies)
    assert run_key(model_dir, SETTINGS, 0, prompts, w) == key
    anchors = code / "training" / "anchors.py"
    anchors.write_text(anchors.read_text() + "# changed\n")
    changed.append(run_key(model_dir, SETTINGS, 0, prompts, w))
    assert key not in changed and len(set(changed)) == len(changed)


def _step_time_rows(stdout: str) -> dict[str, list[str]]:
    """The benchmark's table rows by method (the line after the header starts with 'method')."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["method"])
    return {line.split()[0]: line.split() for line in lines[header + 1:] if line.strip()}


def step_time_benchmark(monkeypatch, capsys, *argv) -> str:
    return benchmark_main(monkeypatch, capsys, "gpu_step_time", *argv)


def test_the_gpu_step_time_benchmark_runs_at_toy_scale(monkeypatch, capsys):
    """benchmarks/gpu_step_time.py (the GPU benchmark) on CPU, tiny random Qwen2, so it cannot rot."""
    out = step_time_benchmark(monkeypatch, capsys, "--steps", "3", "--refresh", "2", "--warmup", "0", "--rounds", "1",
                              "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate",
                              "64", "--vocab", "64", "--prompts", "2", "--G", "2", "--prompt-len", "4",
                              "--completion-len", "4", "--methods", "grpo,pba_support")
    rows = _step_time_rows(out)
    assert set(rows) == {"grpo", "pba_support"}, out
    assert rows["grpo"][-2:] == ["1.000", "1.000"]  # its own ratios


def test_the_gpu_step_time_benchmark_takes_a_model_folder_and_a_study_config(model_dir, split, tmp_path, monkeypatch,
                                                                               capsys):
    """--model (a saved folder, as import-base writes), --config (the study's train settings and
    methods) and --split (the pipeline's train prompts): the config's methods are timed."""
    split.to_parquet(tmp_path / "train.parquet")
    out = step_time_benchmark(monkeypatch, capsys, "--model", model_dir, "--config", "config/smollm2_smoke.yaml",
                              "--split", tmp_path / "train.parquet", "--steps", "3", "--refresh", "2", "--warmup", "0",
                              "--rounds", "1")
    assert "2 prompts x G=2, split prompts + 24 tokens" in out  # the smoke config's train section
    assert "amortised over R=2" in out  # its gate.refresh_steps
    assert set(_step_time_rows(out)) == {"grpo", "pba"}


# ---- the TRL contract ------------------------------------------------------------------------

def test_the_trl_pin_is_written_once_and_matches_pyproject():
    from boundary.training import trl_pin

    pins = re.findall(r'"trl==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pins == [trl_pin.PINNED] and trl_pin.installed() == trl_pin.PINNED


def test_another_trl_is_refused_in_one_line_at_import_of_the_trainer(monkeypatch):
    import importlib
    from importlib import metadata

    from boundary.training import trl_pin

    monkeypatch.setattr(metadata, "version", lambda name: "1.17.0" if name == "trl" else metadata.version(name))
    with pytest.raises(BoundaryError) as err:
        importlib.reload(trl_pin)  # what importing trainer.py runs first
    line = str(err.value)
    assert "TRL 1.17.0 is installed" in line and f"trl=={trl_pin.PINNED}" in line and "\n" not in line
    monkeypatch.undo()
    importlib.reload(trl_pin)
    source = (ROOT / "workflow" / "boundary" / "training" / "trainer.py").read_text()
    assert source.index("import trl_pin") < source.index("from trl import")


# --- the logged KL to the base (train.log_base_kl) ----------------------------------------------

def hand_logps(model, out):
    """Per-token log-probs of the completions, from the model's plain logits (temperature 1)."""
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    T = out["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, -T - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, out["completion_ids"][..., None])[..., 0]


def test_log_base_kl_is_the_token_kl_of_every_policy_rollout(model_dir, split, tmp_path):
    """GRPO with log_base_kl holds the frozen copy, scores every policy rollout with it, and
    logs k1 and k3 from the training forward's log-probs once a step, after its last
    micro-batch: the mean over the step's completion tokens. No term reads the base's log-probs,
    so the `kl` metric (the terms' rows) stays unlogged."""
    from trl.trainer.utils import split_tensor_dict

    trainer = make_trainer(model_dir, split, tmp_path, log_base_kl=True, gradient_accumulation_steps=2)
    assert trainer.base_model is not None
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    assert "base_per_token_logps" in out and not out["base_scored"].any()
    perturb(trainer.model)
    metrics = trainer._metrics["train"]
    first, second = split_tensor_dict(out, 2)
    trainer._compute_loss(trainer.model, first)
    assert "kl_base_k1" not in metrics  # the step's first micro-batch of two
    trainer._compute_loss(trainer.model, second)
    r = hand_logps(trainer.base_model, out) - hand_logps(trainer.model, out)  # log pi_base - log pi
    mask = out["completion_mask"].float()

    def token_mean(per_token):
        return ((per_token * mask).sum() / mask.sum()).item()

    assert metrics["kl_base_k1"] == [pytest.approx(token_mean(-r), abs=1e-5)]
    assert metrics["kl_base_k3"] == [pytest.approx(token_mean(r.exp() - 1 - r), abs=1e-5)]
    assert metrics["kl_base_k3"][0] > 0.01 and "kl" not in metrics


@pytest.mark.parametrize("adapter,every", [(False, 2), (True, 1)])
def test_a_grpo_run_with_log_base_kl_logs_the_kl_columns(model_dir, split, tmp_path, adapter, every):
    """The log rows of steps N, 2N, ... have kl_base_k1 and kl_base_k3; under LoRA the base is
    the policy with its adapter off (no second model): step 1, before any update, has KL 0."""
    from boundary.stages.train import log_table

    lora = {"lora": {"enabled": True, "rank": 4}} if adapter else {}
    trainer = make_trainer(model_dir, split, tmp_path, log_base_kl=True, log_base_kl_every=every, steps=2,
                           checkpoints=[], save_steps=4, **lora)
    assert (trainer.base_model is None) == adapter
    rows = [] if adapter else count_base_rows(trainer)
    trainer.train()
    assert rows == ([] if adapter else [P * G])  # the copy ran once: step 2's rollouts
    log = log_table(trainer.state.log_history)
    assert list(log["step"]) == [1, 2] and log["kl"].isna().all()
    for col in ("kl_base_k1", "kl_base_k3"):
        assert np.isfinite(log[col].iloc[1])
        if every == 1:
            assert abs(log[col].iloc[0]) < 1e-5
        else:
            assert log[col].isna().iloc[0]


def test_k1_terms_score_the_base_on_their_value_steps_only(model_dir, split, tmp_path):
    """kl_value_every 2 with the policy anchor k1: the base scores step 2's rollouts only, the
    anchor's value is logged on step 2 only, and the weights are those of a run that scores the
    base every step (k1's gradient, grad log pi, does not read it)."""
    from boundary.stages.train import log_table

    runs = {}
    for every in (1, 2):
        trainer = make_trainer(model_dir, split, tmp_path / str(every), alternate(split), mask="m",
                               anchor="policy", kl_value_every=every, steps=2, checkpoints=[], save_steps=4)
        steps = []
        trainer.base_model.get_decoder().register_forward_hook(
            lambda *_: steps.append(trainer.state.global_step + 1))
        trainer.train()
        runs[every] = (sorted(set(steps)), log_table(trainer.state.log_history),
                       {n: p.detach().clone() for n, p in trainer.model.named_parameters()})
    (scored1, log1, weights1), (scored2, log2, weights2) = runs[1], runs[2]
    assert scored1 == [1, 2] and scored2 == [2]
    for col in ("anchor_loss", "kl"):
        assert log1[col].notna().all() and log2[col].isna().tolist() == [True, False]
        assert log2[col].iloc[1] == pytest.approx(log1[col].iloc[1], rel=1e-4, abs=1e-6)
    assert list(log1["reward"]) == pytest.approx(list(log2["reward"]))
    for name, w in weights1.items():
        torch.testing.assert_close(weights2[name], w, rtol=1e-5, atol=1e-7, msg=name)


def test_kl_value_every_is_refused_where_a_gradient_reads_the_base():
    """A config gives it only beside k1 terms (test_config.py); settings made without the config
    are refused by the trainer's config."""
    from boundary.training.trainer_config import make_config

    at = {**SETTINGS, "mask": "m", "kl_value_every": 2}
    settings = resolve("train", {**at, "anchor": "policy"})
    assert make_config(settings, 0, "ck").kl_value_every == 2
    for change in ({"anchor": "support"}, {"kl_estimator": "k2"}):  # settings made without the schema
        with pytest.raises(BoundaryError, match="kl_value_every: 2 needs kl_estimator k1"):
            make_config({**settings, **change}, 0, "ck")
    from boundary.core import settings as stage_settings

    before = resolve("train", {**SETTINGS, "mask": "m", "anchor": "policy"})
    assert "kl_value_every" not in stage_settings.key("train", before)  # 1, the default: no run's key moves


def test_length_groups_cut_right_padding_within_a_micro_batch_s_tokens():
    assert length_groups([7] * 5, 3, 2 * 10) == [[0, 1], [2, 3], [4]]  # equal lengths: the uncut micro-batches
    groups = length_groups([2, 9, 0, 5, 9, 1], 3, 24)
    assert groups == [[1, 4], [3, 0, 5], [2]]  # longest first; 2 x 12 and 3 x 8 tokens; an empty row alone
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert length_groups([50], 3, 10) == [[0]]  # a row longer than the budget still gets its forward


@pytest.mark.parametrize("adapter", [False, True])
def test_the_base_scores_each_row_as_an_uncut_forward_does(model_dir, split, tmp_path, adapter):
    """Rows grouped by length and cut to each group's longest completion give the uncut
    micro-batch's log-probs on every completion token, zeros past a row's end, in fewer tokens."""
    lora = {"lora": {"enabled": True, "rank": 4}} if adapter else {}
    trainer = make_trainer(model_dir, split, tmp_path, alternate(split), mask="m", anchor="policy", **lora)
    model = trainer.model if adapter else trainer.base_model
    gen = torch.Generator().manual_seed(0)
    N, P, T = 12, 5, 16
    lengths = torch.tensor([11, 3, 0, 9, 12, 1, 12, 7, 5, 10, 2, 8])  # none reaches T: all right padding
    ids = torch.randint(3, model.config.vocab_size, (N, P + T), generator=gen)
    attn = torch.cat([torch.ones(N, P, dtype=torch.long), (torch.arange(T) < lengths[:, None]).long()], 1)
    attn[:3, :2] = 0  # left-padded prompts
    tokens = []
    model.get_decoder().register_forward_hook(lambda mod, args, kw, out: tokens.append(kw["input_ids"].numel()),
                                              with_kwargs=True)
    trainer.model.eval()
    with torch.no_grad():
        cut = trainer._score_with_base(ids, attn, T)
        cut_tokens, tokens[:] = sum(tokens), []
        from boundary.training import lora as lora_module

        off = lora_module.base_of(trainer.accelerator.unwrap_model(trainer.model)) if adapter else nullcontext()
        with off:
            whole, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, T, batch_size=N)
    mask = attn[:, P:].bool()
    torch.testing.assert_close(cut[mask], whole[mask].float(), rtol=1e-4, atol=1e-5)
    assert (cut[~mask] == 0).all()
    assert cut_tokens < sum(tokens) == N * (P + T)


def test_log_base_kl_off_moves_no_key():
    from boundary.core import settings as stage_settings

    before = stage_settings.key("train", resolve("train", SETTINGS))
    assert "log_base_kl" not in before
    assert stage_settings.key("train", resolve("train", {**SETTINGS, "log_base_kl": False})) == before
    on = stage_settings.key("train", resolve("train", {**SETTINGS, "log_base_kl": True}))
    assert on == {**before, "log_base_kl": True, "log_base_kl_every": 1}
    assert not make_config(resolve("train", SETTINGS), 0, "ck").log_base_kl


def test_the_report_s_kl_panel_shows_the_logged_kl_to_the_base(tmp_path, monkeypatch):
    """GRPO logs no `kl`; with log_base_kl its kl_base_k1 is the panel's curve for every method."""
    from boundary.analysis import figures, tables

    drawn = {}
    monkeypatch.setattr(figures, "save", lambda fig, folder, name: drawn.update({name: fig}) or [])
    logs = pd.DataFrame({"method": ["grpo"] * 3 + ["pba"] * 3, "seed": 0, "step": [1, 2, 3] * 2, "reward": 0.5,
                         "entropy": 1.0, "kl": [np.nan] * 3 + [0.5] * 3,
                         "kl_base_k1": [0.1, np.nan, 0.2, 0.3, np.nan, 0.4], "protected_fraction": 0.0})
    figures.training_curves(logs, tables.View.for_diagnose(["grpo", "pba"]), tmp_path)
    kl = drawn["training"].axes[2]  # log_base_kl_every 2: the logged steps, joined
    assert [list(line.get_xdata()) for line in kl.get_lines()] == [[1, 3], [1, 3]]
    assert [list(line.get_ydata()) for line in kl.get_lines()] == [[0.1, 0.2], [0.3, 0.4]]
