"""One decoding step: temperature, exact top-p without a vocabulary sort, and the entropy of
the sampling distribution.

The nucleus is sampled by rejection: draw from softmax(logits / T) with an exponential race
(argmax p_i / E_i, E_i ~ Exp(1), exact and sort-free), keep the draw if the tokens more
probable than it hold less than top_p of the mass (the nucleus rule of HF's TopPLogitsWarper),
otherwise draw again for that row. The nucleus holds at least top_p of the mass, so a row is
redrawn with probability at most 1 - top_p, and each accepted token is distributed exactly as
the renormalised nucleus. Cost: one extra pass over the vocabulary, where a sort is ~log V.
"""

from __future__ import annotations

import torch

REDRAWS = 8  # then the few rows still rejected (P <= (1 - top_p) ** 8 each) are sorted


def _race(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    noise = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / noise).argmax(-1)


def _in_nucleus(probs: torch.Tensor, token: torch.Tensor, top_p: float) -> torch.Tensor:
    """Whether each row's token lies in its nucleus: the mass strictly above it is < top_p."""
    p_token = probs.gather(-1, token[:, None])
    above = (probs * (probs > p_token)).sum(-1)
    return above < top_p


def sample_step(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One token per row from [rows, vocab] logits, and per row the entropy (nats) of
    softmax(logits / temperature) before top-p truncation and the token's log-probability
    under it (what a frozen-base anchor scores a base rollout by)."""
    scaled = logits.float() / temperature
    log_z = torch.logsumexp(scaled, -1)
    probs = (scaled - log_z[:, None]).exp_()
    # H = log Z - sum_i p_i s_i, as one batched dot product (no second [rows, vocab] buffer).
    entropy = log_z - (probs[:, None, :] @ scaled[:, :, None]).view(-1)
    del scaled
    token = _race(probs, generator)
    if top_p < 1.0:
        rows = torch.arange(len(token), device=token.device)
        for _ in range(REDRAWS):
            rows = rows[~_in_nucleus(probs[rows], token[rows], top_p)]
            if not len(rows):
                break
            token[rows] = _race(probs[rows], generator)
        else:
            rows = rows[~_in_nucleus(probs[rows], token[rows], top_p)]
            if len(rows):
                token[rows] = _race(nucleus_probs(probs[rows], top_p), generator)
    return token, entropy, probs.gather(-1, token[:, None]).view(-1).log()


def nucleus_probs(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The top-p truncated (unnormalised) distribution by a full sort: the reference rule."""
    sorted_p, order = probs.sort(-1, descending=True)
    drop = sorted_p.cumsum(-1) - sorted_p >= top_p
    return probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
