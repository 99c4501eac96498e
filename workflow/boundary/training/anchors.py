"""Anchor losses of PBA: what an anchored prompt's rollouts contribute to the loss.

Pure torch functions on per-token log-probabilities `[B, T]` and a completion mask `[B, T]`;
each returns one value per rollout `[B]` (a token mean, as the paper's length-normalised
estimate), so the trainer can weight rollouts by their prompt's anchor weight.

`policy` anchors: KL(pi || pi_base) estimated on the policy's own rollouts y ~ pi, with
r = log pi_base(y_t) - log pi(y_t) per token (Schulman's k1/k2/k3):

  k1 = -r            the paper-literal token log-ratio. Its value estimates the KL, but as a
                     loss its gradient is grad log pi(y), and E_pi[grad log pi] = 0: in
                     expectation it does not anchor at all (only sampling noise moves pi).
  k2 = r^2 / 2       gradient -r grad log pi; its expectation is the gradient of the reverse
                     KL(pi || pi_base) -- exactly for a single token (tests/test_anchors.py).
  k3 = e^r - 1 - r   gradient (1 - pi_base/pi) grad log pi; its expectation is the gradient
                     of the *forward* KL(pi_base || pi), reached through an importance weight
                     that is huge where pi has already lost the base's mass.

`base` anchor: cross-entropy -log pi(y) on fresh frozen-base rollouts y ~ pi_base. Its
expectation is KL(pi_base || pi) plus the base entropy (a constant), so its gradient is the
forward-KL gradient with no importance weight: it pulls mass back onto base modes the policy
no longer samples, which a policy-sampled estimator cannot see.

`support` anchor: the same fresh base rollouts, but a floor instead of a target. A token y_t
costs relu(log min(pi_base(y_t), floor) - log pi(y_t)): the cross-entropy gradient where the
policy has let a base token fall below the base's probability (capped at `floor`), nothing
elsewhere. Pass@k needs a correct branch kept at a small probability, not at the base's: with
floor = 0.02 a branch is still found in 256 samples with probability 0.994. So rare branches
are held at their base mass, while mass may move freely among branches the base already
samples often -- which is the sharpening that raises pass@1. The base anchor holds both.

`forward_kl` and `js` anchors: DPH-RL's rehearsal terms (Li et al. 2025, arXiv 2509.07430; the
authors' dp_actor.py), on the same fresh base rollouts with u = pi(y_t) / pi_base(y_t) per token:
`forward_kl` is u - log u - 1 (their `forward` mode with kl_loss_type low_var_kl, clamped to
[-10, 10] as theirs), an estimate of KL(pi_base || pi); `js` is the generator form of the
Jensen-Shannon divergence, u log u - (u + 1) log((u + 1) / 2) (their `js_low_var`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from boundary.core.schema import allowed

if TYPE_CHECKING:  # tensor methods only: the Snakefile reads the anchor kinds without torch
    import torch

ESTIMATORS = allowed("methods", "kl_estimator")  # the schema's, as every allowed value
ANCHORS = allowed("methods", "anchor")
# anchors that draw the anchored prompt's rollouts from the base
BASE_SAMPLED = ("base", "support", "forward_kl", "js")
# anchors that read frozen-base log-probs of those rollouts
BASE_SCORED = ("policy", "support", "forward_kl", "js")


def token_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each rollout's completion tokens: [B, T] -> [B]."""
    mask = mask.to(per_token.dtype)
    return (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def per_token_kl(logps: torch.Tensor, base_logps: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_base) on policy samples, differentiable in `logps`."""
    r = base_logps - logps
    if estimator == "k1":
        return -r
    if estimator == "k2":
        return 0.5 * r ** 2
    if estimator == "k3":
        # exp(r) overflows only where the base puts e^80 more mass than the policy; clamp
        # keeps one such token from producing inf and a NaN gradient for the whole batch.
        r = r.clamp(max=80.0)
        return r.exp() - 1.0 - r
    raise ValueError(f"unknown KL estimator {estimator!r} (one of {ESTIMATORS})")


def policy_kl(logps, base_logps, mask, estimator: str) -> torch.Tensor:
    """The `policy` anchor (and the global-KL control): token-mean KL estimate per rollout."""
    return token_mean(per_token_kl(logps, base_logps, estimator), mask)


def base_cross_entropy(logps, mask) -> torch.Tensor:
    """The `base` anchor: token-mean -log pi(y) per rollout, for rollouts y drawn from pi_base."""
    return token_mean(-logps, mask)


def support_floor(logps, base_logps, mask, floor: float) -> torch.Tensor:
    """The `support` anchor: token-mean hinge below min(pi_base, floor) per base rollout."""
    target = base_logps.clamp(max=math.log(floor))
    return token_mean((target - logps).relu(), mask)


def base_forward_kl(logps, base_logps, mask) -> torch.Tensor:
    """The `forward_kl` anchor (DPH-RL forward): token-mean of u - log u - 1, u = pi / pi_base,
    on base rollouts; clamped to [-10, 10] like the authors' low_var_kl."""
    log_u = logps - base_logps
    return token_mean((log_u.clamp(max=20.0).exp() - log_u - 1.0).clamp(-10.0, 10.0), mask)


def base_js(logps, base_logps, mask) -> torch.Tensor:
    """The `js` anchor (DPH-RL js_low_var): token-mean of u log u - (u + 1) log((u + 1) / 2),
    u = pi / pi_base, on base rollouts. log((u + 1) / 2) is computed as logaddexp(log u, 0) -
    log 2, finite wherever u is."""
    log_u = (logps - base_logps).clamp(max=20.0)
    u = log_u.exp()
    f = u * log_u - (u + 1.0) * (log_u.logaddexp(log_u.new_zeros(())) - math.log(2.0))
    return token_mean(f, mask)
