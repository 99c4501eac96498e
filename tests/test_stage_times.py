"""`boundary stage-times`: a run's benchmark files as one table, in the pipeline's order."""

import pandas as pd
import pytest

from boundary.analysis.stage_times import main, read_benchmarks, stage_of
from boundary.core.errors import BoundaryError

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(root, job, seconds, rss=100.0):
    path = root / "benchmarks" / f"{job}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:01\t{rss}\t1\t1\t1\t0\t0\t50\t1\n")


def test_jobs_in_pipeline_order_with_each_stages_job_seconds(tmp_path, capsys):
    for job, s in [("train/grpo/seed0", 120.0), ("report", 5.0), ("calibrate_base/shard1", 60.0),
                   ("calibrate_base/shard0", 61.5), ("calibrate_base", 2.0), ("train_regimes", 1.0),
                   ("import_base", 48.0), ("train/pba/seed0", 130.5)]:
        bench(tmp_path, job, s)
    jobs = read_benchmarks(tmp_path)
    assert jobs["job"].tolist() == ["import_base", "calibrate_base", "calibrate_base/shard0", "calibrate_base/shard1",
                                    "train_regimes", "train/grpo/seed0", "train/pba/seed0", "report"]
    assert stage_of("calibrate_base_train/shard2") == "calibrate_base" and stage_of("evaluate/x/base/seed1") == "evaluate"
    main(["--results", str(tmp_path), "--out", str(tmp_path / "tables")])
    md = (tmp_path / "tables" / "stage_times.md").read_text()
    assert "| calibrate_base (all) | 3 job(s) | 123.5 |" in md and "| train (all) | 2 job(s) | 250.5 |" in md
    assert "| run (all) | 8 job(s) | 428.0 |" in md and md in capsys.readouterr().out
    assert pd.read_csv(tmp_path / "tables" / "stage_times.csv")["seconds"].sum() == 428.0


def test_a_run_without_benchmarks_or_with_a_bad_file_is_one_line(tmp_path):
    with pytest.raises(BoundaryError, match=r"benchmarks: no benchmark files"):
        main(["--results", str(tmp_path)])
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "report.tsv").write_text("not a benchmark\n")
    with pytest.raises(BoundaryError, match=r"report.tsv: not a Snakemake benchmark file"):
        main(["--results", str(tmp_path)])
