"""The unbiased pass@k estimator (Chen et al. 2021) and population curves.

pass@k = 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i): the
numerically stable product form of OpenAI's human-eval `estimate_pass_at_k`, vectorised here
over prompts. It is exactly 1 when n - c < k and exactly 0 when c = 0.

The population curve (paper eq. 1) is the mean of the per-prompt estimates over prompts.
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


def pass_at_k_column(k: int) -> str:
    return f"pass_at_{k}"


def usable_ks(n, ks=DEFAULT_KS) -> list[int]:
    """The ks the estimator allows for every prompt (k <= min n), in order."""
    n_min = int(np.min(n)) if np.size(n) else 0
    return [int(k) for k in ks if 1 <= k <= n_min]


def add_pass_at_k(counts, ks=DEFAULT_KS):
    """Add pass_at_{k} columns to a per-prompt counts frame (columns n, c) for each k <= n."""
    for k in usable_ks(counts["n"].to_numpy(), ks):
        counts[pass_at_k_column(k)] = pass_at_k(counts["n"].to_numpy(), counts["c"].to_numpy(), k)
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
