"""The Snakemake workflow: lint, the paper config's dry run, the smoke run end to end, and
that a config change reruns exactly the stages it invalidates."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT


def snakemake(*args, cwd=ROOT, check=True, env=None):
    """Snakemake on the workflow in `cwd` where it holds a copy (the smoke run's), else ROOT's
    (`env`: variables set on top of this process's)."""
    snakefile = Path(cwd) / "Snakefile" if (Path(cwd) / "Snakefile").is_file() else ROOT / "Snakefile"
    run = subprocess.run(["snakemake", "--snakefile", str(snakefile), *args],
                         cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=None if env is None else {**os.environ, **env})
    if check and run.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{run.stdout[-5000:]}")
    return run


def dry_run_inputs(workdir, config: dict) -> None:
    """Empty files at a real-model config's base model and data paths under `workdir`: a dry
    run checks they exist and opens none."""
    data = config["data"]
    for path in (config["base_model"], *(e["path"] for e in (data["train"], data["diagnostic"],
                                                              *data["benchmarks"].values()))):
        (Path(workdir) / path).parent.mkdir(parents=True, exist_ok=True)
        (Path(workdir) / path).write_bytes(b"")


def planned_jobs(workdir, configfile) -> set[tuple[str, str]]:
    """(rule, first output) of every job with outputs that a dry run would schedule (the
    target rule `all` has none and is left out)."""
    out = snakemake("-n", "--cores", "1", "--configfile", str(configfile), cwd=workdir).stdout
    jobs, rule = set(), None
    for line in out.splitlines():
        if m := re.match(r"^rule (\w+):", line.strip()) or re.match(r"^localrule (\w+):", line.strip()):
            rule = m.group(1)
        elif rule and line.strip().startswith("output:"):
            jobs.add((rule, line.split(":", 1)[1].split(",")[0].strip()))
            rule = None
    return jobs


def test_lint_is_clean():
    assert "Congratulations" in snakemake("--lint").stdout


def test_paper_config_dry_run(tmp_path):
    """The 8-GPU paper config is complete: every job resolves (model and data as placeholders)."""
    (tmp_path / "models" / "Qwen2.5-7B").mkdir(parents=True)
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    for spec in [paper["data"]["train"], paper["data"]["diagnostic"], *paper["data"]["benchmarks"].values()]:
        (tmp_path / spec["path"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / spec["path"]).write_text("")
    out = snakemake("-n", "--cores", "8", "--configfile", str(ROOT / "config" / "paper.yaml"),
                    cwd=tmp_path).stdout
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


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke config run for real, once, in a scratch working directory holding its own copy
    of the workflow and package sources (the code-change tests edit that copy)."""
    workdir = tmp_path_factory.mktemp("smoke")
    shutil.copy(ROOT / "Snakefile", workdir)
    for folder in ("workflow", "config", "envs"):
        shutil.copytree(ROOT / folder, workdir / folder, ignore=shutil.ignore_patterns("__pycache__"))
    config = workdir / "smoke.yaml"
    shutil.copy(ROOT / "tests" / "configs" / "smoke.yaml", config)
    snakemake("--cores", "2", "--configfile", str(config), cwd=workdir)
    return workdir, config


def test_smoke_run_writes_every_artifact(smoke_run):
    workdir, _ = smoke_run
    out = workdir / "results" / "smoke"
    for rel in ["splits/train.parquet", "rollouts/base_calibration.parquet", "rollouts/base_gate.parquet",
                "regimes/regimes.parquet", "masks/pba.parquet", "train/pba/seed1/log.parquet",
                "eval/testbed/early_stop/seed0/counts.parquet", "eval_counts.parquet",
                "tables/benchmark_curves.tex", "figures/passk_testbed.png",
                "benchmarks/train/grpo/seed0.tsv", "logs/report.log"]:
        assert (out / rel).exists(), rel
    counts = pd.read_parquet(out / "eval_counts.parquet")
    assert {"base", "grpo", "pba", "early_stop"} <= set(counts["method"])
    assert set(counts["n"]) == {32}
    assert (out / "train/grpo/seed0/final/config.json").exists()


def test_a_lora_smoke_run_trains_adapters_that_every_later_stage_reads(smoke_run, tmp_path):
    """tests/configs/smoke_lora.yaml (train.lora on: GRPO, PBA, a step-4 checkpoint) from a copy of the
    finished smoke run, as run `smoke`: LoRA changes the training key alone, so exactly the
    training (with PBA's pre-drawn base rollouts, keyed by it), the evaluation of its policies
    and the report run again, and the LoRA path of every stage after the masks runs without a
    second pretraining and calibration."""
    workdir, _ = smoke_run
    copy = tmp_path / "lora"
    shutil.copytree(workdir, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    config = copy / "smoke_lora.yaml"
    shutil.copy(ROOT / "tests" / "configs" / "smoke_lora.yaml", config)
    as_smoke = ("--configfile", str(config), "--config", "run=smoke")
    out = snakemake("-n", "--cores", "1", *as_smoke, cwd=copy).stdout
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert {k: v for k, v in stats.items() if k not in ("all", "total")} == {
        "base_rollouts": "1", "train_grpo": "1", "train_pba": "1", "evaluate": str(2 * 3), "report": "1"}, stats
    snakemake("--cores", "2", *as_smoke, cwd=copy)
    run = copy / "results" / "smoke"
    for policy in ("grpo/seed0/final", "grpo/seed0/step4", "pba/seed0/final"):
        files = {p.name for p in (run / "train" / policy).iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= files, (policy, files)
        assert not {"model.safetensors", "config.json"} & files, (policy, files)  # no full weights
    counts = pd.read_parquet(run / "eval_counts.parquet")
    assert {"base", "grpo", "pba", "early_stop"} <= set(counts["method"]) and set(counts["n"]) == {32}
    # PBA's anchor moves its adapter (GRPO's group advantages are all but zero on this testbed in
    # 8 steps): its evaluation samples base + adapter, not the base (the same seed).
    samples = {m: pd.read_parquet(run / "eval" / "testbed" / m / "seed0" / "samples.parquet") for m in ("base", "pba")}
    assert (samples["pba"]["completion"] != samples["base"]["completion"]).sum() > 0
    assert "Nothing to be done" in snakemake("-n", "--cores", "1", *as_smoke, cwd=copy).stdout


def landing_page_links(out: Path) -> list[str]:
    """The links of a run's landing page (results/{run}/report.html), each checked to resolve
    to a file of the run, after its headline table and regime pass@k figure are found."""
    html = (out / "report.html").read_text()
    assert "<h2>Headline (diagnostic split)</h2><table>" in html and 'alt="pass@k per regime' in html
    links = re.findall(r'href="([^"]+)"', html)
    assert links and all((out / link).is_file() for link in links), [x for x in links if not (out / x).is_file()]
    return links


def test_the_run_ends_with_a_landing_page_linking_every_table_and_figure(smoke_run):
    workdir, _ = smoke_run
    out = workdir / "results" / "smoke"
    links = set(landing_page_links(out))
    tables = {p.relative_to(out).as_posix() for p in (out / "tables").iterdir() if not p.name.startswith(".")}
    figures = {p.relative_to(out).as_posix() for p in (out / "figures").iterdir() if not p.name.startswith(".")}
    assert tables | figures <= links, sorted((tables | figures) - links)


def test_html_report_holds_the_figures(smoke_run):
    workdir, config = smoke_run
    snakemake("--cores", "1", "--configfile", str(config), "--report", "report.html", cwd=workdir)
    html = (workdir / "report.html").read_text(errors="replace")
    assert "passk_testbed.png" in html and "benchmark_curves.csv" in html


def test_nothing_reruns_after_a_complete_run(smoke_run):
    workdir, config = smoke_run
    assert planned_jobs(workdir, config) == set()


def _variant(config: Path, edit) -> Path:
    data = yaml.safe_load(config.read_text())
    edit(data)
    path = config.with_name("variant.yaml")
    path.write_text(yaml.safe_dump(data))
    return path


def test_gate_tau_reruns_only_masks_pba_base_rollouts_training_its_evaluation_and_report(smoke_run):
    workdir, config = smoke_run
    jobs = planned_jobs(workdir, _variant(config, lambda c: c["gate"].update(tau=0.3)))
    rules = {rule for rule, _ in jobs}
    assert rules == {"mask", "base_rollouts", "train_pba", "evaluate", "report"}, rules
    evaluated = {out.split("/")[4] for rule, out in jobs if rule == "evaluate"}
    assert evaluated == {"pba"}


def test_adaptive_calibration_reruns_exactly_calibration_and_what_reads_it(smoke_run):
    """calibration.adaptive on (or its rule changed) reruns calibration, the regime labels and
    the report, and nothing else: no mask, training or evaluation reads the calibration."""
    workdir, config = smoke_run
    for edit in ({"adaptive": True}, {"adaptive": True, "delta": 0.05, "rounds": [8, 16]}):
        jobs = planned_jobs(workdir, _variant(config, lambda c: c["calibration"].update(edit)))
        assert {rule for rule, _ in jobs} == {"calibrate_base", "regimes", "report"}, jobs
    # off (said explicitly), its rule's keys are not read: nothing reruns (key order kept: the
    # report's params follow the methods' order)
    data = yaml.safe_load(config.read_text())
    data["calibration"]["adaptive"] = False
    off = config.with_name("adaptive_off.yaml")
    off.write_text(yaml.safe_dump(data, sort_keys=False))
    assert planned_jobs(workdir, off) == set()


def test_an_evaluation_setting_never_retrains(smoke_run):
    workdir, config = smoke_run
    jobs = planned_jobs(workdir, _variant(config, lambda c: c["evaluate"].update(seed=7)))
    rules = {rule for rule, _ in jobs}
    assert rules == {"evaluate", "report"}, rules
    assert len([1 for rule, _ in jobs if rule == "evaluate"]) == 2 * (1 + 2 + 2 + 1)


def test_touching_code_without_changing_it_reruns_nothing(smoke_run):
    workdir, config = smoke_run
    (workdir / "workflow" / "boundary" / "stages" / "evaluate.py").touch()
    assert planned_jobs(workdir, config) == set()


def _planned_reasons(workdir, configfile) -> dict[str, set[str]]:
    """Each rule a dry run schedules, with the reasons of its jobs. Snakemake gives a job
    downstream of another only that reason ("Input files updated by another job"), without
    checking its own inputs, so a job's own changed code shows only where nothing upstream runs."""
    out = snakemake("-n", "--cores", "1", "--configfile", str(configfile), cwd=workdir).stdout
    reasons: dict[str, set[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        head = re.match(r"(?:local)?rule (\w+):", block.strip())
        reason = re.search(r"reason: (.*)", block)
        if head and reason:
            reasons.setdefault(head.group(1), set()).update(r.split(":")[0] for r in reason.group(1).split("; "))
    return reasons


@functools.cache  # one dry run for every module below: the rules and their commands do not change
def _rule_commands(workdir, configfile) -> dict[str, str]:
    """Each rule with jobs in the smoke run and the `boundary <command>` its shell runs."""
    out = snakemake("-n", "--forceall", "--cores", "1", "--configfile", str(configfile), cwd=workdir).stdout
    rules = set(re.findall(r"^(?:local)?rule (\w+):", out, re.M)) - {"all"}
    commands = {}
    for smk in (workdir / "workflow" / "rules").glob("*.smk"):
        for chunk in re.split(r"(?m)^(?=\s*rule[ :])", smk.read_text()):
            name = re.match(r"\s*rule (\w+):", chunk)
            command = re.search(r"\"[^\"]*boundary (?:--gpus \{[a-z.]+\} )?([a-z][a-z-]*)", chunk)
            trains = 'f"train_{' in chunk  # the rules made per method in a loop
            if command:
                for rule in rules:
                    if (name and rule == name.group(1)) or (not name and trains and rule.startswith("train_")):
                        commands[rule] = command.group(1)
    return commands


@pytest.mark.parametrize("module", ["core/passk.py", "tasks/verify.py", "sampling/hf.py", "training/anchors.py",
                                    "training/gate.py", "readers/verl.py", "analysis/tables.py",
                                    "stages/evaluate.py"])
def test_an_edit_to_a_module_reruns_exactly_the_rules_that_import_it(smoke_run, module):
    workdir, config = smoke_run
    package = workdir / "workflow" / "boundary"
    from boundary.cli import COMMANDS
    from boundary.core import sources

    commands = _rule_commands(workdir, config)
    name = "boundary." + module[:-3].replace("/", ".")
    expected = {rule for rule, command in commands.items()
                if name in sources.closure("boundary.cli", COMMANDS[command][0])}
    path = package / module
    original = path.read_text()
    path.write_text(original + "\n# an edit\n")
    try:
        planned = _planned_reasons(workdir, config)
    finally:
        path.write_text(original)
    direct = {rule for rule, why in planned.items() if "Updated input files" in why}
    assert expected and expected <= set(planned), (module, sorted(planned), sorted(expected))
    assert direct and direct <= expected, (module, sorted(direct), sorted(expected))
    downstream = set(planned) - expected  # they rerun only because a job upstream does
    assert all(planned[rule] == {"Input files updated by another job"} for rule in downstream), planned


def test_an_artifact_lost_to_a_failed_job_is_made_again_with_all_downstream(smoke_run):
    """Snakemake deletes a failed job's outputs (here: a PBA policy and its mask, as after a
    rerun on a corrupt mask): the next run rebuilds them and what depends on them, never
    'Nothing to be done' beside a report whose inputs are gone."""
    workdir, config = smoke_run
    out = workdir / "results" / "smoke"
    lost = [out / "masks" / "pba.parquet", out / "train" / "pba" / "seed0" / "final"]
    aside = workdir / "aside"
    aside.mkdir()
    for i, path in enumerate(lost):
        path.rename(aside / str(i))
    try:
        jobs = planned_jobs(workdir, config)
    finally:
        for i, path in enumerate(lost):
            (aside / str(i)).rename(path)
        aside.rmdir()
    assert {rule for rule, _ in jobs} == {"mask", "base_rollouts", "train_pba", "evaluate", "report"}
    assert {out.split("/")[4] for rule, out in jobs if rule == "evaluate"} == {"pba"}


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
    config key and the path, as the workflow starts. Files a rule of the run writes (the
    generated arithmetic splits) are not missing."""
    config = tmp_path / "real.yaml"
    shutil.copy(ROOT / "config" / "smollm2_smoke.yaml", config)
    path = yaml.safe_load(config.read_text())["data"]["train"]["path"]
    run = snakemake("-n", "--cores", "1", "--configfile", str(config), cwd=tmp_path, check=False)
    assert run.returncode == 1 and len(run.stdout.splitlines()) == 1, run.stdout
    assert run.stdout.startswith(f"{config}: data.train.path: {path}: file not found"), run.stdout
    snakemake("-n", "--cores", "1", "--configfile", str(ROOT / "tests" / "configs" / "smollm2_arith_smoke.yaml"), cwd=tmp_path)


def test_kill_9_of_the_controller_then_the_readme_steps(tmp_path):
    """`kill -9` of Snakemake mid-job: the README's `--unlock` then `--rerun-incomplete` work,
    and no half-written model folder is ever there."""
    import os
    import signal
    import time

    config = tmp_path / "smoke.yaml"
    shutil.copy(ROOT / "tests" / "configs" / "smoke.yaml", config)
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
def test_the_target_asks_for_every_artifact(tmp_path, path):
    """`all` lists every declared output of the run (temp shards aside): what a failed job's
    cleanup deletes is always rebuilt (see run_artifacts in common.smk)."""
    assert_all_asks_for_every_output(tmp_path, path)


def assert_all_asks_for_every_output(tmp_path, configfile):
    if configfile.name == "paper.yaml":
        (tmp_path / "models" / "Qwen2.5-7B").mkdir(parents=True)
        paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
        for spec in [paper["data"]["train"], paper["data"]["diagnostic"], *paper["data"]["benchmarks"].values()]:
            (tmp_path / spec["path"]).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / spec["path"]).write_text("")
    out = snakemake("-n", "--cores", "1", "--configfile", str(configfile), cwd=tmp_path).stdout
    outputs, wanted, rule = set(), set(), None
    for line in out.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):", line.strip()):
            rule = m.group(1)
        elif line.strip().startswith(("output:", "input:")):
            kind, files = line.strip().split(":", 1)
            files = {f.strip() for f in files.split(",") if f.strip().startswith("results/")}
            if kind == "output" and rule != "evaluate_shard":  # temp() shards are deleted by design
                outputs |= files
            elif kind == "input" and rule == "all":
                wanted |= files
    assert outputs and outputs <= wanted, sorted(outputs - wanted)[:5]


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """Overwrite a file's bytes in place, keeping its size and mtime (a re-save by a tool that
    preserves times): nothing Snakemake compares changes."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(data)
    import os

    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_artifact_changed_by_hand_is_named_before_anything_runs(smoke_run):
    """A final samples.parquet truncated, or a policy re-saved in place: one line naming it
    (nothing reads them, so no rerun would notice); put back, nothing is to be done."""
    workdir, config = smoke_run
    out = workdir / "results" / "smoke"
    samples = out / "eval" / "testbed" / "grpo" / "seed0" / "samples.parquet"
    weights = out / "train" / "pba" / "seed0" / "final" / "model.safetensors"
    for path, edit, named in [
        (samples, lambda data: samples.write_bytes(data[: len(data) // 2]), samples),
        (weights, lambda data: _rewrite_in_place(weights, bytes([data[0] ^ 1]) + data[1:]), weights.parent),
    ]:
        original = path.read_bytes()
        edit(original)
        try:
            run = snakemake("-n", "--cores", "1", "--configfile", str(config), cwd=workdir, check=False)
            # Clearing the way stays possible: --unlock after a kill reads the Snakefile too.
            unlock = snakemake("--unlock", "--configfile", str(config), cwd=workdir, check=False)
        finally:
            _rewrite_in_place(path, original) if path == weights else path.write_bytes(original)
        line = (f"{named.relative_to(workdir)}: changed since the pipeline wrote it; delete it to have it "
                "made again (with what depends on it), or move it elsewhere to keep it")
        assert run.returncode != 0 and line in run.stdout.splitlines(), run.stdout[-2000:]
        assert unlock.returncode == 0, unlock.stdout[-2000:]
    assert planned_jobs(workdir, config) == set()


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
    file, and what depends on it; a touch reruns nothing."""
    workdir, config, targets = real_data_run
    data = workdir / "data" / "a.jsonl"
    original = data.read_bytes()
    _rewrite_in_place(data, original.replace(b'"answer": "2"', b'"answer": "3"'))
    try:
        assert _planned(workdir, config, targets) == {("splits", "results/real/splits/bench_a.parquet")}
    finally:
        _rewrite_in_place(data, original)
    data.touch()
    assert _planned(workdir, config, targets) == set()


def test_a_base_model_folder_re_saved_in_place_reruns_the_import(real_data_run):
    workdir, config, targets = real_data_run
    weights = workdir / "source_model" / "model.safetensors"
    original = weights.read_bytes()
    _rewrite_in_place(weights, original[:-1] + bytes([original[-1] ^ 1]))
    try:
        planned = _planned(workdir, config, targets)
    finally:
        _rewrite_in_place(weights, original)
    assert planned == {("import_base", "results/real/models/base")}
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
    # (_planned_reasons): train_pba's base rollouts rerun (they take the training's settings).
    changed = {rule for rule, why in reasons.items() if "Params have changed since last execution" in why}
    assert changed == {"train_grpo", "base_rollouts"}, reasons
    assert set(reasons) - {"all"} == changed | {"train_pba", "evaluate", "report"}, reasons
    assert reasons["evaluate"] == reasons["report"] == {"Input files updated by another job"}
    schema.write_text(text.replace("        default: [8, 16, 24, 32,", "        default: [4, 16, 24, 32,"))
    assert planned_jobs(workdir, config) == set()
