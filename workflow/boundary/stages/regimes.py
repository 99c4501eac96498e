"""The `regimes` stage: regime labels from the frozen-base calibration cache, each with its
reliability (analysis/label_reliability.py): P(label) under the calibration's empirical-Bayes prior
and P(a fresh calibration of the same n labels it otherwise)."""

from __future__ import annotations

import pandas as pd

from boundary.analysis.label_reliability import reliable_labels, summary_lines, warn_unidentified
from boundary.analysis.regimes import REGIMES, Thresholds, counts_from_calibration, label, label_counts
from boundary.core import settings as stage_settings
from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import warn
from boundary.core.options import ArgumentParser, description


def make_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="boundary regimes", description=description(__doc__))
    ap.add_argument("--calibration", required=True, help="rollouts/base_calibration.parquet")
    ap.add_argument("--settings", required=True, help="JSON: easy, boundary, coverage_k, coverage_min")
    ap.add_argument("--out", required=True, help="regimes/regimes.parquet")
    return ap


def resting_on_unverified(samples: pd.DataFrame, table: pd.DataFrame, th: Thresholds) -> pd.DataFrame:
    """The prompts whose label would change were their unverified samples (a check that overran
    or crashed: counted not correct) correct, with that label. Kept here, not in
    analysis/regimes.py: calibrate imports that module, and an edit there reruns calibrations."""
    if "verified" not in samples:  # another tool's calibration: no verdicts to doubt
        return table.iloc[:0]
    unverified = samples.loc[~samples["verified"].astype(bool)].groupby("prompt_id").size().rename("unverified")
    out = table.join(unverified, on="prompt_id", how="inner")
    out["if_correct"] = label((out["c"] + out["unverified"]) / out["n"], th)
    return out[out["if_correct"] != out["regime"]]


def main(argv=None) -> None:
    args = make_parser().parse_args(argv)
    th = Thresholds.from_dict(stage_settings.load("regimes", args.settings))
    samples = read_table(args.calibration, ["prompt_id", "correct"])
    counts = counts_from_calibration(samples)
    warn_unidentified(counts, args.calibration)
    table = reliable_labels(label_counts(counts, th, args.calibration), th)
    doubtful = resting_on_unverified(samples, table, th)
    if len(doubtful):
        warn(f"regimes: {len(doubtful)} label(s) rest on unverified answers (counted not correct): " + "; ".join(
            f"{r.prompt_id} is {r.regime}, {r.if_correct} if its {r.unverified} were correct" for r in doubtful.itertuples()))
    if table["n"].nunique() > 1:  # an adaptive or extended calibration: each prompt's own draws
        warn(f"regimes: calibration n varies by prompt ({table['n'].min()}-{table['n'].max()}: adaptive or "
             "extended): p_base, its strata and the cutoff sensitivity use each prompt's own draws; adaptive "
             "labels at these cutoffs are the full run's up to calibration.delta")
    write_table(table, args.out)
    shares = table["regime"].value_counts().reindex(REGIMES, fill_value=0)
    print("regimes: " + ", ".join(f"{r}={n}" for r, n in shares.items()))
    for line in summary_lines(table):
        print(f"regimes: {line}")
