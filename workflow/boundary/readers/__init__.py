"""Readers for what RLVR tools write, one module per format, each ending in per-prompt counts.

    counts     per-prompt counts: prompt_id, n, c [, entropy, answers | unique_positives]
    samples    one row per completion (or per prompt with list columns): a prompt id or text,
               completion, correct | reward | score; vLLM / TRL users' tables, the pipeline's
               eval/*/samples.parquet
    verl       verl's validation generation dumps ({step}.jsonl: input, output, score, step,
               ...) and main_generation parquet (responses lists)
    lighteval  lighteval's details parquet (doc / model_response / metric, or the flat
               columns of lighteval < 0.11)
    openrlhf   OpenRLHF batch-inference JSONL (input, output [, reward])

`read(path, format, options)` detects the format from the column names when asked for
"auto", groups samples into n and c per prompt, and keeps the samples and prompt texts for
the HTML page. With a `Grader` (a gold-answer file) every sample-level input is keyed by the
gold file's prompt_id and, unless it only keys, re-graded with the project's verifier.
A column or metric key holding verl's best@N or a max over n is warned about.

May import: core, tasks (the verifier, for re-grading).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from boundary.core.errors import BoundaryError
from boundary.readers import counts as counts_format
from boundary.readers import lighteval, openrlhf, verl
from boundary.readers import samples as samples_format
from boundary.readers.common import (
    Grader,
    biased_columns,
    columns_of,
    counts_from_samples,
    key_by_text,
    problems_of,
    warn_biased,
)

FORMATS = ("counts", "samples", "verl", "lighteval", "openrlhf")


@dataclass
class Options:
    reward_threshold: float = 0.5   # reward/score above it counts as correct
    step: int | None = None         # verl: which {step}.jsonl of a dump folder (default: latest)
    grader: Grader | None = None    # gold-answer file: key prompts by it and re-grade samples
    extractor: str = "boxed"        # for a verl main_generation file graded on its own ground truth
    verify_timeout: int = 5
    verify_workers: int = 2


@dataclass
class RunData:
    counts: pd.DataFrame                      # validated, as readers.counts.load_counts returns
    format: str
    samples: pd.DataFrame | None = None       # prompt_id, prompt, completion, correct, answer, entropy
    problems: dict = field(default_factory=dict)  # prompt_id -> problem or prompt text


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
                        f"expected one of {', '.join(FORMATS)} (see docs/diagnostics.md)")


def read(path, fmt: str = "auto", options: Options | None = None) -> RunData:
    """One run's per-prompt counts (and samples, where the file has them) from any format."""
    options = options or Options()
    path = Path(path)
    if not path.exists():
        raise BoundaryError(f"{path}: file not found")
    if fmt == "auto":
        fmt = detect(path)
    if fmt not in FORMATS:
        raise BoundaryError(f"--format {fmt}: expected auto or one of {', '.join(FORMATS)}")
    if fmt != "counts" and not path.is_dir():  # counts: load_counts warns
        warn_biased(columns_of(path), path)
    if fmt == "counts":
        counts = counts_format.load_counts(path)
        problems = {}
        if options.grader is not None:
            problems = {p: options.grader.problems.get(p) for p in counts["prompt_id"] if p in options.grader.problems}
        return RunData(counts, fmt, None, problems)
    grader, own_gold, tool_counts = options.grader, False, None
    if fmt == "samples":
        samples = samples_format.read(path, options.reward_threshold)
    elif fmt == "openrlhf":
        samples = openrlhf.read(path, options.reward_threshold)
    elif fmt == "lighteval":
        samples, tool_counts = lighteval.read(path)
    elif path.is_dir() or verl.looks_like(columns_of(path)):
        samples = verl.read(path, options.reward_threshold, options.step)
    else:  # main_generation parquet: no verdicts; its own ground truth unless --gold
        samples = verl.read_generation(path)
        if grader is None:
            grader, own_gold = Grader(path, options.extractor, options.verify_timeout, options.verify_workers), True
    keyed = (lambda f: grader.key(f, path)) if grader is not None else (lambda f: key_by_text(f, path))
    try:
        samples = keyed(samples)
        if grader is not None and (grader.regrade or own_gold):
            samples, tool_counts = grader.grade(samples, path), None
        if tool_counts is not None:  # lighteval, not re-graded: c from the documents' metrics
            counts = counts_format.counts_frame(keyed(tool_counts)[["prompt_id", "n", "c"]], path)
        else:
            counts = counts_format.counts_frame(counts_from_samples(samples, path), path)
    finally:
        if own_gold:
            grader.close()
    problems = problems_of(samples)
    if grader is not None:  # the gold file's problem text rather than the templated prompt
        problems.update({p: grader.problems[p] for p in counts["prompt_id"] if p in grader.problems})
    return RunData(counts, fmt, samples, problems)
