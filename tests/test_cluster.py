"""The shipped SLURM profile without a cluster: the paper config dry-runs with it, every job
asks for what the config says (GPU stages their GPUs, CPU stages little, on the right
partition), every training job starts one process per GPU it asks for, and
`boundary cluster-check` names the rules a cluster can never schedule."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import ROOT
from test_workflow import paper_placeholders

from boundary import cli
from boundary.core import cluster
from boundary.core.errors import BoundaryError
from boundary.stages import train as launch

PROFILE = ROOT / "config" / "profiles" / "slurm"
PAPER = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())


def paper_workdir(tmp_path):
    """The paper config's model and data as empty placeholders: enough for a dry run."""
    paper_placeholders(tmp_path)
    return tmp_path


def dry_run_command(profile, configfile=ROOT / "config" / "paper.yaml") -> list[str]:
    """The dry run `boundary cluster-check --profile PROFILE --configfile FILE` runs."""
    return [sys.executable, "-m", "snakemake", "--snakefile", str(cluster.SNAKEFILE), "--profile", str(profile),
            "--dry-run", "--configfile", str(configfile)]


def dry_run(workdir, profile=PROFILE, configfile=ROOT / "config" / "paper.yaml") -> str:
    run = subprocess.run(dry_run_command(profile, configfile), cwd=workdir, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    assert run.returncode == 0, run.stdout[-5000:]
    return run.stdout


def jobs_of(text: str) -> list[dict]:
    """Each job of a dry run: rule, resources and the shell command (the profile prints it)."""
    jobs = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", text):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if not rule:
            continue
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        shell = re.search(r"^Shell command: (.*)$", block, re.M)
        jobs.append({"rule": rule.group(1), "resources": cluster._fields(res.group(1)) if res else {},
                     "shell": shell.group(1) if shell else None})
    return jobs


@pytest.fixture(scope="module")
def paper_dry_run(tmp_path_factory):
    """The paper config dry-run with the shipped profile, a user's account and partitions set:
    (working directory, profile, what it printed), once for the tests that read it (a dry run of
    this config is ~9 CPU-seconds)."""
    workdir = paper_workdir(tmp_path_factory.mktemp("paper"))
    profile = tmp_path_factory.mktemp("profile")
    settings = yaml.safe_load((PROFILE / "config.yaml").read_text())
    settings["config"]["slurm"].update(account="proj42", cpu_partition="cpu", gpu_partition="gpu")
    (profile / "config.yaml").write_text(yaml.safe_dump(settings))  # what a user edits, only
    return workdir, profile, dry_run(workdir, profile)


@pytest.fixture(scope="module")
def paper_jobs(paper_dry_run):
    return jobs_of(paper_dry_run[2])


def test_paper_jobs_ask_for_what_the_config_says(paper_jobs):
    res = PAPER["resources"]
    kinds = {"train": {r for r in {j["rule"] for j in paper_jobs} if r.startswith("train_")},
             "sample": {"calibrate_base", "gate_draws", "evaluate_shard", "base_rollouts"},
             "base": {"import_base"},
             "cpu": {"splits", "regimes", "mask", "evaluate", "report"}}
    for job in paper_jobs:
        if job["rule"] == "all":
            continue
        kind = next(k for k, rules in kinds.items() if job["rule"] in rules)
        r = job["resources"]
        assert int(r["cpus_per_task"]) == res[kind]["cpus"], job
        assert int(r["mem_mb"]) == res[kind]["mem_mb"] and int(r["runtime"]) == res[kind]["runtime"], job
        gpus = {"train": PAPER["train"]["gpus"], "sample": 1, "base": 0, "cpu": 0}[kind]
        assert int(r.get("gpu", 0)) == gpus, job
        assert r["slurm_partition"] == ("gpu" if gpus else "cpu"), job
        assert r["slurm_account"] == "proj42", job
    assert kinds["train"] and all(any(j["rule"] == r for j in paper_jobs) for r in kinds["cpu"])


def test_every_paper_training_job_starts_one_process_per_gpu_it_asks_for(paper_jobs, monkeypatch):
    """Run each training job's command as its SLURM job would (SLURM gave it the GPUs it asked
    for), up to the point where it starts its processes."""
    started = []
    monkeypatch.setattr(launch, "run_launcher", lambda command, env: started.append((command, env)) or 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    training = [j for j in paper_jobs if j["rule"].startswith("train_")]
    assert len(training) == 3 + 3 + 10
    for job in training:
        gpus = int(job["resources"]["gpu"])
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(gpus))))  # sbatch --gpus
        argv = shlex.split(job["shell"].split(" > ")[0])
        # exec: the shell becomes boundary train, so the time limit's SIGTERM reaches it
        # --own: a job with the colocated engine owns its devices (the paper config's engine)
        assert argv[1:4] == ["exec", "boundary", "--gpus"] and argv[4] == str(gpus)
        assert argv[5:7] == ["--own", "train"] or argv[5] == "train"
        assert job["resources"]["slurm_extra"] == "--signal=TERM@600"  # the profile's train_stop_seconds
        started.clear()
        assert cli.main(argv[3:]) == 0  # argv: OMP_NUM_THREADS=.. exec boundary --gpus N train ...
        (command, env), = started
        assert f"--nproc-per-node={gpus}" in command, job["rule"]
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, range(gpus)))
    sampling = [j for j in paper_jobs if j["rule"] in ("calibrate_base", "gate_draws", "evaluate_shard",
                                                       "base_rollouts")]
    assert sampling and all(" boundary --gpus 1 " in j["shell"] for j in sampling)


