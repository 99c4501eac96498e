"""How far a regime label can be trusted: its posterior probability, and the labels a second
calibration would be expected to change.

A prompt's calibration draws are i.i.d. Bernoulli(p). Under a Beta(a, b) prior on p, c correct
of n leave the posterior Beta(a + c, b + n - c). The prior is empirical Bayes: the Beta that
maximises the beta-binomial marginal likelihood of the calibration's own counts
(`stats.fit_beta_binomial`, the prior `diagnose --prior fit` puts on every run's p), so it is
the pool's spread of p, not a guess; on the committed SmolLM2 GSM8K calibrations it predicted
91.5 changed labels of 500 where a second run changed 93, against 103 under Jeffreys' prior and
132 under the uniform one (docs/explanation/label_reliability.md).

- P(label) (`label_probability`): the posterior mass of the label's region of p. The regimes
  are intervals of p (`regions`): OutOfReach p <= p0 with 1 - (1 - p0)^coverage_k =
  coverage_min, SolvedEasy p > easy, Reachable boundary <= p <= easy, Boundary p0 < p < boundary.
- P(flip) (`flip_probability`): the probability that a fresh calibration of the prompt, drawn
  the way this one was, labels it otherwise, under the posterior predictive (beta-binomial),
  computed exactly. "The way this one was" is a `Protocol`: the draws after each round and
  which counts stop there; by default one round of the prompt's own n (a fresh full run). The
  fresh run's draws form a Polya urn, so the next m draws given j correct of r are
  BetaBinomial(m, a + c + j, b + n - c + r - j), and a dynamic program over the rounds gives
  the law of the fresh label. E[flips] is the sum over prompts.
- `extension_effect`: what calibration.extend (adaptive.py's `Extension`: a prompt with at
  most `extend_fragile` successes in its first n drawn on to `extend_to`) buys in expected label
  changes and costs in draws, computed from a calibration's counts before drawing anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special, stats

from boundary.analysis.adaptive import Extension
from boundary.analysis.regimes import PAPER, REGIMES, Thresholds, label
from boundary.analysis.stats import fit_beta_binomial
from boundary.core.errors import warn

ROBUST_SUCCESSES = 3  # a Boundary label with at least this many calibration successes is "robust"


def regions(th: Thresholds = PAPER) -> dict[str, tuple[float, float]]:
    """Each regime's interval [lo, hi] of p (empty: lo >= hi), in `label`'s order of rules."""
    p0 = 1.0 - (1.0 - th.coverage_min) ** (1.0 / th.coverage_k)  # coverage(p0) = coverage_min
    easy = max(th.easy, p0)
    return {"OutOfReach": (0.0, p0), "SolvedEasy": (easy, 1.0),
            "Reachable": (max(th.boundary, p0), easy), "Boundary": (p0, max(th.boundary, p0))}


def fit_prior(n, c) -> tuple[float, float]:
    """The empirical-Bayes Beta(a, b) of a calibration's counts."""
    return fit_beta_binomial(n, c)


def prior_text(a: float, b: float) -> str:
    return f"empirical-Bayes prior Beta({a:.3g}, {b:.3g}) fitted to the calibration's counts"


def label_probability(n, c, regime, a: float, b: float, th: Thresholds = PAPER) -> np.ndarray:
    """Posterior probability of each prompt's own label: the Beta(a + c, b + n - c) mass of its
    regime's interval of p."""
    n, c = np.asarray(n, float), np.asarray(c, float)
    span = regions(th)
    lo = np.array([span[r][0] for r in regime], float)
    hi = np.array([span[r][1] for r in regime], float)
    post = stats.beta(a + c, b + n - c)
    return np.clip(np.where(hi > lo, post.cdf(hi) - post.cdf(lo), 0.0), 0.0, 1.0)


# -- a fresh calibration's label -------------------------------------------------------------------

@dataclass(frozen=True)
class Protocol:
    """How a calibration draws a prompt: the draws after each round (the last is the most) and,
    for each round r, which counts c = 0..r stop there (the last round stops every count).
    adaptive.py's StoppingRule and Extension have the same two attributes and serve as well."""

    rounds: tuple[int, ...]
    table: dict  # {r: bool array over c = 0..r}

    @classmethod
    def full(cls, n: int) -> Protocol:
        return cls((int(n),), {int(n): np.ones(int(n) + 1, bool)})


def _log_bb(m: int, d, alpha, beta):
    """log BetaBinomial(m, alpha, beta) at d (broadcast)."""
    return (special.gammaln(m + 1) - special.gammaln(d + 1) - special.gammaln(m - d + 1)
            + special.betaln(alpha + d, beta + m - d) - special.betaln(alpha, beta))


def fresh_labels(alpha: float, beta: float, protocol: Protocol, th: Thresholds = PAPER) -> dict[str, float]:
    """The law of a fresh calibration's label for a prompt whose p has the posterior
    Beta(alpha, beta): {regime: probability}, exactly."""
    out = dict.fromkeys(REGIMES, 0.0)
    states, mass, prev = np.zeros(1, np.int64), np.ones(1), 0  # correct counts reached, their probability
    for r in protocol.rounds:
        m = r - prev
        d = np.arange(m + 1)
        j = states[:, None]
        step = np.exp(_log_bb(m, d[None, :], alpha + j, beta + prev - j))
        grown = np.zeros(r + 1)
        np.add.at(grown, (j + d[None, :]).ravel(), (mass[:, None] * step).ravel())
        stop = protocol.table[r]
        names = label(np.arange(r + 1) / r, th)
        for name in REGIMES:
            out[name] += float(grown[stop & (names == name)].sum())
        keep = np.flatnonzero(~stop & (grown > 0))
        states, mass, prev = keep, grown[keep], r
        if not len(keep):
            break
    return out


