"""Sampling, calibration and evaluation on a tiny random model (no training). The stages' commands
run in this process (conftest's `boundary_cli`)."""

import numpy as np
import pandas as pd
import pytest

from boundary.core.errors import BoundaryError
from boundary.core.passk import pass_at_k
from boundary.core.settings import text as dumps
from boundary.sampling import SamplingParams, sample
from boundary.sampling.scoring import gather_shards
from boundary.stages.evaluate import counts_from_samples


def test_same_seed_same_samples(tiny_model_dir):
    params = SamplingParams(n=8, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=5, batch_size=16)
    a = sample(str(tiny_model_dir), ["p", "q"], ["12+34=", "56+78="], params)
    b = sample(str(tiny_model_dir), ["p", "q"], ["12+34=", "56+78="], params)
    c = sample(str(tiny_model_dir), ["p", "q"], ["12+34="] * 2, SamplingParams(
        n=8, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=6, batch_size=16))
    pd.testing.assert_frame_equal(a, b)
    assert not a["completion"].equals(c["completion"])
    assert len(a) == 16 and (a["n_tokens"] <= 6).all() and (a["n_tokens"] >= 1).all()
    # A random model over a ~20-token vocabulary is near-uniform: entropy near log(20).
    assert a["entropy"].between(1.0, np.log(21)).all()


def test_counts_from_samples():
    samples = pd.DataFrame({
        "prompt_id": ["a"] * 4 + ["b"] * 4,
        "answer": ["1", "1", "2", "x", "9", "9", "9", "9"],
        "correct": [True, True, False, False, False, False, False, False],
        "entropy": [0.1, 0.3, 0.5, 0.7, 0.0, 0.0, 0.0, 0.0],
    })
    counts = counts_from_samples(samples, [1, 4, 8]).set_index("prompt_id")
    assert counts.loc["a", ["n", "c", "unique_positives"]].tolist() == [4, 2, 1]
    assert counts.loc["a", "answers"] == ["1"] and counts.loc["b", "answers"] == []
    assert counts.loc["a", ["modal_answer", "modal_share"]].tolist() == ["1", 0.5]
    assert counts.loc["b", ["modal_answer", "modal_share"]].tolist() == ["9", 1.0]  # one answer to all, none right
    assert counts.loc["a", "entropy"] == pytest.approx(0.4)
    assert counts.loc["a", "pass_at_1"] == pytest.approx(0.5)
    assert "pass_at_8" not in counts  # k > n is never reported


def test_evaluate_cli_writes_samples_and_counts(tiny_model_dir, tmp_path, boundary_cli):
    split = pd.DataFrame({"prompt_id": ["p0", "p1"], "problem": ["12+34=", "56+78="],
                          "prompt": ["12+34=", "56+78="], "answer": ["1234", "5678"]})
    split.to_parquet(tmp_path / "split.parquet")
    settings = {"evaluate": {"n": 16, "temperature": 1.0, "top_p": 1.0, "seed": 3, "ks": [1, 4, 16]},
                "sampling": {"backend": "hf", "batch_size": 64, "max_new_tokens": 6},
                "verify": {"extractor": "last_number", "timeout": 5, "workers": 1}}
    boundary_cli(["evaluate", "--model", tiny_model_dir, "--split", tmp_path / "split.parquet",
                      "--settings", dumps(settings), "--samples", tmp_path / "s.parquet",
                      "--counts", tmp_path / "c.parquet"], check=True)
    samples = pd.read_parquet(tmp_path / "s.parquet")
    counts = pd.read_parquet(tmp_path / "c.parquet")
    assert len(samples) == 32 and set(counts["n"]) == {16}
    expect = pass_at_k(counts["n"], counts["c"], 4)
    np.testing.assert_allclose(counts["pass_at_4"], expect)


def test_sharded_evaluation_gathers_every_prompt(tiny_model_dir, tmp_path, boundary_cli):
    split = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(5)], "problem": ["12+34="] * 5,
                          "answer": ["1234"] * 5})
    split.to_parquet(tmp_path / "split.parquet")
    settings = dumps({"evaluate": {"n": 4, "temperature": 1.0, "top_p": 1.0, "seed": 3, "ks": [1, 4]},
                      "sampling": {"backend": "hf", "batch_size": 64, "max_new_tokens": 6},
                      "verify": {"extractor": "last_number", "timeout": 5, "workers": 1}})
    base = ["evaluate", "--settings", settings]
    for i in range(2):
        boundary_cli(base + ["--model", tiny_model_dir, "--split", tmp_path / "split.parquet",
                                 "--shard", f"{i}/2", "--samples", tmp_path / f"s{i}.parquet"], check=True)
    assert len(pd.read_parquet(tmp_path / "s0.parquet")) == 3 * 4
    boundary_cli(base + ["--gather", tmp_path / "s0.parquet", tmp_path / "s1.parquet",
                             "--samples", tmp_path / "s.parquet", "--counts", tmp_path / "c.parquet"], check=True)
    counts = pd.read_parquet(tmp_path / "c.parquet")
    assert sorted(counts["prompt_id"]) == sorted(split["prompt_id"]) and set(counts["n"]) == {4}
    _, _, err = boundary_cli(base + ["--model", tiny_model_dir, "--split", tmp_path / "split.parquet",
                                         "--shard", "2/2", "--samples", tmp_path / "x.parquet"])
    assert err.strip() == "boundary evaluate: error: --shard: '2/2' is not I/K with 0 <= I < K"


