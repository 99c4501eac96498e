"""Readers for what RLVR tools write, one module per format, each ending in per-prompt counts.

    counts     per-prompt counts: prompt_id, n, c [, entropy, answers | unique_positives,
               modal_answer, modal_share]
    samples    one row per completion (or per prompt with list columns): a prompt id or text,
               completion, correct | reward | score; vLLM / TRL users' tables, the pipeline's
               eval/*/samples.parquet
    verl       verl's validation generation dumps ({step}.jsonl: input, output, score, step,
               ...) and main_generation parquet (responses lists)
    lighteval  lighteval's details parquet (doc / model_response / metric of 0.11 to 0.13,
               or the flat columns of 0.10)
    openrlhf   OpenRLHF batch-inference JSONL (input, output [, reward]), v0.9.5 and earlier

`read(path, format, options)` detects the format from the column names when asked for
"auto", groups samples into n and c per prompt, and keeps the samples and prompt texts for
the HTML page; `path` may name a verl dump folder's step, DIR@step=N. Each run is keyed by
the tool's own prompt ids, else by its prompt text (row numbers such as lighteval's doc.id
or verl's extra_info.index are not ids). With a `Grader` (a gold-answer file, readers.gold)
every sample-level input is keyed by the gold file's prompt_id, matched by problem, and,
unless it only keys, re-graded with the project's verifier. `pair` then keys every input of
one diagnosis alike (readers.pairing). A column or metric key holding verl's best@N or a max
over n is warned about.

May import: core, tasks (the verifier, for re-grading).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from boundary.core.errors import BoundaryError, warn
from boundary.core.passk import horizon
from boundary.readers import counts as counts_format
from boundary.readers import lighteval, openrlhf, verl
from boundary.readers import samples as samples_format
from boundary.readers.common import biased_columns, columns_of, counts_from_samples, problems_of, warn_biased
from boundary.readers.gold import VERIFY, Grader
from boundary.readers.pairing import pair as pair  # re-exported: diagnose keys its runs alike
from boundary.readers.problems import key_by_text

FORMATS = ("counts", "samples", "verl", "lighteval", "openrlhf")
STEP = re.compile(r"^(?P<path>.+)@step=(?P<step>\d+)$")


@dataclass
class Options:
    reward_threshold: float = 0.5   # reward/score above it counts as correct
    step: int | None = None         # verl: which {step}.jsonl of a dump folder (default: latest)
    grader: Grader | None = None    # gold-answer file: key prompts by it and re-grade samples
    extractor: str = VERIFY["extractor"]  # for a verl main_generation file graded on its own ground truth
    verify_timeout: int = VERIFY["timeout"]
    verify_workers: int = VERIFY["workers"]


@dataclass
class RunData:
    counts: pd.DataFrame                      # validated, as readers.counts.load_counts returns
    format: str
    samples: pd.DataFrame | None = None       # prompt_id, prompt, completion, correct, answer, entropy
    problems: dict = field(default_factory=dict)  # prompt_id -> problem or prompt text
    keyed_by: str = "prompt_id"               # prompt_id (the tool's ids), gold (--gold's ids) or text

    def rekeyed(self, ids: dict, problems: dict) -> RunData:
        """The same run under other prompt ids (old -> new), with those ids' problem texts."""
        counts = self.counts.assign(prompt_id=self.counts["prompt_id"].map(ids))
        samples = None if self.samples is None else self.samples.assign(
            prompt_id=self.samples["prompt_id"].astype(str).map(ids))
        return RunData(counts, self.format, samples, {p: problems[p] for p in counts["prompt_id"]}, self.keyed_by)


def input_path(spec) -> tuple[Path, int | None]:
    """A path, or DIR@step=N: the verl dump of step N in that folder (each input its own step)."""
    path = Path(spec)
    m = STEP.match(str(spec))
    if path.exists() or not m:
        return path, None
    return Path(m["path"]), int(m["step"])


