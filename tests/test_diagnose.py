"""diagnose: metrics against direct per-prompt computations, and the CLI's contract."""

import json
import re
from dataclasses import replace
from math import comb

import numpy as np
import pandas as pd
import pytest

from boundary.analysis import diagnose as dg
from boundary.analysis.regimes import PAPER, label_counts
from boundary.core.errors import BoundaryError
from boundary.readers.counts import _unique_positives as unique_positives
from boundary.readers.counts import load_counts


def direct_passk(n, c, k):
    return 1 - comb(n - c, k) / comb(n, k)


@pytest.fixture()
def data():
    rng = np.random.default_rng(3)
    P, n = 80, 32
    ids = [f"q{i}" for i in range(P)]
    w = rng.beta(0.4, 1.0, P)
    w[:10] = 0
    mk = lambda p, ent: pd.DataFrame({"prompt_id": ids, "n": n, "c": rng.binomial(n, p),
                                      "entropy": ent * rng.uniform(0.5, 1.5, P),
                                      "unique_positives": rng.integers(0, 3, P).astype(float)})
    cal = mk(w, 1)[["prompt_id", "n", "c"]]
    base = mk(w, 1.0)
    runs = {("grpo", s): mk(np.where(w < 0.2, w * 0.2, w), 0.3) for s in range(3)}
    runs.update({("pba", s): mk(w, 0.8) for s in range(3)})
    regimes = label_counts(cal, replace(PAPER, coverage_k=32))
    return base, runs, regimes


def test_metrics_against_direct_computation(data):
    base, runs, regimes = data
    d = dg.analyse(base, runs, regimes, ks=[1, 4, 32], resamples=100, pairs=[("pba", "grpo")])
    reg = regimes.set_index("prompt_id")["regime"]
    b = base.set_index("prompt_id")
    for (m, s), run in runs.items():
        r = run.set_index("prompt_id")
        for regime in ["all", "Boundary", "Reachable"]:
            ids = b.index if regime == "all" else reg[reg == regime].index
            def get(metric, k=None):
                x = d.metrics
                x = x[(x["method"] == m) & (x["seed"] == s) & (x["regime"] == regime) & (x["metric"] == metric)]
                return (x if k is None else x[x["k"] == k])["value"].iloc[0]
            for k in (1, 4, 32):
                t = np.mean([direct_passk(32, int(r.loc[i, "c"]), k) for i in ids])
                bb = np.mean([direct_passk(32, int(b.loc[i, "c"]), k) for i in ids])
                assert get("passk", k) == pytest.approx(t)
                assert get("delta_passk", k) == pytest.approx(t - bb)
            assert get("delta_cov") == pytest.approx(get("delta_passk", 32))
            lost = sum((b.loc[i, "c"] > 0) and (r.loc[i, "c"] == 0) for i in ids)
            gained = sum((b.loc[i, "c"] == 0) and (r.loc[i, "c"] > 0) for i in ids)
            assert get("lost") == lost and get("gained") == gained
            assert get("entropy_retained") == pytest.approx(r.loc[ids, "entropy"].mean() / b.loc[ids, "entropy"].mean())
            assert get("unique_positives") == pytest.approx(r.loc[ids, "unique_positives"].mean())
            t = d.transitions
            cells = t[(t["method"] == m) & (t["seed"] == s) & (t["regime"] == regime)]
            assert cells["count"].sum() == len(ids) and len(cells) == 4
            assert cells[cells["base_solved"] & ~cells["trained_solved"]]["count"].iloc[0] == lost


def test_summary_and_pairs(data):
    base, runs, regimes = data
    d = dg.analyse(base, runs, regimes, ks=[1, 32], resamples=100, pairs=[("pba", "grpo")])
    per = d.metrics.query("metric == 'passk' and k == 1 and regime == 'all'").set_index(["method", "seed"])["value"]
    s = d.summary.query("method == 'grpo' and metric == 'passk' and k == 1 and regime == 'all'").iloc[0]
    vals = per.loc["grpo"].to_numpy()
    assert s["mean"] == pytest.approx(vals.mean()) and s["sd"] == pytest.approx(vals.std(ddof=1)) and s["n_seeds"] == 3
    p = d.pairs.query("metric == 'passk' and k == 1 and regime == 'all'").iloc[0]
    assert p["mean"] == pytest.approx((per.loc["pba"] - per.loc["grpo"]).mean())
    boot = d.bootstrap.query("method == 'grpo' and seed == 0 and metric == 'passk' and k == 1 and regime == 'all'").iloc[0]
    assert boot["boot_low"] < boot["mean"] < boot["boot_high"]


