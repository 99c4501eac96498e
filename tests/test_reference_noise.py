"""Statistics a reviewer accepts (issue 41): the base pooled over independent draws, its own
noise in every Δ's seed interval, the cluster bootstrap, lost/gained as totals with each
seed's count, and the synthetic drop policy that shows the loss a study can detect."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from boundary.analysis import stats, tables
from boundary.analysis.diagnose import analyse, cluster_labels
from boundary.analysis.power import drop_sensitivity, drop_studies, power_table
from boundary.analysis.regimes import PAPER, label_counts
from boundary.core.errors import BoundaryError
from boundary.core.passk import pass_at_k

P, N = 60, 32


def _counts(p, n=N, rng=None, ids=None):
    c = rng.binomial(n, p)
    return pd.DataFrame({"prompt_id": ids if ids is not None else [f"q{i:03d}" for i in range(len(p))],
                         "n": n, "c": c})


@pytest.fixture(scope="module")
def study():
    rng = np.random.default_rng(7)
    p = rng.beta(0.4, 2.0, P)
    draws = [_counts(p, rng=rng) for _ in range(4)]
    runs = {(m, s): _counts(p * f, rng=rng) for m, f in (("grpo", 0.7), ("pba", 0.9)) for s in range(3)}
    calibration = _counts(p, 128, rng)
    return draws, runs, label_counts(calibration, replace(PAPER, coverage_k=32))


def test_pool_counts_sums_the_draws_and_refuses_other_prompts():
    a = pd.DataFrame({"prompt_id": ["x", "y"], "n": [4, 4], "c": [1, 0], "answers": [["1"], []],
                      "modal_answer": ["1", "7"], "modal_share": [0.5, 0.75]})
    b = pd.DataFrame({"prompt_id": ["y", "x"], "n": [4, 4], "c": [2, 0], "answers": [["2"], []],
                      "modal_answer": ["7", "3"], "modal_share": [0.25, 1.0]})
    pooled = stats.pool_counts([a, b]).set_index("prompt_id")
    assert pooled.loc["x", ["n", "c"]].tolist() == [8, 1] and pooled.loc["y", ["n", "c"]].tolist() == [8, 2]
    assert pooled.loc["x", "answers"] == ["1"] and pooled.loc["y", "unique_positives"] == 1
    assert pooled.loc["y", "modal_answer"] == "7" and pooled.loc["y", "modal_share"] == pytest.approx(4 / 8)
    assert pooled.loc["x", "modal_answer"] == "3" and pooled.loc["x", "modal_share"] == pytest.approx(4 / 8)
    with pytest.raises(BoundaryError, match="same prompts"):
        stats.pool_counts([a, b.iloc[:1]])


def test_welch_interval_adds_the_base_variance():
    summary = pd.DataFrame({"metric": ["d"], "mean": [-0.02], "sd": [0.01], "ci_low": [0.0], "ci_high": [0.0],
                            "n_seeds": [3]})
    ref = pd.DataFrame({"metric": "d", "value": [0.50, 0.52, 0.49, 0.51]})
    out = stats.with_reference_noise(summary, ref, ["metric"]).iloc[0]
    vt, vb = 0.01 ** 2 / 3, np.var(ref["value"], ddof=1) / 4
    half = sps.t.ppf(0.975, 2) * np.sqrt(vt + vb)  # conservative df: min(3 seeds, 4 draws) - 1
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((-0.02 - half, -0.02 + half))
    assert out["base_draws"] == 4 and out["base_sd"] == pytest.approx(np.std(ref["value"], ddof=1))
    same = stats.with_reference_noise(summary, ref.assign(value=0.5), ["metric"]).iloc[0]  # no base spread
    lo, hi = stats.t_interval(-0.02, 0.01, 3)
    assert (same["ci_low"], same["ci_high"]) == pytest.approx((lo, hi))
    one = stats.with_reference_noise(summary, ref.iloc[:1], ["metric"]).iloc[0]  # one draw: unknown, as it was
    assert np.isnan(one["base_sd"]) and one["ci_low"] == 0.0


def test_several_base_draws_are_pooled_and_widen_every_delta_interval(study):
    draws, runs, regimes = study
    several = analyse(draws, runs, regimes, ks=[1, 8, 32], resamples=200)
    pooled = analyse(stats.pool_counts(draws), runs, regimes, ks=[1, 8, 32], resamples=200)
    assert several.base_draws == 4 and pooled.base_draws == 1
    key = ["method", "metric", "regime", "k"]
    a, b = (d.summary.set_index(key).sort_index() for d in (several, pooled))
    counts = ["base_solved", "solved", "lost", "gained", "n_prompts"]  # from the pooled counts, alike
    pick = lambda t: t[t.index.get_level_values("metric").isin(counts)]["mean"]
    assert np.allclose(pick(a), pick(b).reindex(pick(a).index), equal_nan=True)
    for k in (1, 32):  # the base's pass@k: the mean over its draws of each draw's estimate
        want = np.mean([pass_at_k(d["n"].to_numpy(), d["c"].to_numpy(), k).mean() for d in draws])
        assert a.loc[("base", "passk", "all", k), "mean"] == pytest.approx(want)
    delta = a.xs("delta_passk", level="metric")
    delta = delta[delta.index.get_level_values("method") != "base"]
    assert (delta["base_draws"] == 4).all() and (delta["base_sd"] > 0).any()
    width = (delta["ci_high"] - delta["ci_low"]).dropna()
    plain = b.xs("delta_passk", level="metric").reindex(width.index)  # same seeds' spread, no base term
    assert (width > plain["ci_high"] - plain["ci_low"]).mean() > 0.8
    base_rows = several.frame[several.frame["method"] == "base"]
    assert (base_rows["n"] == 4 * N).all()


def test_singleton_clusters_are_the_prompt_bootstrap():
    rng = np.random.default_rng(1)
    values, strata = rng.normal(size=(40, 3)), np.repeat(["a", "b"], 20)
    plain = stats.bootstrap_means(values, 300, 5, strata)
    alone = stats.bootstrap_means(values, 300, 5, strata, clusters=[f"c{i}" for i in range(40)])
    assert np.allclose(plain[0], alone[0]) and all(np.allclose(plain[1][g], alone[1][g]) for g in plain[1])


def test_clusters_are_redrawn_whole():
    """Every prompt copied three times in one cluster: the cluster bootstrap's interval is the
    one of the distinct prompts; resampling the copies as independent narrows it by ~sqrt(3)."""
    rng = np.random.default_rng(2)
    distinct = rng.normal(size=50)
    copies, ids = np.repeat(distinct, 3), np.repeat([f"fact{i}" for i in range(50)], 3)
    alone = np.diff(stats.bootstrap_ci(distinct, 4000, 3)[0])[0]
    clustered = np.diff(stats.bootstrap_ci(copies, 4000, 3, clusters=ids)[0])[0]
    independent = np.diff(stats.bootstrap_ci(copies, 4000, 3)[0])[0]
    assert clustered == pytest.approx(alone, rel=0.1) and independent == pytest.approx(alone / np.sqrt(3), rel=0.1)


def test_clusters_that_span_strata_are_drawn_over_all_prompts():
    values = np.arange(6, dtype=float)
    strata, clusters = ["a", "a", "a", "b", "b", "b"], ["x", "y", "z", "x", "y", "w"]
    overall, per = stats.bootstrap_means(values, 500, 0, strata, clusters=clusters)
    assert np.isfinite(overall).all() and set(per) == {"a", "b"}
    lo, hi = stats.percentile_interval(per["b"])  # a draw may leave a stratum empty: NaN, left out
    assert 3 <= lo <= hi <= 5


def test_cluster_labels_leave_unmapped_prompts_alone():
    got = cluster_labels(["a", "b", "c"], {"a": "f1", "c": "f1"})
    assert list(got) == ["f1", "prompt:b", "f1"] and cluster_labels(["a"], None) is None


def test_diagnosis_with_clusters_widens_the_bootstrap(study):
    draws, runs, regimes = study
    ids = draws[0]["prompt_id"]
    shared = {pid: f"f{i // 6}" for i, pid in enumerate(ids)}  # ten facts of six prompts
    a = analyse(draws[0], runs, regimes, ks=[1, 32], resamples=500)
    b = analyse(draws[0], runs, regimes, ks=[1, 32], resamples=500, clusters=shared)
    pick = lambda d: d.bootstrap.query("method == 'grpo' and regime == 'all' and metric == 'delta_passk' and k == 1")
    wa, wb = (float((pick(d)["boot_high"] - pick(d)["boot_low"]).mean()) for d in (a, b))
    assert np.allclose(pick(a)["mean"], pick(b)["mean"]) and wb != wa


def test_counts_are_totals_with_each_seed_never_rounded_means(study):
    assert tables.counts_text([1, 2, 1]) == "4 (1, 2, 1)" and tables.counts_text([3]) == "3"
    assert tables.counts_text([]) == "n/a"
    draws, runs, regimes = study
    diag = analyse(draws, runs, regimes, ks=[1, 32], resamples=100)
    view = tables.View(main=["grpo", "pba"])
    lost = tables.per_seed(diag.metrics, "grpo", "lost", "all")
    md = tables.regime_diagnostics(diag, view).md()
    assert tables.counts_text(lost.to_numpy(float)) in md and "total over seeds" in md
    seeds = tables.boundary_seeds(diag, view).md()
    assert "total " in seeds and " ± " not in seeds.split("Base-solved → lost")[1].split("\n")[0]


def test_dropping_prompts_is_detected_more_often_the_more_are_dropped():
    p = np.random.default_rng(3).uniform(0.002, 0.08, 60)
    table = drop_sensitivity(p, seeds=3, n_eval=256, base_draws=4, k=256, drops=(0, 2, 12), sims=60, resamples=300)
    assert list(table["dropped"]) == [0, 2, 12]
    assert table["detected"].iloc[0] <= 0.1 and table["detected"].iloc[-1] >= 0.9
    assert table["delta"].is_monotonic_decreasing and table["lost"].is_monotonic_increasing
    assert abs(table["delta"].iloc[0]) < 0.01


def test_the_lost_null_is_drop_sensitivitys_studies_one_by_one():
    """drop_studies(D = 0) draws the same simulated studies as drop_sensitivity's D = 0 row: the
    mean of its lost counts is that row's `lost`, and its quantiles are the null of a lost count."""
    p = np.random.default_rng(5).uniform(0.002, 0.08, 40)
    kw = dict(seeds=2, n_eval=256, base_draws=4, k=256, sims=30, resamples=200)
    studies = drop_studies(p, 0, **kw)
    row = drop_sensitivity(p, drops=(0,), **kw).iloc[0]
    assert studies.shape == (30, 4) and (studies[:, 3] >= 0).all() and (studies[:, 3] % 1 == 0).all()
    assert studies[:, 3].mean() == row["lost"] and studies[:, 0].mean() == row["delta"]


