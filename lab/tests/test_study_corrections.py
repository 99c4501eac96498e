"""The corrections of 2026-11-28 (issue 41) to the arithmetic studies' pages, recomputed from
the inputs committed beside them: every figure those sections quote comes from here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from boundary.tasks import arithmetic

RESULTS = Path(__file__).resolve().parents[1] / "studies"
ADD15, ADD, EASY = (RESULTS / f"2026-11-27-smollm2-arith-{s}" / "results" for s in ("add15", "add", "easy"))


def _boundary(results: Path):
    regimes = pd.read_parquet(results / "regimes" / "regimes.parquet")
    base = pd.read_parquet(results / "eval" / "diagnostic" / "base" / "seed0" / "counts.parquet")
    b = regimes[regimes["regime"] == "Boundary"].merge(base[["prompt_id", "n", "c"]], on="prompt_id",
                                                        suffixes=("_cal", ""))
    return b, base


def _splits(name: str) -> dict:
    cfg = yaml.safe_load((RESULTS / f"2026-11-27-{name.replace('_', '-')}" / f"{name}.yaml").read_text())["arithmetic"]
    levels = [arithmetic.Level(*x) for x in cfg["levels"]]
    return arithmetic.generate(cfg["splits"], cfg["seed"], levels, cfg.get("max_answer_share"))


def _lost_gained(results: Path, method: str) -> tuple[list[int], list[int]]:
    b, base = _boundary(results)
    lost, gained = [], []
    for seed in range(3):
        c = pd.read_parquet(results / "eval" / "diagnostic" / method / f"seed{seed}" / "counts.parquet")
        c = c.merge(base[["prompt_id", "c"]], on="prompt_id", suffixes=("", "_b"))
        c = c[c["prompt_id"].isin(b["prompt_id"])]
        lost.append(int(((c["c_b"] > 0) & (c["c"] == 0)).sum()))
        gained.append(int(((c["c_b"] == 0) & (c["c"] > 0)).sum()))
    return lost, gained


@pytest.mark.parametrize("results, boundary, solved, misses, identical, noise", [
    (ADD15, 70, 70, 0.70, -1.0, 1.05),  # a lucky base draw: no method could gain
    (ADD, 78, 73, 3.23, 2.27, 1.92)])   # an unlucky one: +2.3 of the +5.6 "gain"
def test_the_reference_draw(results, boundary, solved, misses, identical, noise):
    """A 256-draw base evaluation at the calibration's rates p: it misses sum (1 - p)^256
    Boundary prompts on average; a policy identical to the base scores (observed misses -
    expected misses) / B against this draw; the draw's own SD is sqrt(sum q (1 - q)) / B."""
    b, _ = _boundary(results)
    q = (1 - b["c_cal"] / b["n_cal"]) ** 256
    assert len(b) == boundary and (b["c"] > 0).sum() == solved
    assert q.sum() == pytest.approx(misses, abs=0.01)
    assert -100 * (q.sum() - (b["c"] == 0).sum()) / len(b) == pytest.approx(identical, abs=0.01)
    assert 100 * np.sqrt((q * (1 - q)).sum()) / len(b) == pytest.approx(noise, abs=0.01)
    if results == ADD15:
        assert np.prod(1 - q) == pytest.approx(0.447, abs=0.001)
    else:  # missed by the evaluation, solved by the calibration
        assert ((b["c"] == 0) & (b["c_cal"] > 0)).sum() == 5


@pytest.mark.parametrize("results, method, lost, gained", [
    (ADD15, "grpo", [1, 2, 1], [0, 0, 0]), (ADD15, "pba", [0, 1, 1], [0, 0, 0]),
    (ADD15, "psr", [1, 1, 2], [0, 0, 0]), (ADD15, "random", [1, 1, 1], [0, 0, 0]),
    (ADD, "grpo", [1, 0, 1], [5, 5, 5]), (ADD, "pba", [2, 4, 1], [3, 3, 4]),
    (ADD, "psr", [1, 4, 2], [4, 4, 5]), (ADD, "random", [0, 0, 0], [5, 5, 5])])
def test_lost_and_gained_per_seed(results, method, lost, gained):
    assert _lost_gained(results, method) == (lost, gained)


