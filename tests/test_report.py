"""The report stage on a small synthetic artifact tree (no Snakemake)."""

import json

import numpy as np
import pandas as pd
import pytest

from boundary.analysis import report_settings
from boundary.analysis.report import build
from boundary.core import settings
from boundary.core.errors import BoundaryError
from boundary.core.passk import add_pass_at_k
from boundary.stages import report
from boundary.stages.evaluate import counts_from_samples

KS = [1, 4, 16, 64]


def counts(rng, ids, p, n=64, entropy=1.0):
    c = rng.binomial(n, p)
    df = pd.DataFrame({"prompt_id": ids, "n": n, "c": c,
                       "unique_positives": np.where(c > 0, rng.integers(1, 3, len(ids)), 0),
                       "entropy": entropy * rng.uniform(0.5, 1.5, len(ids))})
    df["answers"] = [[f"a{j}" for j in range(u)] for u in df["unique_positives"]]
    return add_pass_at_k(df, KS)


def modal(ids, method, seed):
    """Modal answers of a synthetic run: GRPO seed 1 answers "1" to every prompt; the others
    spread over five answers; pba_g4's files were written before the columns existed."""
    if method == "pba_g4":
        return {}
    if (method, seed) == ("grpo", 1):
        return {"modal_answer": "1", "modal_share": 1.0}
    return {"modal_answer": [str(i % 5) for i in range(len(ids))], "modal_share": 0.25}


def samples_of(table, method, seed):
    """Sample rows with exactly each prompt's c correct of n, their texts naming the run."""
    rows = [(pid, j, j < c, f"{method} s{seed} {pid}: {'right' if j < c else 'wrong'} {j % 2}")
            for pid, n, c in table[["prompt_id", "n", "c"]].itertuples(index=False) for j in range(n)]
    return pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "correct", "completion"])


def make_tree(root, methods=("grpo", "pba", "global_kl", "pba_g4"), seeds=(0, 1), benches=("testbed",)):
    rng = np.random.default_rng(0)
    P = 120
    ids = [f"d{i}" for i in range(P)]
    w = rng.beta(0.3, 1.2, P)
    w[:20] = 0
    cal = pd.DataFrame([(pid, j, bool(rng.random() < wi)) for pid, wi in zip(ids, w) for j in range(64)],
                       columns=["prompt_id", "sample_idx", "correct"])
    from dataclasses import replace

    from boundary.analysis.regimes import PAPER, counts_from_calibration, label_counts
    (root / "regimes").mkdir(parents=True)
    (root / "splits").mkdir(parents=True)
    pd.DataFrame({"prompt_id": ids, "problem": "12+34=", "answer": "1234", "source": "testbed",
                  "skill": ["Algebra" if i % 3 else "Geometry" for i in range(P)]}).to_parquet(
        root / "splits" / "diagnostic.parquet")
    label_counts(counts_from_calibration(cal), replace(PAPER, coverage_k=64)).to_parquet(root / "regimes/regimes.parquet")
    for split in ("diagnostic",) + tuple(benches):
        sids = ids if split == "diagnostic" else [f"{split}{i}" for i in range(60)]
        sw = w if split == "diagnostic" else rng.beta(0.5, 1.0, 60)
        for method, seed in [("base", 0)] + [(m, s) for m in methods for s in seeds]:
            p = sw if method == "base" else np.where(sw < 0.1, sw * (0.9 if "pba" in method else 0.2), np.minimum(1, sw * 1.5))
            d = root / "eval" / split / method / f"seed{seed}"
            d.mkdir(parents=True)
            if method == "base" and split != "diagnostic":  # through the evaluate stage's own code
                samples = pd.DataFrame([(pid, j, bool(rng.random() < pi), str(j % 3), 0.7) for pid, pi in zip(sids, p)
                                        for j in range(64)], columns=["prompt_id", "sample_idx", "correct", "answer",
                                                                     "entropy"])
                counts_from_samples(samples, KS).to_parquet(d / "counts.parquet")
                continue
            table = counts(rng, sids, p, entropy=1.0 if method == "base" else 0.5).assign(**modal(sids, method, seed))
            table.to_parquet(d / "counts.parquet")
            if split == "diagnostic":  # the samples behind the counts: the page quotes lost prompts' answers
                samples_of(table, method, seed).to_parquet(d / "samples.parquet")
    (root / "masks").mkdir()
    for name, G0 in (("pba", 8), ("g4", 4)):
        m = pd.DataFrame([(pid, e, int(rng.integers(0, 3)), G0) for pid in ids[:50] for e in range(2)],
                         columns=["prompt_id", "epoch", "successes", "G0"])
        m["w_hat"] = m["successes"] / G0
        m["action"] = np.where(m["successes"] > 0, "sharpen", "anchor")
        m["weight"] = (m["action"] == "anchor").astype(float)
        m["flip"] = (m["epoch"] > 0) & (m.groupby("prompt_id")["action"].shift() != m["action"])
        m.to_parquet(root / "masks" / f"{name}.parquet")
    log = pd.DataFrame({"step": range(5), "loss": 0.1, "reward": np.linspace(0, 1, 5), "kl": 0.0,
                        "entropy": np.linspace(1, 0.2, 5), "protected_fraction": 0.5})
    for m in ("grpo", "pba"):
        (root / "train" / m / "seed0").mkdir(parents=True)
        log.to_parquet(root / "train" / m / "seed0" / "log.parquet")


