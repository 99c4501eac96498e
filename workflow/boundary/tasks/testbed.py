"""The synthetic two-mode testbed: prompts with a known correct-mode mass w*(x).

A prompt is `ab+cd=` (four digits). A completion is a method token (A-F) followed by the four
digits rearranged by that method's permutation, then EOS. Each prompt has a hidden answer key:
one method whose rearrangement is the gold answer. The base model never sees the key; its
prior over methods depends only on a coarse *cell* of the prompt (the first digit), so

    pi_0(method m | x) = prior[cell(x)][m],   w*(x) = sum of prior over methods giving gold.

Because the correct method cannot be inferred from the prompt, RL can only learn, per cell,
which method is rewarded most often: it sharpens the dominant mode and erases rare correct
modes on boundary prompts -- the paper's inversion, with w* known exactly.

The base is a tiny Llama with a character-level tokenizer, pretrained on the *exact expected*
two-mode loss (every method's completion weighted by its prior), not on sampled lines.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from boundary.core import settings
from boundary.core.artifacts import atomic_dir, write_json
from boundary.core.errors import BoundaryError

# The config's testbed defaults (the schema's): a dataclass built by hand gets the same.
TASK, MODEL, PRETRAIN = (settings.defaults(f"testbed.{k}") for k in ("task", "model", "pretrain"))

METHODS = "ABCDEF"
# Each method's rearrangement of the prompt digits (a, b, c, d) -> four answer digits.
PERMUTATIONS = {
    "A": (0, 1, 2, 3), "B": (2, 3, 0, 1), "C": (1, 0, 3, 2),
    "D": (3, 2, 1, 0), "E": (0, 2, 1, 3), "F": (1, 3, 0, 2),
}
SPECIAL = {"pad": "<pad>", "eos": "<eos>", "bos": "<bos>"}
VOCAB = [SPECIAL["pad"], SPECIAL["bos"], SPECIAL["eos"], *"0123456789+=", *METHODS]


@dataclass(frozen=True)
class TestbedTask:
    """The task's design: cell priors and the distribution of answer-key ranks."""

    __test__ = False  # not a pytest class, despite the name

    seed: int = TASK["seed"]
    n_cells: int = TASK["n_cells"]
    dominant_min: float = TASK["dominant_min"]  # dominant-mode mass in the cell with the lowest dominance
    dominant_max: float = TASK["dominant_max"]
    # Shares of the non-dominant mass for the methods of rank 1..5 within a cell.
    tail_shares: tuple[float, ...] = tuple(TASK["tail_shares"])
    # Probability that a prompt's hidden key is the cell's method of rank 0..5.
    key_rank_probs: tuple[float, ...] = tuple(TASK["key_rank_probs"])

    def __post_init__(self):
        if len(self.tail_shares) != len(METHODS) - 1:
            raise BoundaryError(f"testbed.tail_shares: need {len(METHODS) - 1} values")
        if len(self.key_rank_probs) != len(METHODS):
            raise BoundaryError(f"testbed.key_rank_probs: need {len(METHODS)} values")
        for name in ("tail_shares", "key_rank_probs"):
            if not math.isclose(sum(getattr(self, name)), 1.0, abs_tol=1e-6):
                raise BoundaryError(f"testbed.{name}: values must sum to 1")

    def cell_priors(self) -> np.ndarray:
        """[n_cells, n_methods] prior over method tokens; each cell ranks methods differently."""
        rng = np.random.default_rng(self.seed)
        priors = np.zeros((self.n_cells, len(METHODS)))
        for cell in range(self.n_cells):
            frac = cell / max(self.n_cells - 1, 1)
            dominant = self.dominant_min + frac * (self.dominant_max - self.dominant_min)
            by_rank = [dominant, *((1 - dominant) * np.asarray(self.tail_shares))]
            order = rng.permutation(len(METHODS))  # order[r] = method index of rank r
            priors[cell, order] = by_rank
        return priors


