"""The worked example of docs/tutorials/diagnose_other_runs.md in miniature: a pipeline run's samples exported
to every supported format (docs/examples/export_formats.py) give the same diagnosis as the
pipeline's own counts files, with the tools' verdicts and re-graded against the gold file."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from boundary.analysis import diagnose as dg

ROOT = Path(__file__).resolve().parents[1]


def exporter():
    spec = importlib.util.spec_from_file_location("export_formats", ROOT / "docs" / "examples" / "export_formats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A results folder shaped like the pipeline's: a split and eval samples of base and grpo."""
    res = tmp_path_factory.mktemp("results")
    rng = np.random.default_rng(1)
    P, n = 20, 8
    ids = [f"tb-{i:04d}" for i in range(P)]
    answers = [str(rng.integers(1000, 9999)) for _ in ids]
    (res / "splits").mkdir()
    pd.DataFrame({"prompt_id": ids, "problem": [f"{i:02d}+{2 * i:02d}=" for i in range(P)], "prompt": "",
                  "answer": answers}).to_parquet(res / "splits" / "diagnostic.parquet")
    p = rng.beta(0.5, 1, P)
    for method, rate in (("base", p), ("grpo", np.where(p < 0.2, 0, np.minimum(1, 1.5 * p)))):
        ok = rng.random((P, n)) < rate[:, None]
        rows = [{"prompt_id": pid, "sample_idx": j, "completion": f"A{a if ok[i, j] else int(a) + 1}",
                 "answer": a if ok[i, j] else str(int(a) + 1), "correct": bool(ok[i, j]), "entropy": 1.0}
                for i, (pid, a) in enumerate(zip(ids, answers)) for j in range(n)]
        folder = res / "eval" / "diagnostic" / method / "seed0"
        folder.mkdir(parents=True)
        pd.DataFrame(rows).to_parquet(folder / "samples.parquet")
        c = ok.sum(axis=1)
        pd.DataFrame({"prompt_id": ids, "n": n, "c": c}).to_parquet(folder / "counts.parquet")
    out = tmp_path_factory.mktemp("formats")
    exporter().export(res, out)
    return res, out


def passk(res_args, out):
    dg.main(res_args + ["--ks", "1,2,8", "--coverage-k", "8", "--resamples", "100", "--no-figures", "--out", str(out)])
    return pd.read_csv(out / "passk.csv").sort_values(["method", "regime", "k"]).reset_index(drop=True)


@pytest.mark.parametrize("regrade", [False, True])
def test_every_format_gives_the_pipelines_diagnosis(run, tmp_path, regrade):
    res, fmt = run
    ev = res / "eval" / "diagnostic"
    reference = passk(["--base", str(ev / "base/seed0/counts.parquet"),
                       "--trained", f"grpo:0={ev / 'grpo/seed0/counts.parquet'}"], tmp_path / "ref")
    gold = ["--gold", str(fmt / "gold.jsonl"), "--extractor", "last_number", "--verify-workers", "1"]
    gold += [] if regrade else ["--keep-scores"]
    for name, base, grpo in [("samples", "samples/base_0.jsonl", "samples/grpo_0.jsonl"),
                             ("verl", "verl/base_0", "verl/grpo_0"),
                             ("lighteval", "lighteval/base_0.parquet", "lighteval/grpo_0.parquet"),
                             ("openrlhf", "openrlhf/base_0.jsonl", "openrlhf/grpo_0.jsonl")]:
        got = passk(["--base", str(fmt / base), "--trained", f"grpo:0={fmt / grpo}"] + gold, tmp_path / name)
        pd.testing.assert_frame_equal(got, reference, obj=name)
    if regrade:  # the same extractor on the same completions: the same answers in every format
        answers = [pd.read_csv(tmp_path / name / "summary.csv").query("metric in ['modal_share', 'unique_positives']")
                   .reset_index(drop=True) for name in ("samples", "verl", "lighteval", "openrlhf")]
        assert answers[0]["mean"].notna().all()
        for other in answers[1:]:
            pd.testing.assert_frame_equal(other, answers[0])
