"""The field's pass@k-preserving objectives, as pure functions the trainer calls.

Each method of the methods study (docs/reference/methods.md) changes one thing
of GRPO: the group advantage, the reward before it, or which tokens a gradient reaches. Here
are those computations alone, on tensors, so each can be tested against a direct
implementation (tests/test_objectives.py). Rollouts come in groups of G consecutive rows (one
prompt's G completions, as TRL lays them out); rewards are binary (1 correct, 0 wrong).

  group_advantages      GRPO's own: (r - group mean) / (group std + 1e-4), TRL's formula, used
                        when only the reward changes (unlikeliness reward)
  passk_advantages      Pass@k Training (Chen et al. 2025, arXiv 2508.10751): the analytic
                        advantage of the group's pass@k reward, k <= G
  reinforce_advantages  W-REINFORCE / NSR / PSR (Zhu et al. 2025, arXiv 2506.01347): +lambda for
                        a correct rollout, -1 for a wrong one, no baseline (lambda = 0: NSR);
                        PSR keeps +1 for a correct rollout and drops the negative term
  unlikeliness_rewards  unlikeliness reward (He et al. 2025, arXiv 2506.02355): a correct
                        rollout's reward shrinks with its likelihood rank in its group
  clip_cov_tokens       Clip-Cov (Cui et al. 2025, arXiv 2505.22617): a random few tokens whose
                        centred logp x advantage covariance lies in (lb, ub) lose their gradient
  kl_cov_tokens         KL-Cov (same paper): the top fraction of tokens by that covariance get
                        a |log pi - log pi_old| penalty
"""

from __future__ import annotations

import math

import torch

from boundary.core.errors import BoundaryError

# Method settings of these objectives, passed to the trainer's config as they are (epsilon_high
# is TRL's own: DAPO's clip-higher).
METHOD_SETTINGS = ("advantage", "passk_k", "positive_weight", "negative_weight", "unlikeliness", "cov_select", "cov_fraction",
                   "cov_bounds", "cov_kl_coef", "epsilon_high")


def _groups(rewards: torch.Tensor, G: int) -> torch.Tensor:
    if rewards.numel() % G:
        raise BoundaryError(f"num_generations: {rewards.numel()} rollouts do not split into groups of {G}")
    return rewards.view(-1, G)


def group_advantages(rewards: torch.Tensor, G: int, scale: bool = True) -> torch.Tensor:
    """TRL's GRPO advantage (scale_rewards group|none): centred by the group mean and, with
    `scale`, divided by the group's sample SD + 1e-4."""
    r = _groups(rewards.float(), G)
    a = r - r.mean(1, keepdim=True)
    if scale:
        a = a / (r.std(1, keepdim=True) + 1e-4)
    return a.reshape(-1)


