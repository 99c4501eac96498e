"""A gold-answer file (`--gold`): it keys every input's prompts by its own prompt_id and
re-grades their completions with the project's verifier.

The file (parquet, CSV or JSONL) has `answer` and `prompt_id` and/or the problem text
(`problem` or `prompt`; the pipeline's splits/*.parquet have all three), or is a verl dataset
parquet (reward_model.ground_truth, prompt messages; its extra_info.index is a row number, so
the problem text keys it). A prompt keeps its id where the input's ids are the tool's own
named ids and all are in the gold file, and its text (where it has one) then must hold that
id's problem, else the input is refused; otherwise its text is matched to a gold problem
(`problems.ProblemIndex`: a prompt asks the problem it contains, ending last).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.artifacts import blank_row, read_table
from boundary.core.errors import BoundaryError, warn
from boundary.core.settings import defaults
from boundary.readers import verl
from boundary.readers.common import columns_of
from boundary.readers.problems import ProblemIndex, field_texts, message_text, normalise, text_id

VERIFY = defaults("verify")  # re-grading as the pipeline verifies (the schema's defaults)


def gold_table(path) -> pd.DataFrame:
    """prompt_id (where the file has real ids), problem text, answer."""
    path = Path(path)
    if path.exists() and path.suffix.lower() == ".parquet" and "answer" not in columns_of(path) \
            and "reward_model" in columns_of(path):
        names = columns_of(path)
        gold = verl.gold_of_generation(pd.read_parquet(path, columns=[c for c in ("prompt", "reward_model")
                                                                      if c in names]))
        return gold.drop(columns="prompt_id")  # extra_info.index: a row number, not an id
    return read_table(path, ["answer"], text=("answer", "problem", "prompt"))


class Grader:
    """Keys prompts by a gold file's prompt_id and re-grades completions against its answers."""

    def __init__(self, path, extractor: str = VERIFY["extractor"], timeout: int = VERIFY["timeout"],
                 workers: int = VERIFY["workers"], regrade: bool = True):
        from boundary.tasks.verify import EXTRACTORS

        if extractor not in EXTRACTORS:
            raise BoundaryError(f"--extractor {extractor}: expected one of {', '.join(EXTRACTORS)}")
        if int(timeout) < 1 or int(workers) < 1:
            raise BoundaryError(f"--verify-timeout {timeout} / --verify-workers {workers}: both must be >= 1")
        gold = gold_table(path)
        gold["answer"] = field_texts(gold["answer"], "answer", path)
        texts = [c for c in ("problem", "prompt") if c in gold.columns]
        for col in texts:  # chat messages: the question they ask
            gold[col] = gold[col].map(message_text)
        if "prompt_id" not in gold.columns and not texts:
            raise BoundaryError(f"{path}: needs prompt_id or problem text (problem or prompt) beside answer")
        by_text = "prompt_id" not in gold.columns
        blank = blank_row(gold[texts[0]]) if by_text else None
        if blank is not None:
            raise BoundaryError(f"{path}: blank {texts[0]} in row {blank} (without prompt_id the problem text "
                                "keys the answer)")
        if by_text:  # a problem asked twice with one answer is one prompt (the readers pool its samples)
            gold["prompt_id"] = [text_id(t) for t in gold[texts[0]]]
            gold = gold.drop_duplicates(["prompt_id", "answer"])
        gold["prompt_id"] = gold["prompt_id"].astype(str)
        if gold["prompt_id"].duplicated().any():
            raise BoundaryError(f"{path}: duplicate prompt_id {gold.loc[gold['prompt_id'].duplicated(), 'prompt_id'].iloc[0]}"
                                + (" (the same problem text with two answers)" if by_text else ""))
        self.path, self.extractor, self.regrade = path, extractor, regrade
        self.timeout, self.workers = timeout, workers
        self.answers = dict(zip(gold["prompt_id"], gold["answer"]))
        self.problems = dict(zip(gold["prompt_id"], gold[texts[0]].astype(str))) if texts else {}
        self.index = ProblemIndex({**{pid: t for col in texts[1:] for pid, t in zip(gold["prompt_id"], gold[col])},
                                   **self.problems})
        self._verifier = None

    def match(self, text: str) -> str | None:
        return self.index.match(text)

    def key(self, samples: pd.DataFrame, path, own_ids: bool = True) -> pd.DataFrame:
        """The samples with the gold file's prompt_id; a prompt it cannot place is an error.
        `own_ids`: the samples' prompt_ids are the tool's named ids (not row numbers)."""
        ids = samples["prompt_id"]
        texts = samples["prompt"].notna().all()
        if own_ids and ids.notna().all() and ids.astype(str).isin(self.answers.keys()).all():
            keyed = samples.assign(prompt_id=ids.astype(str))
            if texts:
                self._check_texts(keyed, path)
            return keyed
        if not texts:
            missing = sorted(set(ids.astype(str)) - set(self.answers))
            raise BoundaryError(f"{path}: {len(missing) or len(set(ids))} prompt_id(s) not in {self.path} "
                                f"(e.g. {(missing or sorted(set(ids.astype(str))))[0]}), and no prompt text to "
                                f"match them by")
        codes, uniques = pd.factorize(samples["prompt"])
        matched = [self.match(t) for t in uniques]
        lost = [t for t, m in zip(uniques, matched) if m is None]
        if lost:
            raise BoundaryError(f"{path}: {len(lost)} prompt(s) match no problem of {self.path} "
                                f"(e.g. {str(lost[0])[:60]!r})")
        return samples.assign(prompt_id=np.asarray(matched, dtype=object)[codes])

    def _check_texts(self, keyed: pd.DataFrame, path) -> None:
        """Under a shared id, the prompt must hold the gold problem: else the ids number other
        problems (row numbers of another file) and pairing by them would grade against the
        wrong answers."""
        if not self.problems:
            return
        pairs = keyed[["prompt_id", "prompt"]].drop_duplicates()
        for pid, prompt in zip(pairs["prompt_id"], pairs["prompt"]):
            if self.index.match(prompt) != pid and normalise(self.problems[pid]) not in normalise(prompt):
                raise BoundaryError(f"{path}: prompt_id {pid} asks {str(prompt)[:50]!r}, but {self.path} has "
                                    f"{self.problems[pid][:50]!r} under that id; the ids number different "
                                    f"problems: drop the id column or fix the gold file")

    def grade(self, samples: pd.DataFrame, path, scored: bool = False) -> pd.DataFrame:
        """Extract each completion's answer and verify it against the gold answer. Refused in
        one line naming the file and the options that fix it when the extractor found no
        answer in most completions (every count would read 0); one warning when the file's
        own verdicts disagree with the re-grade on most samples. `scored`: the file carries
        verdicts the samples do not (lighteval's per-document metrics), so --keep-scores is
        a way out."""
        from boundary.tasks.verify import EXTRACTORS, Verifier, score_samples, unextracted_warning

        if samples["completion"].isna().any():
            raise BoundaryError(f"{path}: samples without completion text cannot be re-graded")
        if self._verifier is None:
            self._verifier = Verifier(timeout=self.timeout, workers=self.workers)
        frame = pd.DataFrame({"prompt_id": samples["prompt_id"].to_numpy(),
                              "completion": samples["completion"].astype(str).to_numpy()})
        frame = score_samples(frame, self.answers, self.extractor, self._verifier)
        own = samples["correct"]
        has_verdicts = len(own) > 0 and own.notna().all()  # per sample: compared with the re-grade below
        message = unextracted_warning(frame["answer"], self.extractor, path)
        if message:
            tail = normalise(frame.loc[frame["answer"] == "", "completion"].iloc[0])[-40:]
            others = " or ".join(f"--extractor {e}" for e in EXTRACTORS if e != self.extractor)
            keep = (" or keep the file's own verdicts with --keep-scores" if (has_verdicts or scored) and self.regrade
                    else "")
            raise BoundaryError(f"{message} (one ends {tail!r}); every answer it could not read would count as "
                                f"wrong: re-grade with {others}{keep}")
        correct = np.asarray(frame["correct"], bool)
        if has_verdicts and self.regrade:
            # Warned, not refused: re-grading is asked for because a tool's reward may not be
            # correctness (a format bonus, another threshold); the answers were read (above),
            # so the user decides which verdicts hold.
            theirs = own.astype(bool).to_numpy()
            differ = float((theirs != correct).mean())
            if differ > 0.5:
                warn(f"{path}: re-grading against {self.path} disagrees with the file's own verdicts on {differ:.0%} "
                     f"of {len(correct)} samples ({correct.mean():.0%} correct re-graded, {theirs.mean():.0%} by the "
                     f"file); the counts use the re-grade: check --extractor {self.extractor} against the answers, "
                     "or keep the file's verdicts with --keep-scores")
        return samples.assign(answer=frame["answer"].to_numpy(), correct=correct)

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None

