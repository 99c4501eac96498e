"""Stage times of a run: every job's wall time and peak memory, read from the benchmark file
Snakemake writes for it (results/RUN/benchmarks/**.tsv, one per job), in the pipeline's order,
and each stage's jobs and job-seconds: where a run spent its time, from the run's own files
(also those copied back from another machine), never copied by hand.

Job-seconds add the jobs' wall times: jobs that ran at once overlap, so their sum is the
machine time the stage took, not the run's wall time.

CLI:
    boundary stage-times --results results/RUN [--out DIR]
Prints the table; --out writes it as DIR/stage_times.{md,tex,csv}.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from boundary.analysis.tables import Stat, Table
from boundary.core.errors import BoundaryError

# The rules' benchmark names (workflow/rules/*.smk), in the order the pipeline runs them.
ORDER = ("arithmetic", "pretrain_base", "import_base", "splits", "calibrate_base", "gate_draws", "regimes",
         "masks", "base_rollouts", "train", "evaluate", "report")


def stage_of(job: str) -> str:
    """A job's stage from its benchmark name: calibrate_base_train and calibrate_base/shard0 are
    calibrate_base's, train_regimes is regimes'; otherwise the name's first part."""
    first = job.split("/")[0]
    if first.startswith("calibrate_base"):
        return "calibrate_base"
    return "regimes" if first == "train_regimes" else first


def read_benchmarks(results: Path) -> pd.DataFrame:
    """One row per job (stage, job, seconds, max_rss_mb): the first row of each benchmark file
    (Snakemake writes one a repeat; the workflow makes one)."""
    folder = Path(results) / "benchmarks"
    files = sorted(folder.rglob("*.tsv"))
    if not files:
        raise BoundaryError(f"{folder}: no benchmark files (Snakemake writes one a job there)")
    rows = []
    for path in files:
        try:
            first = pd.read_csv(path, sep="\t").iloc[0]
            seconds, rss = float(first["s"]), float(first["max_rss"])
        except (KeyError, IndexError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise BoundaryError(f"{path}: not a Snakemake benchmark file ({type(err).__name__})") from None
        job = path.relative_to(folder).with_suffix("").as_posix()
        rows.append({"stage": stage_of(job), "job": job, "seconds": seconds, "max_rss_mb": rss})
    rank = {s: i for i, s in enumerate(ORDER)}
    frame = pd.DataFrame(rows)
    frame["rank"] = frame["stage"].map(rank).fillna(len(ORDER))
    return frame.sort_values(["rank", "stage", "job"]).drop(columns="rank").reset_index(drop=True)


def stage_times_table(jobs: pd.DataFrame, run: str) -> Table:
    """Every job, then each stage's jobs and job-seconds, then the run's."""
    rows = [[r.stage, r.job, Stat(r.seconds, digits=1), Stat(r.max_rss_mb, digits=0)] for r in jobs.itertuples()]
    per_stage = jobs.groupby("stage", sort=False).agg(jobs=("job", "size"), seconds=("seconds", "sum"))
    rows += [[f"{stage} (all)", f"{int(r.jobs)} job(s)", Stat(r.seconds, digits=1), ""]
             for stage, r in per_stage.iterrows()]
    rows.append(["run (all)", f"{len(jobs)} job(s)", Stat(jobs["seconds"].sum(), digits=1), ""])
    return Table("stage_times", f"Stage times of {run} (seconds; peak resident memory in MB)",
                 ["Stage", "Job", "s", "Peak RSS (MB)"], rows, jobs,
                 ["From Snakemake's benchmark files, one a job. A stage's seconds add its jobs' wall times: "
                  "jobs that ran at once overlap, so the sums are machine time, not the run's wall time."])


def make_parser():
    from boundary.core.options import ArgumentParser, description

    ap = ArgumentParser(prog="boundary stage-times", description=description(__doc__),
                        epilog="example:\n  boundary stage-times --results results/testbed --out results/testbed/tables")
    ap.add_argument("--results", required=True, help="a run's folder (results/RUN), holding benchmarks/")
    ap.add_argument("--out", help="write stage_times.{md,tex,csv} into this folder")
    return ap


def main(argv=None) -> None:
    args = make_parser().parse_args(argv)
    table = stage_times_table(read_benchmarks(Path(args.results)), Path(args.results).resolve().name)
    print(table.md(), end="")
    if args.out:
        paths = table.write(Path(args.out))
        print(f"stage-times: {len(table.data)} jobs -> {', '.join(map(str, paths))}")
