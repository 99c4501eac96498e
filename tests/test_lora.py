"""LoRA training (`train.lora`, training/lora.py): the key, every method trained with an adapter,
the base scored and sampled as the policy with its adapter off (no copy), the engine's merged
weights computed beside a base that is never written, adapter-only outputs and checkpoints,
a killed run resumed, and a SIGTERM that ends a run at a step boundary with "resume me"."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import ROOT, pythonpath, stage_here
from standin_engine import StandInEngine
from test_train import SETTINGS, alternate, first_batch, make_trainer, model_dir, split  # noqa: F401

from boundary.core import settings as stage_settings
from boundary.core.config import validate_config
from boundary.core.settings import resolve
from boundary.stages import train as train_stage
from boundary.training import lora, rollout_engine
from boundary.training.launch import RESUME_ME

LORA = {"enabled": True, "rank": 4}
RAW = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
SMOKE = validate_config(RAW)


# --- the key ----------------------------------------------------------------------------------

def keys(config) -> dict:
    return {m: stage_settings.train_key(config, m) for m in config["methods"] if not config["methods"][m]["checkpoint_of"]}


def test_lora_off_moves_no_key_and_on_moves_only_the_lora_runs():
    before = keys(SMOKE)
    for off in ({}, {"enabled": False}, {"enabled": False, "rank": 8}):
        config = validate_config({**RAW, "train": {**RAW["train"], **({"lora": off} if off else {})}})
        assert keys(config) == before
    config = validate_config({**RAW, "train": {**RAW["train"], "lora": {"enabled": True}}})
    after = keys(config)
    full = {**stage_settings.defaults("train.lora"), "enabled": True}  # every default filled
    own = {m for m, spec in RAW["methods"].items() if spec.get("lora")}  # the smoke's pba_lora: its own section
    assert own and all(after[m] == (before[m] if m in own else {**before[m], "lora": full}) for m in before)
    # A method's own section replaces train.lora for its runs; the others keep theirs.
    methods = {m: dict(s) for m, s in RAW["methods"].items()}
    methods["pba"]["lora"] = {"enabled": True, "rank": 8}
    config = validate_config({**RAW, "methods": methods, "train": {**RAW["train"], "lora": {"alpha": 16}}})
    after = keys(config)
    assert after["pba"]["lora"] == {**full, "rank": 8}
    assert all(after[m] == before[m] for m in before if m != "pba")
    assert resolve("train", after["pba"])["lora"] == {**full, "rank": 8}
    assert lora.peft_config(full).target_modules == "all-linear"


def test_a_bad_lora_key_is_one_line():
    from boundary.core.errors import BoundaryError

    with pytest.raises(BoundaryError, match="train.lora.rank"):
        validate_config({**RAW, "train": {**RAW["train"], "lora": {"enabled": True, "rank": 0}}})
    with pytest.raises(BoundaryError, match="unknown key 'train.lora.r'"):
        validate_config({**RAW, "train": {**RAW["train"], "lora": {"r": 4}}})


# --- every method with an adapter; the base is the policy with its adapter off ------------------

METHODS = {
    "grpo": {},
    "policy_k1": {"mask": "m", "anchor": "policy", "kl_estimator": "k1"},
    "policy_k3": {"mask": "m", "anchor": "policy", "kl_estimator": "k3"},
    "base": {"mask": "m", "anchor": "base"},
    "support": {"mask": "m", "anchor": "support"},
    "forward_kl": {"mask": "m", "anchor": "forward_kl"},
    "js": {"mask": "m", "anchor": "js"},
    "global_kl": {"beta_kl": 0.05},
    "drop": {"mask": "m", "masked_action": "drop"},
    "w_reinforce": {"advantage": "reinforce"},
    "passk": {"advantage": "passk", "passk_k": 2},
    "kl_cov": {"cov_select": "kl", "unlikeliness": 0.5},
}


def some_correct(prompts, completions, **kwargs):
    """A fixed pseudo-random reward, ~40% correct: groups with a spread, so every method has a
    gradient (the digits reward is 0 on an untrained model)."""
    import hashlib

    return [float(hashlib.md5(c.encode()).digest()[0] < 100) for c in completions]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_trains_an_adapter_and_holds_no_second_model(name, model_dir, split, tmp_path):
    method = METHODS[name]
    weights = alternate(split) if method.get("mask") else None  # random protection is such a mask
    trainer = make_trainer(model_dir, split, tmp_path, weights, lora=LORA, steps=3, **method)
    trainer.reward_funcs[0] = some_correct
    assert trainer.lora and trainer.base_model is None
    model = trainer.accelerator.unwrap_model(trainer.model)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    adapter = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert adapter and all("lora_" in n for n in adapter)
    trainer.train()
    log = [h for h in trainer.state.log_history if "loss" in h]
    assert len(log) == 3 and all(np.isfinite(h["loss"]) for h in log)
    moved = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, adapter[n])]
    assert moved  # the adapter trained
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if not p.requires_grad)
    if method.get("anchor") in ("policy", "forward_kl", "js") or method.get("beta_kl"):  # support: 0 at the start
        assert any(h.get("kl") for h in log) or any(h.get("anchor_loss") for h in log)


def test_the_base_scores_and_samples_as_the_loaded_base_with_no_copy(model_dir, split, tmp_path):
    """With a trained (non-zero) adapter, the base log-probs the anchors read are those of the
    base model loaded on its own, and base rollouts drawn in place are the base's draws."""
    from transformers import AutoModelForCausalLM

    from boundary.training import base_rollouts

    trainer = make_trainer(model_dir, split, tmp_path, alternate(split), lora=LORA, mask="m", anchor="policy")
    with torch.no_grad():  # a trained adapter: B is zero at the start
        for n, p in trainer.model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.3)
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    T = out["completion_ids"].size(1)
    with torch.no_grad():
        got = trainer._score_with_base(ids, attn, T)
        policy, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, T)
    assert trainer.model.training  # put back after the base's pass
    base = AutoModelForCausalLM.from_pretrained(model_dir).eval().requires_grad_(False)
    with torch.no_grad():  # the base loaded on its own, at the rollouts' temperature (1)
        logits = base(input_ids=ids, attention_mask=attn).logits[:, -T - 1:-1].float()
        want = torch.log_softmax(logits, -1).gather(-1, out["completion_ids"][..., None])[..., 0]
    mask = out["completion_mask"].bool()
    assert torch.allclose(got[mask], want[mask], atol=1e-5)
    assert not torch.allclose(policy[mask], want[mask], atol=1e-3)  # the adapter did move the policy
    # Base rollouts drawn in place: the same draws as the loaded base's (same seed, same prompts).
    prompts = base_rollouts.tokenize(trainer.processing_class, split["problem"].tolist()[:3])
    drawn = trainer._base_sampler()(prompts, 7)
    trainer.lora, trainer.base_model = False, base  # the full fine-tuning path's frozen copy
    plain = trainer._base_sampler()(prompts, 7)
    assert [c.tokens for c in drawn] == [c.tokens for c in plain]
    assert np.allclose(np.concatenate([c.logps for c in drawn]), np.concatenate([c.logps for c in plain]), atol=1e-5)


