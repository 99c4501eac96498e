"""lighteval's details files (huggingface/lighteval, read from logging/evaluation_tracker.py,
logging/info_loggers.py, models/model_output.py, metrics/metrics_sample.py):

`{output_dir}/details/{model}/{date}/details_{task}_{date}.parquet`, one row per document,
written with `datasets.Dataset.from_list([asdict(Detail)])` and columns sorted:

- lighteval >= 0.11: `doc` (struct: query, choices, gold_index, id, task_name, ...),
  `model_response` (struct: text = the n sampled texts, input, ...), `metric` (struct: one
  field per metric, e.g. "pass@k:k=1&n=16", "avg@n:n=16");
- lighteval < 0.11: flat columns `example`, `full_prompt`, `predictions`, `gold`, `metrics`
  (dict, e.g. "math_pass@1:32_samples" or "pass@1:32_samples").

lighteval keeps no per-sample verdict, only per-document metrics. With --gold the n texts are
graded with the project's verifier. Without it, c is recovered from an unbiased pass@k metric
of the document and its n (pass@k:k=K&n=N, avg@n:n=N, [math_|gpqa_]pass@K:N_samples): c is the
count whose estimator value equals the metric (exact for k = 1: c = N x value).
The prompt is keyed by doc.id where set, else by the query text.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.errors import BoundaryError
from boundary.core.passk import pass_at_k
from boundary.readers.common import SAMPLE_COLUMNS, warn

NEW = {"doc", "model_response"}
OLD = {"full_prompt", "predictions"}
PASS_NEW = re.compile(r"^pass@k:k=(\d+)&n=(\d+)$")
AVG_NEW = re.compile(r"^avg@n:n=(\d+)$")
PASS_OLD = re.compile(r"^(?:[a-z0-9]+_)?pass@(\d+):(\d+)_samples$")


def looks_like(names) -> bool:
    return NEW <= set(names) or OLD <= set(names)


def metric_spec(name: str):
    """(k, n) of an unbiased pass@k metric name, or None."""
    for pattern, kn in ((PASS_NEW, lambda m: (int(m[1]), int(m[2]))), (AVG_NEW, lambda m: (1, int(m[1]))),
                        (PASS_OLD, lambda m: (int(m[1]), int(m[2])))):
        m = pattern.match(name)
        if m:
            return kn(m)
    return None


def count_from_metric(value: float, n: int, k: int) -> int:
    """The c in 0..n whose unbiased pass@k is closest to `value` (the smallest such c)."""
    grid = pass_at_k(np.full(n + 1, n), np.arange(n + 1), k)
    return int(np.argmin(np.abs(grid - value)))


def read(path: Path) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(samples with verdicts None, per-prompt counts from the metrics or None)."""
    try:
        df = pd.read_parquet(path)
    except Exception as err:
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if NEW <= set(df.columns):
        docs = df["doc"]
        texts = [list(r["text"]) if isinstance(r, dict) and r.get("text") is not None else []
                 for r in df["model_response"]]
        prompts = [d.get("query") for d in docs]
        ids = [str(d.get("id")) if d.get("id") not in (None, "") else None for d in docs]
        metrics = list(df["metric"]) if "metric" in df else [{}] * len(df)
    else:
        texts = [list(p) if p is not None else [] for p in df["predictions"]]
        prompts = list(df["full_prompt"])
        ids = [None] * len(df)
        metrics = list(df["metrics"]) if "metrics" in df else [{}] * len(df)
    if not all(ids) or len(set(ids)) < len(ids):
        ids = [None] * len(df)  # doc ids unset (most tasks) or repeated: the query keys the prompt
    lengths = np.array([len(t) for t in texts])
    rows = np.repeat(np.arange(len(df)), lengths)
    samples = pd.DataFrame({"prompt_id": np.asarray(ids, dtype=object)[rows] if ids[0] is not None else None,
                            "prompt": np.asarray(prompts, dtype=object)[rows],
                            "completion": np.concatenate([np.asarray(t, dtype=object) for t in texts])
                            if len(rows) else [],
                            "correct": None, "answer": None, "entropy": np.nan})[SAMPLE_COLUMNS]
    counts, ambiguous = [], 0
    for i, m in enumerate(metrics):
        specs = sorted((spec, v) for name, v in (m or {}).items()
                       if v is not None and (spec := metric_spec(name)) is not None)
        if not specs:
            counts = None
            break
        (k, n), value = specs[0]  # smallest k: pass@1 recovers c exactly
        n = min(n, int(lengths[i])) if lengths[i] else n
        ambiguous += k > 1 and float(value) >= 1.0  # every c >= n - k + 1 gives 1
        counts.append((i, n, count_from_metric(float(value), n, k)))
    if ambiguous:
        warn(f"{path}: {ambiguous} document(s) have pass@k = 1 for k > 1 only, which fixes c only as "
             f"c >= n - k + 1 (the smallest is taken); a pass@1 metric or --gold gives exact counts")
    if counts is not None:
        counts = pd.DataFrame(counts, columns=["row", "n", "c"])
        counts["prompt_id"] = [ids[i] if ids[i] is not None else None for i in counts["row"]]
        counts["prompt"] = [prompts[i] for i in counts["row"]]
    return samples, counts