def cell_of(digits: tuple[int, int, int, int], n_cells: int) -> int:
    return digits[0] % n_cells


def prompt_text(digits) -> str:
    a, b, c, d = digits
    return f"{a}{b}+{c}{d}="


def answer_of(digits, method: str) -> str:
    return "".join(str(digits[i]) for i in PERMUTATIONS[method])


def completion_of(digits, method: str) -> str:
    return method + answer_of(digits, method)


def make_prompts(task: TestbedTask, sizes: dict[str, int]) -> dict[str, pd.DataFrame]:
    """Disjoint splits of prompts with hidden keys, gold answers and exact w*."""
    total = sum(sizes.values())
    space = 10 ** 4
    if total > space:
        raise BoundaryError(f"testbed split sizes: {total} prompts requested, only {space} exist")
    rng = np.random.default_rng(task.seed + 1)
    priors = task.cell_priors()
    ids = rng.choice(space, size=total, replace=False)
    out, start = {}, 0
    for split, size in sizes.items():
        rows = []
        for idx in ids[start:start + size]:
            digits = tuple(int(ch) for ch in f"{idx:04d}")
            cell = cell_of(digits, task.n_cells)
            order = np.argsort(-priors[cell], kind="stable")
            rank = int(rng.choice(len(METHODS), p=task.key_rank_probs))
            key = METHODS[order[rank]]
            gold = answer_of(digits, key)
            # Methods whose rearrangement coincides with the gold answer also count as correct.
            w_star = sum(priors[cell, m] for m, name in enumerate(METHODS)
                         if answer_of(digits, name) == gold)
            rows.append({"prompt_id": f"tb-{idx:04d}", "problem": prompt_text(digits),
                         "answer": gold, "source": "testbed", "cell": cell, "key": key,
                         "key_rank": rank, "w_star": float(w_star)})
        out[split] = pd.DataFrame(rows)
        start += size
    return out


# --- tokenizer and model -------------------------------------------------------------------

def build_tokenizer():
    """Character-level fast tokenizer: a BPE model with no merges over the testbed alphabet."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(VOCAB)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    core.add_special_tokens(list(SPECIAL.values()))
    core.decoder = decoders.Fuse()  # characters join without spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=SPECIAL["pad"],
                                  eos_token=SPECIAL["eos"], bos_token=SPECIAL["bos"])
    tok.padding_side = "left"
    return tok


@dataclass(frozen=True)
class TinyModelConfig:
    hidden: int = MODEL["hidden"]
    layers: int = MODEL["layers"]
    heads: int = MODEL["heads"]
    intermediate: int = MODEL["intermediate"]


def build_model(cfg: TinyModelConfig, tokenizer, seed: int = 0):
    """A randomly initialised Llama-style causal LM sized for a CPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads, max_position_embeddings=64, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


# --- pretraining on the exact expected two-mode loss ---------------------------------------

@dataclass(frozen=True)
class PretrainConfig:
    steps: int = PRETRAIN["steps"]
    batch_prompts: int = PRETRAIN["batch_prompts"]
    lr: float = PRETRAIN["lr"]
    warmup: int = PRETRAIN["warmup"]
    seed: int = PRETRAIN["seed"]


def expected_loss_table(task: TestbedTask, tokenizer):
    """Token ids [P, M, L] of every (prompt, method) sequence and prior weights [P, M].

    Built once: each training step then gathers rows instead of re-tokenising text.
    """
    import torch

    priors = task.cell_priors()
    all_digits = list(itertools.product(range(10), repeat=4))
    texts = [prompt_text(d) + completion_of(d, name) + SPECIAL["eos"]
             for d in all_digits for name in METHODS]
    ids = tokenizer(texts, add_special_tokens=False, return_tensors="pt")["input_ids"]
    weights = torch.tensor(np.stack([priors[cell_of(d, task.n_cells)] for d in all_digits]),
                           dtype=torch.float32)
    return ids.view(len(all_digits), len(METHODS), -1), weights