# --- the engine's weights: merged beside the base, never into it -------------------------------

def peft_model(model_dir, dtype=torch.float32, seed=0):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir).to(dtype),
                           lora.peft_config(resolve("train", {**SETTINGS, "lora": LORA})["lora"]))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a trained adapter: B is zero at the start
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


def test_merged_weights_are_peft_s_merge_and_the_base_is_never_written(model_dir, split):
    """In bf16, the base as loaded: after 50 syncs (the adapter moving between them) every base
    weight is bit for bit what it was, while TRL's merge-and-unmerge round trip moves it; each
    sync sends what peft's merge gives, and the engine check passes."""
    from transformers import AutoTokenizer

    model = peft_model(model_dir, torch.bfloat16)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = tok(text=split["problem"].tolist()[:5])["input_ids"]
    engine = StandInEngine(model.get_base_model())
    records = {}
    sequences, starts = rollout_engine.check_sequences(prompt_ids)
    sync = rollout_engine.EngineSync(engine, lambda: lora.merged_weights(model),
                                     lambda s, t: rollout_engine.policy_logps(model, s, t),
                                     lambda k, v: records.setdefault(k, []).append(v), 1, 1, sequences, starts)
    adapters = [p for n, p in model.named_parameters() if "lora_" in n]
    for _ in range(50):
        with torch.no_grad():
            for p in adapters:
                p.add_(torch.randn_like(p) * 1e-3)
        sync.sync()
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)
    assert engine.calls and set(engine.params) == {n for n, _ in lora.merged_weights(model)}
    diffs = records["engine_logp_mean_abs_diff"]
    assert len(diffs) == 50 and max(diffs) <= rollout_engine.LOGP_TOLERANCE
    # What the engine got is the merge peft computes.
    sent = dict(lora.merged_weights(model))
    merged = peft_model(model_dir, torch.float32)
    with torch.no_grad():
        for n, p in merged.named_parameters():
            p.copy_(dict(model.named_parameters())[n].float())
    reference = merged.merge_and_unload().state_dict()
    assert all(torch.allclose(sent[n].float(), reference[n], atol=1e-2, rtol=1e-2) for n in sent)
    # TRL 1.16.0's round trip (merge_adapter, read, unmerge_adapter) on the same bf16 base:
    # the base does not come back.
    for _ in range(5):
        model.merge_adapter()
        model.unmerge_adapter()
    assert not all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)