SETTINGS = {"baseline": "grpo", "method": "pba", "labels": {"grpo": "GRPO", "pba": "GRPO+PBA"},
            "benchmarks": {"testbed": "Testbed", "math500": "MATH500"}, "ks": KS,
            "controls": [{"method": "global_kl", "label": "Global KL", "setting": "beta=0.035"},
                         {"method": "entropy", "label": "Entropy bonus", "setting": "lambda=0.012"}],
            "ablations": [{"method": "pba_g4", "mask": "g4", "G0": 4, "tau": 0.1},
                          {"method": "pba", "mask": "pba", "G0": 8, "tau": 0.1}],
            "bootstrap": {"resamples": 200, "seed": 0}}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    make_tree(root)
    sfile = root / "report.json"
    sfile.write_text(json.dumps(SETTINGS))
    report.main(["--results", str(root), "--settings", str(sfile)])
    return root


def test_every_declared_output_exists(built):
    s = settings.load("report", json.dumps(SETTINGS))
    for name in report_settings.table_names(s):
        for ext in ("tex", "md", "csv"):
            assert (built / "tables" / f"{name}.{ext}").exists(), name
    for name in report_settings.figure_names(s):
        for ext in ("pdf", "png"):
            assert (built / "figures" / f"{name}.{ext}").stat().st_size > 0, name
    assert not list(built.glob(".report.*"))


def test_eval_counts_merges_every_run(built):
    ec = pd.read_parquet(built / "eval_counts.parquet")
    assert set(ec["benchmark"]) == {"diagnostic", "testbed"}
    # base + 4 methods x 2 seeds, 120 diagnostic and 60 testbed prompts
    assert len(ec) == 9 * 120 + 9 * 60
    assert {"pass_at_1", "pass_at_64", "answers", "regime", "p_base"} <= set(ec.columns)
    assert ec.loc[ec["benchmark"] == "diagnostic", "regime"].notna().all()
    split = pd.read_json(built / "release" / "diagnostic_split.jsonl", lines=True)
    assert len(split) == 120 and split["regime"].notna().all()


def test_missing_methods_and_benchmarks_say_not_run(built):
    controls = (built / "tables" / "controls.md").read_text()
    assert "Entropy bonus" in controls and "not run" in controls and "Not run: entropy" in controls
    assert "not run" in (built / "tables" / "seeds_math500.md").read_text()


