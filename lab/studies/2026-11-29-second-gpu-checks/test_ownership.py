"""ownership.py reads Snakemake's log of a one-GPU run: a training job alone on the GPU while it
ran passes, one beside an evaluation fails, and a failed or unfinished one is not counted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("ownership", HERE / "ownership.py")
ownership = importlib.util.module_from_spec(spec)
sys.modules["ownership"] = ownership  # dataclasses look their module up
spec.loader.exec_module(ownership)


def block(stamp: str, rule: str, jobid: int, gpu: int) -> str:
    return (f"[Sun Nov 29 {stamp} 2026]\nlocalrule {rule}:\n    input: a, b\n    output: out{jobid}\n"
            f"    jobid: {jobid}\n    wildcards: seed=0\n"
            f"    resources: tmpdir=/tmp, runtime=60, cpus_per_task=1, gpu={gpu}, mem_mb=4000\n")


def done(stamp: str, jobid: int, rule: str) -> str:
    return f"[Sun Nov 29 {stamp} 2026]\nFinished jobid: {jobid} (Rule: {rule})\n1 of 9 steps (11%) done\n"


def run(tmp_path, text: str, apps: str | None = None) -> tuple[int, str]:
    log = tmp_path / "snakemake.log"
    log.write_text(text)
    argv = [str(log)]
    if apps is not None:
        (tmp_path / "apps.csv").write_text(apps)
        argv += ["--gpu-apps", str(tmp_path / "apps.csv")]
    return ownership.main(argv), log


def test_a_training_job_alone_between_evaluations_owns_the_gpu(tmp_path, capsys):
    text = (block("10:00:00", "splits", 1, 0) + block("10:00:00", "evaluate", 2, 1) + done("10:01:00", 2, "evaluate")
            + block("10:01:00", "train_grpo", 3, 4) + block("10:01:30", "regimes", 4, 0) + done("10:02:00", 4, "regimes")
            + done("10:05:00", 3, "train_grpo") + block("10:05:00", "evaluate", 5, 1)
            + block("10:05:00", "evaluate", 6, 1) + done("10:06:00", 5, "evaluate") + done("10:06:10", 6, "evaluate"))
    apps = "1,11,900 MiB,python3 -m boundary.cli --gpus 4 --own train --settings x\n2,12,400 MiB,boundary evaluate\n2,13,400 MiB,boundary evaluate\n"
    code, _ = run(tmp_path, text, apps)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 training job(s), each alone on the GPU while it ran; 3 other GPU jobs" in out
    assert "named a training process in 1 samples, another process beside it in 0" in out
    assert "train_grpo       job   3  gpu=4  10:01:00 - 10:05:00  240 s" in out


def test_an_evaluation_started_beside_a_training_job_fails_the_check(tmp_path, capsys):
    text = (block("10:00:00", "train_pba", 1, 4) + block("10:02:00", "evaluate", 2, 1)
            + done("10:03:00", 2, "evaluate") + done("10:04:00", 1, "train_pba"))
    code, _ = run(tmp_path, text)
    out = capsys.readouterr().out
    assert code == 1
    assert "train_pba (job 1) shared the GPU with evaluate (job 2)" in out and "NOT alone" in out


def test_failed_and_unfinished_training_jobs_are_not_counted(tmp_path, capsys):
    text = (block("10:00:00", "train_grpo", 1, 4) + "[Sun Nov 29 10:03:00 2026]\nError in rule train_grpo:\n"
            "    message: None\n    jobid: 1\n" + block("10:03:00", "train_pba", 2, 4))
    code, _ = run(tmp_path, text)
    out = capsys.readouterr().out
    assert code == 2 and "FAILED" in out and "no training job finished" in out
