"""The `regimes` stage: regime labels from the frozen-base calibration cache."""

from __future__ import annotations

from boundary.analysis.regimes import REGIMES, Thresholds, counts_from_calibration, label_counts
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


def main(argv=None) -> None:
    args = make_parser().parse_args(argv)
    th = Thresholds.from_dict(stage_settings.load("regimes", args.settings))
    samples = read_table(args.calibration, ["prompt_id", "correct"])
    table = label_counts(counts_from_calibration(samples), th, args.calibration)
    if table["n"].nunique() > 1:  # an adaptive calibration: each prompt's drawn prefix
        warn(f"regimes: calibration n varies by prompt ({table['n'].min()}-{table['n'].max()}, adaptive): the "
             "labels at these cutoffs are the full run's up to calibration.delta; p_base, its strata and the "
             "cutoff sensitivity use each prompt's drawn prefix")
    write_table(table, args.out)
    shares = table["regime"].value_counts().reindex(REGIMES, fill_value=0)
    print("regimes: " + ", ".join(f"{r}={n}" for r, n in shares.items()))
