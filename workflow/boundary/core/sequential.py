"""Sequential evaluation (evaluate.sequential): exact pass@k at a fraction of the draws.

Each prompt draws a block of m samples; a block with a success stops there. Otherwise it draws
on, in rounds, until the round that holds its first success (at draw T), at most `cap` = n
draws. Its counts row (`sequential_counts`) keeps n (draws made), c (their successes), block_n
and block_c (the block's), first_success (T, none when no success within cap) and cap, and
`passk.estimate` reads it: the usual estimator on the block for k <= m; beyond, 1 if the block
holds a success, else 1[T <= k]. Unbiased at every k <= cap, and at k = cap it is the full
run's indicator "a success within cap draws" exactly, so coverage at n, the solved, lost and
gained prompts are the full run's (docs/explanation/sequential_evaluation.md).

Sample i of a prompt is the full run's sample i (the same random stream), so a sequential run
draws a prefix of each prompt's full run, and `replay` gives on a full run's samples the exact
prefix a sequential run would have drawn.

Several sequential draws of the base pool into one sequential row (`pool_sequential`): the
blocks side by side are one block, and the draws after them, in draw order, one stream, so
first success within the pooled cap (1,024 = 4 x 256) is read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from boundary.core.passk import SEQUENTIAL_COLUMNS, counts_of, sequential_view

SEQUENTIAL_MARK = "in_block"  # the samples artifact's column: the sample is in its prompt's block


@dataclass(frozen=True)
class SequentialRule:
    """The stopping rule, in the interface of sample-and-verify's `rule`: `rounds` (the draws
    after each round: the block, then every `round_size` more, then the cap) and
    `next_round(r, c)` (None: stop)."""

    block: int
    round_size: int
    cap: int

    @property
    def rounds(self) -> tuple[int, ...]:
        block = min(self.block, self.cap)
        return tuple(range(block, self.cap, self.round_size)) + (self.cap,)

    def next_round(self, r: int, c: int) -> int | None:
        if c > 0 or r >= self.cap:
            return None
        return next(x for x in self.rounds if x > r)

    def draws(self, correct) -> int:
        """The draws a sequential run makes of a prompt whose full run's outcomes, in sample
        order, are `correct`: the first round end at or after its first success, else cap."""
        hits = np.flatnonzero(np.asarray(correct, dtype=bool)[:self.cap])
        if not len(hits):
            return self.cap
        return next(r for r in self.rounds if r > hits[0])

    @classmethod
    def from_settings(cls, evaluate: dict) -> SequentialRule:
        return cls(int(evaluate["block"]), int(evaluate["round_size"]), int(evaluate["n"]))

    def describe(self) -> str:
        return (f"sequential evaluation: a block of {min(self.block, self.cap)} draws a prompt, then rounds of "
                f"{self.round_size} until the first success, at most {self.cap}")


def replay(samples: pd.DataFrame, rule: SequentialRule) -> pd.DataFrame:
    """The rows of a full run's samples (prompt_id, sample_idx, correct, ...) a sequential run
    would have drawn: each prompt's first rule.draws(its outcomes in sample order) samples."""
    ordered = samples.sort_values(["prompt_id", "sample_idx"], kind="stable")
    keep = []
    for _, group in ordered.groupby("prompt_id", sort=False):
        keep.append(group.index[:rule.draws(group["correct"].to_numpy())])
    return samples.loc[np.concatenate(keep) if keep else []].sort_values(["prompt_id", "sample_idx"], kind="stable")


def sequential_counts(samples: pd.DataFrame, block: int, cap: int) -> pd.DataFrame:
    """The counts of a sequential run from its samples (prompt_id, sample_idx, correct [,
    entropy, answer]): n and c over every draw made; block_n, block_c, first_success (1-based
    sample index of the first success, <NA> when none) and cap; and the readouts that need
    every sample of a fixed size (entropy, answers, unique_positives, modal_answer,
    modal_share) on the block alone, so they compare across policies as a full run's do."""
    drawn = counts_of(samples[["prompt_id", "correct"]])[["prompt_id", "n", "c"]]
    in_block = samples[samples["sample_idx"].to_numpy() < block]
    readouts = counts_of(in_block).rename(columns={"n": "block_n", "c": "block_c"})
    positive = samples[samples["correct"].astype(bool).to_numpy()]
    first = positive.groupby("prompt_id")["sample_idx"].min() + 1
    out = drawn.merge(readouts, on="prompt_id", how="left")
    if out["block_n"].isna().any():
        missing = out.loc[out["block_n"].isna(), "prompt_id"].iloc[0]
        raise ValueError(f"sequential counts: prompt {missing!r} has no draw in its block")
    out["first_success"] = out["prompt_id"].map(first).astype("Int64")
    out["cap"] = np.int64(cap)
    for col in ("block_n", "block_c"):
        out[col] = out[col].astype(np.int64)
    return out


