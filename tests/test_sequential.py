"""Sequential evaluation: its pass@k is unbiased at every k (Monte Carlo over Bernoulli prompts
of known p), a replay of a full run's draws gives exactly the full run's coverage at n and its
lost and gained prompts, pooled base draws keep both properties, and the counts file reads back."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from boundary.core.passk import add_pass_at_k, counts_of, estimate, estimate_all, horizon
from boundary.core.sequential import SequentialRule, check_rows, pool_sequential, replay, sequential_counts

CAP = 256
KS = (1, 4, 8, 16, 64, 256)  # 8: the block below
PS = (0.0, 0.001, 0.004, 0.02, 0.1, 0.5, 1.0)


def _rows(outcomes: np.ndarray, rule: SequentialRule) -> pd.DataFrame:
    """The sequential counts of prompts whose i.i.d. outcomes (prompts x cap, in draw order) are
    given, from the rule's own draws: each prompt's first rule.draws(outcomes) samples."""
    draws = np.array([rule.draws(o) for o in outcomes])
    hits = outcomes.any(axis=1)
    first = np.where(hits, outcomes.argmax(axis=1) + 1, 0)
    made = np.arange(outcomes.shape[1])[None, :] < draws[:, None]
    return pd.DataFrame({"prompt_id": [f"q{i}" for i in range(len(outcomes))], "n": draws,
                         "c": (outcomes & made).sum(axis=1), "block_n": rule.block,
                         "block_c": outcomes[:, :rule.block].sum(axis=1),
                         "first_success": pd.array(np.where(hits, first, None), dtype="Int64"), "cap": rule.cap})


@pytest.mark.parametrize("p", PS)
def test_the_sequential_estimate_is_unbiased_at_every_k(p):
    """Mean estimate over 4,000 simulated prompts of success rate p within 4.5 standard errors
    (the simulation's own) of 1 - (1 - p)^k at every k, and exactly at p = 0 and 1; the counts
    pass the row checks; the mean draws are the rule's expectation."""
    rule = SequentialRule(8, 16, CAP)
    outcomes = np.random.default_rng(int(p * 1e6) + 1).random((4000, CAP)) < p
    counts = _rows(outcomes, rule)
    assert check_rows(counts) is None
    values = estimate(counts, KS)
    assert np.allclose(values, estimate_all(counts, CAP)[:, np.array(KS) - 1], rtol=0, atol=1e-12)  # both forms
    for j, k in enumerate(KS):
        truth = 1 - (1 - p) ** k
        mean, se = values[:, j].mean(), values[:, j].std(ddof=1) / np.sqrt(len(values))
        assert abs(mean - truth) <= 4.5 * se + 1 / len(values), (k, mean, truth, se)
    assert np.array_equal(values[:, -1], outcomes.any(axis=1))  # k = cap: the full run's indicator


def test_the_rule_stops_at_the_round_that_holds_the_first_success():
    rule = SequentialRule(16, 8, CAP)
    assert rule.rounds[:3] == (16, 24, 32) and rule.rounds[-1] == CAP
    assert rule.draws([True]) == 16 and rule.draws([False] * 16 + [True]) == 24
    assert rule.draws([False] * 23 + [True]) == 24 and rule.draws([False] * CAP) == CAP
    assert [rule.next_round(16, 0), rule.next_round(16, 1), rule.next_round(CAP, 0)] == [24, None, None]
    assert SequentialRule(300, 16, CAP).rounds == (CAP,)  # a block beyond the cap is the full run


def _full_run(rng, ps, prompts_per_p=6):
    rows = []
    for i, p in enumerate(np.repeat(ps, prompts_per_p)):
        for k, ok in enumerate(rng.random(CAP) < p):
            rows.append((f"x{i:03d}", k, bool(ok), float(rng.random()), str(int(rng.integers(3)))))
    return pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "correct", "entropy", "answer"])