def detect(path: Path) -> str:
    """The format of a file (or of a folder of verl dumps), from its column names."""
    if path.is_dir():
        return "verl"
    names = columns_of(path)
    if counts_format.looks_like(names):
        return "counts"
    if lighteval.looks_like(names):
        return "lighteval"
    if verl.looks_like(names) or verl.looks_like_generation(names):
        return "verl"
    if openrlhf.looks_like(names):
        return "openrlhf"
    if samples_format.looks_like(names):
        return "samples"
    found = biased_columns(names)
    if found:
        name, what = found[0]
        raise BoundaryError(f"{path}: holds {name!r}, {what}: an aggregate, not per-prompt counts or samples; "
                            f"boundary needs n and c per prompt or the samples themselves")
    raise BoundaryError(f"{path}: format not recognised from its columns ({', '.join(map(str, names[:12]))}); "
                        f"expected one of {', '.join(FORMATS)} (see docs/how-to/other_tools_formats.md)")


def read(path, fmt: str = "auto", options: Options | None = None) -> RunData:
    """One run's per-prompt counts (and samples, where the file has them) from any format.
    `path` may select a verl dump folder's step as DIR@step=N (else options.step, else the latest)."""
    options = options or Options()
    path, step = input_path(path)
    if not path.exists():
        raise BoundaryError(f"{path}: file not found")
    if step is not None:
        if not path.is_dir():
            raise BoundaryError(f"{path}@step={step}: @step= selects a step of a folder of verl dumps; {path} is a file")
        options = replace(options, step=step)
    if fmt == "auto":
        fmt = detect(path)
    if fmt not in FORMATS:
        raise BoundaryError(f"--format {fmt}: expected auto or one of {', '.join(FORMATS)}")
    if fmt != "counts" and not path.is_dir():  # counts: load_counts warns
        warn_biased(columns_of(path), path)
    if fmt == "counts":
        problems = {}
        counts = counts_format.load_counts(path, problems)
        if options.grader is not None:
            problems.update({p: options.grader.problems[p] for p in counts["prompt_id"] if p in options.grader.problems})
        warn_mixed_n(counts, path)
        return RunData(counts, fmt, None, problems)
    grader, own_gold, tool_counts = options.grader, False, None
    if fmt == "samples":
        samples = samples_format.read(path, options.reward_threshold)
    elif fmt == "openrlhf":
        samples = openrlhf.read(path, options.reward_threshold)
    elif fmt == "lighteval":
        samples, tool_counts = lighteval.read(path, graded=grader is not None and grader.regrade)
    elif path.is_dir() or verl.looks_like(columns_of(path)):
        samples = verl.read(path, options.reward_threshold, options.step)
    else:  # main_generation parquet: no verdicts; its own ground truth unless --gold
        samples = verl.read_generation(path)
        if grader is None:
            grader, own_gold = Grader(path, options.extractor, options.verify_timeout, options.verify_workers), True
    own_ids = bool(samples["prompt_id"].notna().all())
    keyed_by = "gold" if grader is not None and not own_gold else "prompt_id" if own_ids else "text"
    keyed = (lambda f: grader.key(f, path, own_ids)) if grader is not None else (lambda f: key_by_text(f, path))
    try:
        samples = keyed(samples)
        if grader is not None and (grader.regrade or own_gold):
            samples, tool_counts = grader.grade(samples, path, scored=fmt == "lighteval"), None
        if tool_counts is not None:  # lighteval, not re-graded: n and c from the documents' metrics
            pooled = keyed(tool_counts).groupby("prompt_id", sort=True)[["n", "c"]].sum().reset_index()  # a query twice: pooled
            counts = counts_format.counts_frame(pooled, path)
        else:
            counts = counts_format.counts_frame(counts_from_samples(samples, path), path)
    finally:
        if own_gold:
            grader.close()
    problems = problems_of(samples)
    if keyed_by == "gold":  # the gold file's problem text rather than the templated prompt
        problems.update({p: grader.problems[p] for p in counts["prompt_id"] if p in grader.problems})
    warn_mixed_n(counts, path)
    return RunData(counts, fmt, samples, problems, keyed_by)


def warn_mixed_n(counts: pd.DataFrame, path) -> None:
    """One line per file whose prompts were sampled different numbers of times: each prompt's
    pass@k is estimated at its own n, and only the ks up to the smallest n are reported. A
    sequential file's n is its draws made; its cap is the n pass@k reaches (`passk.horizon`)."""
    n = pd.Series(horizon(counts))
    if len(n) and n.nunique() > 1:
        warn(f"{path}: n per prompt ranges from {int(n.min())} to {int(n.max())}: pass@k uses each prompt's own n, "
             f"and ks above {int(n.min())} are dropped")
