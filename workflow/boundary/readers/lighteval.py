"""lighteval's details files (huggingface/lighteval, read from logging/evaluation_tracker.py,
logging/info_loggers.py, models/model_output.py, metrics/metrics_sample.py,
metrics/utils/metric_utils.py and tasks/registry.py at v0.10.0 and v0.13.0):

`{output_dir}/details/{model}/{date}/details_{task}_{date}.parquet`, one row per document,
written with `datasets.Dataset.from_list([asdict(Detail)])` and columns sorted:

- lighteval >= 0.11: `doc` (struct: query, choices, gold_index, id, num_samples, ...),
  `model_response` (struct: text = the sampled texts, input = the rendered prompt, ...),
  `metric` (struct: one field per metric, e.g. "pass@k:k=1&n=1", "avg@n:n=1");
- lighteval 0.10: flat columns `example` (doc.query), `full_prompt` (doc.ctx: a string, or a
  list of chat messages with a LiteLLM model), `predictions` (the sampled texts), `gold`,
  `metrics` (dict, e.g. "math_pass@1:1_samples" ... "math_pass@1:64_samples"), `specifics`.

n is the number of stored texts of the document (the model samples the largest n any metric
of the task asks; each metric scores the first n of its own). lighteval keeps no per-sample
verdict. With --gold the texts are graded with the project's verifier. Without it c comes
from the metric that covers all the texts: an unbiased pass@k ("pass@k:k=K&n=N",
"avg@n:n=N", "[math_|gpqa_]pass@K:N_samples") whose N equals the texts' count (no N: all
texts), inverted to the count whose estimator equals the value (exact for k = 1, c = N x
value). lighteval 0.11 to 0.13 keep the task's default n in the key when a run asks `task@n=32`
(the metric is re-parametrised after its name was made), so "pass@k:k=1&n=1" can hold a
value over 32 texts: read as such when its values are not multiples of 1/N (with a warning).
Any other file is refused with one line asking for --gold.

doc.id and lighteval's row order are row numbers, not problem ids: the query text keys the
prompt (so files pair by problem, see readers.pairing).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.errors import BoundaryError, warn
from boundary.core.passk import pass_at_k
from boundary.readers.common import SAMPLE_COLUMNS
from boundary.readers.problems import message_text

NEW = {"doc", "model_response"}
OLD = {"full_prompt", "predictions"}
PASS_NEW = re.compile(r"^(?:[a-z0-9]+_)?pass@k(?::(.*))?$")
AVG_NEW = re.compile(r"^(?:[a-z0-9]+_)?avg@n(?::(.*))?$")
PASS_OLD = re.compile(r"^(?:[a-z0-9]+_)?pass@(\d+):(\d+)_samples$")


def looks_like(names) -> bool:
    return NEW <= set(names) or OLD <= set(names)


def _params(text) -> dict | None:
    try:
        return {k: int(v) for k, v in (item.split("=") for item in (text or "").split("&") if item)}
    except ValueError:
        return None


def metric_spec(name: str):
    """(k, n) of an unbiased pass@k metric name, n None where the name gives none (then the
    metric covers every text), or None for any other metric."""
    m = PASS_OLD.match(name)
    if m:
        return int(m[1]), int(m[2])
    for pattern, default_k in ((PASS_NEW, None), (AVG_NEW, 1)):
        m = pattern.match(name)
        if m:
            p = _params(m[1])
            k = default_k if default_k is not None else (p or {}).get("k")
            if p is None or k is None or set(p) - {"k", "n"}:
                return None
            return k, p.get("n")
    return None


def count_from_metric(value: float, n: int, k: int) -> int:
    """The c in 0..n whose unbiased pass@k is closest to `value` (the smallest such c)."""
    grid = pass_at_k(np.full(n + 1, n), np.arange(n + 1), k)
    return int(np.argmin(np.abs(grid - value)))


def _whole(values, n) -> bool:
    """Every value a multiple of 1/n (n per document)."""
    x = np.asarray(values, float) * n
    return bool(np.all(np.abs(x - np.round(x)) < 1e-6))


def _documents(df: pd.DataFrame, path):
    """(prompt texts, sampled texts per document, metric dicts) of either layout."""
    if NEW <= set(df.columns):
        prompts = [d.get("query") if isinstance(d, dict) else None for d in df["doc"]]
        texts = [list(r["text"]) if isinstance(r, dict) and r.get("text") is not None else []
                 for r in df["model_response"]]
        metrics = list(df["metric"]) if "metric" in df else [{}] * len(df)
    else:  # 0.10: example is doc.query; full_prompt may be a list of chat messages (LiteLLM)
        source = df["example"] if "example" in df and df["example"].map(bool).all() else df["full_prompt"]
        prompts = [message_text(p) for p in source]
        texts = [list(p) if p is not None else [] for p in df["predictions"]]
        metrics = list(df["metrics"]) if "metrics" in df else [{}] * len(df)
    if any(p is None or p == "" for p in prompts):
        raise BoundaryError(f"{path}: a document without query text")
    bad = [t for ts in texts for t in ts if not isinstance(t, str)]
    if bad:
        raise BoundaryError(f"{path}: predictions are not texts (a loglikelihood task?); boundary needs sampled "
                            f"generations")
    return prompts, texts, [m or {} for m in metrics]


def tool_counts(metrics: list[dict], lengths: np.ndarray, path) -> np.ndarray:
    """c per document from the metric that covers all its texts, or a BoundaryError naming
    what the file has and asking for --gold."""
    specs = {}
    for m in metrics:
        for name, v in m.items():
            spec = metric_spec(name)
            if spec is not None and v is not None:
                specs.setdefault(name, spec)
    names = sorted(specs, key=lambda x: (specs[x][0], x))
    values = {name: np.array([m.get(name, np.nan) for m in metrics], float) for name in names}
    usable = [x for x in names if not np.isnan(values[x]).any()]
    covering = [x for x in usable if specs[x][1] is None or (lengths == specs[x][1]).all()]
    renamed = False
    if not covering:  # lighteval 0.13 task@n=N: the key kept the default n
        covering = [x for x in usable if specs[x][0] == 1 and specs[x][1] is not None and
                    (lengths > specs[x][1]).all() and _whole(values[x], lengths) and
                    not _whole(values[x], specs[x][1])]
        renamed = bool(covering)
    if not covering:
        have = ", ".join(names[:4]) or "no pass@k metric"
        raise BoundaryError(f"{path}: {int(lengths.max())} texts per document, but no metric covers them all "
                            f"({have}); give --gold FILE (without --keep-scores) to grade the texts")
    name = covering[0]
    k = specs[name][0]
    if renamed:
        warn(f"{path}: metric {name!r} holds values over all {int(lengths.max())} texts per document (lighteval "
             f"0.11 to 0.13 keep the task's n in the key when a run asks task@n=N): c = texts x value; --gold re-grades")
    if k > 1:
        ones = int((values[name] >= 1.0).sum())
        if ones:  # every c >= n - k + 1 gives 1
            warn(f"{path}: {ones} document(s) have {name} = 1, which fixes c only as c >= n - k + 1 (the smallest "
                 f"is taken); a pass@1 metric or --gold gives exact counts")
    return np.array([count_from_metric(float(v), int(n), k) for v, n in zip(values[name], lengths)], np.int64)


def read(path: Path, graded: bool = False) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(samples with verdicts None, per-prompt counts from the metrics, or None when `graded`:
    the texts will be graded against --gold)."""
    try:
        df = pd.read_parquet(path)
    except Exception as err:
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if df.empty:
        raise BoundaryError(f"{path}: no documents")
    prompts, texts, metrics = _documents(df, path)
    lengths = np.array([len(t) for t in texts])
    if (lengths == 0).any():
        raise BoundaryError(f"{path}: {int((lengths == 0).sum())} document(s) without generated text")
    rows = np.repeat(np.arange(len(df)), lengths)
    samples = pd.DataFrame({"prompt_id": None, "prompt": np.asarray(prompts, dtype=object)[rows],
                            "completion": np.concatenate([np.asarray(t, dtype=object) for t in texts]),
                            "correct": None, "answer": None, "entropy": np.nan})[SAMPLE_COLUMNS]
    if graded:
        return samples, None
    counts = pd.DataFrame({"prompt_id": None, "prompt": prompts, "n": lengths,
                           "c": tool_counts(metrics, lengths, path)})
    return samples, counts