def _comb(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0  # scipy's comb: 0 for an empty choice


def passk_advantages(rewards: torch.Tensor, G: int, k: int) -> torch.Tensor:
    """Pass@k Training's analytic advantage (the paper's eqs., the authors' code/passk_adv.py).

    A group of G rollouts with c correct has mean pass@k reward R = 1 - C(G-c, k) / C(G, k)
    over its k-subsets and sd s = sqrt(R (1 - R)); a correct rollout gets (1 - R) / s, a wrong
    one (1 - R - C(G-c-1, k-1) / C(G-1, k-1)) / s: the mean over the k-subsets containing it of
    (subset reward - R) / s. s + 1e-6 as in their code (a group of all-correct or all-wrong
    rollouts then gets 0)."""
    if not 1 <= k <= G:
        raise BoundaryError(f"passk_k: {k} must be between 1 and num_generations = {G}")
    r = _groups(rewards.float(), G)
    c = (r > 0.5).sum(1).tolist()
    out = torch.empty_like(r)
    for i, ci in enumerate(c):
        mean = 1.0 - _comb(G - ci, k) / _comb(G, k)
        sd = math.sqrt(mean * (1.0 - mean))
        pos = (1.0 - mean) / (sd + 1e-6)
        neg = (1.0 - mean - _comb(G - ci - 1, k - 1) / _comb(G - 1, k - 1)) / (sd + 1e-6)
        out[i] = torch.where(r[i] > 0.5, torch.tensor(pos), torch.tensor(neg))
    return out.reshape(-1)


def reinforce_advantages(rewards: torch.Tensor, positive_weight: float, negative_weight: float) -> torch.Tensor:
    """The authors' psr_nsr advantage: positive_weight (lambda) for a correct rollout,
    -negative_weight for a wrong one, no baseline. Their three modes are weights: `weighted`
    (W-REINFORCE) is (lambda, 1), `negative` (NSR) is (0, 1), `positive` (PSR, their return of
    a 0/1 reward) is (1, 0)."""
    r = rewards.float()
    return torch.where(r > 0.5, torch.full_like(r, positive_weight), torch.full_like(r, -negative_weight))


def sequence_logps(per_token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean log-probability of each rollout (the authors' masked_mean of old log-probs)."""
    mask = mask.to(per_token_logps.dtype)
    return (per_token_logps * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def unlikeliness_rewards(rewards: torch.Tensor, seq_logps: torch.Tensor, G: int, beta: float) -> torch.Tensor:
    """The unlikeliness reward (the authors' ray_lean_trainer `rank_penalty`): within a group,
    rank rollouts by log-probability ascending (0 = least likely) and scale each reward by
    1 - beta * rank / G, so the likeliest correct rollout earns least."""
    r, lp = _groups(rewards.float(), G), _groups(seq_logps.float(), G)
    rank = lp.argsort(1).argsort(1).to(r.dtype)
    return (r * (1.0 - beta * rank / G)).reshape(-1)


def token_covariance(logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token centred cross product (A - mean A) (log pi - mean log pi), means over the valid
    tokens of the batch: each token's term of the batch covariance that drives entropy change."""
    valid = mask.bool()
    a = advantages.expand_as(logps) if advantages.dim() == 2 else advantages[:, None].expand_as(logps)
    a, lp = a.float(), logps.detach().float()
    return (a - a[valid].mean()) * (lp - lp[valid].mean())


def clip_cov_tokens(logps, advantages, mask, fraction: float, bounds, generator=None) -> torch.Tensor:
    """Clip-Cov: bool [B, T], the tokens whose gradient is stopped. Of the valid tokens with
    covariance strictly inside (lb, ub), max(int(fraction x valid tokens), 1) are drawn at
    random (the authors' compute_policy_loss_clip_cov; on-policy no token is PPO-clipped, so
    their clip_by_origin exclusion is empty)."""
    lb, ub = bounds
    cov = token_covariance(logps, advantages, mask)
    inside = ((cov > lb) & (cov < ub) & mask.bool()).nonzero()
    n = max(int(fraction * int(mask.sum())), 1)
    chosen = inside[torch.randperm(len(inside), generator=generator)[:n]]
    out = torch.zeros_like(mask, dtype=torch.bool)
    out[chosen[:, 0], chosen[:, 1]] = True
    return out


def kl_cov_tokens(logps, advantages, mask, fraction: float) -> torch.Tensor:
    """KL-Cov: bool [B, T], the max(1, int(fraction x valid tokens)) valid tokens of largest
    covariance (the authors' compute_policy_loss_kl_cov with k_percent = 100 x fraction)."""
    cov = token_covariance(logps, advantages, mask)
    valid = mask.bool()
    flat = valid.flatten().nonzero().flatten()
    n = max(1, int(len(flat) * fraction))
    top = cov.flatten()[flat].topk(min(n, len(flat))).indices
    out = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    out[flat[top]] = True
    return out.view_as(valid)


def kl_cov_penalty(logps, old_logps, selected, coef: float) -> torch.Tensor:
    """KL-Cov's per-token penalty coef |log pi - log pi_old| on the selected tokens, [B, T].
    On-policy (one update per generation batch) log pi = log pi_old, where |.| has value 0 and
    torch's gradient 0: the penalty then never acts (tests/test_objectives.py)."""
    return coef * (logps - old_logps).abs() * selected.to(logps.dtype)
