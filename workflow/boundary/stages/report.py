"""The `report` stage: every table and figure of the paper from the pipeline's per-prompt artifacts."""

from __future__ import annotations

from pathlib import Path

from boundary.analysis.report import build
from boundary.core import settings as stage_settings
from boundary.core.artifacts import publish, scratch_dir
from boundary.core.options import ArgumentParser, description


def make_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="boundary report", description=description(__doc__))
    ap.add_argument("--results", required=True, help="results/{run}")
    ap.add_argument("--settings", required=True, help="report settings (JSON file or string)")
    ap.add_argument("--out", "--out-dir", dest="out",
                    help="where report.html, tables/, figures/, diagnostics/, eval_counts.parquet go "
                         "(default: --results; --out-dir: the old spelling)")
    for name in ("counts", "masks", "logs"):
        ap.add_argument(f"--{name}", nargs="*", metavar="FILE",
                        help=f"exactly the {name} files to summarise (default: every one under --results)")
    ap.add_argument("--samples", nargs="*", metavar="FILE",
                    help="the diagnostic split's samples files, whose answers the page shows for the worst lost "
                         "prompts (default: samples.parquet beside each of its counts files, where present)")
    return ap


def main(argv=None) -> None:
    args = make_parser().parse_args(argv)
    results = Path(args.results)
    out = Path(args.out or args.results)
    settings = stage_settings.load("report", args.settings)
    with scratch_dir(out / "report") as tmp:  # a killed report leaves nothing the next one keeps
        lines = build(results, settings, tmp, {"counts": args.counts, "masks": args.masks, "logs": args.logs,
                                               "samples": args.samples})
        publish(tmp, out, "boundary report")  # tables/, figures/, ...: replaced only where it wrote them
    print("\n".join(lines))
    print(f"report: {out / 'report.html'} (tables, figures and eval_counts.parquet beside it)")