def test_a_replay_of_full_runs_gives_their_coverage_lost_and_gained_exactly():
    """The base's and a trained policy's full samples replayed by the rule: pass@n per prompt,
    the solved, lost and gained prompts and their counts in `diagnose` are the full runs'
    exactly (booleans and integers), at a fraction of the draws."""
    from boundary.analysis.diagnose import analyse

    rng = np.random.default_rng(11)
    base = _full_run(rng, [0.0, 0.002, 0.01, 0.05, 0.3, 0.9])
    trained = _full_run(rng, [0.0, 0.0, 0.004, 0.1, 0.6, 1.0])
    rule = SequentialRule(16, 16, CAP)
    full = {name: counts_of(s) for name, s in (("base", base), ("trained", trained))}
    seq = {name: sequential_counts(replay(s, rule), rule.block, rule.cap) for name, s in
           (("base", base), ("trained", trained))}
    for name in full:
        assert check_rows(seq[name]) is None
        assert np.array_equal(estimate(seq[name], [CAP])[:, 0], estimate(full[name], [CAP])[:, 0])
        assert ((seq[name]["c"] > 0) == (full[name]["c"] > 0)).all()
        assert seq[name]["n"].sum() < 0.6 * full[name]["n"].sum()
    diag = {kind: analyse(c["base"], {("trained", 0): c["trained"]}, ks=(1, 16, CAP), resamples=200)
            for kind, c in (("full", full), ("seq", seq))}
    m = {kind: d.metrics.set_index(["method", "seed", "regime", "metric", "k"])["value"] for kind, d in diag.items()}
    for metric in ("solved", "base_solved", "lost", "gained", "n_prompts"):
        assert m["full"].xs(metric, level="metric").equals(m["seq"].xs(metric, level="metric"))
    at_n = lambda kind: m[kind].xs(("passk", CAP), level=("metric", "k"))  # noqa: E731
    assert at_n("full").equals(at_n("seq"))
    assert diag["full"].transitions.equals(diag["seq"].transitions)


def test_pooled_sequential_draws_stay_unbiased_up_to_the_pooled_cap():
    """Four sequential draws of the same prompts pooled: mean estimate within 4.5 standard errors
    of 1 - (1 - p)^k for k up to 4 x cap, c > 0 exactly "a success in any draw", and pooling a
    full draw with sequential ones keeps the block estimator."""
    from boundary.analysis.stats import pool_counts

    rule = SequentialRule(8, 16, 64)
    for p in (0.003, 0.02, 0.2):
        rng = np.random.default_rng(int(p * 1e4))
        draws = [_rows(rng.random((4000, rule.cap)) < p, rule) for _ in range(4)]
        pooled = pool_counts(draws)
        assert check_rows(pooled) is None and horizon(pooled).min() == 4 * rule.cap
        assert ((pooled["c"] > 0) == np.any([d["c"] > 0 for d in draws], axis=0)).all()
        ks = (1, 8, 32, 64, 100, 200, 256)
        values = estimate(pooled, ks)
        for j, k in enumerate(ks):
            truth = 1 - (1 - p) ** k
            mean, se = values[:, j].mean(), values[:, j].std(ddof=1) / np.sqrt(len(values))
            assert abs(mean - truth) <= 4.5 * se + 1 / len(values), (p, k, mean, truth)
    full = pd.DataFrame({"prompt_id": ["a", "b"], "n": [64, 64], "c": [3, 0]})
    seq = pd.DataFrame({"prompt_id": ["a", "b"], "n": [8, 64], "c": [1, 1], "block_n": [8, 8], "block_c": [1, 0],
                        "first_success": pd.array([2, 40], dtype="Int64"), "cap": [64, 64]})
    mixed = pool_sequential([full, seq], ["a", "b"])
    assert mixed["block_n"].tolist() == [72, 72] and mixed["block_c"].tolist() == [4, 0]
    assert mixed["first_success"].isna().tolist() == [True, False] and mixed["first_success"][1] == 72 + 40 - 8
    assert mixed["cap"].tolist() == [128, 128]
    assert estimate(mixed.assign(n=[72, 128], c=[4, 1]), [100, 104]).tolist() == [[1.0, 1.0], [0.0, 1.0]]  # a: its block; b: first success 104



