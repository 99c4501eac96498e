"""The unbiased pass@k estimator (Chen et al. 2021) and population curves.

pass@k = 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i): the
numerically stable product form of OpenAI's human-eval `estimate_pass_at_k`, vectorised here
over prompts. It is exactly 1 when n - c < k and exactly 0 when c = 0.

The population curve (paper eq. 1) is the mean of the per-prompt estimates over prompts.

A counts row is full (n, c: every one of n draws) or sequential (evaluate.sequential: a block of
`block_n` draws with `block_c` successes, then draws until the first success at draw
`first_success`, at most `cap` draws; core/sequential.py). `estimate` is the one map from a
counts row to its pass@k, full or sequential: the usual estimator on the block for k <= block_n,
and beyond it 1 if the block holds a success, else 1[first_success <= k]. A full row is the
sequential row whose block is all n draws (block_n = cap = n), so one rule covers both.
"""

from __future__ import annotations

import numpy as np

from boundary.core import settings

DEFAULT_KS = tuple(settings.defaults("evaluate")["ks"])


def pass_at_k(n, c, k: int) -> np.ndarray:
    """Per-prompt unbiased pass@k for arrays of sample counts n and positive counts c."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    n, c = np.broadcast_arrays(n, c)
    k = int(k)
    if k < 1:
        raise ValueError(f"pass_at_k: k={k} must be >= 1")
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("pass_at_k: need 0 <= c <= n")
    if np.any(k > n):
        raise ValueError(f"pass_at_k: k={k} exceeds n for some prompts")
    if n.size > 64:  # evaluate once per distinct (n, c): at most n + 1 products per n
        stride = int(n.max()) + 1
        keys, inverse = np.unique(n.ravel() * stride + c.ravel(), return_inverse=True)
        return _product_form(keys // stride, keys % stride, k)[inverse.ravel()].reshape(n.shape)
    return _product_form(n, c, k)


def _product_form(n: np.ndarray, c: np.ndarray, k: int, budget: int = 1 << 20) -> np.ndarray:
    out = np.ones(n.shape, dtype=np.float64)
    fails = n - c
    todo = fails >= k  # otherwise every k-subset holds a positive: exactly 1
    if np.any(todo):
        out[todo] = 1.0 - _prod_terms(n[todo], c[todo], k, budget)
    return out


def _prod_terms(n: np.ndarray, c: np.ndarray, k: int, budget: int) -> np.ndarray:
    """prod over i in (n-c, n] of (1 - k/i), per row, in blocks of at most `budget` terms.

    The ragged ranges become a masked grid, one block of columns (term offsets) at a time and
    only over the rows whose range reaches that block: memory stays ~budget floats whatever
    the largest c (n = 10^6 would otherwise need rows x 10^6), and the work is the sum of c."""
    order = np.argsort(c, kind="stable")
    n, c = n[order], c[order]
    prod = np.ones(len(n))
    width = max(1, budget // max(len(n), 1))
    for start in range(0, int(c[-1]) if len(c) else 0, width):
        first = int(np.searchsorted(c, start, side="right"))  # rows before it are complete
        offsets = np.arange(start + 1, min(start + width, int(c[-1])) + 1)
        i = (n[first:] - c[first:])[:, None] + offsets[None, :]
        terms = np.where(offsets[None, :] <= c[first:, None], 1.0 - k / i, 1.0)
        prod[first:] *= np.prod(terms, axis=1)
    out = np.empty_like(prod)
    out[order] = prod
    return out


def pass_at_k_all(n, c, kmax: int) -> np.ndarray:
    """Per-prompt pass@k for every k = 1..kmax at once, (prompts x kmax): the ratio
    C(n-c, k) / C(n, k) by its recurrence in k, r(k+1) = r(k) (n-c-k) / (n-k), a running
    product of kmax factors (exactly 0 once k > n - c). Needs kmax <= n for every prompt."""
    n = np.asarray(n, dtype=np.int64).ravel()
    c = np.asarray(c, dtype=np.int64).ravel()
    kmax = int(kmax)
    if kmax < 1 or (n.size and kmax > n.min()):
        raise ValueError(f"pass_at_k_all: need 1 <= kmax={kmax} <= every n")
    j = np.arange(kmax)[None, :]
    factors = np.clip((n - c)[:, None] - j, 0, None) / (n[:, None] - j)
    return 1.0 - np.cumprod(factors, axis=1)


# The columns of a sequential counts row beside n (draws made) and c (their successes).
SEQUENTIAL_COLUMNS = ["block_n", "block_c", "first_success", "cap"]


def is_sequential(counts) -> bool:
    """Whether any row of a counts frame is sequential."""
    return "block_n" in counts and bool(counts["block_n"].notna().any())


def sequential_view(counts) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every row as (block_n, block_c, first_success, cap), ints, first_success 0 for none: a
    full row's block is its n draws (block_n = cap = n, first_success 0: never read, since
    k <= block_n there)."""
    n = np.asarray(counts["n"], dtype=np.int64)
    c = np.asarray(counts["c"], dtype=np.int64)
    if not is_sequential(counts):
        return n, c, np.zeros_like(n), n
    seq = counts["block_n"].notna().to_numpy()

    def column(name, full):
        values = np.asarray(counts[name].astype("Float64").fillna(-1).to_numpy(float), dtype=np.int64)
        return np.where(seq, values, full)

    first = column("first_success", 0)
    return column("block_n", n), column("block_c", c), np.where(first < 0, 0, first), column("cap", n)


