"""What every sample-level reader shares: fast JSONL reading, prompt keys, the biased-metric
warning, re-grading against a gold file, and counting samples into n and c per prompt.

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

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.artifacts import read_table
from boundary.core.errors import BoundaryError

SAMPLE_COLUMNS = ["prompt_id", "prompt", "completion", "correct", "answer", "entropy"]


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------- files

def columns_of(path: Path) -> list[str]:
    """Column names of a table without reading it: parquet schema, CSV header, first JSON line."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq
            return list(pq.read_schema(path).names)
        if suffix == ".csv":
            return list(pd.read_csv(path, nrows=0).columns)
        if suffix in (".jsonl", ".json"):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        first = json.loads(line)
                        return list(first) if isinstance(first, dict) else []
            return []
    except (OSError, ValueError) as err:
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    raise BoundaryError(f"{path}: unknown file type {path.suffix!r} (use parquet, csv or jsonl)")


def read_jsonl(path: Path, fields: dict) -> pd.DataFrame:
    """Selected fields of a JSONL file, {name: pyarrow type or None (any)}; absent fields come
    back as columns of nulls. Arrow's multithreaded reader first (about 1 s per million
    short rows), line-by-line json where the file's types vary between lines."""
    import pyarrow as pa
    import pyarrow.json as pj

    typed = {k: t for k, t in fields.items() if t is not None}
    try:
        table = pj.read_json(path, read_options=pj.ReadOptions(block_size=1 << 24),
                             parse_options=pj.ParseOptions(explicit_schema=pa.schema(typed),
                                                           unexpected_field_behavior="ignore"
                                                           if len(typed) == len(fields) else "infer"))
        df = table.select([c for c in table.column_names if c in fields]).to_pandas(types_mapper=_strings)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        rows = []
        try:
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if line.strip():
                        obj = json.loads(line)
                        rows.append({k: obj.get(k) for k in fields})
        except (OSError, ValueError) as err:
            raise BoundaryError(f"{path}: line {i}: not valid JSON ({err})") from None
        df = pd.DataFrame(rows, columns=list(fields))
    for k in fields:
        if k not in df:
            df[k] = None
    return df


def _strings(dtype):
    import pyarrow as pa
    return pd.StringDtype("pyarrow") if dtype in (pa.string(), pa.large_string()) else None


def read_any(path: Path, columns) -> pd.DataFrame:
    """The named columns that exist, of a parquet, CSV or JSONL table."""
    have = [c for c in columns_of(path) if c in columns]
    if path.suffix.lower() == ".parquet":
        try:
            return pd.read_parquet(path, columns=have)
        except Exception as err:  # corrupt file
            raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if path.suffix.lower() in (".jsonl", ".json"):
        return read_jsonl(path, {c: None for c in have})
    return read_table(path)[have]


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


# ----------------------------------------------------------------------------- prompts

def text_id(text: str) -> str:
    """A stable prompt key from prompt text: the same prompt gets the same id in every file."""
    return "h" + hashlib.sha1(str(text).encode("utf-8")).hexdigest()[:12]


def key_by_text(samples: pd.DataFrame, path) -> pd.DataFrame:
    """prompt_id from the prompt text where the tool gave none (factorised: hashed once per prompt)."""
    if samples["prompt_id"].notna().all():
        return samples
    if samples["prompt"].isna().any():
        raise BoundaryError(f"{path}: samples without a prompt id or prompt text")
    codes, uniques = pd.factorize(samples["prompt"])
    ids = np.array([text_id(t) for t in uniques], dtype=object)
    return samples.assign(prompt_id=ids[codes])


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


# ----------------------------------------------------------------------------- gold

def chat_text(prompt) -> str:
    """The user's text of a chat-message prompt (the last user turn), or the prompt itself."""
    if isinstance(prompt, str):
        return prompt
    turns = [m for m in list(prompt) if isinstance(m, dict)]
    users = [m.get("content", "") for m in turns if m.get("role") == "user"]
    return str(users[-1] if users else (turns[-1].get("content", "") if turns else prompt))