def test_power_with_collapsed_prompts():
    rng = np.random.default_rng(4)
    n = 256
    p = np.concatenate([rng.uniform(0.002, 0.05, 300), rng.uniform(0.6, 0.9, 100)])
    counts = pd.DataFrame({"prompt_id": [str(i) for i in range(len(p))], "n": n, "c": rng.binomial(n, p)})
    t = power_table(counts, PAPER, prompts=[200], seeds=[3], effect=0.0, n_eval=n, k=256, sims=30,
                    resamples=300, collapse=(0, 10), base_draws=4)
    assert list(t["collapsed"]) == [0, 10] and t["power"].iloc[1] > t["power"].iloc[0]


def test_the_report_reads_every_base_draw_and_the_splits_clusters(tmp_path):
    from boundary.analysis import report

    counts = pd.DataFrame({"prompt_id": ["a", "b"], "n": 4, "c": [1, 0]})
    paths = {}
    for method, seed in (("base", 0), ("base", 1), ("grpo", 0)):
        path = tmp_path / "eval" / "diagnostic" / method / f"seed{seed}" / "counts.parquet"
        path.parent.mkdir(parents=True)
        counts.to_parquet(path)
        paths[(method, seed)] = path
    draws, runs, _ = report.load_split("diagnostic", paths)
    assert len(draws) == 2 and list(runs) == [("grpo", 0)]
    (tmp_path / "splits").mkdir()
    pd.DataFrame({"prompt_id": ["a", "b"]}).to_parquet(tmp_path / "splits" / "diagnostic.parquet")
    assert report.split_labels(tmp_path, "diagnostic", "diagnostic", "cluster") is None
    pd.DataFrame({"prompt_id": ["a", "b"], "cluster": ["3 + 4 = 7", "3 + 4 = 7"]}).to_parquet(
        tmp_path / "splits" / "bench_arith.parquet")
    assert report.split_labels(tmp_path, "arith", "diagnostic", "cluster").to_dict() == {"a": "3 + 4 = 7", "b": "3 + 4 = 7"}