def test_a_sequential_counts_file_reads_back_and_a_bad_one_is_one_line(tmp_path):
    from boundary.core.errors import BoundaryError
    from boundary.readers.counts import load_counts

    rule = SequentialRule(8, 8, 32)
    counts = _rows(np.random.default_rng(3).random((20, 32)) < 0.05, rule)
    counts.to_csv(tmp_path / "seq.csv", index=False)
    back = load_counts(tmp_path / "seq.csv")
    assert np.array_equal(estimate(back, (1, 8, 32)), estimate(counts, (1, 8, 32)))
    bad = counts.assign(cap=16)
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(BoundaryError, match=r"bad.csv: sequential counts: n > cap \(prompt_id q"):
        load_counts(tmp_path / "bad.csv")
    counts.drop(columns="cap").to_csv(tmp_path / "part.csv", index=False)
    with pytest.raises(BoundaryError, match="part.csv: column cap missing"):
        load_counts(tmp_path / "part.csv")


def test_regimes_from_sequential_counts_are_refused_in_one_line():
    from boundary.analysis.regimes import label_counts
    from boundary.core.errors import BoundaryError

    counts = _rows(np.zeros((3, 32), bool), SequentialRule(8, 8, 32))
    with pytest.raises(BoundaryError, match="base.csv: sequential counts .* cannot label regimes"):
        label_counts(counts, source="base.csv")


def test_sequential_enters_the_evaluation_key_only_when_on():
    """Off (the default), no evaluation's key moves (tests/fixtures/stage_keys.json holds them);
    on, the key carries it with its block and round size, so those runs are evaluated again."""
    import yaml
    from conftest import ROOT

    from boundary.core import settings
    from boundary.core.config import validate_config

    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    off = settings.evaluate_key(validate_config(raw), "testbed", "grpo", 0)["evaluate"]
    assert not {"sequential", "block", "round_size"} & set(off)
    raw["evaluate"].update(sequential=True)
    config = validate_config(raw)
    on = settings.evaluate_key(config, "testbed", "grpo", 0)["evaluate"]
    assert (on["sequential"], on["block"], on["round_size"]) == (True, 16, 16)
    assert settings.resolve("evaluate", settings.evaluate_key(config, "testbed", "grpo", 0))["evaluate"]["block"] == 16


def test_the_evaluate_stage_draws_a_prefix_of_the_full_run_and_keeps_its_coverage(tiny_model_dir, tmp_path):
    """`boundary evaluate` with and without evaluate.sequential on a tiny model: each prompt's
    sequential samples are the first draws of its full run (same completions, same verdicts),
    stopped at the round that holds the first success, and pass@n is the full run's exactly."""
    import json

    from boundary.stages import evaluate

    split = pd.DataFrame({"prompt_id": ["a", "b", "c", "d"], "prompt": ["12+34=", "5+6=", "1+2=", "7+8="],
                          "answer": ["1", "7", "3", "98765"]})
    split.to_parquet(tmp_path / "split.parquet")
    out = {}
    for kind, extra in (("full", {}), ("seq", {"sequential": True, "block": 4, "round_size": 4})):
        settings = {"evaluate": {"n": 24, "seed": 3, "temperature": 1.0, "top_p": 1.0, "ks": [1, 4, 24], **extra},
                    "sampling": {"backend": "hf", "batch_size": 7, "max_new_tokens": 6},
                    "verify": {"extractor": "last_number", "workers": 1}}
        evaluate.main(["--model", str(tiny_model_dir), "--split", str(tmp_path / "split.parquet"),
                       "--settings", json.dumps(settings), "--samples", str(tmp_path / f"{kind}_samples.parquet"),
                       "--counts", str(tmp_path / f"{kind}_counts.parquet")])
        out[kind] = (pd.read_parquet(tmp_path / f"{kind}_samples.parquet"),
                     pd.read_parquet(tmp_path / f"{kind}_counts.parquet"))
    (full, full_counts), (seq, seq_counts) = out["full"], out["seq"]
    rule = SequentialRule(4, 4, 24)
    expected = replay(full, rule)
    cols = ["prompt_id", "sample_idx", "completion", "correct"]
    assert seq[cols].reset_index(drop=True).equals(expected[cols].reset_index(drop=True))
    assert (seq["in_block"] == (seq["sample_idx"] < 4)).all()
    assert len(seq) < len(full) and seq_counts["c"].gt(0).any() and seq_counts["c"].eq(0).any()
    assert check_rows(seq_counts) is None
    assert seq_counts["pass_at_24"].equals(full_counts["pass_at_24"])
    assert np.array_equal(estimate(seq_counts, [24])[:, 0], (full_counts["c"] > 0).to_numpy(float))


