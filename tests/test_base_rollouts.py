"""The base_rollouts stage: which rollouts it draws, shards that add up to one job, and how the
trainer takes them (prompt tokens checked, rows off the files refused, next to TRL's vLLM
rollouts). That a run reading them trains exactly as one drawing them in place is in
tests/test_distributed.py, through the train stage, in one process and in two; that the stage
imports neither TRL's GRPOTrainer nor vLLM, in test_imports.py's fresh interpreter."""

import json

import numpy as np
import pandas as pd
import pytest
from test_train import SETTINGS, G, P, alternate, make_trainer, model_dir, scheduled_batch, split  # noqa: F401

from boundary.core.errors import BoundaryError
from boundary.core.settings import resolve
from boundary.stages import base_rollouts as base_rollouts_stage
from boundary.training import base_rollouts
from boundary.training.schedule import ActionSampler, step_weights
from boundary.training.trainer import GENERATION_METRICS
from boundary.training.trainer_config import make_config

SUPPORT = dict(mask="m", anchor="support", beta_a=10.0, base_generation_batch_size=12)


def test_plan_holds_every_base_rollout_of_the_schedule_once_in_blocks():
    rng = np.random.default_rng(0)
    weights = rng.choice([0.0, 0.3, 1.0], size=(3, 20))  # soft weights too: realised per step
    steps, refresh, G_, size = 7, 3, 4, 10
    batches = ActionSampler(np.ones_like(weights, dtype=bool), 5, G_, 1, steps, refresh, seed=4).schedule
    blocks = base_rollouts.plan_blocks(batches, weights, G_, refresh, seed=4, block_size=size)
    keys = [k for b in blocks for k in b.keys]
    expected = [(s, p * G_ + j) for s in range(steps)
                for p, w in enumerate(step_weights(weights, s, batches[s], refresh, 4, True)) if w > 0
                for j in range(G_)]
    assert keys == expected  # (step, position) order, each once
    assert all(len(b.keys) <= size and {s // refresh for s, _ in b.keys} == {b.epoch} for b in blocks)
    assert [b.index for b in blocks if b.epoch == 0] == list(range(sum(b.epoch == 0 for b in blocks)))


@pytest.fixture(scope="module")
def stage_inputs(model_dir, split, tmp_path_factory):
    root = tmp_path_factory.mktemp("base_rollouts")
    split.to_parquet(root / "train.parquet")
    w = alternate(split)
    pd.DataFrame([{"prompt_id": p, "epoch": e, "weight": w[e, i], "action": "anchor" if w[e, i] else "sharpen"}
                  for i, p in enumerate(split["prompt_id"]) for e in range(w.shape[0])]
                 ).to_parquet(root / "mask.parquet")
    return root


def stage_argv(model_dir, root, out, shard="0/1", **override):
    settings = {**SETTINGS, **SUPPORT, **override}
    return ["--model", str(model_dir), "--train-split", str(root / "train.parquet"),
            "--mask", str(root / "mask.parquet"), "--settings", json.dumps(settings),
            "--seed", "0", "--shard", shard, "--out", str(out)]


def run_stage(model_dir, root, out, shard="0/1", **override):
    base_rollouts_stage.main(stage_argv(model_dir, root, out, shard, **override))
    return pd.read_parquet(out)


def test_shards_together_are_the_one_job_draw(model_dir, stage_inputs):
    one = run_stage(model_dir, stage_inputs, stage_inputs / "one.parquet")
    parts = [run_stage(model_dir, stage_inputs, stage_inputs / f"s{i}.parquet", f"{i}/3") for i in range(3)]
    assert all(len(p) for p in parts)  # 4 steps x 2 anchored prompts x 4 rollouts in blocks of 12
    merged = pd.concat(parts).sort_values(["step", "position"], ignore_index=True)
    pd.testing.assert_frame_equal(merged, one)
    assert list(one.columns) == base_rollouts.COLUMNS
    assert len(one) == SETTINGS["steps"] * (P // 2) * G  # odd rows anchored: half of every batch
    assert (one["completion_ids"].map(len) == one["base_logps"].map(len)).all()
    assert (np.concatenate(one["base_logps"].tolist()) <= 0).all()


def test_stage_refuses_a_method_without_base_rollouts(model_dir, stage_inputs):
    with pytest.raises(BoundaryError, match="draws no base rollouts"):
        run_stage(model_dir, stage_inputs, stage_inputs / "x.parquet", anchor="policy")


def pre_drawn_trainer(model_dir, split, tmp_path, files):
    from datasets import Dataset
    from test_train import digits_reward
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from boundary.training.trainer import PBATrainer

    data = Dataset.from_dict({"prompt": split["problem"].tolist(), "answer": split["answer"].tolist(),
                              "prompt_id": split["prompt_id"].tolist()})
    cfg = make_config(resolve("train", {**SETTINGS, **SUPPORT}), seed=0, checkpoint_dir=str(tmp_path / "ck"))
    trainer = PBATrainer(AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=digits_reward, args=cfg,
                         train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model_dir),
                         anchor_weights=alternate(split), base_rollouts=[str(f) for f in files])
    trainer._get_train_sampler()
    trainer.model.train()
    return trainer


def test_trainer_takes_pre_drawn_rollouts_without_a_frozen_base(model_dir, split, stage_inputs, tmp_path):
    table = run_stage(model_dir, stage_inputs, stage_inputs / "all.parquet")
    trainer = pre_drawn_trainer(model_dir, split, tmp_path, [stage_inputs / "all.parquet"])
    assert trainer.base_model is None  # the support anchor's log-probs come with the rollouts
    out = trainer._generate_and_score_completions(scheduled_batch(trainer, 1))
    drawn = table[table["step"] == 1].set_index("position")
    for i in out["from_base"].nonzero().flatten().tolist():
        n = int(out["completion_mask"][i].sum())
        assert out["completion_ids"][i, :n].tolist() == drawn.loc[i, "completion_ids"].tolist()
        np.testing.assert_allclose(out["base_per_token_logps"][i, :n].numpy(), drawn.loc[i, "base_logps"])
    assert trainer._metrics["train"]["base_rollouts_on_demand"] == [0]


def test_trainer_refuses_rollouts_drawn_for_other_prompts_or_steps(model_dir, split, stage_inputs, tmp_path):
    table = run_stage(model_dir, stage_inputs, stage_inputs / "all.parquet")
    table.assign(prompt_hash=table["prompt_hash"] + 1).to_parquet(tmp_path / "other.parquet")
    trainer = pre_drawn_trainer(model_dir, split, tmp_path, [tmp_path / "other.parquet"])
    with pytest.raises(BoundaryError, match="other.parquet: step 2: base rollouts were drawn for other prompt tokens"):
        trainer._generate_and_score_completions(scheduled_batch(trainer, 1))
    table[table["step"] != 1].to_parquet(tmp_path / "short.parquet")
    trainer = pre_drawn_trainer(model_dir, split, tmp_path, [tmp_path / "short.parquet"])
    with pytest.raises(BoundaryError, match="short.parquet: no base rollouts for step 2"):
        trainer._generate_and_score_completions(scheduled_batch(trainer, 1))
    with pytest.raises(BoundaryError, match="missing.parquet: base rollouts file not found"):
        base_rollouts.read_epoch([tmp_path / "missing.parquet"], 0)


def test_vllm_settings_reach_trl_and_base_anchors_then_need_pre_drawn_rollouts(model_dir, split, tmp_path):
    from boundary.stages.train import train

    with pytest.raises(BoundaryError, match="rollout_engine: vllm needs a CUDA GPU"):
        train(model_dir, split, {**SETTINGS, "rollout_engine": "vllm"}, 0, tmp_path / "out", tmp_path / "ck")
    cfg = make_config(resolve("train", {**SETTINGS, "rollout_engine": "vllm", "vllm_mode": "server",
                                          "vllm_server_port": 8123}), seed=0, checkpoint_dir=str(tmp_path))
    assert (cfg.use_vllm, cfg.vllm_mode, cfg.vllm_server_port) == (True, "server", 8123)
    assert make_config(resolve("train", SETTINGS), seed=0, checkpoint_dir=str(tmp_path)).use_vllm is False
    with pytest.raises(BoundaryError, match="rollout_engine: vllm: anchor support reads pre-drawn base rollouts"):
        make_trainer(model_dir, split, tmp_path, alternate(split), rollout_engine="vllm", **SUPPORT)


@pytest.mark.parametrize("corrected", [True, False])
def test_with_vllm_rollouts_every_row_goes_to_trl_and_base_rows_keep_their_draws(
        corrected, model_dir, split, stage_inputs, tmp_path, monkeypatch):
    """TRL's vLLM path is collective (weight sync, gathers): every process passes it every row;
    anchored rows then take their base rollouts, with the base log-probs as their sampling
    log-probs where TRL's importance correction reads them; without it no sampling log-probs go
    on to TRL (rollout_engine.unscored)."""
    from trl import GRPOTrainer

    table = run_stage(model_dir, stage_inputs, stage_inputs / "all.parquet")
    trainer = pre_drawn_trainer(model_dir, split, tmp_path, [stage_inputs / "all.parquet"])
    seen = []

    def fake_vllm(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        seen.append(len(prompt_ids))
        return [[7, 7, 7] for _ in prompt_ids], [[-0.5] * 3 for _ in prompt_ids]

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", fake_vllm)
    trainer.use_vllm, trainer._engine_logprobs = True, corrected
    trainer.state.global_step = 1
    from_base = [bool(r % 2) for r in trainer._batches[1] for _ in range(G)]  # odd rows are anchored
    trainer._from_base, trainer._drawn_logps = from_base, [None] * len(from_base)
    trainer._stats = {name: [0.0, 0.0] for name in GENERATION_METRICS}
    prompts = base_rollouts.tokenize(trainer.processing_class,
                                     [trainer.train_dataset[r]["prompt"] for r in trainer._batches[1] for _ in range(G)])
    ids, logprobs = trainer._generate_single_turn(prompts, None, {}, G)
    assert seen == [P * G]
    drawn = table[table["step"] == 1].set_index("position")
    assert (logprobs is not None) is corrected
    for i, anchored in enumerate(from_base):
        if not anchored:
            assert ids[i] == [7, 7, 7] and (not corrected or logprobs[i] == [-0.5] * 3)
        else:
            assert ids[i] == drawn.loc[i, "completion_ids"].tolist()
            if corrected:
                np.testing.assert_allclose(logprobs[i], drawn.loc[i, "base_logps"])


def test_a_trainer_without_files_draws_the_stage_blocks_in_place(model_dir, split, stage_inputs, tmp_path):
    """The same blocks, token for token and bit for bit in the log-probs.

    Bit for bit only as `boundary train` holds its base: loaded from the files like the stage's
    (stages/train.py), not a copy of the policy. The same weights at other addresses are not the
    same computation: MKL's sgemm promises equal bits for equal shapes, thread counts and
    memory alignment only, and a copy is 64-byte aligned where the loaded (memory-mapped)
    weights are not; on an AMD EPYC the copy's 4-row blocks differed in the last bit."""
    from boundary.sampling.models import from_pretrained

    table = run_stage(model_dir, stage_inputs, stage_inputs / "all.parquet").set_index(["step", "position"])
    trainer = make_trainer(model_dir, split, tmp_path, alternate(split), base_model=from_pretrained(model_dir),
                           **SUPPORT)
    trainer._get_train_sampler()
    drawn = {}
    for step in range(0, SETTINGS["steps"], SETTINGS["refresh_steps"]):
        drawn.update(trainer._supply.rollouts(step, trainer._local_slice()))
    assert sorted(drawn) == sorted(table.index)
    for key, (ids, logps, prompt) in drawn.items():
        assert list(ids) == table.loc[key, "completion_ids"].tolist() and prompt == table.loc[key, "prompt_hash"]
        assert np.array_equal(logps, table.loc[key, "base_logps"])
