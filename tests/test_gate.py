"""Masks: the one-success rule, G0 ablations from one draw cache, flips, soft/random/oracle."""

import json

import numpy as np
import pandas as pd
import pytest

from boundary.core.errors import BoundaryError
from boundary.stages.masks import main
from boundary.training.gate import build_mask, soft_weight


def draws_from(successes_by_epoch: dict[str, list[list[bool]]]) -> pd.DataFrame:
    """{prompt_id: [[correct per draw] per epoch]} -> a gate-draws table."""
    rows = [{"prompt_id": pid, "epoch": e, "draw_idx": i, "correct": c,
             "completion": "", "answer": ""}
            for pid, epochs in successes_by_epoch.items()
            for e, draws in enumerate(epochs) for i, c in enumerate(draws)]
    return pd.DataFrame(rows)


def one_hit_at(i, n=32):
    return [j == i for j in range(n)]


@pytest.fixture
def draws():
    return draws_from({
        "a": [one_hit_at(0), one_hit_at(0)],          # a success within the first 4 draws
        "b": [one_hit_at(10), one_hit_at(99)],         # hit only visible at G0 >= 16; then none
        "c": [[False] * 32, [False] * 32],            # never solved
        "d": [[True, True] + [False] * 30] * 2,        # two successes: passes tau = 0.20
    })


def actions(mask, epoch=0):
    rows = mask[mask["epoch"] == epoch].set_index("prompt_id")
    return rows["action"].to_dict()


def test_one_success_rule_and_g0_ablations(draws):
    ids = ["a", "b", "c", "d"]
    g8 = build_mask("gate", {"G0": 8, "tau": 0.10, "epochs": 2}, draws, ids)
    assert actions(g8) == {"a": "sharpen", "b": "anchor", "c": "anchor", "d": "sharpen"}
    # The one-success rule at G0 = 16 is tau = 1/16; it reads draws 0..15 of the same cache.
    g16 = build_mask("gate", {"G0": 16, "tau": 1 / 16, "epochs": 2}, draws, ids)
    assert actions(g16)["b"] == "sharpen"
    assert g16.set_index(["prompt_id", "epoch"]).loc[("b", 0), "w_hat"] == 1 / 16
    tau20 = build_mask("gate", {"G0": 8, "tau": 0.20, "epochs": 2}, draws, ids)
    assert actions(tau20) == {"a": "anchor", "b": "anchor", "c": "anchor", "d": "sharpen"}
    assert set(g8.columns) >= {"successes", "G0", "w_hat", "action", "weight", "flip"}
    assert (g8["weight"] == (g8["action"] == "anchor")).all()


def test_flips_between_epochs(draws):
    g16 = build_mask("gate", {"G0": 16, "tau": 1 / 16, "epochs": 2}, draws, ["a", "b", "c", "d"])
    flips = g16.set_index(["prompt_id", "epoch"])["flip"]
    assert not flips.xs(0, level="epoch").any()  # never at epoch 0
    assert flips[("b", 1)] and not flips[("a", 1)]  # b: sharpen -> anchor


def test_soft_gate_weights():
    w = soft_weight([0, 1, 2, 3, 8], [8] * 5, tau=0.10, confidence=0.9)
    assert w[0] == 1.0 and w[-1] == 0.0
    assert np.all(np.diff(w) <= 0) and 0 < w[1] < 1  # more evidence, less anchoring


def test_random_mask_is_fixed_fraction(draws):
    ids = [f"p{i}" for i in range(100)]
    m = build_mask("random", {"fraction": 0.7, "seed": 17, "epochs": 3}, None, ids)
    per_epoch = m.groupby("epoch")["action"].apply(lambda a: (a == "anchor").sum())
    assert (per_epoch == 70).all() and not m["flip"].any()
    again = build_mask("random", {"fraction": 0.7, "seed": 17, "epochs": 3}, None, ids)
    assert m.equals(again)


