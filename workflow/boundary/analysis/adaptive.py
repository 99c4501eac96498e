"""Adaptive calibration's stopping rule: when a prompt's regime label is settled; and the
extension of a full calibration's fragile prompts (`Extension`, calibration.extend).

The full run draws n samples a prompt (`calibration.n`) and labels it from C_n / n. An adaptive
run draws in rounds r_1 < ... < r_R = n and after each round labels the prompt from its drawn
prefix, L = label(c / r): what the `regimes` stage computes from the artifact. The prompt's n
draws are i.i.d. Bernoulli(p) in correctness, and the adaptive run's are a prefix of the full
run's (same streams), so "the adaptive label differs from the full run's" is one event E of
those n draws, and P_p(E) is computed exactly for any p by a dynamic program over the rounds'
counts (`error_and_draws`).

The rule (docs/explanation/adaptive_calibration.md):
- risk(r, c) = max over p of P_p(c of the first r are correct, and the full label is not
  label(c / r)): the most probability any p puts on "stop here and be wrong";
- stop at (r, c) iff risk(r, c) <= tau, and always at r = n;
- tau is the largest value for which max over p of P_p(E) <= delta, found by bisection on a
  grid of p, then certified on a finer grid uniform in arcsin(sqrt(p)), where moving p by
  a grid step changes P_p(E) by at most the total variation between the n-draw laws
  (`_slack`), so the certified bound holds for every p in [0, 1].
A state whose label is exactly settled (no remaining draws can change the full run's label)
has risk 0 and always stops. delta = 0 stops only there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import special

from boundary.analysis.regimes import PAPER, Thresholds, label
from boundary.core.errors import BoundaryError

DESIGN_GRID = 801  # p values (uniform in arcsin sqrt p) the bisection on tau evaluates
CERTIFY_GRID = 20001  # p values of the certificate: slack sqrt(1 - cos(step/2)^(2n)), 1.3e-3 at n = 256


def rounds_of(n: int, rounds) -> tuple[int, ...]:
    """The draws a prompt has after each round: the configured ones below n, then n."""
    return tuple(sorted({int(r) for r in rounds if 0 < int(r) < n})) + (int(n),)


def _grid(points: int) -> tuple[np.ndarray, float]:
    """p on a grid uniform in theta = arcsin(sqrt(p)), and the grid's theta step."""
    theta = np.linspace(0.0, np.pi / 2, points)
    return np.sin(theta) ** 2, float(theta[1] - theta[0])


def _pmf(m: int, p: np.ndarray) -> np.ndarray:
    """[len(p), m + 1]: the Binomial(m, p) probabilities of 0..m (0 log 0 = 0 at p = 0 or 1)."""
    k = np.arange(m + 1)
    log_choose = special.gammaln(m + 1) - special.gammaln(k + 1) - special.gammaln(m - k + 1)
    p = np.asarray(p, dtype=float)[:, None]
    return np.exp(log_choose + special.xlogy(k, p) + special.xlog1py(m - k, -p))


def _slack(n: int, step: float) -> float:
    """max |P_p(E) - P_q(E)| over events E of n Bernoulli draws, for |theta_p - theta_q| <= step/2:
    TV <= sqrt(1 - BC^2) with the Bhattacharyya coefficient BC = cos(theta_p - theta_q)^n."""
    return float(np.sqrt(1.0 - np.cos(step / 2) ** (2 * n)))


