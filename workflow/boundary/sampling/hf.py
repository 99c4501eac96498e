"""The `hf` backend: a decode loop over a transformers causal LM that never holds a
[batch, length, vocabulary] tensor.

Why not `generate`: entropy needs every step's logits, which `generate` can only return
stacked as [B, T, V] (62 GiB for 256 SmolLM2 completions of 256 tokens), and a row that stops
keeps its seat until the longest row of its batch ends. Here each step samples from the last
logits only (`nucleus.sample_step`, entropy accumulated per row), a row that emits a stop id
or reaches max_new_tokens stops at once and gives up its seat, and when a quarter of the seats are free,
queued rows are prefilled and merged into the KV cache: left-padded to a common length, each
row with its own position ids, exactly as `generate` handles a left-padded batch. Finished
rows are dropped from the cache in batches (see `generate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

from boundary.core.gpus import jobs_per_gpu
from boundary.sampling import Completion
from boundary.sampling.models import load_model, stop_ids
from boundary.sampling.nucleus import sample_step
from boundary.sampling.streams import row_keys

REFILL_BELOW = 0.75  # refill when fewer than this share of the seats hold live rows
COMPACT_AT = 0.25  # drop finished rows from the batch once they are this share of it
CHECK_EVERY = 8  # steps between looks at how many rows finished (each look syncs the GPU)
CPU_BATCH = 64  # completions in flight on a CPU: larger batches are no faster there
MAX_BATCH = 4096


@dataclass
class Active:
    """The rows in flight: their KV cache, attention mask over its columns, the position of
    the next token each feeds, the pending next-token logits, and what each has generated."""
    rows: torch.Tensor  # [B] index into the job's row list
    cache: object  # transformers DynamicCache
    mask: torch.Tensor  # [B, L]
    pos: torch.Tensor  # [B]
    logits: torch.Tensor  # [B, V]
    tokens: torch.Tensor  # [B, max_new]
    count: torch.Tensor  # [B]
    entropy: torch.Tensor  # [B], summed over generated tokens
    logps: torch.Tensor  # [B, max_new]
    live: torch.Tensor  # [B] bool: still generating
    stopped: torch.Tensor  # [B] bool: ended on a stop id
    keys: torch.Tensor  # [B] int64: each row's random stream (`streams.row_keys`)

    def select(self, keep: torch.Tensor) -> Active:
        self.cache.batch_select_indices(keep)
        mask = self.mask[keep]
        # Columns that are padding for every remaining row are dropped from mask and cache.
        lead = int(mask.any(0).int().argmax())
        if lead:
            mask = mask[:, lead:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, lead:], layer.values[:, :, lead:]
        return Active(self.rows[keep], self.cache, mask, self.pos[keep], self.logits[keep],
                      self.tokens[keep], self.count[keep], self.entropy[keep], self.logps[keep],
                      self.live[keep], self.stopped[keep], self.keys[keep])


def _left_pad(x: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    pad = length - x.shape[dim]
    if not pad:
        return x
    widths = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [pad, 0]
    return F.pad(x, widths)


def merge(a: Active | None, b: Active) -> Active:
    """One batch from two: both left-padded to the longer cache, then stacked."""
    if a is None:
        return b
    length = max(a.mask.shape[1], b.mask.shape[1])
    for la, lb in zip(a.cache.layers, b.cache.layers):
        la.keys = torch.cat([_left_pad(la.keys, length, 2), _left_pad(lb.keys, length, 2)])
        la.values = torch.cat([_left_pad(la.values, length, 2), _left_pad(lb.values, length, 2)])
    return Active(torch.cat([a.rows, b.rows]), a.cache,
                  torch.cat([_left_pad(a.mask, length, 1), _left_pad(b.mask, length, 1)]),
                  *(torch.cat([x, y]) for x, y in [(a.pos, b.pos), (a.logits, b.logits),
                                                    (a.tokens, b.tokens), (a.count, b.count),
                                                    (a.entropy, b.entropy), (a.logps, b.logps),
                                                    (a.live, b.live), (a.stopped, b.stopped),
                                                    (a.keys, b.keys)]))


def prefill(model, prompts: list[list[int]], rows: list[int], keys: torch.Tensor, pad_id: int,
            max_new: int) -> Active:
    """The rows' prompts through the model once, ready to decode. A prompt repeated for n
    samples is run once and its KV cache copied to its n rows: at n = 256 the prompt
    forward passes are 1/256 of running every row (on a CPU they dominate a short eval)."""
    from transformers import DynamicCache

    device = model.device
    first: dict[tuple, int] = {}
    of_row = torch.tensor([first.setdefault(tuple(p), len(first)) for p in prompts], device=device)
    unique = list(first)
    length = max(len(p) for p in unique)
    ids = torch.full((len(unique), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(unique), length), dtype=torch.long)
    for i, p in enumerate(unique):
        ids[i, length - len(p):] = torch.tensor(p)
        mask[i, length - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    for layer in cache.layers:  # each row gets its own copy: rows then decode apart
        layer.keys, layer.values = layer.keys[of_row], layer.values[of_row]
    n = len(prompts)
    return Active(torch.tensor(rows, device=device), cache, mask[of_row], pos[of_row, -1] + 1,
                  out.logits[of_row, -1], torch.zeros((n, max_new), dtype=torch.long, device=device),
                  torch.zeros(n, dtype=torch.long, device=device),
                  torch.zeros(n, dtype=torch.float32, device=device),
                  torch.zeros((n, max_new), dtype=torch.float32, device=device),
                  torch.ones(n, dtype=torch.bool, device=device),
                  torch.zeros(n, dtype=torch.bool, device=device), keys.to(device))


def default_batch_size(model, prompt_len: int, max_new: int) -> int:
    """Completions in flight that fit the device: on a GPU, a third of this job's memory over
    the KV cache of one full-length row plus the sampler's [rows, vocab] fp32 buffers (merging
    and compacting copy the cache, and sdpa expands grouped KV heads), at most MAX_BATCH:
    past it a step is no faster per token (H200, SmolLM2 shape). This job's memory is what is
    free, and no more than its share of the device when jobs share it ($BOUNDARY_JOBS_PER_GPU):
    a job sized on free memory alone grew into its neighbour's (an H200 run, out of memory)."""
    if model.device.type != "cuda":
        return CPU_BATCH
    cfg = model.config.get_text_config()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    per_token = 2 * cfg.num_hidden_layers * kv_heads * head_dim * model.dtype.itemsize
    per_row = per_token * (prompt_len + max_new) + 4 * 4 * cfg.vocab_size
    free, total = torch.cuda.mem_get_info(model.device)
    mine = min(free, total / jobs_per_gpu())
    return max(1, min(MAX_BATCH, int(mine / 3 / per_row)))