def flip_probability(n, c, regime, a: float, b: float, th: Thresholds = PAPER, protocol=None) -> np.ndarray:
    """P(a fresh calibration labels the prompt otherwise than `regime`) per prompt, under the
    posterior predictive; `protocol(n)` gives a prompt's fresh calibration (default: n draws)."""
    n, c = np.asarray(n, np.int64), np.asarray(c, np.int64)
    protocol = protocol or Protocol.full
    key = pd.DataFrame({"n": n, "c": c, "regime": np.asarray(regime, object)})
    cache = {}
    for nn, cc, rr in key.drop_duplicates().itertuples(index=False):
        law = fresh_labels(a + cc, b + nn - cc, protocol(int(nn)), th)
        cache[(nn, cc, rr)] = max(0.0, 1.0 - law[rr])
    return np.array([cache[k] for k in zip(key["n"], key["c"], key["regime"])], float)


def extension_effect(n, c, a: float, b: float, extension: Extension, th: Thresholds = PAPER) -> dict:
    """What `extension` would buy on a calibration of n draws a prompt, before drawing anything,
    exactly under the posterior predictive: expected label changes of a second calibration
    without it (both of n draws) and with it (both extended: the extension's own draws D ~
    BetaBinomial(to - n, a + c, b + n - c) averaged over), and the extra draws it makes."""
    n, c = np.asarray(n, np.int64), np.asarray(c, np.int64)
    if (n != extension.n).any():
        raise ValueError(f"extension_effect: every prompt needs n = {extension.n}")
    before = flip_probability(n, c, label(c / n, th), a, b, th)
    proto = extension
    fragile = c <= extension.fragile
    after = flip_probability(n, c, label(c / n, th), a, b, th, protocol=lambda _: proto)
    m, to = extension.to - extension.n, extension.to
    for cc in np.unique(c[fragile]):
        d = np.arange(m + 1)
        weight = np.exp(_log_bb(m, d, a + cc, b + extension.n - cc))
        total = cc + d
        flips = flip_probability(np.full(len(d), to), total, label(total / to, th), a, b, th,
                                 protocol=lambda _: proto)
        after[c == cc] = float(weight @ flips)
    return {"prompts": len(n), "fragile": int(fragile.sum()), "flips_before": float(before.sum()),
            "flips_after": float(after.sum()), "extra_draws": int(fragile.sum()) * m,
            "draws_before": int(n.sum())}


def reliable_labels(counts: pd.DataFrame, th: Thresholds = PAPER, prior: tuple[float, float] | None = None
                    ) -> pd.DataFrame:
    """A labelled table (prompt_id, n, c, regime, ...) with its reliability: `label_prob`
    (posterior probability of the label), `flip_prob` (P(a fresh calibration of the same n
    labels it otherwise)) and the prior as `prior_a`, `prior_b` (fitted here unless given)."""
    a, b = prior if prior is not None else fit_prior(counts["n"], counts["c"])
    out = counts.copy()
    out["label_prob"] = label_probability(out["n"], out["c"], out["regime"], a, b, th)
    out["flip_prob"] = flip_probability(out["n"], out["c"], out["regime"], a, b, th)
    out["prior_a"], out["prior_b"] = a, b
    return out


def robust(regimes: pd.DataFrame) -> pd.Series:
    """The Boundary labels a second calibration keeps: at least ROBUST_SUCCESSES calibration
    successes (at n = 256 a one-success Boundary label flips about 4 times in 10)."""
    return (regimes["regime"] == "Boundary") & (regimes["c"] >= ROBUST_SUCCESSES)


def summary_lines(regimes: pd.DataFrame) -> list[str]:
    """The report's lines on label reliability, from a regimes table with reliability columns."""
    if not {"label_prob", "flip_prob", "prior_a", "prior_b"} <= set(regimes.columns) or not len(regimes):
        return []
    a, b = float(regimes["prior_a"].iloc[0]), float(regimes["prior_b"].iloc[0])
    flips = float(regimes["flip_prob"].sum())
    lines = [f"Label reliability under the {prior_text(a, b)}: mean P(label) {regimes['label_prob'].mean():.2f}; "
             f"a second calibration of the same n would be expected to change {flips:.1f} of {len(regimes)} "
             f"labels ({flips / len(regimes):.1%})"]
    boundary = regimes["regime"] == "Boundary"
    if boundary.any():
        strong = robust(regimes)
        lines.append(f"Boundary: {int(boundary.sum())} prompts, {int(strong.sum())} robust (>= {ROBUST_SUCCESSES} "
                     f"calibration successes); expected changes {regimes.loc[boundary, 'flip_prob'].sum():.1f} of "
                     f"all, {regimes.loc[strong, 'flip_prob'].sum():.1f} of the robust ones")
    return lines


def warn_unidentified(counts: pd.DataFrame, source: str) -> None:
    """One line where the pool's counts cannot pin a prior (every prompt 0/n or n/n)."""
    if (counts["c"] == 0).all() or (counts["c"] == counts["n"]).all():
        warn(f"{source}: every prompt has {'no' if (counts['c'] == 0).all() else 'every'} success: the empirical "
             "prior sits at its bound, so P(label) and the expected label changes are the prior's, not the data's")