# --- cluster-check on a described cluster ------------------------------------------------------

PARTITIONS = """\
PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL Default=YES MaxNodes=UNLIMITED MaxTime=1-00:00:00 MaxCPUsPerNode=UNLIMITED Nodes=c[01-02] State=UP TotalCPUs=64 MaxMemPerNode=UNLIMITED TRES=cpu=64,mem=250G,node=2
PartitionName=gpu AllowGroups=ALL AllowAccounts=proj42,proj7 Default=NO MaxTime=2-00:00:00 MaxCPUsPerNode=UNLIMITED Nodes=g01 State=UP TotalCPUs=96 MaxMemPerNode=UNLIMITED TRES=cpu=96,mem=1000G,node=1,billing=96,gres/gpu=4
PartitionName=old AllowAccounts=ALL Default=NO MaxTime=UNLIMITED Nodes=o01 State=INACTIVE
"""
NODES = """\
NodeName=c01 Arch=x86_64 CPUAlloc=0 CPUEfctv=32 CPUTot=32 Gres=(null) OS=Linux 6.1 #1 SMP  RealMemory=128000 Partitions=cpu State=IDLE CfgTRES=cpu=32,mem=125G
NodeName=c02 CPUEfctv=32 CPUTot=32 Gres=(null) RealMemory=128000 MemSpecLimit=8000 Partitions=cpu State=DOWN* Reason=Not responding [slurm@2026-01-01]
NodeName=g01 CPUEfctv=96 CPUTot=96 Gres=gpu:h100:4(S:0-1) RealMemory=1000000 Partitions=gpu State=MIXED
NodeName=o01 CPUTot=8 Gres=(null) RealMemory=16000 Partitions=old State=IDLE
"""


def req(**kw):
    spec = dict(rule="r", cpus=1, mem_mb=1000, gpus=0, runtime=30, partition="", account="")
    return cluster.Request(**{**spec, **kw})


@pytest.mark.parametrize("request_, why", [
    (req(), None),
    (req(partition="cpu", cpus=32, mem_mb=128000, runtime=1440), None),
    (req(partition="gpu", gpus=4, cpus=96, account="proj42"), None),
    (req(partition="gpu", gpus=8, cpus=64, account="proj42"),
     "no node of partition gpu has 8 GPUs, 64 CPUs, 1000 MB (largest: 4 GPUs, 96 CPUs, 1000000 MB)"),
    (req(partition="gpu", gpus=1, account="other"), "account 'other' may not use partition gpu"),
    (req(partition="cpu", runtime=2000), "runtime 2000 min is over the MaxTime of partition cpu (1440 min)"),
    (req(partition="debug"), "partition 'debug' does not exist (partitions: cpu, gpu, old)"),
    (req(partition="old"), "partition old is INACTIVE"),
    (req(partition="cpu", cpus=64), "no node of partition cpu has 64 CPUs"),
    (req(partition="cpu", mem_mb=125000), None),  # c01: 128000 MB
])
def test_cluster_check_names_what_can_never_run(request_, why):
    found = cluster.problem(request_, cluster.parse_partitions(PARTITIONS), cluster.parse_nodes(NODES))
    assert (found is None) if why is None else (found is not None and found.startswith(why)), found


def test_nodes_and_times_are_read_from_scontrol():
    nodes = {n.name: n for n in cluster.parse_nodes(NODES)}
    assert (nodes["g01"].gpus, nodes["g01"].cpus, nodes["g01"].mem_mb) == (4, 96, 1000000)
    assert nodes["c02"].mem_mb == 120000 and not nodes["c02"].usable
    assert [cluster.parse_minutes(t) for t in ["30", "1:30:00", "2-12", "1-00:00:00", "UNLIMITED"]] == \
        [30, 90, 3600, 1440, float("inf")]
    assert cluster._gres_gpus("gpu:h100:4(S:0-1),shard:8") == 4 and cluster._gres_gpus("gpu:2") == 2


def test_cluster_check_reads_the_paper_dry_run_and_names_each_rule(paper_dry_run, monkeypatch, capsys):
    """The real command on the paper config, against the described cluster: every training
    rule (8 GPUs on 4-GPU nodes) is named once, with its job count; the rest fits. Its dry run
    is the command paper_dry_run ran in the same folder, so that run's output stands in for it
    (`boundary cluster-check` runs it for real against a real SLURM in test_slurm.py)."""
    workdir, profile, printed = paper_dry_run
    fake = {"partition": PARTITIONS, "node": NODES}
    ran = []
    monkeypatch.setattr(cluster, "_run", lambda command: fake[command[2]] if command[0] == "scontrol"
                        else ran.append(command) or printed)
    monkeypatch.chdir(workdir)
    with pytest.raises(BoundaryError, match="12 request"):
        cluster.main(["--profile", str(profile), "--configfile", str(ROOT / "config" / "paper.yaml")])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 12 and all(re.match(r"rule train_\w+ \(\d jobs?: 8 GPUs", line) for line in lines)
    assert any(line.startswith("rule train_pba (3 jobs:") for line in lines)
    assert all("no node of partition gpu has 8 GPUs" in line for line in lines)
    assert ran == [dry_run_command(profile)]
