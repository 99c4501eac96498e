"""The shipped SLURM profile against a real SLURM: a single-node cluster from Debian packages
(workflow/scripts/slurm/up.sh, as root, about a minute with the packages' install), a small
config run through the profile, `sacct` showing that each of its jobs ran as a SLURM job,
and `boundary cluster-check` naming the paper's rules this node can never run.

Skipped, saying why, where SLURM cannot be installed or started from packages (not root, no
apt-get, no package source), or with BOUNDARY_TEST_SLURM=0. The cluster's daemons are
stopped at the end (only those up.sh started); the packages stay installed.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import shutil
import subprocess
import sys

import pytest
import yaml
import zygote
from conftest import ROOT
from test_cluster import PAPER, paper_workdir

SCRIPTS = ROOT / "workflow" / "scripts" / "slurm"
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd")
# A job of each resource class (base, cpu, sample, train: the profile's partitions and the
# schema's CPUs), the later two reading what SLURM jobs before them wrote. Not the regimes job:
# one more CPU-only rule, like the splits, it added a third link to the chain and only the
# plugin's status waits with it (tests/README.md, the sixth round).
TARGETS = ["results/tiny/rollouts/base_calibration.parquet", "results/tiny/train/grpo/seed0/log.parquet"]


def missing_daemons() -> list[str]:
    path = f"/usr/sbin:/usr/bin:{os.environ['PATH']}"
    return [d for d in DAEMONS if not shutil.which(d, path=path)]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if os.environ.get("BOUNDARY_TEST_SLURM") == "0":
        pytest.skip("SLURM test off (BOUNDARY_TEST_SLURM=0)")
    if os.geteuid() != 0:
        pytest.skip("SLURM test: bringing up a test cluster needs root (Debian packages, daemons)")
    if not shutil.which("apt-get") and missing_daemons():
        pytest.skip("SLURM test: no apt-get to install SLURM from Debian packages")
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.skip('SLURM test: snakemake-executor-plugin-slurm missing (pip install -e ".[test]")')
    # One test cluster per machine (fixed ports, /etc/slurm): concurrent test runs take turns.
    lock = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "boundary-slurm-test.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    if shutil.which("scontrol") and subprocess.run(["scontrol", "ping"], capture_output=True).returncode == 0:
        lock.close()
        pytest.skip("SLURM test: a SLURM controller already answers on this machine; the test "
                    "brings up its own (stop the other, or run with BOUNDARY_TEST_SLURM=0)")
    base = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURM_BASE": str(base)}
    up = subprocess.run(["bash", str(SCRIPTS / "up.sh")], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=900)
    if up.returncode:
        subprocess.run(["bash", str(SCRIPTS / "down.sh")], env=env, capture_output=True)
        tail = "\n".join(up.stdout.strip().splitlines()[-15:])
        missing = missing_daemons()
        lock.close()
        if missing:  # the packages could not be installed here: nothing to test against
            pytest.skip(f"SLURM test: SLURM could not be installed ({', '.join(missing)} missing):\n{tail}")
        pytest.fail(f"up.sh could not start the installed SLURM:\n{tail}")
    try:
        yield base
    finally:
        subprocess.run(["bash", str(SCRIPTS / "down.sh")], env={**env, "SLURM_WIPE": "1"}, capture_output=True)
        lock.close()


def tiny_config(path):
    """The smoke config cut to a few seconds of work per job."""
    config = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
    config["run"] = "tiny"
    config.pop("resources", None)  # the schema's defaults, which the test below finds in sacct
    config["testbed"]["splits"] = {"train": 16, "diagnostic": 16, "testbed": 8}
    config["testbed"]["pretrain"]["steps"] = 20
    config["calibration"]["n"] = 8
    config["regimes"]["coverage_k"] = 8
    config["gate"].update(G0=4, refresh_steps=2)
    config["train"].update(seeds=[0], steps=2, prompts_per_step=2, num_generations=2, checkpoints=[2])
    config["methods"] = {"grpo": {"label": "GRPO"}}
    config["evaluate"].update(n=4, ks=[1, 4])
    path.write_text(yaml.safe_dump(config))
    return path


def user_profile(folder, partition):
    """The shipped profile with the values a user sets: here the node's one partition."""
    settings = yaml.safe_load((ROOT / "config" / "profiles" / "slurm" / "config.yaml").read_text())
    settings["config"]["slurm"].update(cpu_partition=partition, gpu_partition=partition)
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(settings))
    return folder


def run(command, cwd, timeout=900, env=None):
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=env)
    return done.returncode, done.stdout


def test_a_small_config_runs_as_slurm_jobs(slurm, tmp_path):
    config, profile = tiny_config(tmp_path / "tiny.yaml"), user_profile(tmp_path / "profile", "debug")
    code, out = run([sys.executable, "-m", "boundary.cli", "cluster-check", "--profile", str(profile),
                     *TARGETS, "--configfile", str(config)], tmp_path)
    assert code == 0 and "4 jobs of 4 rules fit this cluster" in out, out
    start = datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    # Snakemake is a real process (the controller the profile configures) and so is each job's own
    # Snakemake under slurmd; the jobs' `boundary` commands fork from the test pipelines' warm
    # server (sbatch exports the controller's environment: tests/zygote.py), except the base
    # model's, whose two threads (resources.base's default) keep it a real process: a cold
    # start of the installed command under SLURM.
    code, out = run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
                     "--profile", str(profile), "--slurm-init-seconds-before-status-checks", "2",
                     # Snakemake asks SLURM every 10 s by default: idle wall time per job of the chain.
                     "--seconds-between-status-checks", "1",
                     *TARGETS, "--configfile", str(config)], tmp_path, env=zygote.pipeline_env())
    assert code == 0, out[-6000:]
    assert all((tmp_path / t).exists() for t in TARGETS)
    code, acct = run(["sacct", "-X", "-n", "-P", "-a", "-S", start,
                      "-o", "JobID,State,Comment,Partition,ReqCPUS,WorkDir"], tmp_path)
    assert code == 0, acct
    jobs = [line.split("|") for line in acct.splitlines() if line.endswith("|" + str(tmp_path))]
    assert sorted(j[2] for j in jobs) == ["rule_calibrate_base", "rule_pretrain_base", "rule_splits",
                                          "rule_train_grpo_wildcards_0"], acct
    assert all(j[1] == "COMPLETED" and j[3] == "debug" for j in jobs), acct
    cpus = {j[2]: int(j[4]) for j in jobs}
    assert cpus["rule_pretrain_base"] == 2 and cpus["rule_splits"] == 1  # resources.base / .cpu


def test_cluster_check_names_the_paper_rules_this_node_cannot_run(slurm, tmp_path):
    """The shipped profile as is (the default partition) and the paper config on a node with
    no GPU: every training and sampling rule is named; nothing is submitted."""
    workdir = paper_workdir(tmp_path)
    code, out = run([sys.executable, "-m", "boundary.cli", "cluster-check", "--profile",
                     str(ROOT / "config" / "profiles" / "slurm"), "--configfile",
                     str(ROOT / "config" / "paper.yaml")], workdir)
    assert code == 1 and "can never be scheduled on this cluster" in out, out
    named = {line.split()[1] for line in out.splitlines() if line.startswith("rule ")}
    trained = {f"train_{m}" for m, spec in PAPER["methods"].items() if "checkpoint_of" not in spec}
    assert trained | {"calibrate_base", "gate_draws", "evaluate_shard"} <= named, out
