"""The `hf` backend: a decode loop over a transformers causal LM with a KV cache of fixed
seats, that never holds a [batch, length, vocabulary] tensor.

Why not `generate`: entropy needs every step's logits, which `generate` can only return
stacked as [B, T, V] (62 GiB for 256 SmolLM2 completions of 256 tokens), a row that stops
keeps its seat until the longest row of its batch ends, and its growing cache copies itself
every step. Here:
- the KV cache is one buffer per layer of [seats, kv heads, columns, head dim], allocated once
  (`Seats`); a row's prompt sits at columns 0.. of its seat, token t is written at column
  len(prompt) + t, its position id is its column: no padding inside a row, no copy per step;
- a decode step attends each seat over the columns up to the longest live row, masked per
  row (`seat_attention`: the grouped query heads of a KV head read it once, no repeat);
- a row that emits a stop id or reaches max_new_tokens stops counting at once; every
  CHECK_EVERY steps finished rows are harvested and their seats refilled from the queue: the
  new rows' distinct prompts are prefilled once (right-padded, causal, no mask) and their
  KV copied into the free seats. When the queue is empty and fewer than half the seats are
  live, the buffers shrink to the live seats.
Each step samples from the last logits only (`nucleus.sample_step`), entropy accumulated
per row, tokens drawn from each row's own random stream (`streams`).
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from boundary.core.errors import BoundaryError
from boundary.core.gpus import jobs_per_gpu
from boundary.sampling import COMPLETION_COLUMNS, Completion, throughput
from boundary.sampling.models import kv_bytes, load_model, stop_ids
from boundary.sampling.nucleus import sample_step
from boundary.sampling.rounds import Adaptive, Rounds
from boundary.sampling.streams import row_keys

CHECK_EVERY = 8  # steps between harvests/refills (each looks at the GPU: a sync)
SHRINK_BELOW = 0.5  # with the queue empty, shrink the seats once fewer than this share are live
CPU_BATCH = 64  # completions in flight on a CPU: larger batches are no faster there
MAX_BATCH = 4096
MEMORY_SHARE = 0.8  # of a GPU to itself, for the seats' KV cache and the sampler's buffers
SHARED_MEMORY_SHARE = 0.6  # of this job's share of a GPU that others use too: their peaks move
ATTENTION = "boundary_seats"
TEACHER_BATCH = 128  # sequences a teacher-forced forward pass on a GPU


def _grouped(query, key):
    """[rows, heads, 1, dim] -> [rows, kv heads, G, dim]: the G query heads of each KV head."""
    rows, heads, _, dim = query.shape
    return query.view(rows, key.shape[1], heads // key.shape[1], dim)


def _matmul(query, key, value, mask, scaling):
    """The G query heads of each KV head as one [G, D] x [D, columns] product, so the KV cache
    is read once. Scores stay in the cache's dtype: the product rounds to it anyway and softmax
    accumulates in float32 inside, so a float32 copy of the scores would only add passes (on an
    H100 the same completions, 8% faster)."""
    scores = torch.matmul(_grouped(query, key) * scaling, key.transpose(-1, -2))  # [rows, kv, G, columns]
    scores.masked_fill_(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), value)  # [rows, kv, G, dim]


def _sdpa_gqa(query, key, value, mask, scaling):
    """torch's fused attention, grouped query heads by `enable_gqa`."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                                           enable_gqa=True)
    return out.transpose(1, 2)  # [rows, 1, heads, dim]


def _sdpa_grouped(query, key, value, mask, scaling):
    """torch's fused attention with each KV head's G query heads as G query positions (all
    under the row's mask): plain multi-head attention, for backends without `enable_gqa`."""
    return torch.nn.functional.scaled_dot_product_attention(_grouped(query, key), key, value, attn_mask=mask,
                                                            scale=scaling)