def horizon(counts) -> np.ndarray:
    """The largest k each row's pass@k is defined at: n for a full row, cap for a sequential one."""
    return sequential_view(counts)[3]


def estimate(counts, ks) -> np.ndarray:
    """Per-row unbiased pass@k (rows x len(ks)) of a counts frame (n, c [, SEQUENTIAL_COLUMNS]):
    the one map from a counts row to pass@k, full or sequential. For k <= block_n the usual
    estimator on the block (product form, `pass_at_k`); for k > block_n, 1 if the block holds a
    success, else 1[first_success <= k]. Unbiased at every k <= cap: E = P(T <= block_n) +
    P(block_n < T <= k) = 1 - (1 - p)^k, T the first success of the prompt's i.i.d. draws."""
    ks = [int(k) for k in ks]
    return _estimate(counts, ks, lambda n, c, inside: np.stack([pass_at_k(n, c, k) for k in inside], axis=1))


def estimate_all(counts, kmax: int) -> np.ndarray:
    """`estimate` at every k = 1..kmax (rows x kmax), the block's part by the recurrence in k
    (`pass_at_k_all`): the curves of the attribution, k* and the area over log k."""
    return _estimate(counts, list(range(1, int(kmax) + 1)),
                     lambda n, c, inside: pass_at_k_all(n, c, max(inside)))


def _estimate(counts, ks: list[int], block) -> np.ndarray:
    bn, bc, first, cap = sequential_view(counts)
    if ks and bn.size and (min(ks) < 1 or max(ks) > cap.min()):
        raise ValueError(f"estimate: k={max(ks)} exceeds the draws some prompts allow ({int(cap.min())})")
    karr = np.asarray(ks, dtype=np.int64)
    signature = np.stack([bn, bc, first, cap], axis=1)
    rows, inverse = np.unique(signature, axis=0, return_inverse=True)  # a few hundred distinct rows
    out = np.empty((len(rows), len(ks)))
    for m in np.unique(rows[:, 0]):
        at = np.flatnonzero(rows[:, 0] == m)
        inside = karr <= m
        if inside.any():
            out[np.ix_(at, np.flatnonzero(inside))] = block(rows[at, 0], rows[at, 1], karr[inside].tolist())
        if (~inside).any():
            t = rows[at, 2][:, None]
            tail = (rows[at, 1][:, None] > 0) | ((t >= 1) & (t <= karr[~inside][None, :]))
            out[np.ix_(at, np.flatnonzero(~inside))] = tail
    return out[inverse.ravel()]