def harvest(active: Active, rows: torch.Tensor, results: list) -> None:
    """Record the finished `rows` (a bool mask over the batch) into `results`."""
    index = rows.nonzero().view(-1)
    for row, toks, n, s, h, lp in zip(active.rows[index].tolist(), active.tokens[index].tolist(),
                                      active.count[index].tolist(), active.stopped[index].tolist(),
                                      active.entropy[index].tolist(), active.logps[index].tolist()):
        results[row] = Completion(toks[:n], "stop" if s else "length", h / n, lp[:n])


@torch.inference_mode()
def generate(model, prompts: list[list[int]], stop: list[int], pad_id: int, *, max_new: int,
             temperature: float, top_p: float, batch_size: int, seed: int,
             samples: list[int] | None = None, progress=False):
    """Sample one completion per prompt (repeat a prompt for n samples): a `Completion` each.
    Row i draws from the stream of (seed, prompts[i], samples[i]) (`streams.row_keys`; by
    default a prompt's k-th row is its sample k), so a row's tokens do not depend on the batch.

    A finished row stops counting at once but keeps its seat until the batch is compacted:
    every CHECK_EVERY steps, when a quarter of the rows are finished or seats are needed for
    queued rows. Compacting copies the whole KV cache, so doing it per step would cost more
    than the rows it removes."""
    device = model.device
    keys = row_keys(seed, prompts, samples)
    stop_t = torch.tensor(stop, device=device, dtype=torch.long)
    queue = list(range(len(prompts)))
    results: list = [None] * len(prompts)
    active, step = None, 0
    bar = tqdm(total=len(prompts), desc="sampling", disable=not progress)
    while True:
        if active is None or step % CHECK_EVERY == 0:
            if active is not None:
                live = int(active.live.sum())
                dead = len(active.rows) - live
                short = queue and live < REFILL_BELOW * batch_size
                if dead and (not live or short or dead >= COMPACT_AT * len(active.rows)):
                    harvest(active, ~active.live, results)
                    bar.update(dead)
                    active = active.select(active.live.nonzero().view(-1)) if live else None
            busy = 0 if active is None else len(active.rows)
            if queue and busy < REFILL_BELOW * batch_size:
                take, queue = queue[:batch_size - busy], queue[batch_size - busy:]
                active = merge(active, prefill(model, [prompts[i] for i in take], take, keys[take], pad_id,
                                                max_new))
            if active is None:
                break
        step += 1
        token, entropy, logp = sample_step(active.logits, temperature, top_p, active.keys, active.count)
        live = active.live
        at = torch.arange(len(token), device=device)
        slot = active.count.clamp(max=max_new - 1)
        active.tokens[at, slot] = torch.where(live, token, active.tokens[at, slot])
        active.logps[at, slot] = torch.where(live, logp, active.logps[at, slot])
        active.count += live
        active.entropy += entropy * live
        stopped = torch.isin(token, stop_t) & live
        active.stopped |= stopped
        active.live = live & ~stopped & (active.count < max_new)
        active.mask = torch.cat([active.mask, active.mask.new_ones((len(token), 1))], 1)
        out = model(input_ids=token[:, None], attention_mask=active.mask,
                    position_ids=active.pos[:, None], past_key_values=active.cache, use_cache=True)
        active.logits = out.logits[:, -1]
        active.pos += 1
    bar.close()
    return results


