"""The trainer's FSDP path on 2 gloo CPU processes (tests/fsdp_cpu_worker.py, with an
accelerate that allows FSDP on CPU processes) against DDP: the same rollouts give the same
log step by step and the same final weights, for the policy anchor with a global KL, the drop
sampler and the field's methods, the support anchor on pre-drawn rollouts and LoRA; sharded
checkpoints resume. Every run is made in one launch (`runs`). Apart from test_distributed.py (the
train command's own launch) so that the two run side by side (test.sh: --dist loadfile puts a
file on one worker)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, pythonpath, stage_here
from test_distributed import env, smoke  # noqa: F401  (smoke: a fixture, built once in this module too)
from torchrun_jobs import launch

from boundary.stages import base_rollouts as base_rollouts_stage


@pytest.fixture(scope="module")
def accelerate_with_cpu_fsdp(tmp_path_factory):
    """A private copy of the installed accelerate whose AcceleratorState turns FSDP on for CPU
    processes too: as shipped it does so for GPU (and other accelerator) process groups only,
    and on the CPU silently trains unsharded. One list gains MULTI_CPU; nothing else changes."""
    import accelerate

    root = tmp_path_factory.mktemp("accelerate_cpu_fsdp")
    shutil.copytree(Path(accelerate.__file__).parent, root / "accelerate")
    state = root / "accelerate" / "state.py"
    marker = "            elif self.distributed_type in [\n                DistributedType.MULTI_GPU,\n"
    text = state.read_text()
    if text.count(marker) != 1:
        pytest.skip(f"accelerate {accelerate.__version__}: its AcceleratorState changed; cannot lift its GPU-only FSDP")
    state.write_text(text.replace(marker, marker.replace("[\n", "[\n                DistributedType.MULTI_CPU,\n")))
    return root


# The methods below, each trained under FSDP and under DDP (and resumed under FSDP where said).
POLICY_GLOBAL_KL = {}  # the worker's own: the policy anchor with a global KL
DROP_AND_FIELD = {"anchor": None, "beta_kl": 0.0, "masked_action": "drop", "unlikeliness": 0.5, "cov_select": "kl"}
SUPPORT = {"anchor": "support", "support_floor": 0.5, "beta_a": 2.0, "beta_kl": 0.0}
SUPPORT_EVERY = 6  # the support anchor's mask anchors 5 prompts in 6
LORA = {"lora": {"enabled": True, "rank": 4}}


@pytest.fixture(scope="module")
def runs(smoke, accelerate_with_cpu_fsdp, tmp_path_factory) -> dict:
    """Every run of the tests below, in one launch of tests/fsdp_cpu_worker.py on 2 gloo
    processes (torchrun_jobs.py: a launch costs three process starts, more than a run of 3
    steps): name -> what that run reported (its folder under "out")."""
    from fsdp_cpu_worker import SETTINGS, anchored

    root = tmp_path_factory.mktemp("fsdp")
    # The support anchor's base rollouts, pre-drawn by the base_rollouts stage on its mask.
    split = pd.read_parquet(smoke / "train.parquet")
    w = anchored(len(split), SUPPORT_EVERY)[0]
    pd.DataFrame({"prompt_id": split["prompt_id"], "epoch": 0, "weight": w,
                  "action": np.where(w > 0, "anchor", "sharpen")}).to_parquet(root / "mask.parquet")
    drawn = root / "base_rollouts.parquet"
    with stage_here():  # the stage's own code; its process start is not what is tested
        base_rollouts_stage.main(["--model", str(smoke / "base"), "--train-split", str(smoke / "train.parquet"),
                                  "--mask", str(root / "mask.parquet"), "--settings",
                                  json.dumps({**SETTINGS, **SUPPORT}), "--seed", "0", "--out", str(drawn)])
    jobs = []
    for name, method, extra, resumed in [("policy", POLICY_GLOBAL_KL, {}, True),
                                         ("drop", DROP_AND_FIELD, {}, False),
                                         ("support", SUPPORT, {"base_rollouts": str(drawn), "every": SUPPORT_EVERY},
                                          False),
                                         ("lora", LORA, {}, True)]:
        jobs += [{"mode": mode, "out": str(root / name / mode), "method": method, **extra} for mode in ("fsdp", "ddp")]
        if resumed:  # killed after checkpoint 2 (here: what came after it not copied), then run again
            ck = root / name / "resumed" / "checkpoint-2"
            jobs.append({"mode": "fsdp", "out": str(root / name / "resumed"), "method": method, "resume": str(ck),
                         "copy": [str(root / name / "fsdp" / "checkpoint-2"), str(ck)]})
    done = launch(ROOT / "tests" / "fsdp_cpu_worker.py", [str(smoke / "base"), str(smoke / "train.parquet")], jobs,
                  {**env(), "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": pythonpath(accelerate_with_cpu_fsdp)})
    assert [r["out"] for r, _ in done] == [j["out"] for j in jobs]
    return {str(Path(r["out"]).relative_to(root)): {**r, "out": Path(r["out"])} for r, _ in done}


def same_log(fsdp: dict, ddp: dict) -> None:
    """FSDP logs what DDP logs, step by step."""
    for a, b in zip(fsdp["log"], ddp["log"], strict=True):
        for key, value in a.items():
            assert value == (b[key] if b[key] is None else pytest.approx(b[key], rel=1e-5, abs=1e-7)), (a["step"], key)


def test_fsdp_trains_as_ddp_does_on_two_cpu_processes(runs):
    """The trainer's FSDP2 path (accelerate's plugin, the frozen base sharded as TRL shards its
    reference, synced generation, every process scoring with the base or none, sharded
    checkpoints, the whole model gathered for the outputs) on 2 gloo processes, in fp32,
    against DDP: the same rollouts (each process's stream is seeded as under DDP) give the
    same loss, gradient norm, KL and rewards step by step, and the same final weights."""
    from safetensors.torch import load_file

    fsdp, ddp = runs["policy/fsdp"], runs["policy/ddp"]
    assert fsdp["sharded"] and fsdp["policy"].startswith("FSDP") and fsdp["base"].startswith("FSDP")
    assert not ddp["sharded"] and not ddp["policy"].startswith("FSDP")
    assert fsdp["checkpoints"] == ddp["checkpoints"] == ["checkpoint-2", "checkpoint-3"]
    assert [h["step"] for h in fsdp["log"]] == [1, 2, 3]
    same_log(fsdp, ddp)
    assert any(h["grad_norm"] > 0 for h in fsdp["log"]) and any(h["kl"] for h in fsdp["log"])
    a, b = (load_file(r["out"] / "final" / "model.safetensors") for r in (fsdp, ddp))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    config = json.loads((fsdp["out"] / "final" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]  # not the FSDP-wrapped class's name
    # Killed after checkpoint 2 (here: what came after it not copied), the FSDP run resumes from
    # its sharded checkpoint and repeats step 3.
    resumed = runs["policy/resumed"]
    assert fsdp["steps_run"] == [1, 2, 3] and resumed["steps_run"] == [3]
    assert resumed["log"] == fsdp["log"]


def test_fsdp_trains_the_drop_sampler_and_the_field_s_methods_as_ddp_does(runs):
    """Without a frozen base: the drop sampler, the unlikeliness reward and KL-Cov (each makes
    an extra no-grad policy forward, a collective under FSDP, on every process) under FSDP
    log what DDP logs, step by step."""
    fsdp, ddp = runs["drop/fsdp"], runs["drop/ddp"]
    assert fsdp["sharded"] and fsdp["base"] == "NoneType" and fsdp["policy"].startswith("FSDP")
    same_log(fsdp, ddp)
    assert any(h["grad_norm"] > 0 for h in fsdp["log"])


def test_fsdp_trains_the_support_anchor_on_pre_drawn_rollouts_as_ddp_does(runs):
    """A base-sampled anchor under FSDP: its rollouts pre-drawn by the base_rollouts stage (no
    frozen base in training, no base generate call), the support hinge on their stored base
    log-probs; FSDP logs what DDP logs step by step. The mask anchors 5 prompts in 6: in the
    first step one process holds anchored rows only while the other draws from the policy, so
    the first has no rollout of its own to draw yet must step the other's generate (every
    sharded forward is a collective; on 2 and 4 H100s such runs waited for ever)."""
    fsdp, ddp = runs["support/fsdp"], runs["support/ddp"]
    assert fsdp["sharded"] and fsdp["base"] == "NoneType"  # pre-drawn: no frozen base in training
    lone = [step for step, rows in enumerate(zip(*fsdp["policy_rows"])) if min(rows) == 0 < max(rows)]
    assert lone == [0], fsdp["policy_rows"]  # a process without policy rows, the other with
    same_log(fsdp, ddp)
    assert any(h["anchor_loss"] for h in fsdp["log"])


def test_lora_trains_under_fsdp_as_under_ddp_and_resumes_from_a_sharded_checkpoint(runs):
    """train.lora under both shardings on 2 gloo processes: the policy anchor with a global KL
    scores the base as the policy with its adapter off (no frozen copy, sharded or not), FSDP
    logs what DDP logs step by step, the outputs are the same adapter (and only an adapter),
    and the FSDP run resumes from its checkpoint and repeats the last step."""
    from safetensors.torch import load_file

    fsdp, ddp = runs["lora/fsdp"], runs["lora/ddp"]
    assert fsdp["sharded"] and fsdp["policy"].startswith("FSDP") and not ddp["sharded"]
    assert fsdp["base"] == ddp["base"] == "NoneType"  # no second model under LoRA
    same_log(fsdp, ddp)
    assert any(h["grad_norm"] > 0 for h in fsdp["log"]) and any(h["kl"] for h in fsdp["log"])
    finals = [r["out"] / "final" for r in (fsdp, ddp)]
    assert all(not list(f.glob("model*.safetensors")) for f in finals)
    a, b = (load_file(f / "adapter_model.safetensors") for f in finals)
    assert a.keys() == b.keys() and all("lora_" in k for k in a)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a) and any(a[k].abs().sum() > 0 for k in a if "lora_B" in k)
    resumed = runs["lora/resumed"]
    assert resumed["steps_run"] == [3] and resumed["log"] == fsdp["log"]