def test_unique_positives_from_answers():
    assert unique_positives(["1", "2", "2", ""], "f") == 2
    assert unique_positives('["1", "x"]', "f") == 2
    assert unique_positives([], "f") == 0


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_counts_files_with_and_without_the_modal_answer(tmp_path, suffix):
    """Counts files written before modal_answer/modal_share existed read as not measured
    (NaN, None), never as 0; where present, answers stay text as written ("007", not 7)."""
    old = pd.DataFrame({"prompt_id": ["a", "b"], "n": [4, 4], "c": [1, 0]})
    counts = load_counts(write(old, tmp_path / f"old{suffix}"))
    assert counts["modal_share"].isna().all() and counts["modal_answer"].isna().all()
    new = old.assign(modal_answer=["007", ""], modal_share=[0.75, 0.0])
    counts = load_counts(write(new, tmp_path / f"new{suffix}"))
    assert counts["modal_answer"].tolist() == ["007", ""] and counts["modal_share"].tolist() == [0.75, 0.0]
    with pytest.raises(BoundaryError, match=r"modal_share must lie in \[0, 1\] \(prompt_id b\)"):
        load_counts(write(new.assign(modal_share=[0.5, 1.5]), tmp_path / f"bad{suffix}"))


def test_top_modal_answer_across_prompts():
    """Per run, the answer modal on the most prompts and their share: a run whose prompts nobody
    answered ("") has share 0; one whose counts carry no modal answers (None) NaN, not 0."""
    f = pd.DataFrame({"method": ["one"] * 3 + ["old"] * 2 + ["mute"] * 2, "seed": [0, 0, 0, 1, 1, 2, 2],
                      "modal_answer": ["1", "1", "", None, None, "", ""],
                      "modal_share": [1.0, 1.0, 0.0, np.nan, np.nan, 0.0, 0.0]})
    top = dg.top_modal_answers(f).set_index("method")
    assert top.loc["one", ["answer", "count", "prompts"]].tolist() == ["1", 2, 3]
    assert top.loc["one", "share"] == pytest.approx(2 / 3)
    assert top.loc["old", "answer"] is None and np.isnan(top.loc["old", "share"])
    assert top.loc["mute", "answer"] is None and top.loc["mute", "share"] == 0


def test_mask_metrics():
    m = pd.DataFrame({"prompt_id": ["a", "b", "a", "b"], "epoch": [0, 0, 1, 1],
                      "action": ["anchor", "sharpen", "sharpen", "sharpen"], "weight": [1.0, 0, 0, 0],
                      "flip": [False, False, True, False]})
    out = dg.mask_metrics({"pba": m})
    pooled = out[out["epoch"].isna()].set_index("metric")["value"]
    assert pooled["protected_fraction"] == 0.25 and pooled["flips"] == 1 and pooled["flip_rate"] == 0.5
    e0 = out[out["epoch"] == 0].set_index("metric")["value"]
    assert e0["protected_fraction"] == 0.5


def write(df, path):
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        df.to_parquet(path)
    return str(path)