def stop_and_pad(model, tokenizer) -> tuple[list[int], int]:
    """The ids a completion stops at, and the id prompts are left-padded with."""
    stop = stop_ids(model.generation_config, tokenizer)
    return stop, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]


def sample(model_path, prompt_ids, prompts, params, log=None):
    import pandas as pd

    model, tokenizer = load_model(str(model_path))
    stop, pad = stop_and_pad(model, tokenizer)
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    jobs = [(pid, i, ids) for pid, ids in zip(prompt_ids, encoded) for i in range(params.n)]
    batch = params.batch_size
    if batch in (None, "auto"):
        batch = default_batch_size(model, max(map(len, encoded), default=1), params.max_new_tokens)
    out = generate(model, [ids for _, _, ids in jobs], stop, pad,
                   max_new=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p,
                   batch_size=int(batch), seed=params.seed, samples=[i for _, i, _ in jobs],
                   progress=log is not None)
    texts = tokenizer.batch_decode([c.tokens for c in out], skip_special_tokens=True)
    return pd.DataFrame(
        [(pid, i, text, len(c.tokens), c.finish_reason, c.entropy)
         for (pid, i, _), text, c in zip(jobs, texts, out)],
        columns=["prompt_id", "sample_idx", "completion", "n_tokens", "finish_reason", "entropy"])


@torch.inference_mode()
def teacher_forced(model, prompts: list[list[int]], completions: list[list[int]], temperature: float,
                   batch_size: int = 16, positions: int = 64) -> tuple[list[float], list[list[float]]]:
    """Per completion, the mean entropy of softmax(logits / T) over its tokens and each token's
    log-probability under it, by one teacher-forced pass: what `generate` records while
    decoding, for backends that expose no full logits. Logits are made `positions` at a time
    from the hidden states, never [B, T, V]."""
    head, body = model.get_output_embeddings(), model.get_decoder()
    device, entropies, logps = model.device, [], []
    for start in range(0, len(prompts), batch_size):
        chunk = completions[start:start + batch_size]
        seqs = [p + c for p, c in zip(prompts[start:start + batch_size], chunk)]
        length = max(map(len, seqs))
        ids = torch.zeros((len(seqs), length), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, length - len(s):], mask[i, length - len(s):] = torch.tensor(s), 1
        ids, mask = ids.to(device), mask.to(device)
        hidden = body(input_ids=ids, attention_mask=mask,
                      position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).last_hidden_state
        # Logits at position t predict token t + 1: a completion of m tokens is predicted by the
        # m positions before its end.
        lengths = torch.tensor([len(c) for c in chunk], device=device)
        longest = int(lengths.max())
        total = torch.zeros(len(seqs), device=device)
        token_logps = torch.zeros((len(seqs), longest), device=device)
        for lo in range(0, longest, positions):
            at = torch.arange(lo, min(lo + positions, longest), device=device)
            cols = (length - 1 - lengths[:, None] + at[None, :]).clamp(0, length - 1)  # [b, chunk]
            h = hidden.gather(1, cols[..., None].expand(-1, -1, hidden.shape[-1]))
            logp = torch.log_softmax(head(h).float() / temperature, -1)
            ent = -(logp.exp() * logp).sum(-1)
            inside = at[None, :] < lengths[:, None]
            total += (ent * inside).sum(1)
            drawn = ids.gather(1, (cols + 1).clamp(max=length - 1))  # the token each position predicts
            token_logps[:, at] = logp.gather(-1, drawn[..., None]).squeeze(-1) * inside
        entropies.extend((total / lengths.clamp(min=1)).tolist())
        logps.extend(row[:n] for row, n in zip(token_logps.tolist(), lengths.tolist()))
    return entropies, logps