def gold_of_generation(df: pd.DataFrame) -> pd.DataFrame:
    """prompt_id, problem, answer of a verl dataset / main_generation parquet (here, not in
    verl.py: a verl dataset is also a gold file for every reader)."""
    index = [e.get("index") if isinstance(e, dict) else None for e in df["extra_info"]] \
        if "extra_info" in df else [None] * len(df)
    problem = [chat_text(p) for p in df["prompt"]]
    ids = [str(i) if i is not None else None for i in index]
    answer = [r.get("ground_truth") if isinstance(r, dict) else None for r in df["reward_model"]] \
        if "reward_model" in df else [None] * len(df)
    return pd.DataFrame({"prompt_id": ids, "problem": problem, "answer": answer})


def gold_table(path) -> pd.DataFrame:
    """A gold-answer table: `answer` with prompt_id and/or problem text, or a verl dataset
    parquet (reward_model.ground_truth, prompt messages, extra_info.index)."""
    path = Path(path)
    if path.exists() and path.suffix.lower() == ".parquet" and "answer" not in columns_of(path) \
            and "reward_model" in columns_of(path):
        gold = gold_of_generation(pd.read_parquet(path, columns=[c for c in ("prompt", "reward_model", "extra_info")
                                                                 if c in columns_of(path)]))
        if gold["prompt_id"].isna().any():
            gold = gold.drop(columns="prompt_id")
        return gold
    return read_table(path, ["answer"])


class Grader:
    """Re-grades completions with the project's verifier against a gold-answer file, and keys
    prompts by that file's prompt_id.

    The gold file (parquet, CSV or JSONL) has `answer` and `prompt_id` and/or the problem text
    (`problem` or `prompt`; the pipeline's splits/*.parquet have all three). A sample keeps its
    prompt_id when the gold file has it; otherwise its prompt text is matched to a gold problem:
    equal text, else the gold problem found in the prompt that ends last (few-shot examples
    come earlier), the longest where several end there (not one nested in another).
    """

    def __init__(self, path, extractor: str = "boxed", timeout: int = 5, workers: int = 2, regrade: bool = True):
        from boundary.tasks.verify import EXTRACTORS

        if extractor not in EXTRACTORS:
            raise BoundaryError(f"--extractor {extractor}: expected one of {', '.join(EXTRACTORS)}")
        if int(timeout) < 1 or int(workers) < 1:
            raise BoundaryError(f"--verify-timeout {timeout} / --verify-workers {workers}: both must be >= 1")
        gold = gold_table(path)
        texts = [c for c in ("problem", "prompt") if c in gold.columns]
        if "prompt_id" not in gold.columns and not texts:
            raise BoundaryError(f"{path}: needs prompt_id or problem text (problem or prompt) beside answer")
        if "prompt_id" not in gold.columns:
            gold["prompt_id"] = [text_id(t) for t in gold[texts[0]]]
        gold["prompt_id"] = gold["prompt_id"].astype(str)
        if gold["prompt_id"].duplicated().any():
            raise BoundaryError(f"{path}: duplicate prompt_id {gold.loc[gold['prompt_id'].duplicated(), 'prompt_id'].iloc[0]}")
        if gold["answer"].isna().any():
            raise BoundaryError(f"{path}: empty answer for prompt_id {gold.loc[gold['answer'].isna(), 'prompt_id'].iloc[0]}")
        self.path, self.extractor, self.regrade = path, extractor, regrade
        self.timeout, self.workers = timeout, workers
        self.answers = dict(zip(gold["prompt_id"], gold["answer"].astype(str)))
        self.problems = dict(zip(gold["prompt_id"], gold[texts[0]].astype(str))) if texts else {}
        self.by_text = {}
        for col in texts:
            for pid, text in zip(gold["prompt_id"], gold[col].astype(str)):
                self.by_text.setdefault(text.strip(), pid)
        self._verifier = None

    def match(self, text: str) -> str | None:
        text = str(text)
        exact = self.by_text.get(text.strip())
        if exact is not None:
            return exact
        found = [(text.rfind(problem) + len(problem), len(problem), pid) for problem, pid in self.by_text.items()
                 if problem and problem in text]  # ends last, then longest: not one nested in another
        return max(found)[2] if found else None

    def key(self, samples: pd.DataFrame, path) -> pd.DataFrame:
        """The samples with the gold file's prompt_id; a prompt it cannot place is an error."""
        ids = samples["prompt_id"]
        if ids.notna().all() and ids.astype(str).isin(self.answers.keys()).all():
            return samples.assign(prompt_id=ids.astype(str))
        if samples["prompt"].isna().any():
            missing = sorted(set(ids.astype(str)) - set(self.answers))
            raise BoundaryError(f"{path}: {len(missing)} prompt_id(s) not in {self.path} (e.g. {missing[0]})")
        codes, uniques = pd.factorize(samples["prompt"])
        matched = [self.match(t) for t in uniques]
        lost = [t for t, m in zip(uniques, matched) if m is None]
        if lost:
            raise BoundaryError(f"{path}: {len(lost)} prompt(s) match no problem of {self.path} "
                                f"(e.g. {str(lost[0])[:60]!r})")
        return samples.assign(prompt_id=np.asarray(matched, dtype=object)[codes])

    def grade(self, samples: pd.DataFrame, path) -> pd.DataFrame:
        """Extract each completion's answer and verify it against the gold answer."""
        from boundary.tasks.verify import Verifier, score_samples

        if samples["completion"].isna().any():
            raise BoundaryError(f"{path}: samples without completion text cannot be re-graded")
        if self._verifier is None:
            self._verifier = Verifier(timeout=self.timeout, workers=self.workers)
        frame = pd.DataFrame({"prompt_id": samples["prompt_id"].to_numpy(),
                              "completion": samples["completion"].astype(str).to_numpy()})
        frame = score_samples(frame, self.answers, self.extractor, self._verifier)
        return samples.assign(answer=frame["answer"].to_numpy(), correct=np.asarray(frame["correct"], bool))

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None