def test_cli_skills_say_which_skills_lose_coverage(data, tmp_path):
    """--skills: a label per prompt (one left out: "(no label)"); the skills table and CSV count
    every prompt once; a prompt labelled twice is one line."""
    base, runs, regimes = data
    labels = base[["prompt_id"]].assign(skill=["even" if i % 2 == 0 else "odd" for i in range(len(base))]).iloc[1:]
    args = ["--base", write(base, tmp_path / "base.parquet"), "--skills", write(labels, tmp_path / "skills.csv"),
            "--calibration", write(regimes[["prompt_id", "n", "c"]], tmp_path / "cal.csv"), "--no-figures",
            "--resamples", "50", "--ks", "1,4,32", "--coverage-k", "32", "--out", str(tmp_path / "out")]
    for (m, sd), r in runs.items():
        args += ["--trained", f"{m}:{sd}=" + write(r, tmp_path / f"{m}{sd}.parquet")]
    dg.main(args)
    table = pd.read_csv(tmp_path / "out" / "skills.csv")
    n = table[(table["method"] == "base") & (table["metric"] == "n_prompts")].set_index("skill")["mean"]
    assert n.to_dict() == {"all": len(base), "even": len(base) // 2 - 1, "odd": len(base) // 2, dg.UNLABELLED: 1}
    md = (tmp_path / "out" / "tables" / "skills.md").read_text()
    assert [line.split("|")[1].strip() for line in md.splitlines()[4:8]] == [dg.UNLABELLED, "even", "odd", "all"]
    write(pd.concat([labels, labels.iloc[:1]]), tmp_path / "twice.csv")
    with pytest.raises(BoundaryError, match="twice.csv: prompt_id .* is given twice"):
        dg.main(args[:2] + ["--skills", str(tmp_path / "twice.csv")] + args[4:])


def test_cli_end_to_end(data, tmp_path, capsys):
    base, runs, regimes = data
    args = ["--base", write(base.assign(answers=[["1"]] * len(base)), tmp_path / "base.jsonl"),
            "--calibration", write(regimes[["prompt_id", "n", "c"]], tmp_path / "cal.csv")]
    for (m, s), r in runs.items():
        args += ["--trained", f"{m}:{s}=" + write(r, tmp_path / f"{m}{s}.parquet")]
    dg.main(args + ["--ks", "1,4,32", "--coverage-k", "32", "--resamples", "200", "--pair", "pba", "grpo",
                    "--labels", "pba=GRPO+PBA", "--out", str(tmp_path / "out")])
    out = tmp_path / "out"
    labels = pd.read_csv(out / "regimes.csv")
    assert list(labels.columns) == ["prompt_id", "p_base", "regime", "n", "c", "label_prob", "flip_prob", "problem"]
    assert labels["label_prob"].between(0, 1).all() and labels["flip_prob"].between(0, 1).all()
    counts_table = (out / "tables" / "regime_counts.md").read_text()
    assert "Mean P(label)" in counts_table and "empirical-Bayes prior Beta(" in counts_table
    robust_table = (out / "tables" / "boundary_robust.md").read_text()
    assert "robust (c ≥ 3)" in robust_table and "claim different things" in robust_table
    assert list(pd.read_csv(out / "passk.csv").columns) == ["method", "seed", "regime", "k", "value"]
    assert list(pd.read_csv(out / "transitions.csv").columns) == ["method", "seed", "regime", "base_solved",
                                                                 "trained_solved", "count"]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns) == ["method", "metric", "regime", "k", "mean", "sd", "ci_low", "ci_high", "n_seeds"]
    assert {"passk", "delta_passk"} <= set(summary["metric"]) and "all" in set(summary["regime"])
    for name in ("passk_curves", "regime_passk", "transitions", "p_base_hist", "paired_gain"):
        assert (out / "figures" / f"{name}.png").exists()
    assert (out / "tables" / "boundary_seeds.tex").exists()
    assert "n/a" in (out / "tables" / "answer_concentration.md").read_text()  # these counts carry no modal answers
    assert "No skill labels" in (out / "tables" / "skills.md").read_text()  # no --skills
    assert "GRPO+PBA mean" in (out / "tables" / "boundary_seeds.md").read_text()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "one --base draw" in warnings[0]  # independent calibration given