def test_diagnose_reads_sequential_counts_files(tmp_path, capsys):
    """`boundary diagnose` on sequential counts of the base (two draws, pooled) and a trained run,
    labelled by a full calibration: the lost and gained prompts and pass@n are those of the
    full runs the sequential ones replay, and no line calls their n mixed."""
    from boundary.analysis import diagnose

    rng = np.random.default_rng(5)
    rule = SequentialRule(16, 16, CAP)
    ps = [0.0, 0.002, 0.01, 0.05, 0.3, 0.9]
    runs = {"base0": _full_run(rng, ps), "base1": _full_run(rng, ps), "grpo": _full_run(rng, [0, 0, 0.004, 0.1, 0.6, 1])}
    for name, samples in runs.items():
        counts_of(samples).to_parquet(tmp_path / f"{name}_full.parquet")
        sequential_counts(replay(samples, rule), rule.block, rule.cap).to_parquet(tmp_path / f"{name}_seq.parquet")
    counts_of(_full_run(rng, ps)).to_parquet(tmp_path / "cal.parquet")
    tables = {}
    for kind in ("full", "seq"):
        diagnose.main(["--base", str(tmp_path / f"base0_{kind}.parquet"), "--base", str(tmp_path / f"base1_{kind}.parquet"),
                       "--trained", f"grpo:0={tmp_path / f'grpo_{kind}.parquet'}", "--calibration",
                       str(tmp_path / "cal.parquet"), "--resamples", "100", "--no-figures",
                       "--out", str(tmp_path / kind)])
        m = pd.read_csv(tmp_path / kind / "metrics.csv")
        tables[kind] = m[m["metric"].isin(["lost", "gained", "solved", "base_solved"]) |
                         ((m["metric"] == "passk") & (m["k"] == CAP))].reset_index(drop=True)
    assert tables["full"].equals(tables["seq"])
    assert "n per prompt ranges" not in capsys.readouterr().err


