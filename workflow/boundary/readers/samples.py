"""Plain sample tables (JSONL, parquet or CSV), as vLLM or TRL users write them, and the
pipeline's own eval/*/samples.parquet.

One row per completion, or one row per prompt whose completion column holds a list (the
verdict column then holds a parallel list). Columns, first name found wins:

    prompt id    prompt_id, problem_id, question_id, id, uid, idx, index   (else the prompt text)
    prompt text  prompt, problem, question, input, query
    completion   completion, response, output, generation, text, generated_text
                 (lists: completions, responses, outputs, generations)
    verdict      correct, is_correct, acc, accuracy, passed (booleans or 0/1), else
                 reward, score, rewards, scores (numbers; correct when > --reward-threshold)
    optional     answer | pred | extracted_answer, entropy
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.errors import BoundaryError
from boundary.readers.common import SAMPLE_COLUMNS, columns_of, read_any, verdicts

IDS = ("prompt_id", "problem_id", "question_id", "id", "uid", "idx", "index")
TEXTS = ("prompt", "problem", "question", "input", "query")
COMPLETIONS = ("completion", "response", "output", "generation", "text", "generated_text",
               "completions", "responses", "outputs", "generations")
BOOLS = ("correct", "is_correct", "acc", "accuracy", "passed")
REWARDS = ("reward", "score", "rewards", "scores")
ANSWERS = ("answer", "pred", "extracted_answer")


def _first(names, candidates):
    return next((c for c in candidates if c in names), None)


def looks_like(names) -> bool:
    names = set(names)
    return bool(_first(names, COMPLETIONS)) or (bool(_first(names, IDS + TEXTS)) and
                                                 bool(_first(names, BOOLS + REWARDS)))


def _is_list(x) -> bool:
    return isinstance(x, (list, tuple, np.ndarray))


def read(path: Path, threshold: float = 0.5) -> pd.DataFrame:
    names = columns_of(path)
    pick = {"prompt_id": _first(names, IDS), "prompt": _first(names, TEXTS),
            "completion": _first(names, COMPLETIONS), "bool": _first(names, BOOLS),
            "reward": _first(names, REWARDS), "answer": _first(names, ANSWERS),
            "entropy": "entropy" if "entropy" in names else None}
    if not (pick["prompt_id"] or pick["prompt"]):
        raise BoundaryError(f"{path}: no prompt column (one of {', '.join(IDS + TEXTS)})")
    df = read_any(path, [c for c in pick.values() if c])
    verdict = pick["bool"] or pick["reward"]
    lists = [c for c in (pick["completion"], verdict, pick["answer"], pick["entropy"])
             if c and len(df) and _is_list(df[c].dropna().iloc[0] if df[c].notna().any() else None)]
    if lists:  # one row per prompt: one row per completion
        try:
            df = df.explode(lists, ignore_index=True)
        except ValueError:
            raise BoundaryError(f"{path}: list columns {', '.join(lists)} differ in length on some row") from None
    out = pd.DataFrame({c: (df[pick[c]].reset_index(drop=True) if pick.get(c) else None) for c in
                        ("prompt_id", "prompt", "completion", "answer", "entropy")})
    if pick["prompt_id"]:
        out["prompt_id"] = df[pick["prompt_id"]].astype(str).to_numpy()
    cut = 0.5 if verdict == pick["bool"] else threshold  # 0/1 verdicts are not rewards
    out["correct"] = verdicts(df[verdict], path, verdict, cut).to_numpy() if verdict else None
    return out[SAMPLE_COLUMNS]