@pytest.mark.parametrize("breakage, message", [
    (lambda df: df.drop(columns="c"), "missing column"),
    (lambda df: df.assign(c=df["n"] + 1), "c > n"),
    (lambda df: pd.concat([df, df.iloc[:1]]), "duplicate prompt_id"),
    (lambda df: df.iloc[:0], "no rows"),
    (lambda df: df.assign(n=1.5), "whole numbers"),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(data, tmp_path, breakage, message):
    base, runs, _ = data
    good = write(base, tmp_path / "base.parquet")
    bad = write(breakage(runs[("grpo", 0)]), tmp_path / "bad.csv")
    with pytest.raises(BoundaryError, match=message) as err:
        dg.main(["--base", good, "--trained", f"grpo:0={bad}", "--out", str(tmp_path / "out")])
    assert "bad.csv" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


def test_cli_other_errors(data, tmp_path, capsys):
    base, runs, _ = data
    good = write(base, tmp_path / "base.parquet")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(BoundaryError, match="unknown file type"):
        dg.main(["--base", good, "--trained", f"grpo:0={tmp_path / 'x.txt'}", "--out", str(tmp_path / "o")])
    with pytest.raises(BoundaryError, match="NAME:SEED=PATH"):
        dg.main(["--base", good, "--trained", "grpo=x.csv", "--out", str(tmp_path / "o")])
    short = write(runs[("grpo", 0)].iloc[:-1], tmp_path / "short.parquet")
    with pytest.raises(BoundaryError, match="missing"):
        dg.main(["--base", good, "--trained", f"grpo:0={short}", "--out", str(tmp_path / "o")])
    # Without --calibration the base labels the regimes, with a warning.
    r = write(runs[("grpo", 0)], tmp_path / "g.parquet")
    dg.main(["--base", good, "--trained", f"grpo:0={r}", "--ks", "1,32", "--resamples", "50", "--no-figures",
             "--out", str(tmp_path / "o")])
    assert "not independent" in capsys.readouterr().err
    assert (tmp_path / "o" / "summary.csv").exists()


def test_cli_via_dispatcher(tmp_path, capsys):
    from boundary.cli import main
    (tmp_path / "b.csv").write_text("prompt_id,n,c\na,4,5\n")
    (tmp_path / "g.csv").write_text("prompt_id,n,c\na,4,1\n")
    assert main(["diagnose", "--base", str(tmp_path / "b.csv"), "--trained", f"g:0={tmp_path / 'g.csv'}",
                 "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "b.csv: c > n for prompt_id a" in err


def test_bootstrap_deltas_are_paired(data):
    """A run identical to the base has a zero-width delta interval (same resamples)."""
    base, runs, regimes = data
    d = dg.analyse(base, {("copy", 0): base.copy(), **runs}, regimes, ks=[1, 32], resamples=300)
    b = d.bootstrap
    delta = b[(b["method"] == "copy") & (b["metric"] == "delta_passk")]
    assert len(delta) == 2 * 5 and (delta["boot_low"] == 0).all() and (delta["boot_high"] == 0).all()
    pk = b[(b["method"] == "copy") & (b["metric"] == "passk")]
    assert (pk["boot_low"] < pk["boot_high"]).any()


def test_a_regime_the_calibration_n_cannot_populate_is_named_with_the_n_it_needs():
    from boundary.analysis.regimes import REGIMES, label, unpopulated

    th = PAPER
    (line,) = unpopulated([8], th)
    assert line == ("Boundary cannot hold any prompt at n=8 (p_base = c/n; Boundary: p_base < 0.1 with "
                    "coverage@256 > 0.4): needs n >= 11")
    # The rule, by brute force over every c of every n: Boundary is reachable from n = 11 on.
    reach = {n: set(label(np.arange(n + 1) / n, th)) for n in range(1, 600)}
    assert [n for n in reach if "Boundary" not in reach[n]] == list(range(1, 11))
    assert unpopulated([11], th) == [] and unpopulated([8, 16], th) == []  # some prompt can be Boundary
    assert unpopulated([8, 9, 10], th)[0].startswith("Boundary cannot hold any prompt at n=8 to 10")
    assert [x.split()[0] for x in unpopulated([1], th)] == ["Reachable", "Boundary"]
    assert set(REGIMES) == reach[64]


def test_diagnose_with_an_empty_boundary_says_so(data, tmp_path, capsys):
    """A calibration of 8 samples a prompt: one warning with the n Boundary needs, the regime
    table repeats it, and the tables print "no Boundary prompts" for methods that ran."""
    base, runs, regimes = data
    rng = np.random.default_rng(0)
    cal = regimes[["prompt_id"]].assign(n=8, c=rng.binomial(8, 0.3, len(regimes)))
    args = ["--base", write(base, tmp_path / "base.parquet"), "--calibration", write(cal, tmp_path / "cal8.csv"),
            "--ks", "1,4,32", "--resamples", "50", "--no-figures", "--pair", "pba", "grpo", "--out", str(tmp_path / "o")]
    for (m, s), r in runs.items():
        args += ["--trained", f"{m}:{s}=" + write(r, tmp_path / f"{m}{s}.parquet")]
    dg.main(args)
    err = capsys.readouterr().err
    assert err.count("warning:") - err.count("warning: one --base draw") == 1
    assert f"warning: {tmp_path / 'cal8.csv'}: Boundary cannot hold any prompt at n=8 (" in err and "needs n >= 11" in err
    tables = tmp_path / "o" / "tables"
    assert "Boundary cannot hold any prompt at n=8" in (tables / "regime_counts.md").read_text()
    headline = (tables / "headline_intervals.md").read_text()
    assert "| grpo boundary lost prompts | no Boundary prompts | no Boundary prompts |" in headline
    assert "not run" not in headline.lower()
    seeds_table = (tables / "boundary_seeds.md").read_text()
    assert "no Boundary prompts" in seeds_table and "not run" not in seeds_table.lower()  # counts too


def test_per_prompt_outputs_and_error_lines_carry_the_problem(tmp_path):
    """Prompts keyed by their text get opaque ids (h + 12 hex digits); prompts.csv and
    regimes.csv carry the problem beside them, and an error line naming a prompt quotes it."""
    long = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."
    texts = ["What is 2 + 3?", long]
    rows = lambda ts: pd.DataFrame([{"prompt": t, "completion": "x", "correct": j < 2} for t in ts for j in range(4)])
    base = write(rows(texts), tmp_path / "base.jsonl")
    trained = write(rows(texts), tmp_path / "trained.jsonl")
    dg.main(["--base", base, "--trained", f"g:0={trained}", "--ks", "1,4", "--coverage-k", "4", "--resamples", "20",
             "--no-figures", "--out", str(tmp_path / "o")])
    for name in ("prompts", "regimes"):
        table = pd.read_csv(tmp_path / "o" / f"{name}.csv")
        assert table.columns[-1] == "problem" and table["prompt_id"].str.fullmatch(r"h[0-9a-f]{12}").all()
        assert set(table["problem"]) == {"What is 2 + 3?", long[:59].rstrip() + "…"}
    short = write(rows(texts[:1]), tmp_path / "short.jsonl")
    with pytest.raises(BoundaryError, match=r"short.jsonl: 1 base prompt_id\(s\) missing \(e.g. h[0-9a-f]{12} "
                                            r"\('Natalia sold clips .*…'\)\)$"):
        dg.main(["--base", base, "--trained", f"g:0={short}", "--out", str(tmp_path / "o2")])


def test_regimes_from_the_base_itself_are_not_captioned_a_calibration(data, tmp_path):
    base, runs, _ = data
    b = write(base, tmp_path / "base.parquet")
    dg.main(["--base", b, "--trained", f"grpo:0={write(runs[('grpo', 0)], tmp_path / 'g.parquet')}", "--ks", "1,32",
             "--resamples", "50", "--out", str(tmp_path / "o")])
    caption = (tmp_path / "o" / "tables" / "regime_counts.md").read_text().splitlines()[0]
    assert caption == ("**Regimes of the diagnostic split (base evaluation base.parquet, not independent "
                       "(no --calibration))**")
    assert (tmp_path / "o" / "figures" / "transitions.png").exists()


def test_the_terminal_gets_a_results_table_then_the_page_and_each_short_warning_once(data, tmp_path, capsys):
    """diagnose prints a compact table (Δp@1, Δp@K with intervals, lost and significant per
    method, the finding), then the report's path; its warnings are one short line each, each
    once, and name no pipeline config key."""
    from boundary.cli import main

    base, runs, _ = data
    args = ["diagnose", "--base", write(base, tmp_path / "base.parquet"), "--ks", "1,4,32", "--resamples", "100",
            "--pair", "pba", "grpo", "--labels", "pba=GRPO+PBA", "--labels", "grpo=GRPO", "--out", str(tmp_path / "o")]
    for (m, s), r in runs.items():
        args += ["--trained", f"{m}:{s}=" + write(r.assign(n=r["n"].where(r.index > 0, 16)), tmp_path / f"{m}{s}.csv")]
    assert main(args) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "diagnose: 6 run(s) against the base on 80 prompts"
    assert lines[1].split() == ["method", "seeds", "Δp@1", "(pts)", "Δp@4", "(pts)", "lost", "significant", "finding"]
    assert [line.split()[:2] for line in lines[3:5]] == [["GRPO", "3"], ["GRPO+PBA", "3"]]
    assert re.search(r"^GRPO +3 +[+−]\d+\.\d \[[+−]\d+\.\d, [+−]\d+\.\d\] +[+−]\d+\.\d \[", lines[3])
    assert lines[-1] == f"report: {tmp_path / 'o' / 'report.html'}" and len(lines) == 6
    warnings = err.splitlines()
    assert all(w.startswith("warning: ") for w in warnings) and len(warnings) == len(set(warnings))
    assert all(len(w.replace(str(tmp_path), "")) <= 130 for w in warnings), warnings
    assert not any(key in w for w in warnings for key in ("evaluate.", "base_seeds", "calibration.", "config"))
    assert sum("n per prompt ranges" in w for w in warnings) == 6  # one a file, each naming its file
    assert sum("exceed the smallest n" in w for w in warnings) == 1


def test_a_trained_run_that_is_the_bases_own_dump_is_refused_naming_the_step_meant(tmp_path):
    """verl dump folders: the trained run reading the base's file at the base's step is refused
    before anything is read, naming the @step= meant; the same plain file given twice too."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for step in (0, 100, 200):
        (dumps / f"{step}.jsonl").write_text(json.dumps({"input": "q", "output": "a", "score": 1.0, "step": step}) + "\n")
    out = ["--out", str(tmp_path / "o")]
    cases = [
        ([f"{dumps}@step=0"], f"grpo:0={dumps}@step=0", f"did you mean --trained grpo:0={dumps}@step=200?"),
        ([str(dumps)], f"grpo:0={dumps}@step=200", f"did you mean --base {dumps}@step=0?"),
        ([str(dumps)], f"grpo:0={dumps}", f"did you mean --trained grpo:0={dumps}@step=100?"),
    ]
    for base, trained, meant in cases:
        with pytest.raises(BoundaryError) as err:
            dg.main(sum((["--base", b] for b in base), []) + ["--trained", trained] + out)
        line = str(err.value)
        assert line.startswith(f"--trained {trained}: reads {dumps}/") and "the same file as --base" in line
        assert meant in line and line.endswith("(dumps has steps 0, 100, 200)".replace("dumps", str(dumps)))
    with pytest.raises(BoundaryError, match="the same file as --base .*another file$"):
        dg.main(["--base", str(dumps / "0.jsonl"), "--trained", f"g:0={dumps / '0.jsonl'}"] + out)
    assert not (tmp_path / "o").exists()


def test_chat_templated_prompts_are_quoted_by_their_question(tmp_path):
    """Prompts that are a chat template's rendering (ChatML with special tokens; decoded without
    them, as verl dumps hold it) are quoted by their question in prompts.csv, not by the
    template's first words."""
    chatml = "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    plain = "system\nPlease reason step by step.\nuser\n{}\nassistant\n"
    questions = ["What is 2 + 3?", "Compute 7 times 6."]
    for i, template in enumerate((chatml, plain)):
        rows = pd.DataFrame([{"prompt": template.format(q), "completion": "x", "correct": j < 2}
                             for q in questions for j in range(4)])
        base, trained = write(rows, tmp_path / f"b{i}.jsonl"), write(rows, tmp_path / f"t{i}.jsonl")
        dg.main(["--base", base, "--trained", f"g:0={trained}", "--ks", "1,4", "--coverage-k", "4", "--resamples",
                 "20", "--no-figures", "--out", str(tmp_path / f"o{i}")])
        assert set(pd.read_csv(tmp_path / f"o{i}" / "prompts.csv")["problem"]) == set(questions)


def test_figures_keep_their_legend_and_panels_when_a_regime_or_a_quantity_is_empty(data, monkeypatch, tmp_path):
    """The regime figure's legend names base and every method also when its first regime
    (SolvedEasy) has no prompt; training.png keeps its KL panel, saying why it is empty; the
    pass@k figure of diagnose is not titled by its input format."""
    from boundary.analysis import figures, tables

    base, runs, regimes = data
    hard = regimes.assign(regime=regimes["regime"].replace("SolvedEasy", "Reachable"))
    d = dg.analyse(base, runs, hard, ks=[1, 4, 32], resamples=50)
    view = tables.View.for_diagnose(["grpo", "pba"], pair=("pba", "grpo"))
    drawn = {}
    monkeypatch.setattr(figures, "save", lambda fig, folder, name: drawn.update({name: fig}) or [])
    figures.regime_passk(d, view, tmp_path)
    fig = drawn["regime_passk"]
    assert fig.axes[0].get_title() == "SolvedEasy (n=0)" and "no SolvedEasy prompts" in fig.axes[0].texts[0].get_text()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["Base", "grpo", "pba"]
    logs = pd.DataFrame({"method": "grpo", "seed": 0, "step": range(4), "reward": 0.5, "entropy": 1.0,
                         "kl": np.nan, "protected_fraction": 0.0})
    figures.training_curves(logs, view, tmp_path)
    axes = drawn["training"].axes
    assert [ax.get_title() for ax in axes] == ["reward", "entropy", "KL(π ‖ π_base)", "protected fraction"]
    assert axes[2].texts[0].get_text().startswith("not logged") and drawn["training"].legends
    figures.write_diagnose_figures(d, view, tmp_path)
    assert drawn["passk_curves"].axes[0].get_title() == "pass@k over every prompt"