def test_the_benchmark_replays_full_runs_and_prints_the_share_of_draws(tmp_path, capsys):
    """bench_sequential --replay on full runs' verdicts: the draws the rule keeps, as a share of
    the full run's, and coverage at n the full run's; --counts: the expected share, exact where
    every prompt is solved by its first draw."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sequential.py"
    spec = importlib.util.spec_from_file_location("bench_sequential", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(2)
    full = _full_run(rng, [0.0, 0.01, 0.5], prompts_per_p=2)
    rule = SequentialRule(16, 16, CAP)
    kept = sum(rule.draws(g["correct"].to_numpy()) for _, g in full.groupby("prompt_id"))
    full.assign(pool="p", run="full").to_parquet(tmp_path / "outcomes.parquet")
    bench.main(["--replay", str(tmp_path / "outcomes.parquet")])
    out = capsys.readouterr().out
    assert f"{kept:,} of {len(full):,} draws = {kept / len(full):.1%}; coverage at n the full run's: True" in out
    pd.DataFrame({"prompt_id": ["a", "b"], "n": [CAP, CAP], "c": [CAP, 0]}).to_parquet(tmp_path / "counts.parquet")
    bench.main(["--counts", str(tmp_path / "counts.parquet")])
    assert f"expected draws {(16 + CAP) / (2 * CAP):.1%} of the full run's" in capsys.readouterr().out


def test_the_report_reads_sequential_evaluations(tmp_path):
    """`boundary report` on an artifact tree whose evaluations are sequential (replays of full
    samples): it writes every table and figure, and its transitions and its lost, gained and
    pass@n are those of the full evaluations the sequential ones replay."""
    import json
    from dataclasses import replace as with_

    from boundary.analysis.diagnose import analyse
    from boundary.analysis.regimes import PAPER, counts_from_calibration, label_counts
    from boundary.stages import report

    rng = np.random.default_rng(9)
    rule = SequentialRule(8, 8, 64)
    ps = rng.beta(0.3, 1.2, 60)
    ps[:10] = 0
    ids = [f"d{i:02d}" for i in range(60)]

    def samples(p):
        return pd.DataFrame([(pid, j, bool(rng.random() < pi), str(j % 3), 0.7) for pid, pi in zip(ids, p)
                             for j in range(64)], columns=["prompt_id", "sample_idx", "correct", "answer", "entropy"])

    (tmp_path / "regimes").mkdir()
    (tmp_path / "splits").mkdir()
    pd.DataFrame({"prompt_id": ids, "problem": "1+2=", "answer": "3"}).to_parquet(tmp_path / "splits/diagnostic.parquet")
    label_counts(counts_from_calibration(samples(ps)), with_(PAPER, coverage_k=64)).to_parquet(
        tmp_path / "regimes/regimes.parquet")
    full = {}
    for method, seed, p in (("base", 0, ps), ("grpo", 0, np.where(ps < 0.1, ps * 0.3, np.minimum(1, 1.5 * ps))),
                            ("grpo", 1, np.where(ps < 0.1, ps * 0.5, np.minimum(1, 1.3 * ps)))):
        s = samples(p)
        full[(method, seed)] = counts_of(s)
        d = tmp_path / "eval" / "diagnostic" / method / f"seed{seed}"
        d.mkdir(parents=True)
        seq = sequential_counts(replay(s, rule), rule.block, rule.cap)
        add_pass_at_k(seq, [1, 4, 16, 64]).to_parquet(d / "counts.parquet")
    settings = {"baseline": "grpo", "method": "pba", "labels": {"grpo": "GRPO"}, "benchmarks": {}, "ks": [1, 4, 16, 64],
                "bootstrap": {"resamples": 100, "seed": 0}}
    (tmp_path / "report.json").write_text(json.dumps(settings))
    report.main(["--results", str(tmp_path), "--settings", str(tmp_path / "report.json")])
    got = pd.read_csv(tmp_path / "diagnostics" / "diagnostic" / "transitions.csv")
    regimes = pd.read_parquet(tmp_path / "regimes/regimes.parquet")
    want = analyse(full[("base", 0)], {k: v for k, v in full.items() if k[0] != "base"}, regimes, ks=(1, 64),
                   resamples=100)
    assert got["count"].tolist() == want.transitions["count"].tolist()
    m = pd.read_csv(tmp_path / "diagnostics" / "diagnostic" / "metrics.csv")
    for metric, k in (("lost", None), ("gained", None), ("passk", 64)):
        mine = m[(m["metric"] == metric) & ((m["k"] == k) if k else m["k"].isna())]["value"].to_numpy()
        theirs = want.metrics[(want.metrics["metric"] == metric) & ((want.metrics["k"] == k) if k
                                                                     else want.metrics["k"].isna())]["value"].to_numpy()
        # The same per-prompt values: counts exactly, pass@64's means to the last bits (read back from
        # the CSV text, averaged in pandas' order; the device image's pandas differs in the last bit).
        assert np.allclose(mine, theirs, rtol=0, atol=1e-12) and (k or np.array_equal(mine, theirs)), metric
    assert (tmp_path / "report.html").is_file()
