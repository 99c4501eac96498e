"""What every sample-level reader shares: column names and reading of any table, the biased-metric warning,
verdicts, and counting samples into n and c per prompt.

A reader turns a tool's file into one row per completion with these columns (None where the
tool has no such field):

    prompt_id   the tool's own prompt key, or None (then the prompt text keys the prompt)
    prompt      the prompt text as the tool stored it (template included)
    completion  the sampled text
    correct     the tool's verdict (bool), or None where it left none
    answer      the extracted answer, where the tool kept one
    entropy     mean token entropy, where the tool kept one
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.artifacts import json_columns, read_json, read_table
from boundary.core.errors import BoundaryError, warn
from boundary.core.passk import counts_of

SAMPLE_COLUMNS = ["prompt_id", "prompt", "completion", "correct", "answer", "entropy"]


# ----------------------------------------------------------------------------- files

def columns_of(path: Path) -> list[str]:
    """Column names of a table without reading it: parquet schema, CSV header, first JSON object."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq
            return list(pq.read_schema(path).names)
        if suffix == ".csv":
            return list(pd.read_csv(path, nrows=0).columns)
        if suffix in (".jsonl", ".json"):
            return json_columns(path)
    except (OSError, ValueError) as err:
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    raise BoundaryError(f"{path}: unknown file type {path.suffix!r} (use parquet, csv or jsonl)")


def read_any(path: Path, columns, text=()) -> pd.DataFrame:
    """The named columns that exist, of a parquet, CSV or JSON table; `text` columns verbatim."""
    have = [c for c in columns_of(path) if c in columns]
    if path.suffix.lower() == ".parquet":
        try:
            return pd.read_parquet(path, columns=have)
        except Exception as err:  # corrupt file
            raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if path.suffix.lower() in (".jsonl", ".json"):
        return read_json(path, {c: None for c in have}, text=[c for c in text if c in have])
    return read_table(path, ids=(), text=[c for c in text if c in have])[have]


# ----------------------------------------------------------------------------- checks

# Aggregates that are not the unbiased pass@k: verl's best@N / worst@N (a bootstrap max over
# N draws with replacement, under-reports pass@N) and OpenRLHF's passN (max reward over n).
BIASED = [
    (re.compile(r"(^|[/_])(best|worst)@\d+"), "verl's best@N/worst@N (a bootstrap max over N samples drawn "
                                              "with replacement; it under-reports pass@N)"),
    (re.compile(r"(^|_)pass\d+$"), "OpenRLHF's passN (the max reward over the n samples)"),
    (re.compile(r"(^|[/_])max(@\d+|_over_n|_reward)"), "a max over n samples"),
]


def biased_columns(names) -> list[tuple[str, str]]:
    return [(n, what) for n in names for pattern, what in BIASED if pattern.search(str(n))]


def warn_biased(names, path) -> list[str]:
    """Warn about columns or metric keys that hold a max-over-n style aggregate."""
    found = biased_columns(names)
    for name, what in found:
        warn(f"{path}: {name!r} is {what}, not an unbiased pass@k; boundary ignores it and estimates "
             f"pass@k from n and c per prompt")
    return [n for n, _ in found]


# ----------------------------------------------------------------------------- verdicts

def verdicts(values, path, column: str, threshold: float) -> pd.Series:
    """A tool's verdict column as bool: booleans as they are, numbers (reward, score) > threshold."""
    v = pd.Series(values).reset_index(drop=True)
    if v.isna().any():
        raise BoundaryError(f"{path}: column {column} has empty values")
    if pd.api.types.is_bool_dtype(v):
        return v.astype(bool)
    if v.dtype == object and v.map(type).isin([bool, np.bool_]).all():
        return v.astype(bool)
    num = pd.to_numeric(v, errors="coerce")
    if num.isna().any():
        raise BoundaryError(f"{path}: column {column} must hold booleans or numbers")
    return num.astype(float) > threshold


# ----------------------------------------------------------------------------- counts

def counts_from_samples(samples: pd.DataFrame, path) -> pd.DataFrame:
    """Per-prompt n (samples) and c (positives), mean entropy, and where the samples carry
    answers the number of distinct answers of the positives and the modal answer and share:
    the counts-file columns (NaN and None where the samples carry no answers: not measured)."""
    if samples.empty:
        raise BoundaryError(f"{path}: no samples")
    if samples["correct"].isna().any():
        raise BoundaryError(f"{path}: some samples carry no verdict (correct, reward or score); "
                            "give --gold FILE to verify them")
    keyed = samples.assign(prompt_id=samples["prompt_id"].astype(str))
    if samples["answer"].isna().all():
        keyed = keyed.drop(columns="answer")
    out = counts_of(keyed)
    if "answers" not in out:
        out = out.assign(unique_positives=np.nan, modal_answer=None, modal_share=np.nan)
    return out[["prompt_id", "n", "c", "entropy", "unique_positives", "modal_answer", "modal_share"]].astype(
        {"unique_positives": float})


def problems_of(samples: pd.DataFrame) -> dict:
    """prompt_id -> prompt text (the first seen), where the samples carry text."""
    s = samples[samples["prompt"].notna()].drop_duplicates("prompt_id")
    return dict(zip(s["prompt_id"].astype(str), s["prompt"].astype(str)))
