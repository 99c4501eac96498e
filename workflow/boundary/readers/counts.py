"""Per-prompt counts files (parquet, CSV or JSONL), one row per prompt:

    prompt_id   unique within the file (read as a string)
    n, c        samples drawn and verifier-positive samples, 0 <= c <= n
    entropy     (optional) mean over the n samples of each completion's mean token entropy
    answers     (optional) distinct normalized answers of the positives (a JSON list in CSV)
    unique_positives  (optional) used only when answers is absent
    modal_answer, modal_share  (optional) the most common non-empty extracted answer over the n
                samples and the share of the n that give it (0 when none answered); a file
                without them (written before they were measured) reads as not measured (NaN)
    block_n, block_c, first_success, cap  (optional, together) a sequential evaluation's row
                (evaluate.sequential): n and c are then the draws made and their successes,
                block_n and block_c the first block's, first_success the 1-based index of the
                first positive sample (blank: none within cap draws), cap the most draws a
                prompt makes; entropy, answers and modal_* are the block's. pass@k is defined
                for k <= cap (core/passk.py `estimate`; docs/explanation/sequential_evaluation.md)

The pipeline's eval/*/counts.parquet, and what `boundary diagnose` reads by default.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from boundary.core.artifacts import read_table
from boundary.core.errors import BoundaryError
from boundary.core.passk import SEQUENTIAL_COLUMNS
from boundary.core.sequential import check_rows
from boundary.readers.common import warn_biased
from boundary.readers.problems import named


def looks_like(names) -> bool:
    """n and c, or a prompt_id with one of them (so a missing column is named, not guessed)."""
    names = set(names)
    return {"n", "c"} <= names or ("prompt_id" in names and bool({"n", "c"} & names))


def _unique_positives(answers, path) -> float:
    """Distinct non-empty verifier-positive normalized answers of one prompt."""
    if answers is None or (isinstance(answers, float) and np.isnan(answers)):
        return 0.0
    if isinstance(answers, str):  # CSV cells carry the list as JSON
        try:
            answers = json.loads(answers) if answers.strip() else []
        except json.JSONDecodeError:
            raise BoundaryError(f"{path}: column answers must hold lists (JSON lists in CSV)") from None
    return float(len({str(a) for a in answers if str(a) != ""}))


def load_counts(path, problems: dict | None = None) -> pd.DataFrame:
    """Read and validate one per-prompt counts file; a bad file is one BoundaryError line.
    `problems`, a dict, receives the file's problem texts where it carries them."""
    df = read_table(path, ["prompt_id", "n", "c"], text=["modal_answer", "problem", "prompt"])
    warn_biased(df.columns, path)
    if problems is not None:
        problems.update(problems_in(df))
    return counts_frame(df, path)


def counts_frame(df: pd.DataFrame, path) -> pd.DataFrame:
    """Validated counts (prompt_id, n, c, entropy, unique_positives, modal_answer, modal_share)
    from a frame with prompt_id, n, c and optional entropy, answers or unique_positives,
    modal_answer, modal_share (absent: NaN and None, not measured); `path` names it in errors."""
    if df.empty:
        raise BoundaryError(f"{path}: no rows")
    out = pd.DataFrame({"prompt_id": df["prompt_id"].astype(str)})
    texts = problems_in(df)
    name = lambda rows: named(out.loc[rows, "prompt_id"].iloc[0], texts)  # the first such prompt, with its text
    for col in ("n", "c"):
        v = pd.to_numeric(df[col], errors="coerce")
        if v.isna().any() or (v != np.round(v)).any():
            raise BoundaryError(f"{path}: column {col} must hold whole numbers")
        out[col] = v.astype(np.int64).to_numpy()
    if (out["n"] < 1).any():
        raise BoundaryError(f"{path}: n < 1 for prompt_id {name(out['n'] < 1)}")
    if (out["c"] < 0).any():
        raise BoundaryError(f"{path}: c < 0 for prompt_id {name(out['c'] < 0)}")
    bad = out["c"] > out["n"]
    if bad.any():
        raise BoundaryError(f"{path}: c > n for prompt_id {name(bad)}")
    dup = out["prompt_id"].duplicated()
    if dup.any():
        raise BoundaryError(f"{path}: duplicate prompt_id {name(dup)}")
    out["entropy"] = _optional_numbers(df, "entropy", path)
    if "answers" in df:
        out["unique_positives"] = [_unique_positives(a, path) for a in df["answers"]]
    else:
        out["unique_positives"] = _optional_numbers(df, "unique_positives", path)
    out["modal_answer"] = (df["modal_answer"].map(lambda a: None if pd.isna(a) else str(a)).to_numpy(object)
                           if "modal_answer" in df else None)  # None: not measured; "": none answered
    out["modal_share"] = _optional_numbers(df, "modal_share", path)
    bad = ~out["modal_share"].isna() & ~out["modal_share"].between(0, 1)
    if bad.any():
        raise BoundaryError(f"{path}: column modal_share must lie in [0, 1] "
                            f"(prompt_id {name(bad)})")
    return _sequential(df, out, path)


def _sequential(df: pd.DataFrame, out: pd.DataFrame, path) -> pd.DataFrame:
    """A sequential evaluation's columns (all of SEQUENTIAL_COLUMNS, or none), checked."""
    given = [col for col in SEQUENTIAL_COLUMNS if col in df]
    if not given:
        return out
    if len(given) < len(SEQUENTIAL_COLUMNS):
        missing = next(col for col in SEQUENTIAL_COLUMNS if col not in df)
        raise BoundaryError(f"{path}: column {missing} missing (a sequential counts file has "
                            f"{', '.join(SEQUENTIAL_COLUMNS)})")
    for col in SEQUENTIAL_COLUMNS:
        v = pd.to_numeric(df[col], errors="coerce")
        text = v.isna() & df[col].notna() & (df[col].astype(str).str.strip() != "")
        if text.any() or (v.dropna() != np.round(v.dropna())).any():
            raise BoundaryError(f"{path}: column {col} must hold whole numbers")
        out[col] = pd.array(v.to_numpy(), dtype="Int64")
    problem = check_rows(out)
    if problem:
        raise BoundaryError(f"{path}: sequential counts: {problem}")
    return out


def problems_in(df: pd.DataFrame) -> dict:
    """prompt_id -> problem text of a counts file that carries one (`problem` or `prompt`)."""
    column = next((c for c in ("problem", "prompt") if c in df.columns), None)
    return dict(zip(df["prompt_id"].astype(str), df[column])) if column else {}


def _optional_numbers(df: pd.DataFrame, col: str, path):
    """An optional numeric column: a blank is NaN (not measured), text is an error."""
    if col not in df:
        return np.nan
    values = pd.to_numeric(df[col], errors="coerce")
    text = values.isna() & df[col].notna() & (df[col].astype(str).str.strip() != "")
    if text.any():
        raise BoundaryError(f"{path}: column {col} must hold numbers, not {df.loc[text, col].iloc[0]!r} "
                            f"(prompt_id {df.loc[text, 'prompt_id'].iloc[0]})")
    return values.to_numpy()


