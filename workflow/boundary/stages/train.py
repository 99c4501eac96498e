"""The `train` stage: GRPO, PBA and every control through one TRL trainer (training/trainer.py).

`boundary train` starts one process per GPU under torchrun (training/launch.py; with
`train.gpus: 0`, `--processes` CPU processes over gloo); each runs `run`: the run's key (every
input it is trained from), the trainer built from the filled settings, resumption from the
newest checkpoint under that key, and the outputs (final policy, step snapshots, log, the
actions as trained), written once by the main process.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core import settings as stage_settings
from boundary.core import sources
from boundary.core.errors import BoundaryError
from boundary.core.gpus import visible
from boundary.core.options import ArgumentParser, description
from boundary.training import sharding
from boundary.training.launch import (
    ERRORS_ENV,
    RESUME_ME,
    STOP_ENV,
    StopRequest,
    die_with_launcher,
    launch_plan,
    leave,
    relay_error,
    relayed_error,
    run_launcher,
    start_processes,
    stop_processes,
    torchrun,
)

# torch, transformers and TRL are imported where training starts, not here: `boundary train
# --help` and `boundary.cli.parsers()` build the parser without them (seconds, and warnings).

OWNER = "boundary train"  # the marker of the model folders it writes (core.artifacts.output_folder)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "WORLD_SIZE" in os.environ:  # a worker of a launch: train here, then leave at once
        die_with_launcher()
        stop = StopRequest().install()  # before anything slow: a SIGTERM from here on stops at a step
        finished = False
        try:
            start_processes()
            run(argv, stop=stop)
            finished = True
        except BoundaryError as err:
            relay_error(err)
            raise
        finally:
            stop_processes(finished)
        return leave()
    known = make_parser().parse_args(argv)  # --help, and a bad option, before any process starts
    if known.processes is not None and known.processes < 1:
        raise BoundaryError(f"--processes: {known.processes} is not a process count")
    settings = stage_settings.load("train", known.settings)  # a bad one: one line, before any process
    gpus = int(settings["gpus"])
    launch = launch_plan(gpus, known.processes, visible() if gpus else [])
    # Refused here, before any process starts or anything is written.
    sharding.check_launch(settings["sharding"], gpus, launch.processes)
    stage_settings.check_batch_split(settings, launch.processes)
    if settings["sharding"] == "fsdp" and launch.processes == 1:
        print("train: sharding fsdp with 1 GPU shards nothing: the one process holds the whole model", flush=True)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(launch.devices)
    if launch.processes == 1:
        stats = run(argv, settings, stop=StopRequest().install())
        if "stopped_at" in stats:
            raise SystemExit(RESUME_ME)
        return None
    env = dict(os.environ)
    # The job's CPU threads are shared by its processes.
    threads = int(env.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    env["OMP_NUM_THREADS"] = str(max(1, threads // launch.processes))
    where = f"GPUs {','.join(launch.devices)}" if launch.devices else "CPU (gloo)"
    print(f"train: {launch.processes} processes on {where}", flush=True)
    with tempfile.TemporaryDirectory() as errors, tempfile.TemporaryDirectory() as stop:
        env[ERRORS_ENV], env[STOP_ENV] = errors, stop
        code = run_launcher(torchrun(launch.processes, argv), env)
        said = relayed_error(errors) if code else None
        stopped = StopRequest.stopped(stop)
    if stopped and not code:
        raise SystemExit(RESUME_ME)
    if said:
        raise BoundaryError(f"train: {said}")
    if code:
        raise BoundaryError(f"train: a process of {launch.processes} failed (exit {code}); "
                            "its error is above in this log")


def make_reward(extractor: str, timeout: int, workers: int):
    from boundary.tasks.verify import Verifier, extract_answer

    verifier = Verifier(timeout=timeout, workers=workers)  # one pool per process

    def correct(prompts, completions, answer, **kwargs):
        found = [extract_answer(c, extractor) for c in completions]
        verdicts = verifier.verdicts([str(a) for a in answer], found)
        unverified = sum(v is None for v in verdicts)
        if unverified:  # no verdict to give: rewarded 0 like a wrong answer, and said so
            print(f"verify: {unverified} of {len(verdicts)} completions unverified (rewarded 0)", flush=True)
        return [float(v is True) for v in verdicts]

    correct.verifier = verifier
    return correct


def step_snapshots(steps, folder: Path):
    """A TrainerCallback that saves save_pretrained copies at the configured steps, into the
    checkpoint folder (which outlives a killed job); `boundary train` copies them into its
    outputs at the end. Its `accelerator` is set once the trainer exists."""
    from transformers import TrainerCallback

    class StepSnapshots(TrainerCallback):
        def __init__(self):
            self.steps, self.folder, self.accelerator = set(steps), folder, None

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if state.global_step in self.steps:
                save_atomic(self.accelerator, model, processing_class, self.folder / f"step{state.global_step}")

    return StepSnapshots()


def no_checkpoint_at_the_end():
    """A TrainerCallback that skips the resumable checkpoint of the last step (transformers
    saves at every multiple of save_steps, the last step too): the finished run removes its
    checkpoint folder, so that save (weights and optimizer state: 1.6 GB at 135M, about 21 GB at
    1.5B) would only be written to be deleted. A kill between the last step and the outputs
    resumes from the checkpoint before it."""
    from transformers import TrainerCallback

    class NoCheckpointAtTheEnd(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                control.should_save = False

    return NoCheckpointAtTheEnd()


def stop_at_step_boundary(stop: StopRequest):
    """A TrainerCallback that ends training after a step where any process was asked to stop
    (a SIGTERM: StopRequest), with a resumable checkpoint of that step. Every process calls
    `agreed` (an all-reduce) at every step end, so all stop after the same step. The last step
    needs no stop: the run is finishing. `stopped_at` is set once it has stopped; `device`
    once the trainer exists."""
    from transformers import TrainerCallback

    class StopAtStepBoundary(TrainerCallback):
        def __init__(self):
            self.stopped_at, self.device = None, "cpu"

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step < state.max_steps and stop.agreed(self.device):
                control.should_save = control.should_training_stop = True
                self.stopped_at = state.global_step

    return StopAtStepBoundary()


def save_atomic(accelerator, model, tokenizer, path: Path):
    """save_pretrained of the whole model, by the main process. Every process calls it: under
    FSDP the whole state dict is gathered from the shards. A LoRA policy (peft) writes its
    adapter alone (adapter_config.json, adapter_model.safetensors): peft's save_pretrained keeps
    the adapter's entries of the state dict."""
    from boundary.core.artifacts import atomic_dir

    state = sharding.full_state_dict(accelerator, model)
    if accelerator.is_main_process:
        with atomic_dir(path, OWNER) as tmp:
            accelerator.unwrap_model(model).save_pretrained(tmp, state_dict=state)
            tokenizer.save_pretrained(tmp)


