"""The workflow without the smoke run: lint, the shipped configs' dry runs, a config error
stopping Snakemake in one line, `kill -9` of the controller and the README's steps after it, and
what an edit to a data file, the base model's folder or a schema default reruns. Apart from
test_workflow.py (the smoke run and what reads it) so that the two run side by side (test.sh:
--dist loadfile puts a file on one worker)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from test_workflow import (
    _planned_reasons,
    _rewrite_in_place,
    assert_all_asks_for_every_output,
    paper_placeholders,
    planned_jobs,
    snakemake,
)


def test_lint_is_clean():
    assert "Congratulations" in snakemake("--lint").stdout


@pytest.fixture(scope="module")
def paper_plan(tmp_path_factory) -> tuple[Path, str]:
    """The paper config's dry run (model and data as placeholders), once for the tests that read
    it: (its working directory, what it printed). A dry run of this config is ~9 CPU-seconds."""
    workdir = tmp_path_factory.mktemp("paper")
    paper_placeholders(workdir)
    return workdir, snakemake("-n", "--cores", "8", "--configfile", str(ROOT / "config" / "paper.yaml"),
                              cwd=workdir).stdout


def test_paper_config_dry_run(paper_plan):
    """The 8-GPU paper config is complete: every job resolves (model and data as placeholders)."""
    _, out = paper_plan
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert stats["train_grpo"] == "3" and stats["train_pba"] == "3"
    for control in ["global_kl", "entropy", "random", "drop", "oracle", "pba_g4", "pba_g16",
                    "pba_g32", "pba_tau20", "pba_soft"]:
        assert stats[f"train_{control}"] == "1", control
    # base + 3 grpo + 3 pba + 11 single-seed runs (early stop included), on 3 splits.
    assert stats["evaluate"] == str(3 * (1 + 3 + 3 + 11))
    assert stats["evaluate_shard"] == str(8 * 3 * (1 + 3 + 3 + 11))  # sampling.shards: 8
    assert stats["mask"] == "8" and stats["calibrate_base"] == "2"  # diagnostic + train (oracle)


def test_calibration_shards_scatter_and_join_and_the_target_asks_for_each(tmp_path):
    """calibration.shards: 3 makes three GPU jobs and one CPU join; the shards are kept (a lease
    that ends early brings back those it made), so `all` asks for each."""
    config = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
    config["calibration"]["shards"] = 3
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    out = snakemake("-n", "--cores", "1", "--configfile", str(tmp_path / "c.yaml"), cwd=tmp_path).stdout
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert stats["calibrate_base_shard"] == "3" and stats["calibrate_base"] == "1"
    run = f"results/{config['run']}"
    shards = {f"{run}/rollouts/base_calibration_shards/{i}.parquet" for i in range(3)}
    made = set(re.findall(r"^\s+output: (\S+/base_calibration_shards/\d\.parquet)$", out, re.M))
    wanted = re.search(r"^(?:local)?rule all:\n\s+input: (.*)$", out, re.M)[1].split(", ")
    assert made == shards and shards <= set(wanted)


def job_lines(out: str) -> dict[str, list[str]]:
    """A dry run's (-p) jobs: rule name -> each job's block of lines (resources, shell)."""
    jobs: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        if m := re.match(r"(?:local)?rule (\w+):", block):
            jobs.setdefault(m.group(1), []).append(block)
    return jobs


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_training_job_with_the_engine_owns_its_gpus(tmp_path, gpus):
    """train.rollout_engine: vllm with $BOUNDARY_JOBS_PER_GPU=4: a training job's `gpu` resource
    is every slot of its devices (4 a GPU), so Snakemake under `--resources gpu=<devices x 4>`
    starts no other job beside it, and it claims them with `--own` (core/gpus.py); sampling
    jobs keep one slot. With `generate` the training job takes one slot a GPU, as before."""
    config = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
    config["train"].update(gpus=gpus, rollout_engine="vllm")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    out = snakemake("-n", "-p", "--cores", "1", "--configfile", str(tmp_path / "c.yaml"), cwd=tmp_path,
                    env={"BOUNDARY_JOBS_PER_GPU": "4"}).stdout
    jobs = job_lines(out)
    trains = [block for rule, blocks in jobs.items() if rule.startswith("train_") for block in blocks]
    assert trains and all(re.search(rf"\bgpu={4 * gpus}\b", b) for b in trains)
    assert all(f"boundary --gpus {gpus} --own train " in b for b in trains)
    for block in jobs["evaluate"] + jobs["calibrate_base"]:
        assert re.search(r"\bgpu=1\b", block) and "--own" not in block
    config["train"]["rollout_engine"] = "generate"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    out = snakemake("-n", "-p", "--cores", "1", "--configfile", str(tmp_path / "c.yaml"), cwd=tmp_path,
                    env={"BOUNDARY_JOBS_PER_GPU": "4"}).stdout
    trains = [b for rule, blocks in job_lines(out).items() if rule.startswith("train_") for b in blocks]
    assert all(re.search(rf"\bgpu={gpus}\b", b) and f"boundary --gpus {gpus} train " in b for b in trains)


def test_a_duplicate_config_key_stops_snakemake_with_one_line(tmp_path):
    config = tmp_path / "dup.yaml"
    text = (ROOT / "tests" / "configs" / "smoke.yaml").read_text()
    config.write_text(text + "gate: {G0: 8, tau: 0.5, refresh_steps: 4}\n")
    run = snakemake("-n", "--cores", "1", "--configfile", str(config), cwd=tmp_path, check=False)
    assert run.returncode != 0
    line = len(text.splitlines()) + 1
    assert f"{config}: line {line}: duplicate key 'gate'" in run.stdout.splitlines()


def test_a_config_error_stops_snakemake_with_one_line_naming_the_file(tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text((ROOT / "tests" / "configs" / "smoke.yaml").read_text() + "trian: {}\n")
    run = snakemake("-n", "--cores", "1", "--configfile", str(config), cwd=tmp_path, check=False)
    assert run.returncode == 1 and run.stdout.splitlines() == [f"{config}: config: unknown key 'trian'"]


def test_a_missing_data_file_stops_snakemake_before_any_job_with_one_line(tmp_path):
    """Not "At least one job did not complete successfully" from the splits job's log: the
    config key and the path, as the workflow starts. (That files a rule of the run writes, the
    generated arithmetic splits, are not missing: the arithmetic config's dry run in an empty
    folder, test_the_target_asks_for_every_artifact[smollm2_arith_smoke].)"""
    config = tmp_path / "real.yaml"
    shutil.copy(ROOT / "config" / "smollm2_smoke.yaml", config)
    path = yaml.safe_load(config.read_text())["data"]["train"]["path"]
    run = snakemake("-n", "--cores", "1", "--configfile", str(config), cwd=tmp_path, check=False)
    assert run.returncode == 1 and len(run.stdout.splitlines()) == 1, run.stdout
    assert run.stdout.startswith(f"{config}: data.train.path: {path}: file not found"), run.stdout


def test_kill_9_of_the_controller_then_the_readme_steps(tmp_path):
    """`kill -9` of Snakemake mid-job: the README's `--unlock` then `--rerun-incomplete` work,
    and no half-written model folder is ever there."""
    import os
    import signal
    import time

    config = tmp_path / "smoke.yaml"
    smoke = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
    smoke["testbed"]["pretrain"]["steps"] = 20  # the job runs twice; its length is not what is tested
    config.write_text(yaml.safe_dump(smoke))
    model = tmp_path / "results" / "smoke" / "models" / "base"
    args = ["--cores", "1", "--configfile", str(config)]
    target = "results/smoke/models/base"  # targets before --configfile
    controller = subprocess.Popen(["snakemake", "--snakefile", str(ROOT / "Snakefile"), target, *args],
                                  cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
    log = tmp_path / "results" / "smoke" / "logs" / "pretrain_base.log"
    while not log.exists() and controller.poll() is None:
        time.sleep(0.2)
    os.kill(controller.pid, signal.SIGKILL)
    controller.wait()
    assert not model.exists()  # the job is still running: nothing half-written in its place
    while True:  # its orphaned job (same process group) finishes the model
        try:
            os.killpg(controller.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    assert (model / "model.safetensors").exists()
    incomplete = snakemake(target, *args, cwd=tmp_path, check=False)  # it distrusts the orphan's model
    assert incomplete.returncode != 0 and "--rerun-incomplete" in incomplete.stdout
    locked = snakemake(target, "--rerun-incomplete", *args, cwd=tmp_path, check=False)
    assert locked.returncode != 0 and "--unlock" in locked.stdout
    snakemake(target, "--unlock", *args, cwd=tmp_path)  # the README's two steps
    snakemake(target, "--rerun-incomplete", *args, cwd=tmp_path)
    assert (model / "model.safetensors").exists() and (model / "pretrain.json").exists()
    assert planned_jobs_for(tmp_path, target, config) == set()


def planned_jobs_for(workdir, target, configfile):
    out = snakemake(target, "-n", "--cores", "1", "--configfile", str(configfile), cwd=workdir).stdout
    return {m.group(1) for m in re.finditer(r"^(?:local)?rule (\w+):", out, re.M)}


@pytest.mark.parametrize("path", [ROOT / "tests" / "configs" / "smoke.yaml", ROOT / "config" / "paper.yaml",
                                  ROOT / "tests" / "configs" / "smollm2_arith_smoke.yaml",
                                  ROOT / "tests" / "configs" / "methods.yaml"], ids=lambda p: p.stem)
def test_the_target_asks_for_every_artifact(tmp_path, path, request):
    """`all` lists every declared output of the run (temp shards aside): what a failed job's
    cleanup deletes is always rebuilt (see run_artifacts in common.smk). The arithmetic config's
    dry run in an empty folder also shows that a file a rule of the run writes (its generated
    splits) is not reported missing (test_a_missing_data_file_stops_snakemake_before_any_job...)."""
    if path.name == "paper.yaml":  # the paper's dry run, shared with test_paper_config_dry_run
        workdir, out = request.getfixturevalue("paper_plan")
        assert_all_asks_for_every_output(workdir, path, out)
    else:
        assert_all_asks_for_every_output(tmp_path, path)


@pytest.fixture(scope="module")
def real_data_run(tmp_path_factory, tiny_model_dir):
    """A real-data config's first stages run for real: the base imported from a model folder
    and one split per data file (the rest of the pipeline is the smoke run's)."""
    import json

    workdir = tmp_path_factory.mktemp("real")
    shutil.copytree(tiny_model_dir, workdir / "source_model")
    (workdir / "data").mkdir()
    for name in ("train", "diag", "a", "b"):
        rows = [json.dumps({"problem": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(4)]
        (workdir / "data" / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
    config = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
    del config["testbed"]
    config.update(run="real", base_model="source_model", data={
        "train": {"path": "data/train.jsonl"}, "diagnostic": {"path": "data/diag.jsonl"},
        "benchmarks": {"a": {"path": "data/a.jsonl"}, "b": {"path": "data/b.jsonl"}}})
    path = workdir / "real.yaml"
    path.write_text(yaml.safe_dump(config))
    targets = ["results/real/models/base", "results/real/splits/bench_a.parquet",
               "results/real/splits/bench_b.parquet"]
    snakemake(*targets, "--cores", "1", "--configfile", str(path), cwd=workdir)
    return workdir, path, targets


def _planned(workdir, config, targets) -> set[tuple[str, str]]:
    out = snakemake(*targets, "-n", "--cores", "1", "--configfile", str(config), cwd=workdir).stdout
    return {(m.group(1), m.group(2).split(",")[0].strip())
            for m in re.finditer(r"^(?:local)?rule (\w+):\n(?:.*\n)*?\s+output: (.*)$", out, re.M)}


def test_a_data_file_edited_in_place_reruns_exactly_its_split(real_data_run):
    """A corrected gold answer (same size, mtime kept) reruns the one split read from that
    file, and what depends on it (that a touch reruns nothing: the next test's last dry run)."""
    workdir, config, targets = real_data_run
    data = workdir / "data" / "a.jsonl"
    original = data.read_bytes()
    _rewrite_in_place(data, original.replace(b'"answer": "2"', b'"answer": "3"'))
    try:
        assert _planned(workdir, config, targets) == {("splits", "results/real/splits/bench_a.parquet")}
    finally:
        _rewrite_in_place(data, original)


def test_a_base_model_folder_re_saved_in_place_reruns_the_import(real_data_run):
    """Put back, nothing reruns, with a data file and the model's weights touched besides (one
    dry run for both: a touch reruns nothing only where the restored run reruns nothing)."""
    workdir, config, targets = real_data_run
    weights = workdir / "source_model" / "model.safetensors"
    original = weights.read_bytes()
    _rewrite_in_place(weights, original[:-1] + bytes([original[-1] ^ 1]))
    try:
        planned = _planned(workdir, config, targets)
    finally:
        _rewrite_in_place(weights, original)
    assert planned == {("import_base", "results/real/models/base")}
    (workdir / "data" / "a.jsonl").touch()
    weights.touch()
    assert _planned(workdir, config, targets) == set()


def _touched_run(workdir: Path, config: Path) -> None:
    """A finished run of `config` in `workdir` without running it: every job's outputs as
    empty stand-ins (folders for outputs without a suffix), recorded by `snakemake --touch`,
    as docs/how-to/upgrade.md has a user keep a finished run."""
    out = snakemake("-n", "--forceall", "--cores", "1", "--configfile", str(config), cwd=workdir).stdout
    for line in out.splitlines():
        if line.strip().startswith("output:"):
            for path in (workdir / p.strip() for p in line.split(":", 1)[1].split(",")):
                if path.suffix:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch()
                else:
                    path.mkdir(parents=True, exist_ok=True)
    snakemake("--touch", "--forceall", "--cores", "1", "--configfile", str(config), cwd=workdir)


def test_a_default_edited_in_the_schema_reruns_exactly_the_stages_that_read_it(tmp_path):
    """One key per setting (core/settings.py): train.weight_decay's default edited in the
    schema plans the training runs again (their params changed) and what reads their policies;
    a default that no stage of the run reads (calibration.rounds, read only when adaptive)
    plans nothing."""
    workdir = tmp_path
    shutil.copy(ROOT / "Snakefile", workdir)
    for folder in ("workflow", "config", "envs"):
        shutil.copytree(ROOT / folder, workdir / folder, ignore=shutil.ignore_patterns("__pycache__"))
    config = workdir / "smoke.yaml"
    shutil.copy(ROOT / "tests" / "configs" / "smoke.yaml", config)
    _touched_run(workdir, config)
    assert planned_jobs(workdir, config) == set()
    schema = workdir / "workflow" / "schemas" / "config.schema.yaml"
    text = schema.read_text()
    for old, new in [("weight_decay: {type: number, minimum: 0, default: 0.0,", "weight_decay: {type: number, "
                      "minimum: 0, default: 0.01,"),
                     ("        default: [8, 16, 24, 32,", "        default: [4, 16, 24, 32,")]:
        assert old in text, old
    schema.write_text(text.replace("weight_decay: {type: number, minimum: 0, default: 0.0,",
                                   "weight_decay: {type: number, minimum: 0, default: 0.01,"))
    reasons = _planned_reasons(workdir, config)
    # Snakemake names a job's own changed params only where nothing upstream of it reruns
    # (_planned_reasons): train_pba's and train_pba_lora's base rollouts rerun (they take the
    # training's settings).
    changed = {rule for rule, why in reasons.items() if "Params have changed since last execution" in why}
    assert changed == {"train_grpo", "base_rollouts"}, reasons
    assert set(reasons) - {"all"} == changed | {"train_pba", "train_pba_lora", "evaluate", "report"}, reasons
    assert reasons["evaluate"] == reasons["report"] == {"Input files updated by another job"}
    schema.write_text(text.replace("        default: [8, 16, 24, 32,", "        default: [4, 16, 24, 32,"))
    assert planned_jobs(workdir, config) == set()