def _packed(seats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A width cut of a seat buffer [rows, kv, width of columns, dim] as varlen's packed tokens
    [T, kv, dim] over the same memory, and where each row's tokens start (int32, rows + 1)."""
    rows, kv, _, dim = seats.shape
    columns = seats.stride(1) // dim
    total = (rows - 1) * kv * columns + columns
    packed = seats.as_strided((total, kv, dim), (dim, columns * dim, 1), seats.storage_offset())
    starts = torch.arange(rows + 1, device=seats.device, dtype=torch.int32) * kv * columns
    return packed, starts.clamp(max=total)


@functools.cache
def _varlen_options(varlen_attn) -> dict:
    """What this torch's varlen_attn takes beyond the lengths, read once (not per layer and
    step): enable_gqa where it exists, else the kernel groups heads by their counts. A
    varlen_attn without seqused_k (torch 2.11's reads whole sequences) is one line."""
    accepts = inspect.signature(varlen_attn).parameters
    if "seqused_k" not in accepts:
        raise BoundaryError(f"{SEAT_ATTENTION_ENV}=varlen needs torch's varlen_attn with seqused_k "
                            f"(torch 2.13 has it; this is torch {torch.__version__})")
    return {"enable_gqa": True} if "enable_gqa" in accepts else {}


def _varlen(query, key, value, mask, scaling):
    """FlashAttention-2's varlen kernel (CUDA) over the seat buffers in place: seat i's columns
    are the packed tokens from i * kv * columns on (token stride `dim`, head stride `columns *
    dim`), and `seqused_k` reads only each row's filled columns, so the padding up to the
    longest row (half of what the masked forms read) is skipped. No copy of the cache."""
    from torch.nn.attention.varlen import varlen_attn

    gqa = _varlen_options(varlen_attn)
    rows, heads, _, dim = query.shape
    (packed_key, key_starts), (packed_value, _) = _packed(key), _packed(value)
    used = mask.view(rows, -1).sum(-1, dtype=torch.int32)
    args = (query.view(rows, heads, dim), packed_key, packed_value,
            torch.arange(rows + 1, device=query.device, dtype=torch.int32), key_starts, 1, key.shape[2])
    return varlen_attn(*args, scale=scaling, seqused_k=used, **gqa)


# Decode attention by name: (query [rows, heads, 1, dim], key/value [rows, kv heads, columns,
# dim], mask [rows, 1, 1, columns] bool, scaling) -> heads' outputs that reshape to [rows, 1,
# heads, dim]. One choice per process, so a GPU benchmark can pick without a code change.
DECODE_ATTENTION = {"matmul": _matmul, "sdpa_gqa": _sdpa_gqa,
                    "sdpa_grouped": _sdpa_grouped, "varlen": _varlen}
SEAT_ATTENTION_ENV = "BOUNDARY_SEAT_ATTENTION"
SEAT_ATTENTION = os.environ.get(SEAT_ATTENTION_ENV, "matmul")  # read once: the GPU benchmark picks


def decode_attention(name: str | None = None):
    """The decode attention named (default $BOUNDARY_SEAT_ATTENTION, else "matmul")."""
    name = name or SEAT_ATTENTION
    if name not in DECODE_ATTENTION:
        raise BoundaryError(f"{SEAT_ATTENTION_ENV}={name!r} is not one of {', '.join(DECODE_ATTENTION)}")
    return DECODE_ATTENTION[name]


def seat_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Decode attention over `Seats` (one query per row, `seat_mask` [rows, 1, 1, columns]) by
    `decode_attention`. Any other call (prefill, teacher forcing) is transformers' sdpa."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not kwargs.get("seat_decode"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    rows, heads, _, dim = query.shape
    out = decode_attention()(query, key, value, attention_mask, scaling)
    return out.reshape(rows, 1, heads, dim), None


def use_seat_attention(model) -> None:
    """Register `seat_attention` (sdpa masks for its prefill) and make it the model's."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) == ATTENTION:
        return
    AttentionInterface.register(ATTENTION, seat_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    model.set_attn_implementation(ATTENTION)


class Seats:
    """The KV cache: per layer a [seats, kv heads, columns, head dim] key and value buffer. A
    decode step writes row i's new key/value at column `at[i]` and hands attention the first
    `width` columns (a view)."""

    def __init__(self, config, seats: int, columns: int, dtype, device):
        cfg = config.get_text_config()
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        shape = (seats, kv_heads, columns, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.rows = torch.arange(seats, device=device)
        self.at = torch.zeros(seats, dtype=torch.long, device=device)
        self.width = 0

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[self.rows, :, self.at] = key_states[:, :, 0]
        v[self.rows, :, self.at] = value_states[:, :, 0]
        return k[:, :, :self.width], v[:, :, :self.width]

    def fill(self, seats: torch.Tensor, cache, of_row: torch.Tensor) -> None:
        """Copy prefilled prompts' KV (`cache` from a right-padded prefill; row i of the new
        rows is prompt of_row[i]) into columns 0.. of `seats`."""
        for k, v, layer in zip(self.keys, self.values, cache.layers):
            width = layer.keys.shape[2]
            k[seats, :, :width] = layer.keys[of_row]
            v[seats, :, :width] = layer.values[of_row]

    def select(self, keep: torch.Tensor) -> None:
        self.keys = [k[keep] for k in self.keys]
        self.values = [v[keep] for v in self.values]
        self.rows = self.rows[:len(keep)]
        self.at = self.at[keep]


@dataclass
class Batch:
    """Per seat: the job row it holds (-1: none), the pending next-token logits, what the row
    has generated, and whether it is still generating."""
    row: torch.Tensor  # [S] long
    logits: torch.Tensor  # [S, V]
    tokens: torch.Tensor  # [S, max_new]
    logps: torch.Tensor  # [S, max_new]
    count: torch.Tensor  # [S]
    entropy: torch.Tensor  # [S], summed over generated tokens
    live: torch.Tensor  # [S] bool
    stopped: torch.Tensor  # [S] bool: ended on a stop id
    keys: torch.Tensor  # [S] int64: each row's random stream (`streams.row_keys`)
    length: np.ndarray = field(default=None)  # [S] filled columns, mirrored on the host (no sync)

    def select(self, keep: torch.Tensor) -> None:
        for name in ("row", "logits", "tokens", "logps", "count", "entropy", "live", "stopped", "keys"):
            setattr(self, name, getattr(self, name)[keep])
        self.length = self.length[keep.cpu().numpy()]


def _empty_batch(seats: int, vocab: int, max_new: int, device) -> Batch:
    return Batch(torch.full((seats,), -1, dtype=torch.long, device=device),
                 torch.zeros((seats, vocab), dtype=torch.float32, device=device),
                 torch.zeros((seats, max_new), dtype=torch.long, device=device),
                 torch.zeros((seats, max_new), dtype=torch.float32, device=device),
                 torch.zeros(seats, dtype=torch.long, device=device),
                 torch.zeros(seats, dtype=torch.float32, device=device),
                 torch.zeros(seats, dtype=torch.bool, device=device),
                 torch.zeros(seats, dtype=torch.bool, device=device),
                 torch.zeros(seats, dtype=torch.long, device=device),
                 np.zeros(seats, dtype=np.int64))


def prefill(model, prompts: list[list[int]], pad_id: int):
    """The distinct prompts through the model once, right-padded (causal attention needs no
    mask then: padding comes after every real token). Returns (cache, last-token logits per
    distinct prompt, which distinct prompt each row has). A prompt repeated for n samples is
    run once: at n = 256 the prompt passes are 1/256 of running every row."""
    from transformers import DynamicCache

    device = model.device
    first: dict[tuple, int] = {}
    of_row = torch.tensor([first.setdefault(tuple(p), len(first)) for p in prompts], device=device)
    unique = list(first)
    width = max(len(p) for p in unique)
    ids = torch.full((len(unique), width), pad_id, dtype=torch.long)
    for i, p in enumerate(unique):
        ids[i, :len(p)] = torch.tensor(p)
    ids = ids.to(device)
    cache = DynamicCache(config=model.config)
    hidden = model.get_decoder()(input_ids=ids, position_ids=torch.arange(width, device=device)[None].expand_as(ids),
                                 past_key_values=cache, use_cache=True).last_hidden_state
    last = torch.tensor([len(p) - 1 for p in unique], device=device)
    logits = model.get_output_embeddings()(hidden[torch.arange(len(unique), device=device), last])
    return cache, logits, of_row


def kv_bytes_per_token(model) -> int:
    return kv_bytes(model.config.get_text_config(), model.dtype.itemsize)


def default_batch_size(model, prompt_len: int, max_new: int) -> int:
    """Seats that fit the device: on a GPU, a share of this job's memory over one seat's KV
    cache (its full length, allocated up front) plus the sampler's [seats, vocab] fp32
    buffers (about ten of them live in a step) and the attention scores, at most MAX_BATCH.
    This job's memory is what is free (its own cache emptied first), and no more than its
    share of the device when jobs share it ($BOUNDARY_JOBS_PER_GPU): a job sized on free
    memory alone grew into its neighbour's (an H200 run, out of memory). A GPU to itself
    gets MEMORY_SHARE (real SmolLM2 on an 80 GB H100: 3,778 seats, peak 70.4 GiB; 7% more
    tokens/s than at 0.6), a shared one SHARED_MEMORY_SHARE of the job's part."""
    if model.device.type != "cuda":
        return CPU_BATCH
    cfg = model.config.get_text_config()
    columns = prompt_len + max_new + CHECK_EVERY
    per_row = (kv_bytes_per_token(model) * columns + 10 * 4 * cfg.vocab_size
               + 2 * 4 * cfg.num_attention_heads * columns)
    # An earlier call in this process (the gate's next refresh epoch) leaves its batch's blocks
    # in torch's cache, which the driver counts as used: without this, the 1.5B's gate draws got
    # 2,074 seats in epoch 1 and 195 in epochs 2-3, a third of the speed.
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(model.device)
    jobs = jobs_per_gpu()
    mine = min(free, total / jobs)
    share = MEMORY_SHARE if jobs == 1 else SHARED_MEMORY_SHARE
    return max(1, min(MAX_BATCH, int(mine * share / per_row)))