def test_missing_split_is_one_line(tiny_model_dir, tmp_path, boundary_cli):
    code, _, err = boundary_cli(["evaluate", "--model", tiny_model_dir, "--split", tmp_path / "nope.parquet",
                                     "--settings", '{"evaluate": {"n": 4, "seed": 0}}', "--samples", "x",
                                     "--counts", "y"])
    assert code == 1
    assert err.strip().splitlines() == [
        f"boundary evaluate: error: {tmp_path / 'nope.parquet'}: file not found"]


def test_an_extractor_that_finds_nothing_is_named_in_a_warning(tiny_model_dir):
    """The testbed model never writes \\boxed{}: the boxed extractor finds no answer, and the
    warning names the split."""
    from boundary.sampling.scoring import scored_samples
    from boundary.tasks.verify import Verifier

    split = pd.DataFrame({"prompt_id": ["p0"], "prompt": ["12+34="], "answer": ["1234"]})
    said = []
    verifier = Verifier(timeout=5, workers=1)
    try:
        scored_samples(str(tiny_model_dir), split, SamplingParams(n=4, temperature=1.0, top_p=1.0, seed=0, max_new_tokens=4), "boxed",
                       verifier, log=said.append, label="splits/bench_x.parquet")
    finally:
        verifier.close()
    warnings = [line for line in said if line.startswith("warning")]  # besides the throughput lines
    assert warnings == ["warning: splits/bench_x.parquet: extractor 'boxed' found no answer in 100% of 4 completions"]


def test_sharded_calibration_joins_every_prompt_once_in_split_order(tiny_model_dir, tmp_path, boundary_cli):
    """calibration.shards: each shard draws its own prompts (I, I+K, ...), the rounds of an
    adaptive calibration included, and --gather joins them in split order; shards that are not one scatter of
    the split are refused in one line."""
    split = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(5)], "problem": ["12+34="] * 5,
                          "answer": ["1234"] * 5})
    split.to_parquet(tmp_path / "split.parquet")
    settings = dumps({"calibration": {"n": 16, "temperature": 1.0, "top_p": 1.0, "seed": 3, "shards": 2,
                                      "adaptive": True, "rounds": [8], "delta": 0.01},
                      "regimes": {"easy": 0.6, "boundary": 0.1, "coverage_k": 16, "coverage_min": 0.4},
                      "sampling": {"backend": "hf", "batch_size": 64, "max_new_tokens": 6},
                      "verify": {"extractor": "last_number", "timeout": 5, "workers": 1}})
    base = ["calibrate", "--split", tmp_path / "split.parquet", "--settings", settings]
    shards = [tmp_path / f"s{i}.parquet" for i in range(2)]
    for i, path in enumerate(shards):
        boundary_cli(base + ["--model", tiny_model_dir, "--shard", f"{i}/2", "--out", path], check=True)
    parts = [pd.read_parquet(p) for p in shards]
    assert sorted(parts[0]["prompt_id"].unique()) == ["p0", "p2", "p4"]
    assert sorted(parts[1]["prompt_id"].unique()) == ["p1", "p3"]
    assert all(part.groupby("prompt_id").size().isin([8, 16]).all() for part in parts)  # adaptive: 8 or n
    _, out, _ = boundary_cli(base + ["--gather", *reversed(shards), "--out", tmp_path / "c.parquet"], check=True)
    assert "2 shards joined, 5 prompts" in out
    joined = pd.read_parquet(tmp_path / "c.parquet")
    assert list(joined["prompt_id"].drop_duplicates()) == list(split["prompt_id"])  # split order
    assert (joined.groupby("prompt_id")["sample_idx"].apply(lambda s: list(s) == list(range(len(s))))).all()
    expect = pd.concat(parts).sort_values(["prompt_id", "sample_idx"]).reset_index(drop=True)
    got = joined.sort_values(["prompt_id", "sample_idx"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expect[got.columns])
    code, _, err = boundary_cli(base + ["--gather", shards[0], "--out", tmp_path / "x.parquet"])
    assert code == 1 and err.strip() == (
        "boundary calibrate: error: --gather: 2 of the split's prompts in no shard (first 'p1'): "
        "the shards are not one scatter of this split")
    assert not (tmp_path / "x.parquet").exists()
    order = list(split["prompt_id"])
    with pytest.raises(BoundaryError, match="prompt 'p0' in more than one shard"):
        gather_shards([*map(str, shards), str(shards[0])], ["prompt_id"], order)
    with pytest.raises(BoundaryError, match="1 prompts not in the split"):
        gather_shards(list(map(str, shards)), ["prompt_id"], order[:-1])
