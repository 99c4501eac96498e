"""Regime labels, strata and the regimes CLI, against the paper's definitions written out."""

import json

import numpy as np
import pandas as pd
import pytest

from boundary.analysis import regimes as rg
from boundary.core.errors import BoundaryError
from boundary.stages import regimes as regimes_stage


def paper_label(p, easy=0.6, boundary=0.10, K=256, cmin=0.4):
    cov = 1 - (1 - p) ** K
    if cov <= cmin:
        return "OutOfReach"
    if p > easy:
        return "SolvedEasy"
    if boundary <= p <= easy:
        return "Reachable"
    assert p < boundary and cov > cmin
    return "Boundary"


def test_labels_match_the_paper():
    p = np.array([0, 1 / 512, 1 / 256, 0.002, 0.05, 0.0999, 0.10, 0.3, 0.6, 0.6001, 1.0])
    got = rg.label(p)
    assert list(got) == [paper_label(x) for x in p]
    assert got[0] == "OutOfReach" and got[2] == "Boundary" and got[6] == "Reachable" and got[8] == "Reachable"


def test_paper_regimes_partition_the_unit_interval():
    # With paper cutoffs exactly one regime condition holds for every p.
    for p in np.linspace(0, 1, 2001):
        cov = 1 - (1 - p) ** 256
        conds = [p > 0.6, p < 0.10 and cov > 0.4, 0.10 <= p <= 0.6, cov <= 0.4]
        assert sum(conds) == 1


def test_strata_bins():
    s = rg.strata([0, 0.005, 0.01, 0.011, 0.6, 1.0], (0, 0.01, 0.6, 1))
    assert list(s) == ["0", "(0,0.01]", "(0,0.01]", "(0.01,0.6]", "(0.01,0.6]", "(0.6,1]"]
    assert rg.strata_order((0, 0.01, 0.6, 1)) == ["0", "(0,0.01]", "(0.01,0.6]", "(0.6,1]"]


def test_sensitivity_grid_starts_with_the_configured_cutoffs():
    th = rg.PAPER
    grid = rg.sensitivity_grid(th)
    assert grid[0] == th and len(set(grid)) == len(grid) > 5


def test_cli_writes_regimes_parquet(tmp_path):
    rows = [("a", i, i < 3) for i in range(256)] + [("b", i, False) for i in range(256)] + \
           [("c", i, i < 200) for i in range(256)] + [("d", i, i < 50) for i in range(256)]
    cal = pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "correct"]).assign(
        completion="x", answer="", entropy=0.5, n_tokens=3)
    cal.to_parquet(tmp_path / "cal.parquet")
    (tmp_path / "s.json").write_text(json.dumps({"easy": 0.6, "boundary": 0.10, "coverage_k": 256, "coverage_min": 0.4}))
    regimes_stage.main(["--calibration", str(tmp_path / "cal.parquet"), "--settings", str(tmp_path / "s.json"),
             "--out", str(tmp_path / "regimes" / "regimes.parquet")])
    out = pd.read_parquet(tmp_path / "regimes" / "regimes.parquet").set_index("prompt_id")
    assert out.loc["a", "c"] == 3 and out.loc["a", "n"] == 256
    assert out.loc["a", "p_base"] == pytest.approx(3 / 256)
    assert out.loc["a", "coverage"] == pytest.approx(1 - (1 - 3 / 256) ** 256)
    assert dict(out["regime"]) == {"a": "Boundary", "b": "OutOfReach", "c": "SolvedEasy", "d": "Reachable"}
    assert set(out["coverage_k"]) == {256} and set(out["easy"]) == {0.6}


def test_bad_settings_are_one_line(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"easy": 0.6, "boundary": 0.10, "coverage_k": 256, "typo": 1}))
    with pytest.raises(BoundaryError, match="unknown key 'typo'"):
        regimes_stage.main(["--calibration", "unused", "--settings", str(tmp_path / "s.json"), "--out", "unused"])
    with pytest.raises(BoundaryError):
        rg.Thresholds(easy=0.05, boundary=0.1, coverage_k=256, coverage_min=0.4)


def test_a_label_that_rests_on_unverified_answers_is_named_in_one_warning(tmp_path, capsys):
    """An unverified answer (a check that overran) counts not correct; where counting it correct
    would move the prompt to another regime the stage names it (the 0.5B pilot's math500-00203:
    0 of 256 correct, 2 unverified, OutOfReach or Boundary). Labels stay as computed."""
    rows = ([("zero", i, False, i >= 2) for i in range(256)]          # 2 unverified: OutOfReach or Boundary
            + [("safe", i, i < 100, i != 200) for i in range(256)]     # 1 unverified: Reachable either way
            + [("edge", i, i < 25, i < 254) for i in range(256)])      # 25 + 2 of 256 crosses 0.10
    cal = pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "correct", "verified"])
    cal.to_parquet(tmp_path / "cal.parquet")
    (tmp_path / "s.json").write_text(json.dumps({"easy": 0.6, "boundary": 0.10, "coverage_k": 256, "coverage_min": 0.4}))
    args = ["--settings", str(tmp_path / "s.json"), "--out", str(tmp_path / "regimes.parquet")]
    regimes_stage.main(["--calibration", str(tmp_path / "cal.parquet"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: regimes: 2 label(s) rest on unverified answers (counted not correct): "
                   "edge is Boundary, Reachable if its 2 were correct; zero is OutOfReach, Boundary if its 2 were correct"]
    out = pd.read_parquet(tmp_path / "regimes.parquet").set_index("prompt_id")["regime"].to_dict()
    assert out == {"edge": "Boundary", "safe": "Reachable", "zero": "OutOfReach"}
    cal.drop(columns="verified").to_parquet(tmp_path / "other_tool.parquet")  # no verdicts to doubt: no warning
    regimes_stage.main(["--calibration", str(tmp_path / "other_tool.parquet"), *args])
    assert capsys.readouterr().err == ""
