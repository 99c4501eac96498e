"""lab/studies/2026-11-28-qwen15b-fidelity/bench_fidelity.py (issue 41, item 2) end to end on a CPU with the tiny model: the
tables it writes, every Fisher p-value and total recomputed from the written counts and
samples (the combined tests against their exact null by enumeration), and the stock half the
same whether one process or several shards draw it, resumed prompt by prompt."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[3]
PROMPTS = {"a": ("12+34=", "4"), "b": ("5+6=", "1"), "c": ("7+8=", "5"), "d": ("1+2=", "3")}
N = 32
TINY = ["--cpu", "--config", str(ROOT / "config" / "config.yaml"), "--n", str(N), "--max-new-tokens", "2",
        "--prompts", "3", "--draws", "20000"]
PER_PROMPT = ["prompt_id", "n_project", "c_project", "rate_project", "tokens_project", "tokens_sd_project",
              "capped_project", "n_stock", "c_stock", "rate_stock", "tokens_stock", "tokens_sd_stock", "capped_stock",
              "fisher_p", "regime_project", "regime_stock", "modal_share_project", "modal_share_stock"]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_fidelity

    return bench_fidelity


@pytest.fixture
def split(tmp_path):
    path = tmp_path / "split.parquet"
    pd.DataFrame({"prompt_id": list(PROMPTS), "problem": [p for p, _ in PROMPTS.values()],
                  "prompt": [p for p, _ in PROMPTS.values()], "answer": [a for _, a in PROMPTS.values()],
                  "source": "t"}).to_parquet(path)
    return path


def _run(bench, monkeypatch, *args):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # restored after the test (--cpu sets it)
    bench.main(TINY + [str(a) for a in args])


def _exact_conditional_p(c1, n1, c2, n2):
    """The direction and omnibus p-values by enumerating every table set with the margins fixed."""
    supports = []
    for a, m, b, k in zip(c1, n1, c2, n2):
        good, total = a + b, m + k
        xs = np.arange(max(0, good - k), min(good, m) + 1)
        supports.append((xs, stats.hypergeom.pmf(xs, total, good, m), m * good / total,
                         m * k * good * (total - good) / (total ** 2 * (total - 1))))
    seen_d = sum(a - e for a, (_, _, e, _) in zip(c1, supports))
    seen_q = sum((a - e) ** 2 / v for a, (_, _, e, v) in zip(c1, supports) if v > 0)
    p_d = p_q = 0.0
    for combo in itertools.product(*[list(zip(xs, pmf)) for xs, pmf, _, _ in supports]):
        prob = np.prod([p for _, p in combo])
        d = sum(x - e for (x, _), (_, _, e, _) in zip(combo, supports))
        q = sum((x - e) ** 2 / v for (x, _), (_, _, e, v) in zip(combo, supports) if v > 0)
        p_d += prob * (abs(d) >= abs(seen_d) - 1e-9)
        p_q += prob * (q >= seen_q - 1e-9)
    return p_d, p_q


def test_the_tables_equal_a_recomputation_from_the_written_counts(bench, split, tmp_path, monkeypatch, capsys,
                                                                 tiny_model_dir):
    from boundary.analysis.regimes import PAPER, label

    out, model = tmp_path / "out", tiny_model_dir
    # one process: project, stock, compare
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", out)
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "fidelity.csv", dtype={"prompt_id": str})
    totals = pd.read_csv(out / "totals.csv").iloc[0]
    assert table.columns.tolist() == PER_PROMPT
    assert table["prompt_id"].tolist() == ["a", "b", "c"]  # the split's first --prompts, in order
    assert (table["n_project"] == N).all() and (table["n_stock"] == N).all()
    for row in table.itertuples():
        expected = stats.fisher_exact([[row.c_project, row.n_project - row.c_project],
                                       [row.c_stock, row.n_stock - row.c_stock]])[1]
        assert row.fisher_p == pytest.approx(expected, rel=1e-9)
        assert row.regime_project == label([row.c_project / row.n_project], PAPER)[0]
        assert row.regime_stock == label([row.c_stock / row.n_stock], PAPER)[0]

    # the counts and lengths are the written samples'
    project = pd.read_parquet(out / "project.parquet")
    stock = pd.concat([pd.read_parquet(p) for p in sorted((out / "stock").glob("0*.parquet"))])
    for side, samples in (("project", project), ("stock", stock)):
        g = samples[samples["prompt_id"].isin(table["prompt_id"])].groupby("prompt_id")
        assert g["correct"].sum().astype(int).tolist() == table[f"c_{side}"].tolist()
        assert g["n_tokens"].mean().to_numpy() == pytest.approx(table[f"tokens_{side}"].to_numpy())
        assert (g["finish_reason"].apply(lambda f: (f == "length").sum())).tolist() == table[f"capped_{side}"].tolist()
        assert totals[f"c_{side}"] == table[f"c_{side}"].sum() and totals[f"n_{side}"] == 3 * N

    # totals from the counts
    c1, n1, c2, n2 = (table[k].to_numpy() for k in ("c_project", "n_project", "c_stock", "n_stock"))
    assert ((c1 > 0) & (c1 < n1)).any() and ((c2 > 0) & (c2 < n2)).any()  # tables with both outcomes
    r1, r2 = c1.sum() / n1.sum(), c2.sum() / n2.sum()
    var = sum(n * (c / n) * (1 - c / n) * n / (n - 1) for c, n in zip(c1, n1)) / n1.sum() ** 2 \
        + sum(n * (c / n) * (1 - c / n) * n / (n - 1) for c, n in zip(c2, n2)) / n2.sum() ** 2
    assert totals["rate_project"] == pytest.approx(r1) and totals["rate_stock"] == pytest.approx(r2)
    assert totals["rate_diff"] == pytest.approx(r1 - r2)
    assert totals["rate_diff_high"] - totals["rate_diff"] == pytest.approx(1.959964 * np.sqrt(var), rel=1e-5)
    assert totals["fisher_below_05"] == (table["fisher_p"] < 0.05).sum()
    assert totals["fisher_expected_below_05"] == pytest.approx(0.05 * 3)
    e = n1 * (c1 + c2) / (n1 + n2)
    v = n1 * n2 * (c1 + c2) * (n1 + n2 - c1 - c2) / ((n1 + n2) ** 2 * (n1 + n2 - 1))
    assert totals["cmh_chi2"] == pytest.approx((c1 - e).sum() ** 2 / v.sum())
    exact_d, exact_q = _exact_conditional_p(c1, n1, c2, n2)
    assert totals["direction_p"] == pytest.approx(exact_d, abs=0.02)  # 20,000 draws: SE <= 0.0035
    assert totals["omnibus_p"] == pytest.approx(exact_q, abs=0.02)
    lengths = {side: s[s["prompt_id"].isin(table["prompt_id"])]["n_tokens"] for side, s in (("project", project),
                                                                                            ("stock", stock))}
    assert totals["tokens_diff"] == pytest.approx(lengths["project"].mean() - lengths["stock"].mean())
    assert totals["regimes_agree"] == (table["regime_project"] == table["regime_stock"]).sum()
    assert totals["agree"] == (min(totals["direction_p"], totals["omnibus_p"]) >= 0.025)
    # the secondary concentration figures: each side's own modal answer's share, paired over prompts
    for side, samples in (("project", project), ("stock", stock)):
        def share(a):  # a null or empty extracted answer is no answer
            given = a[a.notna()].astype(str)
            given = given[given != ""]
            return given.value_counts().iloc[0] / len(a) if len(given) else 0.0

        shares = samples[samples["prompt_id"].isin(table["prompt_id"])].groupby("prompt_id")["answer"].agg(share)
        assert table[f"modal_share_{side}"].to_numpy() == pytest.approx(shares.to_numpy())
        assert totals[f"modal_share_{side}"] == pytest.approx(shares.mean())
    diff = table["modal_share_project"] - table["modal_share_stock"]
    assert (totals["modal_lower"], totals["modal_higher"]) == ((diff < 0).sum(), (diff > 0).sum())
    assert "secondary, not in the verdict" in printed
    assert "verdict:" in printed and "Fisher p < 0.05:" in printed
    from boundary.sampling import hf

    info = json.loads((out / "project.json").read_text())
    assert info["decode_attention"] == hf.SEAT_ATTENTION and f"decode attention {hf.SEAT_ATTENTION}" in printed

    # the stock half in two shards, resumed: the same draws, prompt by prompt
    parts = tmp_path / "parts"
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", parts, "--only", "project")
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", parts, "--only", "stock", "--shard", "1/2")
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", parts, "--only", "stock", "--shard", "0/2")
    capsys.readouterr()
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", parts, "--only", "stock", "--shard", "0/2")
    assert "every prompt present" in capsys.readouterr().out
    _run(bench, monkeypatch, "--split", split, "--out", parts, "--only", "compare")
    again = pd.read_csv(parts / "fidelity.csv", dtype={"prompt_id": str})
    assert again[["c_stock", "tokens_stock"]].equals(table[["c_stock", "tokens_stock"]])


def test_a_project_half_at_another_seed_is_a_fresh_draw_compared_with_the_same_stock(bench, split, tmp_path,
                                                                                   monkeypatch, capsys,
                                                                                   tiny_model_dir):
    out, model = tmp_path / "out", tiny_model_dir
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", out)
    again = tmp_path / "again"
    (again / "stock").mkdir(parents=True)
    for path in (out / "stock").iterdir():  # STOCK_FROM: the same stock half
        (again / "stock" / path.name).write_bytes(path.read_bytes())
    capsys.readouterr()
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", again, "--seed", "1234")
    assert json.loads((again / "project.json").read_text())["seed"] == 1234
    assert json.loads((out / "project.json").read_text())["seed"] == 1001  # config.yaml's calibration seed
    assert ", seed 1234" in capsys.readouterr().out
    first = pd.read_parquet(out / "project.parquet")
    fresh = pd.read_parquet(again / "project.parquet")
    assert list(first["prompt_id"]) == list(fresh["prompt_id"])
    assert not first["completion"].equals(fresh["completion"])  # other random streams, other draws
    assert (pd.read_csv(out / "fidelity.csv")[["c_stock", "n_stock"]]
            .equals(pd.read_csv(again / "fidelity.csv")[["c_stock", "n_stock"]]))


def test_halves_made_with_other_settings_are_refused(bench, split, tmp_path, monkeypatch, tiny_model_dir):
    from boundary.core.errors import BoundaryError

    out, model = tmp_path / "out", tiny_model_dir
    _run(bench, monkeypatch, "--model", model, "--split", split, "--out", out)
    with pytest.raises(BoundaryError, match="made with"):
        _run(bench, monkeypatch, "--split", split, "--out", out, "--only", "compare", "--n", "16")
    with pytest.raises(BoundaryError, match="needs project.json"):
        _run(bench, monkeypatch, "--split", split, "--out", tmp_path / "empty", "--only", "compare")


def test_the_split_is_the_data_stages_and_checked_against_the_models_tokenizer(bench, tmp_path, tiny_model_dir):
    """--make-split: the config's diagnostic split (its template, the model's chat template), the
    first --prompts rows of --data; a split another tokenizer rendered is refused."""
    import json

    from transformers import AutoTokenizer

    from boundary.core.errors import BoundaryError

    model = tmp_path / "chat_model"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}[assistant]"
    tokenizer.save_pretrained(model)
    data = tmp_path / "test.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i}+1?", "answer": f"... #### {i + 1}"}) + "\n"
                            for i in range(5)))
    out = tmp_path / "split.parquet"
    bench.main(["--make-split", str(out), "--model", str(model), "--data", str(data), "--prompts", "3",
                "--config", str(ROOT / "lab" / "studies" / "2026-11-28-qwen15b-preregistration" / "qwen15b.yaml")])
    split = pd.read_parquet(out)
    assert split["prompt_id"].tolist() == ["diagnostic-00000", "diagnostic-00001", "diagnostic-00002"]
    assert split["answer"].tolist() == ["1", "2", "3"]
    assert split["prompt"][0] == ("[user]What is 0+1?\nPlease reason step by step, and put your final answer "
                                  "within \\boxed{}.[assistant]")
    s = bench.resolved(str(ROOT / "lab" / "studies" / "2026-11-28-qwen15b-preregistration" / "qwen15b.yaml"))
    bench.check_prompts(split, s["prompt"], str(model))
    tokenizer.chat_template = tokenizer.chat_template.replace("[assistant]", "[bot]")
    tokenizer.save_pretrained(model)
    with pytest.raises(BoundaryError, match="3 prompts .first diagnostic-00000. differ"):
        bench.check_prompts(split, s["prompt"], str(model))


def test_a_regime_split_is_the_runs_own_prompts_of_that_regime(bench, tmp_path, capsys):
    """--make-split --from-run: a finished run's diagnostic prompts of one regime, in split order,
    as its data stage rendered them; a cap warns, an unknown regime or an empty pick is one line."""
    from boundary.core.errors import BoundaryError

    run = tmp_path / "run"
    (run / "splits").mkdir(parents=True)
    (run / "regimes").mkdir()
    ids = ["p0", "p1", "p2", "p3", "p4"]
    pd.DataFrame({"prompt_id": ids, "problem": [f"q{i}" for i in range(5)], "prompt": [f"<q{i}>" for i in range(5)],
                  "answer": list("01234"), "source": "t"}).to_parquet(run / "splits" / "diagnostic.parquet")
    pd.DataFrame({"prompt_id": ["p4", "p3", "p2", "p1", "p0"],
                  "regime": ["Boundary", "SolvedEasy", "Boundary", "OutOfReach", "Boundary"]}).to_parquet(
        run / "regimes" / "regimes.parquet")
    out = tmp_path / "boundary.parquet"
    bench.main(["--make-split", str(out), "--from-run", str(run), "--prompts", "100"])
    made = pd.read_parquet(out)
    assert made["prompt_id"].tolist() == ["p0", "p2", "p4"]
    assert made["prompt"].tolist() == ["<q0>", "<q2>", "<q4>"]
    bench.main(["--make-split", str(out), "--from-run", str(run), "--prompts", "2"])
    assert pd.read_parquet(out)["prompt_id"].tolist() == ["p0", "p2"]
    assert "3 Boundary prompts, the first 2 kept" in capsys.readouterr().err
    with pytest.raises(BoundaryError, match="--regime Edge"):
        bench.regime_split(str(run), "Edge", 10)
    with pytest.raises(BoundaryError, match="no diagnostic prompt is Reachable"):
        bench.regime_split(str(run), "Reachable", 10)
