"""The Snakemake workflow's smoke run end to end (every rule once, its LoRA methods included:
`pipeline_config`), and that a config, code or artifact change reruns exactly the stages it
invalidates; the helpers the other workflow tests use. Lint, the shipped configs' dry runs and runs without the smoke run:
test_workflow_plans.py."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
import zygote
from conftest import ROOT


def snakemake(*args, cwd=ROOT, check=True, env=None):
    """Snakemake on the workflow in `cwd` where it holds a copy (the smoke run's), else ROOT's
    (`env`: variables set on top of the session's own, as it began: conftest.START_ENV). Its
    `boundary` jobs fork from a warm server (zygote.py: the imports paid once a test process, not
    once a job)."""
    snakefile = Path(cwd) / "Snakefile" if (Path(cwd) / "Snakefile").is_file() else ROOT / "Snakefile"
    run = subprocess.run(["snakemake", "--snakefile", str(snakefile), *args],
                         cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**zygote.pipeline_env(), **(env or {})})
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


def pipeline_config() -> dict:
    """tests/configs/smoke.yaml as the smoke run runs it: every rule once, so one seed (GRPO, PBA,
    an early stop, and the LoRA methods: PBA with its adapter and a checkpoint of it). A smoke job
    is almost all process start; a second seed runs the same rules again and is checked without
    a pipeline (tests/README.md, "What the smoke run leaves to other tests"): its wiring (the
    paper's dry run, test_workflow_plans.py) and its tables (test_report.py)."""
    config = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
    config["train"]["seeds"] = [0]
    config["methods"] = {m: {k: v for k, v in spec.items() if k != "seeds"} for m, spec in config["methods"].items()}
    return config


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke config (`pipeline_config`) run for real, once, in a scratch working directory
    holding its own copy of the workflow and package sources (the code-change tests edit that
    copy)."""
    workdir = tmp_path_factory.mktemp("smoke")
    shutil.copy(ROOT / "Snakefile", workdir)
    for folder in ("workflow", "config", "envs"):
        shutil.copytree(ROOT / folder, workdir / folder, ignore=shutil.ignore_patterns("__pycache__"))
    config = workdir / "smoke.yaml"
    config.write_text(yaml.safe_dump(pipeline_config(), sort_keys=False))
    snakemake("--cores", "2", "--configfile", str(config), cwd=workdir)
    return workdir, config


def test_smoke_run_writes_every_artifact(smoke_run):
    workdir, _ = smoke_run
    out = workdir / "results" / "smoke"
    for rel in ["splits/train.parquet", "rollouts/base_calibration.parquet", "rollouts/base_gate.parquet",
                "regimes/regimes.parquet", "masks/pba.parquet", "train/pba/seed0/log.parquet",
                "eval/testbed/early_stop/seed0/counts.parquet", "eval_counts.parquet",
                "tables/benchmark_curves.tex", "figures/passk_testbed.png",
                "benchmarks/train/grpo/seed0.tsv", "logs/report.log"]:
        assert (out / rel).exists(), rel
    counts = pd.read_parquet(out / "eval_counts.parquet")
    assert set(counts["method"]) == {"base", "grpo", "pba", "early_stop", "pba_lora", "early_stop_lora"}
    assert set(counts["n"]) == {32}
    assert (out / "train/grpo/seed0/final/config.json").exists()


def test_lora_trains_adapters_that_every_later_stage_reads(smoke_run):
    """The smoke run's pba_lora (a method's own lora section: rank-4 adapters, PBA's support
    anchor scoring the base as the policy with its adapter off) and early_stop_lora (its step-4
    checkpoint): each policy is an adapter folder without full weights, and the evaluation of
    each reads the base and its adapter."""
    workdir, _ = smoke_run
    run = workdir / "results" / "smoke"
    for policy in ("pba_lora/seed0/final", "pba_lora/seed0/step4"):
        files = {p.name for p in (run / "train" / policy).iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= files, (policy, files)
        assert not {"model.safetensors", "config.json"} & files, (policy, files)  # no full weights
    counts = pd.read_parquet(run / "eval_counts.parquet")
    assert {"pba_lora", "early_stop_lora"} <= set(counts["method"]) and set(counts["n"]) == {32}
    # PBA's anchor moves its adapter (GRPO's group advantages are all but zero on this testbed in
    # 8 steps): its evaluation samples base + adapter, not the base (the same seed).
    samples = {m: pd.read_parquet(run / "eval" / "testbed" / m / "seed0" / "samples.parquet")
               for m in ("base", "pba_lora", "early_stop_lora")}
    assert (samples["pba_lora"]["completion"] != samples["base"]["completion"]).sum() > 0
    assert (samples["early_stop_lora"]["completion"] != samples["base"]["completion"]).sum() > 0


def test_lora_on_reruns_exactly_the_training_and_what_reads_it(smoke_run):
    """tests/configs/smoke_lora.yaml (train.lora on: GRPO, PBA, a step-4 checkpoint) planned over
    the finished smoke run, as run `smoke`: LoRA changes the training key alone, so exactly the
    training (with PBA's pre-drawn base rollouts, keyed by it), the evaluation of its policies
    and the report would run again, without a second pretraining and calibration."""
    workdir, _ = smoke_run
    as_smoke = ("--configfile", str(ROOT / "tests" / "configs" / "smoke_lora.yaml"), "--config", "run=smoke")
    out = snakemake("-n", "--cores", "1", *as_smoke, cwd=workdir).stdout
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert {k: v for k, v in stats.items() if k not in ("all", "total")} == {
        "base_rollouts": "1", "train_grpo": "1", "train_pba": "1", "evaluate": str(2 * 3), "report": "1"}, stats


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
    assert rules == {"mask", "base_rollouts", "train_pba", "train_pba_lora", "evaluate", "report"}, rules
    evaluated = {out.split("/")[4] for rule, out in jobs if rule == "evaluate"}
    assert evaluated == {"pba", "pba_lora", "early_stop_lora"}


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
    assert len([1 for rule, _ in jobs if rule == "evaluate"]) == 2 * 6  # base, GRPO, PBA, early stop, the LoRA two


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
    assert {rule for rule, _ in jobs} == {"mask", "base_rollouts", "train_pba", "train_pba_lora", "evaluate", "report"}
    assert {out.split("/")[4] for rule, out in jobs if rule == "evaluate"} == {"pba", "pba_lora", "early_stop_lora"}


def assert_all_asks_for_every_output(tmp_path, configfile, out: str | None = None):
    """`all` lists every output the dry run of `configfile` in `tmp_path` declares (`out`: that
    dry run's output where a test has it already)."""
    if out is None:
        if configfile.name == "paper.yaml":
            paper_placeholders(tmp_path)
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


def paper_placeholders(workdir) -> None:
    """The paper config's model and data as empty placeholders: enough for a dry run."""
    (Path(workdir) / "models" / "Qwen2.5-7B").mkdir(parents=True)
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    for spec in [paper["data"]["train"], paper["data"]["diagnostic"], *paper["data"]["benchmarks"].values()]:
        (Path(workdir) / spec["path"]).parent.mkdir(parents=True, exist_ok=True)
        (Path(workdir) / spec["path"]).write_text("")


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
    (nothing reads them, so no rerun would notice); put back, nothing is to be done, and
    nothing after a complete run nor after code is touched (one dry run for the three: a touch
    reruns nothing only where the complete run reruns nothing)."""
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
            # Clearing the way stays possible: --unlock after a kill reads the Snakefile too (the
            # check skips it whichever artifact changed: once is enough).
            unlock = None if path == weights else snakemake("--unlock", "--configfile", str(config), cwd=workdir,
                                                             check=False)
        finally:
            _rewrite_in_place(path, original) if path == weights else path.write_bytes(original)
        line = (f"{named.relative_to(workdir)}: changed since the pipeline wrote it; delete it to have it "
                "made again (with what depends on it), or move it elsewhere to keep it")
        assert run.returncode != 0 and line in run.stdout.splitlines(), run.stdout[-2000:]
        assert unlock is None or unlock.returncode == 0, unlock.stdout[-2000:]
    (workdir / "workflow" / "boundary" / "stages" / "evaluate.py").touch()
    assert planned_jobs(workdir, config) == set()