def run_key(model_dir, settings: dict, seed: int, prompts: dict, weights) -> str:
    """The identity of a training run: the key of its complete settings (core.settings.key: the
    rule's key, so a default edited in the schema never resumes a checkpoint made under the old
    value), seed, prompts, anchor weights, the process
    count, the base model's files and the package's code. A job resumes only checkpoints under
    its own key, so a changed config, gate, base or code never resumes a stale run, and a job
    with another process count (train.gpus, or --processes on the CPU) starts afresh: TRL
    seeds process r with seed + r, so the random streams are laid out by the count, and
    transformers would resume another count's checkpoint without a word about the processes
    whose random state it lacks. Files that do not shape the weights are left out:
    pretrain.json (it records wall-clock seconds) and hidden files (download caches, the
    folder's owner marker)."""
    processes = int(os.environ.get("WORLD_SIZE", 1))
    keyed = stage_settings.key("train", settings)
    h = hashlib.sha256(json.dumps([keyed, seed, prompts, processes], sort_keys=True).encode())
    if weights is not None:
        h.update(np.ascontiguousarray(weights, dtype=np.float64).tobytes())
    model_files = [p for p in sorted(Path(model_dir).rglob("*")) if p.name != "pretrain.json"
                   and not any(part.startswith(".") for part in p.relative_to(model_dir).parts)]
    for path in [*model_files, *code_files()]:
        if path.is_file():
            with open(path, "rb") as f:
                h.update(path.name.encode() + hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()[:16]


def code_files() -> list[Path]:
    """The package sources a training process runs (this stage's import closure)."""
    return sources.files(__name__)


def last_checkpoint(folder: Path) -> str | None:
    """The newest complete TRL checkpoint (a kill mid-save leaves one without trainer state)."""
    done = [p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
    return str(max(done, key=lambda p: int(p.name.split("-")[1]))) if done else None


def log_table(history: list[dict]) -> pd.DataFrame:
    rows = [{k.replace("/", "_"): v for k, v in h.items()} for h in history if "loss" in h]
    df = pd.DataFrame(rows)
    for col in ("step", "loss", "reward", "kl", "entropy", "protected_fraction", "anchor_loss"):
        if col not in df:
            df[col] = np.nan
    return df


def train(model_dir, split: pd.DataFrame, settings: dict, seed: int, out_dir, checkpoint_dir,
          mask: pd.DataFrame | None = None, mask_path="--mask", callbacks=(),
          base_rollout_files: list | None = None, full: dict | None = None, keep_checkpoints: bool = False,
          stop: StopRequest | None = None) -> dict:
    """Train one run. `settings`: as given; `full`: their complete settings (core/settings.py),
    resolved here unless the caller has them; the checkpoints are keyed by full's key. Once the
    outputs are written the run's checkpoint folder is removed unless `keep_checkpoints`: no
    later job resumes it (a changed config or code has another key), and a 1.5B run's two
    checkpoints with their optimizer state are about 40 GB. Without `keep_checkpoints` the last
    step writes no resumable checkpoint either. With `stop` (a SIGTERM's request) the run may
    end early at a step boundary: it saves a checkpoint there, writes no outputs and returns
    `stopped_at`, the step it resumes after."""
    full = full or stage_settings.resolve("train", settings)
    if full["rollout_engine"] != "vllm":
        from boundary.training import trl_pin

        trl_pin.without_vllm()  # before TRL's trainer: its import of vLLM is ~10 s of start-up
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from boundary.sampling.models import from_pretrained
    from boundary.training import rollout_engine
    from boundary.training.schedule import anchor_weights_for
    from boundary.training.trainer import PBATrainer, needs_frozen_base
    from boundary.training.trainer_config import check_micro_batch, make_config

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out_dir = Path(out_dir)
    cfg = make_config(full, seed, str(checkpoint_dir))
    rollout_engine.check_device(cfg)
    if cfg.use_vllm:
        from boundary.sampling.vllm import without_flashinfer_sampler

        without_flashinfer_sampler()  # TRL builds its colocated engine with the trainer
    if full["mask"] and mask is None:
        raise BoundaryError(f"--mask: method uses mask {full['mask']!r}, none given")
    text = split["prompt"] if "prompt" in split else split["problem"]
    prompts = {"prompt": text.tolist(), "answer": split["answer"].astype(str).tolist(),
               "prompt_id": split["prompt_id"].tolist()}
    data = Dataset.from_dict(prompts)
    epochs = stage_settings.refresh_epochs(cfg.max_steps, cfg.refresh_steps)
    weights = (None if mask is None else
               anchor_weights_for(mask, split["prompt_id"].tolist(), epochs, mask_path))
    checkpoint_dir = Path(checkpoint_dir) / run_key(model_dir, full, seed, prompts, weights)
    cfg.output_dir = str(checkpoint_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = from_pretrained(model_dir)
    if torch.cuda.is_available():  # before the engine and the trainer take the GPU
        gpu = torch.cuda.get_device_properties(torch.cuda.current_device())
        check_micro_batch(cfg, model.config.vocab_size, gpu.total_memory)
    anchoring = stage_settings.anchoring(weights is not None and weights.any(), cfg.masked_action)
    # Under LoRA the base is the policy with its adapter off: no copy is loaded.
    needs_base = needs_frozen_base(cfg, anchoring, bool(base_rollout_files)) and cfg.lora is None
    base = from_pretrained(model_dir) if needs_base else None
    reward = make_reward(full["extractor"], int(full["verify_timeout"]), int(full["verify_workers"]))
    checkpoints = sorted(int(s) for s in full.get("checkpoints", []))
    snapshots = checkpoint_dir / "snapshots"
    snapshots.mkdir(parents=True, exist_ok=True)
    snapshot = step_snapshots([c for c in checkpoints if c < cfg.max_steps], snapshots)
    skip_last_save = [] if keep_checkpoints else [no_checkpoint_at_the_end()]  # after transformers' own, which it overrides
    stopper = stop_at_step_boundary(stop or StopRequest())
    trainer = PBATrainer(model, reward_funcs=reward, args=cfg, train_dataset=data,
                         processing_class=tokenizer, anchor_weights=weights, base_model=base,
                         base_rollouts=base_rollout_files,
                         callbacks=[snapshot, *skip_last_save, stopper, *callbacks])
    snapshot.accelerator, stopper.device = trainer.accelerator, trainer.accelerator.device
    resume = last_checkpoint(checkpoint_dir)
    main_process = trainer.accelerator.is_main_process
    if main_process:
        print(f"train: {'resuming from ' + resume if resume else 'starting in ' + str(checkpoint_dir)}; "
              f"{cfg.max_steps} steps x {cfg.generation_batch_size} completions in "
              f"{trainer.accelerator.num_processes} process(es)", flush=True)
    start = time.time()
    from boundary.core.artifacts import atomic_dir, storage_errors, write_table

    try:
        with storage_errors(checkpoint_dir):  # a full disk: one line; the checkpoints so far resume
            trainer.train(resume_from_checkpoint=resume)
    finally:
        reward.verifier.close()
    stats = {"steps": int(trainer.state.global_step), "resumed_from": resume,
             "seconds": round(time.time() - start, 1)}
    if stopper.stopped_at is not None:  # a time limit: the checkpoint is saved; the rerun resumes
        if main_process:
            StopRequest.mark_stopped()
            print(f"train: stopped after step {stopper.stopped_at} of {cfg.max_steps} (SIGTERM); its checkpoint "
                  f"is in {checkpoint_dir}; exit {RESUME_ME}: rerun to resume", flush=True)
        trainer.accelerator.wait_for_everyone()
        return {**stats, "stopped_at": stopper.stopped_at}
    if torch.cuda.is_available():  # this process's GPU peak, policy + base + optimizer + rollouts
        stats["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
    save_atomic(trainer.accelerator, trainer.model, tokenizer, out_dir / "final")
    if main_process:  # the outputs, once
        for step_dir in snapshots.glob("step*"):
            with atomic_dir(out_dir / step_dir.name, OWNER) as tmp:
                shutil.copytree(step_dir, tmp, dirs_exist_ok=True)
        log = log_table(trainer.state.log_history)
        write_table(trainer.actions(), out_dir / "actions.parquet")
        write_table(log, out_dir / "log.parquet")
        stats["mean_step_time"] = float(log["step_time"].mean()) if "step_time" in log else None
        print("train: " + json.dumps(stats, sort_keys=True), flush=True)
    trainer.accelerator.wait_for_everyone()  # no process exits while the outputs are written
    if main_process and not keep_checkpoints:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    trainer.accelerator.end_training()
    return stats


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary train", description=description(__doc__))
    parser.add_argument("--model", required=True, help="base model folder (save_pretrained)")
    parser.add_argument("--train-split", required=True, help="splits/train.parquet")
    parser.add_argument("--mask", help="masks/{mask}.parquet (methods with a mask)")
    parser.add_argument("--settings", required=True, help="JSON string or file: train + method")
    parser.add_argument("--seed", type=int, required=True, help="the training seed")
    parser.add_argument("--out", required=True, help="train/{method}/seed{S}")
    parser.add_argument("--checkpoint-dir", required=True,
                        help="resumable checkpoints, outside Snakemake's declared outputs "
                             "(in a subfolder named by the run's key)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep the run's checkpoints once it has finished, the last step's too "
                             "(default: removed, and the last step writes none: the outputs hold the run; "
                             "a killed run always keeps them)")
    parser.add_argument("--base-rollouts", nargs="+", metavar="FILE",
                        help="the base_rollouts stage's files for this run (base-sampled anchors; "
                             "default: drawn in place)")
    parser.add_argument("--processes", type=int,
                        help="CPU processes (gloo) when train.gpus is 0 (default 1); with GPUs "
                             "training runs one process per GPU (read by launch.py)")
    return parser


def run(argv=None, full: dict | None = None, stop: StopRequest | None = None) -> dict:
    """One training process: parse the stage's options, train, write the outputs; the run's
    stats. `full`: the complete settings, where the caller has resolved them; `stop`: the
    process's stop request (a SIGTERM ends the run at a step boundary)."""
    from boundary.core.artifacts import read_table
    from boundary.training.gate import read_mask

    args = make_parser().parse_args(argv)
    if not Path(args.model).is_dir():
        raise BoundaryError(f"--model: {args.model}: no such model folder")
    settings = stage_settings.read(args.settings)
    split = read_table(args.train_split, ["prompt_id", "answer"])
    if "prompt" not in split and "problem" not in split:
        raise BoundaryError(f"{args.train_split}: missing column problem (or prompt)")
    mask = read_mask(args.mask) if args.mask else None
    return train(args.model, split, settings, args.seed, args.out, args.checkpoint_dir, mask, args.mask,
                 base_rollout_files=args.base_rollouts, full=full, keep_checkpoints=args.keep_checkpoints,
                 stop=stop)