def test_a_datasets_cluster_field_becomes_the_splits_cluster_column(tmp_path):
    from boundary.stages.data import load_dataset_file

    rows = [{"question": "Ann has 3 apples. She gets 4 more.", "answer": "7", "solution": "3 + 4 = 7"},
            {"question": "Bo has 3 pens. He gets 4 more.", "answer": "7", "solution": "3 + 4 = 7"},
            {"question": "Cy has 2 cups. She gets 5 more.", "answer": "7", "solution": "2 + 5 = 7"}]
    path = tmp_path / "arith.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    spec = {"path": str(path), "problem_field": "question", "answer_field": "answer"}
    assert "cluster" not in load_dataset_file(spec, "diagnostic")
    split = load_dataset_file({**spec, "cluster_field": "solution", "skill_field": "answer"}, "diagnostic")
    assert split["cluster"].tolist() == ["3 + 4 = 7", "3 + 4 = 7", "2 + 5 = 7"]
    assert split["skill"].tolist() == ["7", "7", "7"] and "skill" not in load_dataset_file(spec, "diagnostic")
    with pytest.raises(BoundaryError, match="fact"):
        load_dataset_file({**spec, "cluster_field": "fact"}, "diagnostic")


def test_near_copies_by_text_and_by_fact():
    from boundary.tasks.near_copy import near_copies, normalise

    assert normalise("Ann has 3,000 apples; she eats 1/2.") == ["ann", "has", "#", "apples", "she", "eats", "#"]
    train = [("Ann has 3 apples. She gets 4 more. How many apples does Ann have now?", "7"),
             ("A train travels 60 miles in 2 hours. What is its speed?", "30")]
    held = [("Bo has 5 apples. She gets 9 more. How many apples does Bo have now?", "14"),  # reworded numbers
            ("Cy has 4 pens. He gets 3 more. How many pens does Cy have?", "7"),          # same fact 3 + 4
            ("Find the area of a circle of radius 2.", "4\\pi")]
    found = near_copies(held, train)
    assert [(i, j, why) for i, j, why in found] == [(0, 0, "text"), (1, 0, "fact")]