class Clock:
    """Seconds per phase of `generate` when profiling (each phase ends in a device sync, so
    a profiled run is a little slower than a plain one); a no-op otherwise."""

    def __init__(self, on: bool, device):
        self.on, self.device, self.seconds, self.counts = on, device, {}, {}
        self.last = time.perf_counter()

    def __call__(self, phase: str, n: int = 1) -> None:
        if not self.on:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.last
        self.counts[phase] = self.counts.get(phase, 0) + n
        self.last = now


def _harvest(batch: Batch, seats: torch.Tensor, results: list, reason: str | None = None) -> None:
    """Record the rows finished in `seats` (indices) into `results` (`reason`: for rows cut short)."""
    for row, toks, n, s, h, lp in zip(*(x[seats].tolist() for x in (batch.row, batch.tokens, batch.count,
                                                                        batch.stopped, batch.entropy, batch.logps))):
        results[row] = Completion(toks[:n], reason or ("stop" if s else "length"), h / max(n, 1), lp[:n])


@torch.inference_mode()
def generate(model, prompts: list[list[int]], stop: list[int], pad_id: int, *, max_new: int,
             temperature: float, top_p: float, batch_size: int, seed: int,
             samples: list[int] | None = None, progress=False, profile: dict | None = None,
             feed=None):
    """Sample one completion per prompt (repeat a prompt for n samples): a `Completion` each.
    Row i draws from the stream of (seed, prompts[i], samples[i]) (`streams.row_keys`; by
    default a prompt's k-th row is its sample k), so a row's tokens do not depend on the batch.
    `profile`, a dict, receives seconds and counts per phase and the KV columns read.
    `feed` (adaptive calibration, `Rounds`; `prompts` may then be empty): at each harvest
    `feed.more(rows, results)` gets the rows just finished and returns rows to cancel (their
    seats are freed, their partial completion recorded, finish reason "cancelled"), and every
    free seat is refilled by `feed.take(free seats)`, so the seats stay full while
    `feed.capacity` (rows it may still add) lasts; they shrink only once it is spent. `profile`
    then also gets `occupancy`: per decode step, (seats holding a row, feed.capacity).
    Returns the completions of every row."""
    if not prompts and feed is None:
        return []
    prompts = list(prompts)
    device = model.device
    decode_attention()  # an unknown $BOUNDARY_SEAT_ATTENTION fails before any work
    if hasattr(model, "set_attn_implementation"):
        use_seat_attention(model)
    keys = row_keys(seed, prompts, samples).to(device) if prompts else torch.zeros(0, dtype=torch.long, device=device)
    stop_t = torch.tensor(stop, device=device, dtype=torch.long)
    seats_n = max(1, min(batch_size, len(prompts) + (feed.capacity if feed is not None else 0)))
    columns = max(map(len, prompts + (feed.prompts if feed is not None else []))) + max_new + CHECK_EVERY
    vocab = model.get_output_embeddings().weight.shape[0]
    kv = Seats(model.config, seats_n, columns, model.dtype, device)
    batch = _empty_batch(seats_n, vocab, max_new, device)
    clock = Clock(profile is not None, device)
    queue, results, step, read, used = 0, [None] * len(prompts), 0, 0, 0
    occupancy = []
    bar = tqdm(total=len(prompts), desc="sampling", disable=not progress)
    while True:
        if step % CHECK_EVERY == 0:
            done = (~batch.live & (batch.row >= 0)).nonzero().view(-1)
            if len(done):
                _harvest(batch, done, results)
                bar.update(len(done))
                finished = batch.row[done].tolist()
                batch.row[done] = -1
                batch.length[done.cpu().numpy()] = 0
                if feed is not None:
                    cancel = feed.more(finished, results)
                    if cancel:  # look-ahead beyond a stopped prompt's stop: free its seats now
                        gone = torch.isin(batch.row, torch.tensor(cancel, device=device)).nonzero().view(-1)
                        _harvest(batch, gone, results, "cancelled")
                        batch.row[gone], batch.live[gone] = -1, False
                        batch.length[gone.cpu().numpy()] = 0
                        bar.total -= len(gone)
            free = (batch.row < 0).nonzero().view(-1)
            if feed is not None and queue >= len(prompts) and len(free):
                more = feed.take(len(free))
                if more:
                    keys = torch.cat([keys, row_keys(seed, [p for p, _ in more], [i for _, i in more]).to(device)])
                    prompts += [p for p, _ in more]
                    results += [None] * len(more)
                    bar.total += len(more)
            refilled = queue < len(prompts) and len(free)
            if refilled:
                take = list(range(queue, min(len(prompts), queue + len(free))))
                queue += len(take)
                seats = free[:len(take)]
                cache, logits, of_row = prefill(model, [prompts[i] for i in take], pad_id)
                kv.fill(seats, cache, of_row)
                del cache
                batch.row[seats] = torch.tensor(take, device=device)
                batch.logits[seats] = logits.float()[of_row]
                batch.count[seats], batch.entropy[seats] = 0, 0.0
                batch.live[seats], batch.stopped[seats] = True, False
                batch.keys[seats] = keys[take]
                batch.length[seats.cpu().numpy()] = [len(prompts[i]) for i in take]
                clock("prefill", len(take))
            # an adaptive feed fills every seat while it has rows to give: shrink only once it is spent
            if queue >= len(prompts) and not refilled and (feed is None or feed.capacity == 0):
                held = batch.row >= 0
                if not bool(held.any()):
                    break
                if int(held.sum()) < SHRINK_BELOW * len(held):
                    keep = held.nonzero().view(-1)
                    kv.select(keep)
                    batch.select(keep)
                    clock("shrink")
        if profile is not None and feed is not None:
            occupancy.append((int((batch.row >= 0).sum()), feed.capacity))
        step += 1
        token, entropy, logp = sample_step(batch.logits, temperature, top_p, batch.keys, batch.count)
        clock("sample")
        live = batch.live
        slot = batch.count.clamp(max=max_new - 1)
        at = kv.rows
        batch.tokens[at, slot] = torch.where(live, token, batch.tokens[at, slot])
        batch.logps[at, slot] = torch.where(live, logp, batch.logps[at, slot])
        batch.count += live
        batch.entropy += entropy * live
        stopped = torch.isin(token, stop_t) & live
        batch.stopped |= stopped
        batch.live = live & ~stopped & (batch.count < max_new)
        # Feed every seat its token (finished and empty seats too: their output is never
        # read, and skipping them would cost a gather of the cache).
        clock("bookkeeping")
        kv.at.copy_(torch.from_numpy(batch.length))
        kv.width = int(batch.length.max()) + 1
        mask = torch.arange(kv.width, device=device)[None, :] <= kv.at[:, None]
        out = model(input_ids=token[:, None], position_ids=kv.at[:, None], past_key_values=kv,
                    attention_mask=mask[:, None, None, :], use_cache=True, seat_decode=True)
        batch.logits = out.logits[:, -1].float()
        held = batch.length > 0
        read += kv.width * len(batch.length)
        used += int(batch.length[held].sum() + held.sum())
        batch.length[held] += 1
        clock("forward")
    bar.close()
    if profile is not None:
        profile.update(seconds=clock.seconds, counts=clock.counts, steps=step, seats=seats_n,
                       kv_columns_read=read, kv_columns_used=used, occupancy=occupancy)
    return results