@dataclass(frozen=True)
class StoppingRule:
    n: int
    rounds: tuple[int, ...]
    delta: float
    thresholds: Thresholds = PAPER  # the schema's cutoffs

    def __post_init__(self):
        if not 0 <= self.delta < 1:
            raise BoundaryError(f"calibration.delta: {self.delta} must be in [0, 1)")
        object.__setattr__(self, "rounds", rounds_of(self.n, self.rounds))

    @classmethod
    def from_settings(cls, calibration: dict, regimes: dict) -> StoppingRule:
        return cls(int(calibration["n"]), tuple(calibration["rounds"]), float(calibration["delta"]),
                   Thresholds.from_dict(regimes))

    # -- the labels in count space ---------------------------------------------------------------
    def full_labels(self) -> np.ndarray:
        """The full run's label of each count C_n = 0..n."""
        return label(np.arange(self.n + 1) / self.n, self.thresholds)

    def _out(self, r: int, p: np.ndarray) -> np.ndarray:
        """[len(p), r + 1]: P_p(the full label is not label(c / r)), given c correct of r."""
        full, c, m = self.full_labels(), np.arange(r + 1), self.n - r
        lo, hi = np.full(r + 1, self.n + 1), np.full(r + 1, -1)
        for i, name in enumerate(label(c / r, self.thresholds)):
            at = np.flatnonzero(full == name)  # one interval: every regime is an interval of p
            if len(at):
                lo[i], hi[i] = at[0], at[-1]
        pmf = _pmf(m, np.asarray(p, dtype=float))
        zero = np.zeros((len(pmf), 1))
        below = np.concatenate([zero, np.cumsum(pmf, axis=1)], axis=1)  # below[:, k] = P(D < k)
        above = np.concatenate([np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1], zero], axis=1)  # P(D >= k)
        down = np.clip(lo - c, 0, m + 1)  # D < lo - c leaves the span below
        up = np.clip(hi - c + 1, 0, m + 1)  # D >= hi - c + 1 leaves it above
        out = below[:, down] + above[:, up]
        return np.where(hi < lo, 1.0, np.clip(out, 0.0, 1.0))

    # -- the exact error and cost of a stop table ------------------------------------------------
    def error_and_draws(self, table: dict, p, outs: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """P_p(adaptive label != full label) and E_p[draws] for each p, exactly, for the stop
        table {r: bool array over c = 0..r}. `outs`: `_out` of each round at these p, if known."""
        from scipy import signal  # here: the regimes stage and the report import this module, not the rule

        p = np.atleast_1d(np.asarray(p, dtype=float))
        alive = np.ones((len(p), 1))  # P(c correct so far and not stopped), c = 0..prev
        prev, wrong, draws = 0, np.zeros(len(p)), np.zeros(len(p))
        for r in self.rounds:
            grown = np.clip(signal.fftconvolve(alive, _pmf(r - prev, p), axes=1), 0.0, None)
            stop = table[r]
            draws += r * grown[:, stop].sum(1)
            if r < self.n:
                out = outs[r] if outs is not None else self._out(r, p)
                wrong += (grown[:, stop] * out[:, stop]).sum(1)
            alive, prev = np.where(stop[None], 0.0, grown), r
        return wrong, draws

    # -- the design ------------------------------------------------------------------------------
    @functools.cached_property
    def _coarse(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        p, _ = _grid(DESIGN_GRID)
        return p, {r: self._out(r, p) for r in self.rounds[:-1]}

    @functools.cached_property
    def _risk(self) -> dict[int, np.ndarray]:
        p, outs = self._coarse
        return {r: (_pmf(r, p) * outs[r]).max(0) for r in self.rounds[:-1]}

    def _table(self, tau: float) -> dict[int, np.ndarray]:
        table = {r: risk <= tau for r, risk in self._risk.items()}
        table[self.n] = np.ones(self.n + 1, dtype=bool)
        return table

    @functools.cached_property
    def design(self) -> tuple[float, dict[int, np.ndarray], float]:
        """(tau, the stop table, the certified bound on max_p P_p(adaptive label != full label))."""
        certify, step = _grid(CERTIFY_GRID)
        slack = _slack(self.n, step)
        target = self.delta - slack
        exact = self._table(0.0)  # exactly settled states only: error 0
        if target <= 0 or len(self.rounds) == 1:
            return 0.0, exact, 0.0
        coarse, outs = self._coarse
        candidates = np.unique(np.concatenate([v for v in self._risk.values()]))
        lo, hi = 0, len(candidates) - 1  # bisection over the distinct risks (monotone in tau)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.error_and_draws(self._table(candidates[mid]), coarse, outs)[0].max() <= target:
                lo = mid
            else:
                hi = mid - 1
        while True:  # the coarse grid may miss a peak: certify on the fine one, step down if need be
            tau = float(candidates[lo]) if len(candidates) else 0.0
            table = self._table(tau)
            bound = float(self.error_and_draws(table, certify)[0].max()) + slack
            if bound <= self.delta or lo == 0:
                return (tau, table, bound) if bound <= self.delta else (0.0, exact, 0.0)
            lo -= 1

    @property
    def table(self) -> dict[int, np.ndarray]:
        return self.design[1]

    def next_round(self, r: int, c: int) -> int | None:
        """The draws a prompt should have next, given c correct of its first r (a round); None
        once its label is settled."""
        if r not in self.table:
            raise ValueError(f"{r} draws is not a round of {self.rounds}")
        if self.table[r][c]:
            return None
        return self.rounds[self.rounds.index(r) + 1]

    def draws(self, outcomes) -> int:
        """The draws an adaptive run makes of a prompt whose full run's outcomes are `outcomes`
        (0/1 in sample order): the rule applied to each round's prefix."""
        outcomes = np.asarray(outcomes)
        for r in self.rounds:
            if self.table[r][int(outcomes[:r].sum())]:
                return r
        return self.n

    def describe(self) -> str:
        tau, _, bound = self.design
        return (f"adaptive calibration: rounds {list(self.rounds)}, delta {self.delta:g}: stop where "
                f"risk <= {tau:.3g}; P(label differs from the full run's) <= {bound:.4f} for every p")


@dataclass(frozen=True)
class Extension:
    """calibration.extend: a prompt with at most `fragile` successes in its first n draws is
    drawn on to `to`, and its label reads all of them (the `regimes` stage labels c / n from each
    prompt's rows). What it buys: label_reliability.extension_effect."""

    n: int
    to: int
    fragile: int

    @property
    def rounds(self) -> tuple[int, ...]:
        return (self.n, self.to) if self.to > self.n else (self.n,)

    def next_round(self, r: int, c: int) -> int | None:
        """What the calibrate stage's rounds ask (scoring.scored_samples' `rule`)."""
        return self.to if r == self.n and self.to > self.n and c <= self.fragile else None

    @property
    def table(self) -> dict[int, np.ndarray]:
        """{round: stops at c = 0..round}, as StoppingRule.table: stop at n unless fragile."""
        if self.to <= self.n:
            return {self.n: np.ones(self.n + 1, dtype=bool)}
        return {self.n: np.arange(self.n + 1) > self.fragile, self.to: np.ones(self.to + 1, dtype=bool)}

    def describe(self) -> str:
        return (f"calibration extended: a prompt with at most {self.fragile} successes in its first {self.n} "
                f"draws is drawn on to {self.to}; its label reads all of them")
