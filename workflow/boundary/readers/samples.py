"""Plain sample tables (JSONL, parquet or CSV), as vLLM or TRL users write them, and the
pipeline's own eval/*/samples.parquet.

One row per completion, or one row per prompt whose completion column holds a list (the
verdict column then holds a parallel list). Columns, first name found wins:

    prompt id    prompt_id, problem_id, question_id, uid; id, idx, index only where the
                 file has no prompt text (they are most often row numbers); else the text
    prompt text  prompt, problem, question, input, query; a chat-message list (TRL's
                 conversational format) gives its last user turn
    completion   completion, response, output, generation, text, generated_text
                 (lists: completions, responses, outputs, generations); a message list
                 gives its assistant turns
    verdict      correct, is_correct, acc, accuracy, passed (booleans or 0/1), else
                 reward, score, rewards, scores (numbers; correct when > --reward-threshold)
    optional     answer | pred | extracted_answer, entropy
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.artifacts import blank_row
from boundary.core.errors import BoundaryError
from boundary.core.sequential import SEQUENTIAL_MARK
from boundary.readers.common import SAMPLE_COLUMNS, columns_of, read_any, verdicts
from boundary.readers.problems import completion_text, is_messages, message_text

IDS = ("prompt_id", "problem_id", "question_id", "id", "uid", "idx", "index")
ROW_NUMBERS = ("id", "idx", "index")  # most often a row's position: the text keys the prompt where there is one
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


def _first_value(column: pd.Series):
    present = column.dropna()
    return present.iloc[0] if len(present) else None


def read(path: Path, threshold: float = 0.5) -> pd.DataFrame:
    names = columns_of(path)
    if SEQUENTIAL_MARK in names:  # its prompts stop at a first success: their n and c are no full counts
        raise BoundaryError(f"{path}: samples of a sequential evaluation (column {SEQUENTIAL_MARK}): give its "
                            "counts file, which carries the block, first_success and cap")
    pick = {"prompt_id": _first(names, IDS), "prompt": _first(names, TEXTS),
            "completion": _first(names, COMPLETIONS), "bool": _first(names, BOOLS),
            "reward": _first(names, REWARDS), "answer": _first(names, ANSWERS),
            "entropy": "entropy" if "entropy" in names else None}
    if not (pick["prompt_id"] or pick["prompt"]):
        raise BoundaryError(f"{path}: no prompt column (one of {', '.join(IDS + TEXTS)})")
    df = read_any(path, [c for c in pick.values() if c], text=[pick[c] for c in ("prompt_id", "prompt", "answer")
                                                                if pick[c]])
    if pick["prompt"] and is_messages(_first_value(df[pick["prompt"]])):  # TRL conversational
        df[pick["prompt"]] = df[pick["prompt"]].map(message_text)
    comp = pick["completion"]
    if comp and is_messages(_first_value(df[comp])):  # one conversational completion per row
        df[comp] = df[comp].map(completion_text)
    verdict = pick["bool"] or pick["reward"]
    lists = [c for c in (comp, verdict, pick["answer"], pick["entropy"])
             if c and len(df) and _is_list(_first_value(df[c]))]
    if lists:  # one row per prompt: one row per completion
        try:
            df = df.explode(lists, ignore_index=True)
        except ValueError:
            raise BoundaryError(f"{path}: list columns {', '.join(lists)} differ in length on some row") from None
        if comp in lists and is_messages(_first_value(df[comp])):
            df[comp] = df[comp].map(completion_text)
    out = pd.DataFrame({c: (df[pick[c]].reset_index(drop=True) if pick.get(c) else None) for c in
                        ("prompt_id", "prompt", "completion", "answer", "entropy")})
    if pick["prompt_id"] and not (pick["prompt_id"] in ROW_NUMBERS and pick["prompt"]):
        row = blank_row(df[pick["prompt_id"]])
        if row is not None:  # as text it would be "None" or "nan": a prompt of its own, or dropped
            raise BoundaryError(f"{path}: blank {pick['prompt_id']} in row {row}")
        out["prompt_id"] = df[pick["prompt_id"]].astype(str).to_numpy()
    else:  # a row number pairs nothing across files: the prompt text keys the prompt
        out["prompt_id"] = None
    cut = 0.5 if verdict == pick["bool"] else threshold  # 0/1 verdicts are not rewards
    out["correct"] = verdicts(df[verdict], path, verdict, cut).to_numpy() if verdict else None
    return out[SAMPLE_COLUMNS]