def stop_and_pad(model, tokenizer) -> tuple[list[int], int]:
    """The ids a completion stops at, and the id prompts are left-padded with."""
    stop = stop_ids(model.generation_config, tokenizer)
    return stop, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]


def sample(model_path, prompt_ids, prompts, params, log=None, adaptive: Adaptive | None = None,
           base: str | None = None):
    """params.n completions per prompt (`base`: the base folder of a LoRA adapter folder
    `model_path`, merged into it once: `models.load_model`); with `adaptive`, a prefix of them per prompt, drawn in
    rounds until `adaptive.settled` stops the prompt (`rounds`). The frame's attrs hold what was
    drawn: `drawn_completions` and `drawn_tokens` (with the adaptive look-ahead that was
    cancelled or dropped beyond a stop, which the frame's rows do not hold)."""
    import pandas as pd

    start = time.perf_counter()
    model, tokenizer = load_model(str(model_path), base=base)
    if log is not None:
        log(f"sampling (hf): model loaded in {time.perf_counter() - start:.1f} s")
    stop, pad = stop_and_pad(model, tokenizer)
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    if adaptive is None:
        feed = None
        jobs = [(i, k) for i in range(len(encoded)) for k in range(params.n)]
        rows = [(encoded[i], k) for i, k in jobs]
    else:
        feed = Rounds(list(prompt_ids), encoded, adaptive,
                      lambda tokens: tokenizer.batch_decode(tokens, skip_special_tokens=True))
        rows = []  # the feed gives every row as seats free up
        jobs = feed.jobs  # grows as rows are taken
    batch = params.batch_size
    chosen = "set"
    if batch in (None, "auto"):
        batch = default_batch_size(model, max(map(len, encoded), default=1), params.max_new_tokens)
        chosen = "auto"
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(model.device)
    start = time.perf_counter()
    out = generate(model, [ids for ids, _ in rows], stop, pad,
                   max_new=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p,
                   batch_size=int(batch), seed=params.seed, samples=[k for _, k in rows],
                   progress=log is not None, feed=feed)
    drawn = sum(len(c.tokens) for c in out)
    if log is not None:
        log(throughput("hf", drawn, len(out), time.perf_counter() - start, f"{int(batch)} ({chosen})"))
    kept = feed.kept_rows() if feed is not None else sorted(range(len(jobs)), key=jobs.__getitem__)
    if feed is not None and log is not None:
        tokens = sum(len(out[j].tokens) for j in kept)
        log(f"sampling (hf, adaptive): kept {len(kept):,} of {len(out):,} completions drawn, {tokens:,} of "
            f"{drawn:,} tokens (the rest: look-ahead beyond a prompt's stop, cancelled or dropped)")
    texts = tokenizer.batch_decode([out[j].tokens for j in kept], skip_special_tokens=True)
    frame = pd.DataFrame(
        [(prompt_ids[jobs[j][0]], jobs[j][1], text, len(out[j].tokens), out[j].finish_reason,
          out[j].entropy) for j, text in zip(kept, texts)],
        columns=COMPLETION_COLUMNS)
    frame.attrs.update(drawn_completions=len(out), drawn_tokens=drawn)
    return frame


@torch.inference_mode()
def teacher_forced(model, prompts: list[list[int]], completions: list[list[int]], temperature: float,
                   batch_size: int | None = None, positions: int = 64) -> tuple[list[float], list[list[float]]]:
    """Per completion, the mean entropy of softmax(logits / T) over its tokens and each token's
    log-probability under it, by one teacher-forced pass: what `generate` records while
    decoding, for backends that expose no full logits. Logits are made `positions` at a time
    from the hidden states, never [B, T, V]. Sequences go through in order of length (batches
    of like lengths pad little); batch_size: TEACHER_BATCH on a GPU, 16 on a CPU by default."""
    head, body = model.get_output_embeddings(), model.get_decoder()
    device = model.device
    batch_size = batch_size or (TEACHER_BATCH if device.type == "cuda" else 16)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(completions[i]))
    entropies, logps = [0.0] * len(order), [None] * len(order)
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        chunk = [completions[i] for i in index]
        seqs = [prompts[i] + c for i, c in zip(index, chunk)]
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
        for i, h, row, n in zip(index, (total / lengths.clamp(min=1)).tolist(), token_logps.tolist(),
                                lengths.tolist()):
            entropies[i], logps[i] = h, row[:n]
    return entropies, logps