def test_tables_match_the_counts(built):
    """The benchmark table's base p@1 equals the mean of c/n recomputed from eval_counts."""
    ec = pd.read_parquet(built / "eval_counts.parquet")
    base = ec[(ec["benchmark"] == "testbed") & (ec["method"] == "base")]
    want = 100 * (base["c"] / base["n"]).mean()
    assert f"{want:.1f}" in (built / "tables" / "benchmark_curves.md").read_text()
    tex = (built / "tables" / "benchmark_curves.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex
    gate = pd.read_csv(built / "tables" / "gate_ablation.csv")
    assert set(gate["required_successes"]) == {1} and list(gate["G0"].unique()) == [4, 8]
    assert "the mask shows" not in (built / "tables" / "gate_ablation.md").read_text()
    m = pd.read_parquet(built / "masks" / "pba.parquet")
    assert gate.loc[gate["G0"] == 8, "protected"].iloc[0] == pytest.approx((m["action"] != "sharpen").mean())


def test_diagnostics_audit_tables(built):
    t = pd.read_csv(built / "diagnostics" / "diagnostic" / "transitions.csv")
    assert (t.groupby(["method", "seed", "regime"])["count"].sum().xs("all", level="regime") == 120).all()
    assert (built / "diagnostics" / "testbed" / "pairs.csv").exists()


def test_missing_base_is_one_line(tmp_path):
    make_tree(tmp_path, methods=("grpo",), seeds=(0,), benches=())
    import shutil
    shutil.rmtree(tmp_path / "eval" / "diagnostic" / "base")
    with pytest.raises(BoundaryError, match="base/seed0/counts.parquet"):
        report.main(["--results", str(tmp_path), "--settings", json.dumps(SETTINGS)])
    assert not (tmp_path / "tables").exists()


def test_headline_interval_recomputed_from_counts(built):
    """Boundary lost for GRPO: recount from eval_counts + regimes, then scipy's t interval."""
    from scipy import stats as sps
    ec = pd.read_parquet(built / "eval_counts.parquet")
    d = ec[ec["benchmark"] == "diagnostic"]
    base = d[d["method"] == "base"].set_index("prompt_id")["c"]
    g = d[(d["method"] == "grpo") & (d["regime"] == "Boundary")]
    lost = g.assign(base_c=g["prompt_id"].map(base)).query("base_c > 0 and c == 0").groupby("seed").size()
    lost = lost.reindex(sorted(g["seed"].unique()), fill_value=0).to_numpy(float)
    mean, sd = lost.mean(), lost.std(ddof=1)
    half = sps.t.ppf(0.975, len(lost) - 1) * sd / np.sqrt(len(lost))
    h = pd.read_csv(built / "tables" / "headline_intervals.csv")
    row = h[h["quantity"] == "GRPO boundary lost prompts"].iloc[0]
    assert row["mean"] == pytest.approx(mean) and row["ci_low"] == pytest.approx(mean - half)


def test_skills_table_recounted_from_the_counts(built):
    """The split's skill labels: each skill's Boundary prompts and GRPO's lost prompts (total,
    then each seed's) recounted from eval_counts; the all row sums the skills."""
    ec = pd.read_parquet(built / "eval_counts.parquet")
    d = ec[ec["benchmark"] == "diagnostic"]
    skill = pd.read_parquet(built / "splits" / "diagnostic.parquet").set_index("prompt_id")["skill"]
    base = d[d["method"] == "base"].set_index("prompt_id")
    g = d[d["method"] == "grpo"].assign(skill=lambda x: x["prompt_id"].map(skill),
                                        base_c=lambda x: x["prompt_id"].map(base["c"]))
    lines = [[c.strip() for c in line.strip("|").split("|")]
             for line in (built / "tables" / "skills.md").read_text().splitlines() if line.startswith("| ")]
    rows = {cells[0]: dict(zip(lines[0], cells)) for cells in lines[1:]}
    assert list(rows) == ["Algebra", "Geometry", "all"]
    for name, sub in [*g.groupby("skill"), ("all", g)]:
        lost = sub.query("base_c > 0 and c == 0").groupby("seed").size().reindex([0, 1], fill_value=0)
        assert rows[name]["GRPO lost"] == f"{lost.sum()} ({lost[0]}, {lost[1]})"
        ids = base.index if name == "all" else skill.index[skill == name]
        assert int(rows[name]["Boundary"]) == int((base.loc[ids, "regime"] == "Boundary").sum())
    assert (built / "diagnostics" / "diagnostic" / "skills.csv").exists()


def test_answer_concentration_exposes_a_constant_answer_collapse(built):
    """GRPO seed 1 answers "1" everywhere: its seed shows "1" modal on 100% of the prompts; the
    diverse runs spread five answers over the prompts (the smallest wins a tie, 20% each);
    pba_g4's counts files lack the columns, so its row says n/a, not 0."""
    md = (built / "tables" / "answer_concentration.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in md.splitlines() if line.startswith("| ")}
    assert "| 25% | " in rows["Base"] and "0 (20%)" in rows["Base"]
    assert "62 ± 53%" in rows["GRPO"] and "s0: 0 (20%); s1: 1 (100%)" in rows["GRPO"]
    assert "s0: 0 (20%); s1: 0 (20%)" in rows["GRPO+PBA"] and "25 ± 0%" in rows["GRPO+PBA"]
    assert rows["pba_g4"].count("n/a") == 7 and "0%" not in rows["pba_g4"]
    assert "n/a: the counts files of pba_g4 carry no modal_share" in md
    data = pd.read_csv(built / "tables" / "answer_concentration.csv", dtype={"top_modal_answer": str})
    grpo1 = data[(data["method"] == "grpo") & (data["seed"] == 1)].iloc[0]
    assert (grpo1["top_modal_answer"], grpo1["top_modal_prompts"], grpo1["top_modal_share"]) == ("1", 120, 1.0)
    assert grpo1["modal_share_all"] == 1.0 and grpo1["modal_share_Boundary"] == 1.0
    assert data.loc[data["method"] == "pba_g4", "modal_share_all"].isna().all()
    tex = (built / "tables" / "answer_concentration.tex").read_text()
    assert "s1: 1 (100\\%)" in tex


def test_answers_in_table_cells_keep_markdown_and_latex_intact():
    from boundary.analysis import tables

    t = tables.Table("t", "c", ["Answer"], [["|x|"], ["2^{10}"], ["a" * 30]], pd.DataFrame())
    assert "| \\|x\\| |" in t.md()
    assert "2\\^{}{10}" in t.tex()
    assert tables._answer_text("a" * 30) == "a" * 21 + "..." and tables._answer_text(None) == "none answered"


def test_controls_list_each_method_once_and_soft_gates_by_kind():
    from types import SimpleNamespace

    from boundary.analysis import tables

    summary = pd.DataFrame([{"method": m, "metric": "passk", "regime": "all", "k": k, "mean": 0.3, "sd": 0.01}
                            for m in ("grpo", "pba", "pba_soft") for k in (1, 256)])
    diag = SimpleNamespace(summary=summary, ks=[1, 256])
    view = tables.View.from_settings(settings.resolve("report", {
        **SETTINGS, "controls": [{"method": "grpo", "label": "GRPO", "setting": "no KL"},
                                 {"method": "pba", "label": "GRPO+PBA", "setting": "G0=8"}],
        "ablations": [{"method": "pba_soft", "mask": "soft", "G0": 8, "tau": 0.1, "kind": "soft"}]}))
    rows = tables.controls(diag, view).rows
    assert [r[:2] for r in rows] == [["GRPO", "no KL"], ["GRPO+PBA", "G0=8"]]  # no default duplicates
    masks = pd.DataFrame([{"mask": "soft", "epoch": np.nan, "metric": m, "value": v}
                          for m, v in (("protected_fraction", 0.56), ("G0", 8), ("required_successes", 2))])
    table = tables.gate_ablation(diag, masks, view)
    assert table.rows[0][1].startswith("soft") and table.rows[0][2] == "–" and not table.notes


def test_methods_ranking_matches_the_counts(built):
    """Every method ranked by benchmark pass@1 and boundary Δpass@K, each with the seed-level
    t interval of stats.py, recomputed here from the per-prompt counts."""
    from boundary.analysis.stats import t_interval
    from boundary.core.passk import pass_at_k

    table = pd.read_csv(built / "tables" / "methods_ranking.csv")
    assert set(table["method"]) == {"grpo", "pba", "global_kl", "pba_g4"}
    regimes = pd.read_parquet(built / "regimes" / "regimes.parquet")
    boundary = set(regimes.loc[regimes["regime"] == "Boundary", "prompt_id"])
    k = max(KS)

    def split_value(split, method, seed, kk, ids=None):
        c = pd.read_parquet(built / "eval" / split / method / f"seed{seed}" / "counts.parquet")
        c = c[c["prompt_id"].isin(ids)] if ids is not None else c
        return np.mean(pass_at_k(c["n"].to_numpy(), c["c"].to_numpy(), kk))

    base_k = split_value("diagnostic", "base", 0, k, boundary)
    for r in table.itertuples():
        p1 = [split_value("testbed", r.method, s, 1) for s in (0, 1)]
        delta = [split_value("diagnostic", r.method, s, k, boundary) - base_k for s in (0, 1)]
        for values, prefix in ((p1, "passk1"), (delta, "boundary_delta")):
            lo, hi = t_interval(np.mean(values), np.std(values, ddof=1), 2)
            assert np.allclose([getattr(r, f"{prefix}_mean"), getattr(r, f"{prefix}_ci_low"),
                                getattr(r, f"{prefix}_ci_high")], [np.mean(values), lo, hi], atol=1e-9)
    assert list(table["rank_boundary"]) == sorted(table["rank_boundary"])  # sorted by the boundary
    assert list(table.sort_values("passk1_mean", ascending=False)["rank_passk1"]) == sorted(table["rank_passk1"])
    md = (built / "tables" / "methods_ranking.md").read_text()
    assert "Base" in md and "95% CI" in md


def test_per_prompt_files_carry_the_problem_beside_the_id(built):
    """The diagnostic split's problem text beside each prompt_id (none for a split without a
    splits/ file): eval_counts.parquet and the audit tables."""
    ec = pd.read_parquet(built / "eval_counts.parquet")
    on_split = ec["benchmark"] == "diagnostic"
    assert (ec.loc[on_split, "problem"] == "12+34=").all() and (ec.loc[~on_split, "problem"] == "").all()
    for name in ("prompts", "regimes"):
        table = pd.read_csv(built / "diagnostics" / "diagnostic" / f"{name}.csv")
        assert table.columns[-1] == "problem" and (table["problem"] == "12+34=").all()


def test_a_report_whose_calibration_cannot_hold_boundary_prompts_says_so(tmp_path, capsys):
    """Regimes labelled from 8 samples a prompt: the Boundary rows of every table say "no
    Boundary prompts" for the methods that ran, not "not run", and the ranking says why."""
    from dataclasses import replace

    from boundary.analysis.regimes import PAPER, label_counts

    make_tree(tmp_path)
    regimes = pd.read_parquet(tmp_path / "regimes" / "regimes.parquet")
    eight = regimes[["prompt_id"]].assign(n=8, c=np.minimum(8, (regimes["p_base"] * 8).round()).astype(int))
    label_counts(eight, replace(PAPER, coverage_k=64), "cal8").to_parquet(tmp_path / "regimes" / "regimes.parquet")
    assert "cal8: Boundary cannot hold any prompt at n=8" in capsys.readouterr().err
    # The stage's build of the report, tables only: what is checked here is text in the tables
    # (the stage around it, its figures and page: test_the_report_stage_prints_its_verdicts_and_page).
    tables = tmp_path / "report"
    build(tmp_path, settings.load("report", json.dumps(SETTINGS)), tables, tables_only=True)
    tables = tables / "tables"
    assert "Boundary cannot hold any prompt at n=8" in (tables / "regime_counts.md").read_text()
    for name in ("headline_intervals", "mechanism_summary", "methods_ranking"):
        text = (tables / f"{name}.md").read_text()
        assert "no Boundary prompts" in text and "not run" not in text.replace("Not run: Entropy bonus.", ""), name
    ranking = pd.read_csv(tables / "methods_ranking.csv")
    assert set(ranking["method"]) == {"grpo", "pba", "global_kl", "pba_g4"} and ranking["boundary_delta_mean"].isna().all()


def test_the_landing_page_shows_the_headline_and_links_every_table_and_figure(built):
    """results/{run}/report.html: the headline table and the regime pass@k figure inline, and a
    link that resolves to a file for every table and figure of the run."""
    import re

    html = (built / "report.html").read_text()
    assert "<h2>Headline (diagnostic split)</h2><table>" in html and "GRPO+PBA" in html
    assert "Seed-level two-sided 95% Student-t intervals" in html
    assert html.count("<img") == 1 and 'alt="pass@k per regime' in html
    links = re.findall(r'href="([^"]+)"', html)
    assert links and all((built / link).is_file() for link in links), [x for x in links if not (built / x).is_file()]
    s = settings.load("report", json.dumps(SETTINGS))
    for name in report_settings.table_names(s):
        assert {f"tables/{name}.{ext}" for ext in ("md", "csv", "tex")} <= set(links), name
    for name in report_settings.figure_names(s):
        assert {f"figures/{name}.{ext}" for ext in ("png", "pdf")} <= set(links), name
    assert "eval_counts.parquet" in links and "diagnostics/diagnostic/summary.csv" in links


def test_tables_the_config_cannot_fill_say_why_in_one_line(built, tmp_path):
    """No controls and no gate configured: the two tables say so, with no empty cells."""
    settings = {k: v for k, v in SETTINGS.items() if k not in ("controls", "ablations")}
    report.main(["--results", str(built), "--settings", json.dumps(settings), "--out", str(tmp_path),
                 "--masks"])
    controls = (tmp_path / "tables" / "controls.md").read_text()
    assert "No controls in this config" in controls and "GRPO+PBA" in controls
    gate = (tmp_path / "tables" / "gate_ablation.md").read_text()
    assert "No gate in this config" in gate and "|  |" not in gate and "| |" not in gate
    masks = (tmp_path / "tables" / "masks.md").read_text()
    assert "No masks in this config" in masks
    html = (tmp_path / "report.html").read_text()
    assert "No gate in this config" in html and "No controls in this config" in html


def test_the_landing_page_answers_which_prompts(built, capsys):
    """report.html leads with one verdict line per method, gives the headline's Δs with their
    intervals, and lists the worst lost prompts with the base's correct answers beside the
    policy's (read from the diagnostic split's samples, only those prompts' rows)."""
    import re

    html = (built / "report.html").read_text()
    verdicts = re.findall(r"<li>((?:GRPO|GRPO\+PBA): [^<]*)</li>", html)
    assert [v.split(":")[0] for v in verdicts] == ["GRPO", "GRPO+PBA"]
    assert all(re.search(r"Δpass@1 [+−]\d+\.\d \[[+−]\d+\.\d, [+−]\d+\.\d\] pts", v) for v in verdicts)
    assert all("prompt(s) lost" in v for v in verdicts)
    headline = html.split("<h2>Headline (diagnostic split)</h2>")[1].split("</table>")[0]
    assert "Δp@1 (pts) [95%]" in headline and headline.count("<span class='note'>[") >= 4
    lost = html.split("<h2>Worst lost prompts (diagnostic split)</h2>")[1].split("<h2>")[0]
    sides = re.findall(r"<div class='sides'><div>(.*?)</div><div>(.*?)</div></div>", lost)
    assert sides, lost[:500]
    for base_side, run_side in sides:
        assert "Base, verified correct" in base_side and "right" in base_side and "wrong" not in base_side
        assert "none correct" in run_side and "wrong" in run_side and "right" not in run_side
    assert "Problem:</p><pre>12+34=</pre>" in lost


def test_the_report_stage_prints_its_verdicts_and_page(tmp_path, capsys):
    make_tree(tmp_path / "run", methods=("grpo", "pba"), seeds=(0,))
    report.main(["--results", str(tmp_path / "run"), "--settings", json.dumps(SETTINGS), "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["method", "seeds", "Δp@1"] and out[2].startswith("GRPO ")
    assert [line.split(":")[0] for line in out[4:6]] == ["GRPO", "GRPO+PBA"]
    assert out[-1] == f"report: {tmp_path / 'o' / 'report.html'} (tables, figures and eval_counts.parquet beside it)"