def test_a_random_mask_at_a_gate_masks_share_anchors_as_many_prompt_epochs(draws):
    """share_of: the gate mask (G0 8, tau 0.10) anchors b and c in both epochs, 4 of 8 prompt-epochs:
    the random mask anchors half the prompts in every epoch; the stage's log names the share."""
    ids = ["a", "b", "c", "d"]
    gate = {"kind": "gate", "G0": 8, "tau": 0.10, "epochs": 2}
    m = build_mask("random", {"share_of": "pba", "share_of_settings": gate, "seed": 17, "epochs": 2}, draws, ids)
    assert (m.groupby("epoch")["action"].apply(lambda a: (a == "anchor").sum()) == 2).all()
    with pytest.raises(BoundaryError, match="--gate-draws: required for a random mask with share_of"):
        build_mask("random", {"share_of": "pba", "share_of_settings": gate, "seed": 17, "epochs": 2}, None, ids)


def test_oracle_mask(draws):
    regimes = pd.DataFrame({"prompt_id": ["a", "b", "c", "d"],
                            "regime": ["SolvedEasy", "Boundary", "OutOfReach", "Boundary"]})
    m = build_mask("oracle", {"epochs": 2}, draws, ["a", "b", "c", "d"], regimes)
    assert actions(m, 1) == {"a": "sharpen", "b": "anchor", "c": "sharpen", "d": "anchor"}
    assert m["G0"].eq(32).all()  # evidence from every cached draw


def test_user_errors(draws):
    with pytest.raises(BoundaryError, match="epoch 2"):
        build_mask("gate", {"G0": 8, "tau": 0.1, "epochs": 3}, draws, ["a"])
    with pytest.raises(BoundaryError, match="G0 = 64"):
        build_mask("gate", {"G0": 64, "tau": 0.1, "epochs": 1}, draws, ["a"])
    with pytest.raises(BoundaryError, match="tau: missing"):  # the settings layer's check
        main(["--kind", "gate", "--train-split", "unused", "--settings", '{"G0": 8, "epochs": 1}', "--out", "unused"])
    with pytest.raises(BoundaryError, match="zz"):
        build_mask("gate", {"G0": 8, "tau": 0.1, "epochs": 1}, draws, ["a", "zz"])


def test_cli_writes_mask(draws, tmp_path):
    draws.to_parquet(tmp_path / "draws.parquet")
    pd.DataFrame({"prompt_id": ["a", "b", "c", "d"]}).to_parquet(tmp_path / "train.parquet")
    out = tmp_path / "masks" / "pba.parquet"
    main(["--kind", "gate", "--gate-draws", str(tmp_path / "draws.parquet"),
          "--train-split", str(tmp_path / "train.parquet"),
          "--settings", json.dumps({"G0": 8, "tau": 0.1, "epochs": 2}), "--out", str(out)])
    mask = pd.read_parquet(out)
    assert len(mask) == 8 and set(mask["action"]) == {"sharpen", "anchor"}


def test_a_configs_random_mask_at_the_gates_share_through_the_stage(draws, tmp_path, capsys):
    """masks.random.share_of: pba: its key holds pba's (a changed tau makes it again), and the
    stage anchors pba's pooled share and says so in its log line."""
    from pathlib import Path

    import yaml

    from boundary.core import settings
    from boundary.core.config import validate_config

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    raw["masks"]["random"] = {"kind": "random", "share_of": "pba", "seed": 17}
    raw["gate"].update(G0=8, tau=0.10, refresh_steps=100)
    raw["train"].update(steps=200, checkpoints=[200])  # two refresh epochs, as the draws hold
    config = validate_config(raw)
    key = settings.mask_key(config, "random")
    assert key["share_of_settings"] == settings.mask_key(config, "pba")
    config["masks"]["pba"]["tau"] = 0.25
    assert settings.mask_key(config, "random") != key
    draws.to_parquet(tmp_path / "draws.parquet")
    pd.DataFrame({"prompt_id": ["a", "b", "c", "d"]}).to_parquet(tmp_path / "train.parquet")
    main(["--kind", "random", "--gate-draws", str(tmp_path / "draws.parquet"), "--train-split",
          str(tmp_path / "train.parquet"), "--settings", settings.text(key), "--out", str(tmp_path / "random.parquet")])
    mask = pd.read_parquet(tmp_path / "random.parquet")
    assert (mask.groupby("epoch")["action"].apply(lambda a: (a == "anchor").sum()) == 2).all()
    assert capsys.readouterr().out.strip().endswith("the share pba anchors, pooled over its epochs: 0.5000")