def test_the_engine_sync_of_a_lora_trainer_sends_merged_weights_and_passes_its_check(model_dir, split, tmp_path):
    trainer = make_trainer(model_dir, split, tmp_path, lora=LORA)
    trainer.args.vllm_check_every, trainer.args.vllm_sync_bucket_mib = 1, 1
    model = trainer.model
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.3)

    class Generation:  # TRL's VLLMGeneration as install reads it (no engine in this process)
        enable_sleep_mode, generation_kwargs = False, {}
        accelerator = trainer.accelerator

        class _dist:  # noqa: N801
            is_fsdp = False

    Generation.model = model
    trainer.vllm_generation = Generation()
    engine = StandInEngine(model.get_base_model())
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    rollout_engine.install(trainer, engine)
    for _ in range(3):
        trainer.vllm_generation.sync_weights()
    names = [n for call in engine.calls for n in call]
    assert not [n for n in names if "lora_" in n or "base_layer" in n or n.startswith("base_model")]
    assert set(names) == set(engine.params)
    diffs = trainer._metrics["train"]["engine_logp_mean_abs_diff"]
    assert len(diffs) == 3 and 0 < max(diffs) <= rollout_engine.LOGP_TOLERANCE
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)


# --- outputs, checkpoints, resume, a time limit -----------------------------------------------

