"""One decoding step: temperature, exact top-p without a vocabulary sort, and the entropy of
the sampling distribution.

A token is drawn from softmax(logits / T) by inverse CDF in two levels: the vocabulary is cut
into blocks of BLOCK tokens, a block is picked by one uniform against the float64 cumulative
sums of the block masses, and a token inside it by a second uniform against the float64
cumulative sums of its BLOCK probabilities. The draw is exact for the float32 probabilities
(no float32 running sum over the vocabulary, whose rounding would shift rare tokens' mass),
costs one read of the probabilities, and takes its two uniforms from the row's counter-based
stream (`streams`), so a row draws the same tokens in any batch.

The nucleus is sampled by rejection: keep the draw if the tokens more probable than it hold
less than top_p of the mass (the nucleus rule of HF's TopPLogitsWarper), otherwise draw again
for that row (the next attempt's uniforms). The nucleus holds at least top_p of the mass, so a
row is redrawn with probability at most 1 - top_p, and each accepted token is distributed
exactly as the renormalised nucleus. Cost: one extra pass over the vocabulary, where a sort
is ~log V.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from boundary.sampling.streams import uniforms

REDRAWS = 8  # then the few rows still rejected (P <= (1 - top_p) ** 8 each) are sorted
BLOCK = 128  # tokens a block: the first level picks among V / BLOCK blocks, the second inside one


def _blocks(probs: torch.Tensor) -> torch.Tensor:
    """[rows, V / BLOCK, BLOCK] view of the probabilities, zero-padded when V is not a multiple."""
    pad = -probs.shape[-1] % BLOCK
    return (F.pad(probs, (0, pad)) if pad else probs).view(len(probs), -1, BLOCK)


def _block_cdf(blocks: torch.Tensor) -> torch.Tensor:
    return blocks.sum(-1, dtype=torch.float64).cumsum(-1)


def _draw(blocks: torch.Tensor, cdf: torch.Tensor, u_block: torch.Tensor, u_token: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws, one per row: block by u_block, token within it by u_token."""
    last = blocks.shape[1] - 1
    block = torch.searchsorted(cdf, (u_block * cdf[:, -1])[:, None], right=True).view(-1).clamp(max=last)
    inner = blocks[torch.arange(len(block), device=block.device), block].double().cumsum(-1)
    token = torch.searchsorted(inner, (u_token * inner[:, -1])[:, None], right=True).view(-1)
    return block * BLOCK + token.clamp(max=BLOCK - 1)


def _in_nucleus(probs: torch.Tensor, token: torch.Tensor, top_p: float) -> torch.Tensor:
    """Whether each row's token lies in its nucleus: the mass strictly above it is < top_p."""
    p_token = probs.gather(-1, token[:, None])
    above = (probs * (probs > p_token)).sum(-1)
    return above < top_p


def sample_step(logits: torch.Tensor, temperature: float, top_p: float, keys: torch.Tensor,
                counter: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One token per row from [rows, vocab] logits, drawn from row i's stream `keys[i]` at token
    index `counter[i]`; and per row the entropy (nats) of softmax(logits / temperature) before
    top-p truncation and the token's log-probability under it (what a frozen-base anchor
    scores a base rollout by)."""
    scaled = logits.float() / temperature
    log_z = torch.logsumexp(scaled, -1)
    probs = (scaled - log_z[:, None]).exp_()
    # H = log Z - sum_i p_i s_i, as one batched dot product (no second [rows, vocab] buffer).
    entropy = log_z - (probs[:, None, :] @ scaled[:, :, None]).view(-1)
    del scaled
    blocks = _blocks(probs)
    cdf = _block_cdf(blocks)
    token = _draw(blocks, cdf, uniforms(keys, counter, 0, 0), uniforms(keys, counter, 0, 1))
    if top_p < 1.0:
        rows = torch.arange(len(token), device=token.device)
        for attempt in range(1, REDRAWS + 1):
            rows = rows[~_in_nucleus(probs[rows], token[rows], top_p)]
            if not len(rows):
                break
            token[rows] = _draw(blocks[rows], cdf[rows], uniforms(keys[rows], counter[rows], attempt, 0),
                                uniforms(keys[rows], counter[rows], attempt, 1))
        else:
            rows = rows[~_in_nucleus(probs[rows], token[rows], top_p)]
            if len(rows):
                kept = _blocks(nucleus_probs(probs[rows], top_p))
                token[rows] = _draw(kept, _block_cdf(kept), uniforms(keys[rows], counter[rows], REDRAWS + 1, 0),
                                    uniforms(keys[rows], counter[rows], REDRAWS + 1, 1))
    return token, entropy, probs.gather(-1, token[:, None]).view(-1).log()


def nucleus_probs(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The top-p truncated (unnormalised) distribution by a full sort: the reference rule."""
    sorted_p, order = probs.sort(-1, descending=True)
    drop = sorted_p.cumsum(-1) - sorted_p >= top_p
    return probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
