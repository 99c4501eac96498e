"""Whether a training job owned its GPU, read off Snakemake's own log of a run on ONE GPU.

    python lab/studies/2026-11-29-second-gpu-checks/ownership.py SNAKEMAKE_LOG [--gpu-apps CSV]

Prints every job (rule, job id, the GPU slots it asked for, start, end, seconds) and then one
verdict line: on one GPU a training job owns it if no other job that asked for a GPU slot ran at
any moment of its life (jobs that ask for none see no device: core/gpus.py). With --gpu-apps
(checks.sh's samples: time, pid, MiB, command) it also counts the samples in which a training
process shared the GPU with another process. Exit status 0 when the job(s) owned the GPU, 1 when
one did not, 2 when the log holds no finished training job.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from datetime import datetime

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
GPU = re.compile(r"\bgpu=(\d+)")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
FAILED = re.compile(r"^Error in rule (\w+):$")


@dataclass
class Job:
    jobid: int
    rule: str
    gpu: int = 0
    start: datetime | None = None
    end: datetime | None = None
    failed: bool = False

    @property
    def seconds(self) -> float | None:
        return (self.end - self.start).total_seconds() if self.start and self.end else None


def read_jobs(text: str) -> list[Job]:
    jobs: dict[int, Job] = {}
    now, pending, failing = None, None, False  # the last timestamp; the job block being read; an error's
    for line in text.splitlines():
        if m := STAMP.match(line.strip()):
            now = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif m := RULE.match(line.strip()):
            pending = Job(jobid=-1, rule=m.group(1), start=now)
        elif pending and (m := JOBID.match(line)):
            pending.jobid = int(m.group(1))
            jobs[pending.jobid] = pending
        elif failing and (m := JOBID.match(line)):  # an error block names its job
            failing = False
            if int(m.group(1)) in jobs:
                jobs[int(m.group(1))].failed, jobs[int(m.group(1))].end = True, now
        elif pending and line.strip().startswith("resources:"):
            if m := GPU.search(line):
                pending.gpu = int(m.group(1))
            pending = None
        elif m := FINISHED.match(line.strip()):
            if int(m.group(1)) in jobs:
                jobs[int(m.group(1))].end = now
        elif FAILED.match(line.strip()):
            failing = True
    return sorted(jobs.values(), key=lambda j: (j.start or datetime.min, j.jobid))


def overlapping(train: Job, jobs: list[Job]) -> list[Job]:
    """Jobs asking for a GPU slot that ran at some moment of `train`'s life (start to end)."""
    return [j for j in jobs if j is not train and j.gpu > 0 and j.start and j.start < train.end
            and (j.end is None or j.end > train.start)]


def shared_samples(path: str) -> tuple[int, int]:
    """(samples in which a training process was on the GPU, of those, samples with another process)."""
    by_time: dict[str, list[str]] = {}
    for line in open(path):
        t, _pid, _mem, command = (line.rstrip("\n").split(",", 3) + ["", "", ""])[:4]
        by_time.setdefault(t, []).append(command)
    with_train = [cmds for cmds in by_time.values() if any(" train " in c for c in cmds)]
    return len(with_train), sum(len(cmds) > 1 for cmds in with_train)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--gpu-apps")
    args = p.parse_args(argv)
    jobs = read_jobs(open(args.log).read())
    for j in jobs:
        print(f"{j.rule:<16} job {j.jobid:>3}  gpu={j.gpu}  {j.start:%H:%M:%S} - "
              f"{j.end.strftime('%H:%M:%S') if j.end else 'running'}"
              f"{f'  {j.seconds:.0f} s' if j.seconds is not None else ''}{'  FAILED' if j.failed else ''}")
    trains = [j for j in jobs if j.rule.startswith("train_") and j.end and not j.failed]
    if not trains:
        print("ownership: no training job finished in this log")
        return 2
    bad = {t.jobid: overlapping(t, jobs) for t in trains}
    for t in trains:
        if bad[t.jobid]:
            print(f"ownership: {t.rule} (job {t.jobid}) shared the GPU with "
                  + ", ".join(f"{j.rule} (job {j.jobid})" for j in bad[t.jobid]))
    if args.gpu_apps:
        seen, shared = shared_samples(args.gpu_apps)
        print(f"ownership: nvidia-smi named a training process in {seen} samples, another process beside it in {shared}")
    owned = not any(bad.values())
    print(f"ownership: {len(trains)} training job(s), "
          + ("each alone on the GPU while it ran" if owned else "NOT alone on the GPU")
          + f"; {sum(j.gpu > 0 and not j.rule.startswith('train_') for j in jobs)} other GPU jobs before and after")
    return 0 if owned else 1


if __name__ == "__main__":
    sys.exit(main())