def pass_at_k_column(k: int) -> str:
    return f"pass_at_{k}"


def usable_ks(n, ks=DEFAULT_KS) -> list[int]:
    """The ks the estimator allows for every prompt (k <= min n; of a counts frame: its
    `horizon`), in order."""
    n_min = int(np.min(n)) if np.size(n) else 0
    return [int(k) for k in ks if 1 <= k <= n_min]


def add_pass_at_k(counts, ks=DEFAULT_KS):
    """Add pass_at_{k} columns to a per-prompt counts frame (n, c [, SEQUENTIAL_COLUMNS]) for
    each k its rows allow (`horizon`)."""
    ks = usable_ks(horizon(counts), ks)
    values = estimate(counts, ks)
    for j, k in enumerate(ks):
        counts[pass_at_k_column(k)] = values[:, j]
    return counts


def passk_curve(n, c, ks=DEFAULT_KS) -> dict[int, float]:
    """Population pass@k: mean over prompts of the per-prompt estimate, for each usable k."""
    return {k: float(np.mean(pass_at_k(n, c, k))) for k in usable_ks(n, ks)}


def answered(prompt_ids, answers):
    """(prompt_id, answer as text) of the samples that gave an answer: a null or empty
    extracted answer is no answer. The one rule of what counts as an answer."""
    import pandas as pd

    a = pd.DataFrame({"prompt_id": prompt_ids, "answer": answers})
    a = a[a["answer"].notna()]
    a = a.assign(answer=a["answer"].astype(str))
    return a[a["answer"] != ""]


def modal_answers(keys, answers):
    """Per key (a prompt id) that has any answer: its most common answer (`modal_answer`, ties
    to the smallest text) and how often it occurs (`modal_count`)."""
    freq = answered(keys, answers).groupby(["prompt_id", "answer"], sort=True).size().rename("modal_count")
    freq = freq.reset_index().sort_values(["prompt_id", "modal_count", "answer"], ascending=[True, False, True],
                                          kind="stable")
    return freq.drop_duplicates("prompt_id").set_index("prompt_id").rename(columns={"answer": "modal_answer"})


def counts_of(samples):
    """The estimator's inputs from one row per sample (prompt_id, correct [, entropy, answer]):
    per prompt (sorted by id) n, c, the mean entropy and, where the samples carry answers, the
    distinct answers of its positives (`answers`, and their number `unique_positives`), its
    most common answer over all n samples (`modal_answer`, "" when none answered) and that
    answer's share of the n (`modal_share`, 0 when none answered): a policy that gives one
    answer to everything shows it there, where per-token entropy need not. The one grouping
    rule of evaluation, calibration and the readers."""
    import pandas as pd

    correct = samples["correct"].astype(bool).to_numpy()
    entropy = (pd.to_numeric(samples["entropy"], errors="coerce").to_numpy() if "entropy" in samples
               else np.full(len(samples), np.nan))
    g = pd.DataFrame({"prompt_id": samples["prompt_id"].to_numpy(), "c": correct, "entropy": entropy}).groupby(
        "prompt_id", sort=True)
    out = pd.DataFrame({"n": g.size(), "c": g["c"].sum().astype(np.int64), "entropy": g["entropy"].mean()})
    if "answer" in samples:
        ids, answers = samples["prompt_id"].to_numpy(), samples["answer"].to_numpy()
        pos = answered(ids[correct], answers[correct]).groupby("prompt_id")["answer"].agg(lambda a: sorted(set(a)))
        out["answers"] = pos.reindex(out.index).map(lambda a: a if isinstance(a, list) else [])
        out["unique_positives"] = out["answers"].map(len)
        modal = modal_answers(ids, answers).reindex(out.index)
        out["modal_answer"] = modal["modal_answer"].fillna("").astype(str)
        out["modal_share"] = modal["modal_count"].fillna(0).to_numpy(float) / out["n"].to_numpy()
    return out.reset_index()