def pretrain(task: TestbedTask, model_cfg: TinyModelConfig, cfg: PretrainConfig, out_dir,
             log=print) -> dict:
    """Fit the tiny model to the two-mode base distribution; save with save_pretrained.

    The method token is trained against the exact prior (a soft-label cross-entropy), which
    is what fixes w*(x). The digits after it are a deterministic function of prompt and
    method, so their optimum does not depend on how methods are weighted: one uniformly
    drawn method per prompt trains them at a sixth of the cost of all six.
    """
    import torch
    import torch.nn.functional as F

    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer()
    model = build_model(model_cfg, tokenizer, seed=cfg.seed)
    priors = task.cell_priors()
    table_ids, table_weights = expected_loss_table(task, tokenizer)
    method_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list(METHODS)))
    generator = torch.Generator().manual_seed(cfg.seed)
    pos = len(prompt_text((0, 0, 0, 0)))  # index of the method token
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup)
        * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps)))
    model.train()
    start = time.time()
    for step in range(cfg.steps):
        rows = torch.randint(0, len(table_ids), (cfg.batch_prompts,), generator=generator)
        methods = torch.randint(0, len(METHODS), (cfg.batch_prompts,), generator=generator)
        ids = table_ids[rows, methods]  # [B, L]
        logits = model(input_ids=ids).logits
        method_logp = F.log_softmax(logits[:, pos - 1], -1)[:, method_ids]
        method_loss = -(table_weights[rows] * method_logp).sum(-1).mean()
        rest = logits[:, pos:-1]
        rest_loss = F.cross_entropy(rest.reshape(-1, rest.size(-1)), ids[:, pos + 1:].reshape(-1),
                                    reduction="none").view(len(ids), -1).sum(-1).mean()
        loss = method_loss + rest_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 200 == 0 or step == cfg.steps - 1:
            log(f"pretrain step {step}/{cfg.steps} loss {loss.item():.4f} "
                f"(method {method_loss.item():.4f}) ({time.time() - start:.0f}s)")
    # The entropy floor of the exact target: what a perfect fit would reach.
    floor = float(-(priors * np.log(priors)).sum(1).mean())
    model.eval()
    stats = {"final_loss": float(loss.item()), "final_method_loss": float(method_loss.item()),
             "target_entropy": floor, "seconds": time.time() - start,
             "parameters": sum(p.numel() for p in model.parameters())}
    with atomic_dir(out_dir, "boundary pretrain") as tmp:  # never a model folder without weights
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(stats, tmp / "pretrain.json")
    return stats




def task_from_settings(settings: dict) -> TestbedTask:
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in settings["task"].items()}
    return TestbedTask(**fields)


def correct_mass(model, tokenizer, split: pd.DataFrame) -> np.ndarray:
    """Exact probability that the model's completion is verifier-positive, per prompt.

    Sums, over the methods whose rearrangement equals the gold answer, the probability of
    that method token, its four digits and EOS: the model's own w(x), no sampling noise.
    """
    import torch

    texts, owners = [], []
    for i, (problem, gold) in enumerate(zip(split["problem"], split["answer"])):
        digits = tuple(int(ch) for ch in problem if ch.isdigit())
        for name in METHODS:
            if answer_of(digits, name) == gold:
                texts.append(problem + completion_of(digits, name) + SPECIAL["eos"])
                owners.append(i)
    ids = tokenizer(texts, add_special_tokens=False, return_tensors="pt")["input_ids"]
    start = len(split["problem"].iloc[0])
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=ids).logits[:, start - 1:-1].float(), -1)
        seq = logp.gather(-1, ids[:, start:, None]).squeeze(-1).sum(-1).exp().numpy()
    return np.bincount(owners, weights=seq, minlength=len(split))