def test_the_gate_anchored_the_15_plus_15_problem_in_every_seed():
    train = pd.DataFrame(_splits("smollm2_arith_add15")["train"])
    twin = train.loc[train["answer"] == "30", "id"].tolist()
    assert twin == ["arith-s0-001421"]
    mask = pd.read_parquet(ADD15 / "masks" / "pba.parquet")
    rows = mask[mask["prompt_id"].isin(twin)]
    assert list(rows["action"]) == ["anchor", "anchor"] and (rows["successes"] == 0).all()
    for method, action in (("pba", "anchor"), ("random", "sharpen")):
        for seed in range(3):
            actions = pd.read_parquet(ADD15 / "train" / method / f"seed{seed}" / "actions.parquet")
            met = actions[actions["prompt_id"].isin(twin)]
            assert len(met) >= 1 and (met["action"] == action).all()


def test_held_out_prompts_share_operand_pairs_with_training():
    splits = _splits("smollm2_arith_add15")
    pair = lambda solution: tuple(re.findall(r"\d+", solution)[:2])  # ordered (a, b) of a + b
    train = {pair(r["solution"]) for r in splits["train"]}
    diagnostic, test = splits["diagnostic"][:256], splits["test"][:32]
    assert sum(pair(r["solution"]) in train for r in diagnostic) == 239  # 93%
    assert sum(pair(r["solution"]) in train for r in test) == 30
    rows = pd.DataFrame(diagnostic).assign(fact=lambda d: d["solution"].map(pair))
    x = rows.merge(pd.read_parquet(ADD15 / "regimes" / "regimes.parquet"), left_on="id", right_on="prompt_id")
    assert _icc(x, "fact", "p_base") == pytest.approx(0.57, abs=0.005)
    iccs = [_icc(x.merge(pd.read_parquet(ADD15 / "eval" / "diagnostic" / "grpo" / f"seed{s}" / "counts.parquet")
                         [["prompt_id", "pass_at_1"]], on="prompt_id"), "fact", "pass_at_1") for s in range(3)]
    assert min(iccs) == pytest.approx(0.82, abs=0.005) and max(iccs) == pytest.approx(0.93, abs=0.005)


def _icc(x: pd.DataFrame, key: str, value: str) -> float:
    """One-way random-effects ICC(1) with unequal group sizes."""
    g = x.groupby(key)[value]
    k, grand = g.size(), x[value].mean()
    msb = (k * (g.mean() - grand) ** 2).sum() / (len(k) - 1)
    msw = ((x[value] - g.transform("mean")) ** 2).sum() / (len(x) - len(k))
    n0 = (len(x) - (k ** 2).sum() / len(x)) / (len(k) - 1)
    return float((msb - msw) / (msb + (n0 - 1) * msw))


def test_the_gates_prompts_taught_pba_to_add():
    """The follow-up study: on its 39 diagnostic subtraction prompts, the share whose modal
    answer is a + b, and the subtraction pass@1, per seed."""
    ids = set(pd.read_parquet(EASY / "splits" / "diagnostic.parquet")["prompt_id"])
    rows = pd.DataFrame(_splits("smollm2_arith_easy")["diagnostic"])
    sub = rows[rows["id"].isin(ids) & rows["solution"].str.contains(" - ")].copy()
    sub["sum"] = sub["solution"].map(lambda s: str(sum(int(x) for x in re.findall(r"\d+", s)[:2])))
    assert len(sub) == 39
    got = {}
    for method in ("pba", "random"):
        shares, p1 = [], []
        for seed in range(3):
            c = pd.read_parquet(EASY / "eval" / "diagnostic" / method / f"seed{seed}" / "counts.parquet")
            c = c.merge(sub[["id", "sum"]], left_on="prompt_id", right_on="id")
            shares.append(round(100 * (c["modal_answer"] == c["sum"]).mean()))
            p1.append(100 * c["pass_at_1"].mean())
        got[method] = (shares, p1)
    assert got["pba"][0] == [69, 69, 54] and got["random"][0] == [10, 10, 15]
    assert 6 <= min(got["pba"][1]) and max(got["pba"][1]) < 12 and 40 <= min(got["random"][1]) and max(got["random"][1]) < 44