def check_rows(counts: pd.DataFrame) -> str | None:
    """What is wrong with a frame's sequential rows (one line), or None: 1 <= block_n <= n <=
    cap, 0 <= block_c <= block_n, block_c <= c; no first_success where c = 0; a row whose block
    has no success drew on to its first success, beyond the block (c >= 1), or to cap (c = 0)."""
    if "block_n" not in counts:
        return None
    seq = counts["block_n"].notna().to_numpy()
    if not seq.any():
        return None
    missing = [col for col in SEQUENTIAL_COLUMNS if col != "first_success" and counts.loc[seq, col].isna().any()]
    if missing:
        return f"column {missing[0]} is empty in a sequential row (block_n given)"
    bn, bc, first, cap = (a[seq] for a in sequential_view(counts))
    n, c = counts["n"].to_numpy()[seq], counts["c"].to_numpy()[seq]
    checks = [(bn < 1, "block_n < 1"), (bn > n, "block_n > n"), (n > cap, "n > cap"),
              (bc < 0, "block_c < 0"), (bc > bn, "block_c > block_n"), (bc > c, "block_c > c"),
              ((c == 0) & (first > 0), "first_success given but c = 0"), (first > n, "first_success > n"),
              ((bc == 0) & (c > 0) & (first == 0), "no first_success, yet c > 0 beyond the block"),
              ((bc == 0) & (c == 0) & (n != cap), "no success yet fewer than cap draws"),
              ((bc > 0) & (first > bn), "block_c > 0 but first_success beyond the block"),
              ((bc == 0) & (first > 0) & (first <= bn), "first_success inside a block without success")]
    ids = counts["prompt_id"].to_numpy()[seq]
    for bad, what in checks:
        if bad.any():
            return f"{what} (prompt_id {ids[bad][0]})"
    return None


def pool_sequential(draws: list[pd.DataFrame], ids) -> pd.DataFrame:
    """The sequential columns of several independent draws of the same prompts pooled, in the
    order of `ids`: the blocks side by side are one block (block_n, block_c summed); where no
    block holds a success, the draws after the blocks, in draw order, are one i.i.d. stream, so
    first_success is the pooled blocks' size plus the first success's place in that stream; cap
    summed. A full draw enters as a sequential row whose block is its n draws (its first
    success's place unknown: where such a block is the first with a success, first_success is
    <NA>, which the estimator never reads since the pooled block holds a success)."""
    views = [sequential_view(d.set_index("prompt_id").loc[ids].reset_index()) for d in draws]
    bn = np.sum([v[0] for v in views], axis=0)
    bc = np.sum([v[1] for v in views], axis=0)
    cap = np.sum([v[3] for v in views], axis=0)
    first = np.zeros(len(ids), dtype=np.int64)
    offset = np.zeros(len(ids), dtype=np.int64)  # draws of the stream before this draw's
    before = np.zeros(len(ids), dtype=np.int64)  # block draws before this draw's block
    found = np.zeros(len(ids), dtype=bool)
    for d_bn, d_bc, d_first, d_cap in views:
        block_hit = ~found & (d_bc > 0)
        first = np.where(block_hit & (d_first > 0), before + d_first, first)  # 0: a full draw's, unknown
        found |= block_hit
        before = before + d_bn
    for d_bn, d_bc, d_first, d_cap in views:  # no block success: the streams after the blocks
        hit = ~found & (bc == 0) & (d_first > 0)
        first = np.where(hit, bn + offset + d_first - d_bn, first)
        found |= hit
        offset = offset + d_cap - d_bn
    return pd.DataFrame({"prompt_id": list(ids), "block_n": bn, "block_c": bc,
                         "first_success": pd.array(np.where(first > 0, first, None), dtype="Int64"), "cap": cap})