def cli(args, **kwargs):
    env = {**os.environ, "PYTHONPATH": pythonpath(), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "boundary.cli", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def lora_args(model_dir, split, tmp_path, name, **extra):
    split.to_parquet(tmp_path / "train.parquet")
    pd.DataFrame([{"prompt_id": p, "epoch": e, "weight": float(i % 2), "action": "anchor" if i % 2 else "sharpen"}
                  for i, p in enumerate(split["prompt_id"]) for e in range(2)]).to_parquet(tmp_path / "mask.parquet")
    settings = {**SETTINGS, "steps": 8, "refresh_steps": 4, "save_steps": 2, "checkpoints": [4], "mask": "pba",
                "anchor": "policy", "lora": LORA, "verify_workers": 1, **extra}
    return ["--model", str(model_dir), "--train-split", str(tmp_path / "train.parquet"),
            "--mask", str(tmp_path / "mask.parquet"), "--settings", json.dumps(settings),
            "--seed", "0", "--out", str(tmp_path / name), "--checkpoint-dir", str(tmp_path / f"ck_{name}")]


def wait_for(path_glob, proc, seconds=300):
    deadline = time.time() + seconds
    while not path_glob():
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "nothing within the time"
        time.sleep(0.05)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


SAME = ["step", "learning_rate", "protected_fraction", "num_tokens"]  # what a resumed run repeats


def test_a_lora_run_is_killed_resumes_and_repeats_the_uninterrupted_run(model_dir, split, tmp_path, capsys):
    """kill -9 after a checkpoint, then a rerun: it resumes, takes the uninterrupted run's
    actions and draws the same rollouts (the token counts); outputs and checkpoints hold the
    adapter only (no full weights)."""
    args = lora_args(model_dir, split, tmp_path, "killed")
    first = cli(args, start_new_session=True)
    ck = tmp_path / "ck_killed"
    wait_for(lambda: list(ck.glob("*/checkpoint-4/trainer_state.json")), first)
    saved = next(ck.glob("*/checkpoint-4"))
    names = {p.name for p in saved.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
            "rng_state.pth", "trainer_state.json"} <= names
    assert not names & {"model.safetensors", "pytorch_model.bin"}
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # The rerun and the uninterrupted reference: the train stage's own run, in this process (the
    # kill needed a process; the resume reads the files it left, whatever runs it).
    capsys.readouterr()
    with stage_here():
        train_stage.run(args)
    text = capsys.readouterr().out
    assert "resuming from" in text, text
    with stage_here():
        train_stage.run(lora_args(model_dir, split, tmp_path, "plain"))
    for name in ("killed", "plain"):
        final = tmp_path / name / "final"
        assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= {p.name for p in final.iterdir()}
        assert not list(final.glob("model*.safetensors"))
        assert (tmp_path / name / "step4" / "adapter_model.safetensors").exists()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "killed" / "actions.parquet"),
                                  pd.read_parquet(tmp_path / "plain" / "actions.parquet"))
    killed, plain = (pd.read_parquet(tmp_path / n / "log.parquet") for n in ("killed", "plain"))
    pd.testing.assert_frame_equal(killed[SAME], plain[SAME])


@pytest.mark.parametrize("processes", [1, 2])
def test_a_sigterm_stops_at_a_step_boundary_with_a_checkpoint_and_resume_me(processes, model_dir, split, tmp_path,
                                                                          capsys):
    """SIGTERM (SLURM's --signal) to the launch: every process stops after the same step, saves a
    checkpoint there, writes no outputs and exits 75; the next job resumes from it and finishes,
    with the uninterrupted run's actions. With 2 processes (gloo) the launcher's stop file and
    the all-reduce of the stop flag bring both to the same step."""
    extra = ["--processes", "2"] if processes > 1 else []
    args = lora_args(model_dir, split, tmp_path, "stopped") + extra
    first = cli(args)
    ck = tmp_path / "ck_stopped"
    wait_for(lambda: list(ck.glob("*/checkpoint-2/trainer_state.json")), first)
    # As SLURM's --signal does: every process of the job (launcher, torchrun, workers) at once.
    for pid in [first.pid, *descendants(first.pid)]:
        os.kill(pid, signal.SIGTERM)
    text, _ = first.communicate(timeout=600)
    assert first.returncode == RESUME_ME, text
    assert "stopped after step" in text, text
    step = int(text.split("stopped after step ")[1].split()[0])
    assert 2 <= step < 8
    assert (next(ck.glob(f"*/checkpoint-{step}")) / "trainer_state.json").exists()
    assert not (tmp_path / "stopped" / "final").exists()
    if processes > 1:  # the command's resume of a 2-process launch (its only real-process test)
        second = cli(args)
        text, _ = second.communicate(timeout=600)
        assert second.returncode == 0, text[-4000:]
    else:  # one process: the train stage's own run, in this process (the stop needed a process)
        capsys.readouterr()
        with stage_here():
            train_stage.run(args)
        text = capsys.readouterr().out
    assert "resuming from" in text, text[-4000:]
    assert f"checkpoint-{step}" in text.split("resuming from ")[1].split(";")[0], text[-4000:]
    log = pd.read_parquet(tmp_path / "stopped" / "log.parquet")
    assert log["step"].tolist() == list(range(1, 9))
    assert (tmp_path / "stopped" / "final" / "adapter_model.safetensors").exists()
