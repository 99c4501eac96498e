"""Per-prompt action masks: the PBA gate, its ablations, a soft gate, random and oracle masks.

A mask has one row per (train prompt, refresh epoch): the frozen-base evidence (successes of
G0 gate draws, w_hat = successes / G0), the action (sharpen | anchor) and an anchor weight
(1 anchor, 0 sharpen; the soft gate lies between). `flip` marks an action that changed since
the previous epoch: the base is frozen, so a flip is pure gate noise, which the run card
reports. Masks never say "drop": a method with `masked_action: drop` turns anchor rows into
drop at train time, so the drop control reuses the PBA mask exactly.

Kinds (complete settings, core/settings.py: the soft gate's confidence is the schema's when unset):
  gate   {G0, tau, epochs}                sharpen iff w_hat >= tau (G0 = 8, tau = 0.10 is the
                                          paper's one-success rule)
  soft   {G0, tau, confidence, epochs}    weight = clip(1 - LCB / tau, 0, 1), LCB the
                                          Clopper-Pearson (Beta-quantile) lower bound on w
  random {fraction | share_of, seed, epochs}  a fixed random `fraction` of prompts anchored, or
                                          the share a gated mask anchors (share_of)
  oracle {epochs}                         anchor the prompts labelled Boundary
  solved {G0, tau, epochs}                the gate turned around: anchor iff w_hat >= tau, the
                                          prompts the base solves. With the gate's G0 and tau
                                          and `masked_action: drop` only zero-success prompts
                                          are trained (zero-success-only, Yuan et al. 2026);
                                          G0 = 4, tau = 1 is DPH-RL's near-perfect set (4 of 4
                                          base draws correct), rehearsed by an anchor
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from boundary.core.artifacts import read_table
from boundary.core.errors import BoundaryError
from boundary.core.names import GATED  # kinds that read the first G0 gate draws of each epoch

KINDS = ("gate", "soft", "random", "oracle", "solved")
COLUMNS = ["prompt_id", "epoch", "successes", "G0", "w_hat", "action", "weight", "flip"]


def gate_evidence(draws: pd.DataFrame, prompt_ids, epochs: int, G0: int | None) -> pd.DataFrame:
    """successes, G0 and w_hat per (prompt, epoch) from the first G0 draws of each epoch.

    G0=None uses every draw of the epoch (the evidence column of random and oracle masks).
    """
    for epoch in range(epochs if G0 is not None else 0):
        if not (draws["epoch"] == epoch).any():
            raise BoundaryError(f"gate draws: no draws for refresh epoch {epoch} "
                                f"(mask needs epochs 0..{epochs - 1})")
    draws = draws[draws["epoch"] < epochs]
    if G0 is not None:
        draws = draws[draws["draw_idx"] < G0]
    grouped = draws.groupby(["prompt_id", "epoch"])["correct"]
    ev = pd.DataFrame({"successes": grouped.sum(), "G0": grouped.size()}).reset_index()
    if G0 is not None and (ev["G0"] < G0).any():
        short = ev[ev["G0"] < G0].iloc[0]
        raise BoundaryError(f"gate draws: prompt {short.prompt_id} epoch {short.epoch} has "
                            f"{short.G0} draws, G0 = {G0} needs {G0}")
    grid = pd.MultiIndex.from_product([list(prompt_ids), range(epochs)],
                                      names=["prompt_id", "epoch"]).to_frame(index=False)
    ev = grid.merge(ev, on=["prompt_id", "epoch"], how="left")
    if G0 is not None and ev["G0"].isna().any():
        missing = ev[ev["G0"].isna()].iloc[0]
        raise BoundaryError(f"gate draws: no draws for train prompt {missing.prompt_id} "
                            f"in epoch {missing.epoch}")
    ev["w_hat"] = ev["successes"] / ev["G0"]
    return ev


def soft_weight(successes, G0, tau: float, confidence: float) -> np.ndarray:
    """Anchor weight from the one-sided Clopper-Pearson lower bound on w at `confidence`.

    No success gives LCB = 0 (full anchor); the weight falls to 0 once the bound reaches tau,
    so a prompt is sharpened freely only when the base evidence is confidently above tau.
    """
    from scipy.stats import beta

    s, n = np.asarray(successes, float), np.asarray(G0, float)
    lcb = np.where(s > 0, beta.ppf(1 - confidence, np.maximum(s, 1), n - s + 1), 0.0)
    return np.clip(1.0 - lcb / tau, 0.0, 1.0)


def build_mask(kind: str, settings: dict, draws: pd.DataFrame | None, prompt_ids,
               regimes: pd.DataFrame | None = None) -> pd.DataFrame:
    """A mask of `kind` from its complete settings (core.settings.resolve("masks", ...))."""
    if kind not in KINDS:
        raise BoundaryError(f"--kind: unknown mask kind {kind!r} (one of {', '.join(KINDS)})")
    epochs = int(settings["epochs"])
    prompt_ids = list(prompt_ids)
    G0 = int(settings["G0"]) if kind in GATED else None
    if draws is None:
        if G0 is not None:
            raise BoundaryError(f"--gate-draws: required for a {kind} mask")
        ev = pd.MultiIndex.from_product([prompt_ids, range(epochs)], names=["prompt_id", "epoch"]
                                        ).to_frame(index=False)
        ev["successes"], ev["G0"], ev["w_hat"] = np.nan, np.nan, np.nan
    else:
        ev = gate_evidence(draws, prompt_ids, epochs, G0)

    if kind == "gate":
        weight = (ev["w_hat"] < float(settings["tau"])).astype(float)
    elif kind == "solved":
        weight = (ev["w_hat"] >= float(settings["tau"])).astype(float)
    elif kind == "soft":
        weight = pd.Series(soft_weight(ev["successes"], ev["G0"], float(settings["tau"]),
                                       float(settings["confidence"])), index=ev.index)
    elif kind == "random":
        # One draw for the whole run: the control asks whether protecting *any* fixed 70%
        # of prompts helps, so it has no gate noise and never flips.
        rng = np.random.default_rng(int(settings["seed"]))
        n_anchor = int(round(random_fraction(settings, draws, prompt_ids) * len(prompt_ids)))
        chosen = set(rng.choice(prompt_ids, size=n_anchor, replace=False).tolist())
        weight = ev["prompt_id"].isin(chosen).astype(float)
    else:  # oracle
        if regimes is None:
            raise BoundaryError("--train-regimes: required for an oracle mask")
        boundary = set(regimes.loc[regimes["regime"] == "Boundary", "prompt_id"])
        unknown = set(prompt_ids) - set(regimes["prompt_id"])
        if unknown:
            raise BoundaryError(f"--train-regimes: no regime for train prompt {sorted(unknown)[0]}")
        weight = ev["prompt_id"].isin(boundary).astype(float)

    ev["weight"] = weight.to_numpy()
    ev["action"] = np.where(ev["weight"] >= 0.5, "anchor", "sharpen")
    ev = ev.sort_values(["prompt_id", "epoch"], ignore_index=True)
    previous = ev.groupby("prompt_id")["action"].shift(1)
    ev["flip"] = previous.notna() & (previous != ev["action"])
    return ev[COLUMNS]


def random_fraction(settings: dict, draws: pd.DataFrame | None, prompt_ids) -> float:
    """A random mask's share of anchored prompts: `fraction`, or with `share_of` the named gated
    mask's anchored share pooled over its epochs (its key in share_of_settings), built here from
    the same gate draws."""
    ref = settings.get("share_of_settings")
    if ref is None:
        return float(settings["fraction"])
    if draws is None:
        raise BoundaryError(f"--gate-draws: required for a random mask with share_of ({settings['share_of']})")
    return float((build_mask(ref["kind"], ref, draws, prompt_ids)["action"] == "anchor").mean())


def read_mask(path, columns=("prompt_id", "epoch", "action", "weight")) -> pd.DataFrame:
    """A mask file as training and the analysis read it: `columns` present, actions sharpen or
    anchor (drop is a method's `masked_action`, applied to anchored prompts; never in a mask),
    one row per (prompt_id, epoch)."""
    mask = read_table(path, list(columns))
    bad = set(mask["action"]) - {"sharpen", "anchor"}
    if bad:
        raise BoundaryError(f"{path}: unknown action(s) {', '.join(sorted(map(str, bad)))} (sharpen or anchor)")
    if mask.duplicated(["prompt_id", "epoch"]).any():
        raise BoundaryError(f"{path}: duplicate (prompt_id, epoch) rows")
    return mask


def summary(mask: pd.DataFrame) -> str:
    by_epoch = mask.groupby("epoch").agg(anchored=("action", lambda a: (a == "anchor").mean()),
                                         flips=("flip", "mean"))
    return "; ".join(f"epoch {e}: {r.anchored:.0%} anchored, {r.flips:.0%} flipped"
                     for e, r in by_epoch.iterrows())