# ----------------------------------------------------------------------------- counts

def counts_from_samples(samples: pd.DataFrame, path) -> pd.DataFrame:
    """Per-prompt n (samples) and c (positives), mean entropy, and the distinct normalized
    answers of the positives (where the samples carry answers): the counts-file columns."""
    if samples.empty:
        raise BoundaryError(f"{path}: no samples")
    if samples["correct"].isna().any():
        raise BoundaryError(f"{path}: some samples carry no verdict (correct, reward or score); "
                            "give --gold FILE to verify them")
    correct = samples["correct"].astype(bool).to_numpy()
    keys = samples["prompt_id"].astype(str)
    g = pd.DataFrame({"prompt_id": keys.to_numpy(), "c": correct,
                      "entropy": pd.to_numeric(samples["entropy"], errors="coerce").to_numpy()}).groupby(
        "prompt_id", sort=True)
    out = pd.DataFrame({"n": g.size(), "c": g["c"].sum().astype(np.int64), "entropy": g["entropy"].mean()})
    answers = samples["answer"]
    if answers.notna().any():
        pos = pd.DataFrame({"prompt_id": keys[correct].to_numpy(), "answer": answers[correct].astype(str).to_numpy()})
        distinct = pos[pos["answer"] != ""].drop_duplicates().groupby("prompt_id")["answer"].size()
        out["unique_positives"] = distinct.reindex(out.index).fillna(0).astype(float)
    else:
        out["unique_positives"] = np.nan
    out = out.reset_index()
    return out[["prompt_id", "n", "c", "entropy", "unique_positives"]]


def problems_of(samples: pd.DataFrame) -> dict:
    """prompt_id -> prompt text (the first seen), where the samples carry text."""
    s = samples[samples["prompt"].notna()].drop_duplicates("prompt_id")
    return dict(zip(s["prompt_id"].astype(str), s["prompt"].astype(str)))
