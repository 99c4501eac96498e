"""Prompt-level diagnosis of an RLVR run against its base: where did pass@k move, and why.

Everything the paper reports about a trained policy comes from per-prompt counts files
(prompt_id, n, c [, entropy, answers | unique_positives, modal_answer, modal_share]) of the base
and of each trained (method, seed), plus regime labels from an independent base calibration.
All metrics are defined in docs/reference/metrics.md; in short, per (method, seed, regime):

    passk@k          mean over prompts of the unbiased per-prompt pass@k
    delta_passk@k    mean over prompts of (trained - base) pass@k, same prompts
    delta_cov        delta_passk at the largest k (the paper's pass@256 trained - base)
    base_solved, solved, lost, gained   prompts with c > 0 under base / trained; lost =
                     base-solved and trained-unsolved ("solved" = at least one positive in n)
    entropy_retained mean trained entropy / mean base entropy over the regime's prompts
    unique_positives mean over prompts of the number of distinct verifier-positive
                     normalized answers (empty answers excluded)
    modal_share      mean over prompts of the share of the n samples that give the prompt's
                     most common non-empty answer (NaN where the counts do not carry it)
    lost_significant lost prompts whose one-sided Fisher exact p < 1 - level; lost_null the
                     lost count expected if nothing changed; lost_floor the 0/n bound on p

The base may be evaluated several times (independent draws): their counts are pooled per
prompt (`stats.pool_counts`), its pass@k is the mean of the draws' estimates
(`_base_passk_over_draws`), and every Δ's seed-level interval adds the base's variance from the
spread of its draws (`stats.with_reference_noise`, Welch). Prompts that share structure carry
a cluster id; the bootstrap then redraws whole clusters (`stats.resample_counts`). Prompts may
carry a skill label (a subject, a level): every metric is then also summarised per skill, to
show which skills lose coverage.

plus the attribution of Δpass@k to regimes and transition cells, the crossover k* and the
area between the curves over log k (attribution.py), with per-prompt Beta-Binomial intervals.

`boundary diagnose` runs this on what any trainer or evaluator writes (verl, OpenRLHF, TRL,
lighteval, vLLM: see `boundary.readers`); the pipeline's `boundary report` calls the same
`analyse` on its own eval artifacts.

CLI:
    boundary diagnose --base BASE [--base BASE2 ...] --trained NAME:SEED=PATH [...] [--calibration CAL]
                      [--clusters FILE] [--skills FILE]
                      [--mask NAME=PATH ...] [--pair A B] [--labels NAME=LABEL ...]
                      [--ks 1,4,16,64,256]
                      [--easy 0.6 --boundary 0.1 --coverage-k 256 --coverage-min 0.4]
                      [--bins 0,0.01,...,1] [--resamples 10000] [--seed 0] [--no-figures]
                      [--format auto|counts|samples|verl|lighteval|openrlhf] [--gold FILE
                      [--keep-scores] [--extractor boxed] [--verify-timeout 5] [--verify-workers 2]]
                      [--reward-threshold 0.5] [--step N] [--level 0.95] [--prior fit|jeffreys]
                      --out DIR
    Any PATH may be a verl dump folder's step, DIR@step=N (e.g. --base dumps@step=0
    --trained grpo:0=dumps@step=500); inputs of different tools pair by problem text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from boundary import readers
from boundary.analysis import label_reliability as rl
from boundary.analysis import regimes as rg
from boundary.analysis import verdict
from boundary.analysis.attribution import Attribution, cells
from boundary.analysis.stats import (
    bootstrap_blocks,
    bootstrap_means,
    credible_interval,
    fit_beta_binomial,
    lost_p_value,
    paired,
    percentile_interval,
    pool_counts,
    summarize,
    with_reference_noise,
    zero_predictive,
    zero_upper_bound,
)
from boundary.core import settings
from boundary.core.artifacts import atomic_dir, output_folder, read_table, write_table
from boundary.core.errors import BoundaryError, warn
from boundary.core.names import BASE
from boundary.core.passk import DEFAULT_KS, estimate, horizon, modal_answers, pass_at_k_column, usable_ks
from boundary.readers.problems import named, snippet
from boundary.training.gate import read_mask

# The report's and the verifier's defaults (the schema's), for the options they share.
REPORT, VERIFY = settings.defaults("report"), settings.defaults("verify")
OWNER = "boundary diagnose"
ALL = "all"
UNLABELLED = "(no label)"  # a prompt the skill labels leave out
RUN_KEYS = ["method", "seed"]
RELIABILITY = ("n", "c", "label_prob", "flip_prob")  # regimes.csv's columns beside the label, where known
CALIBRATION = ("calibration", 0)  # the calibration's place among the inputs while they are paired


# ----------------------------------------------------------------------------- inputs

def dump_steps(folder: Path) -> list[int]:
    """The steps of a folder of verl dumps ({step}.jsonl)."""
    return sorted(int(p.stem) for p in folder.glob("*.jsonl") if p.stem.isdigit())


def resolved(spec: str, step: int | None) -> tuple[Path, int | None, bool]:
    """The file an input reads, its dump step (folders of verl dumps) and whether the spec
    named the step itself (DIR@step=N), before anything is read."""
    from boundary.readers.verl import dump_file

    path, own = readers.input_path(spec)
    if not path.is_dir():
        return path, None, False
    file = dump_file(path, own if own is not None else step)
    return file, int(file.stem), own is not None


def check_not_base(bases: list[str], trained: list[str], step: int | None) -> None:
    """A trained input that reads the base's own file (and step) is refused, naming the
    `@step=` (or file) the user probably meant: a folder of verl dumps read twice at its latest
    step, or the same file given twice."""
    base_files = {}
    for spec in bases:
        if readers.input_path(spec)[0].exists():
            file, base_step, named = resolved(spec, step)
            base_files[file.resolve()] = (spec, base_step, named)
    for spec in trained:
        path = readers.input_path(spec.partition("=")[2])[0]
        if not path.exists():
            continue
        file, run_step, named = resolved(spec.partition("=")[2], step)
        if file.resolve() not in base_files:
            continue
        base_spec, base_step, base_named = base_files[file.resolve()]
        head = f"--trained {spec}: reads {file}, the same file as --base {base_spec}"
        if run_step is None:
            raise BoundaryError(f"{head}; a trained run is its policy's own evaluation, another file")
        folder, steps = file.parent, dump_steps(file.parent)
        others = [s for s in steps if s != run_step]
        if not others:
            raise BoundaryError(f"{head} (step {run_step}, the only dump in {folder}); the trained policy's "
                                "evaluations are other steps' dumps")
        if named and not base_named:  # the base went to the latest step: it is the run's first
            meant = f"--base {folder}@step={min(steps)}"
        else:
            meant = f"--trained {spec.partition('=')[0]}={folder}@step={max(others)}"
        raise BoundaryError(f"{head} (step {run_step}); did you mean {meant}? ({folder} has steps "
                            f"{', '.join(map(str, steps))})")


def parse_run(spec: str) -> tuple[str, int, str]:
    """NAME:SEED=PATH -> (name, seed, path)."""
    head, sep, path = spec.partition("=")
    name, sep2, seed = head.rpartition(":")
    if not sep or not sep2 or not name or not path or not seed.lstrip("-").isdigit():
        raise BoundaryError(f"--trained {spec}: expected NAME:SEED=PATH")
    if name == BASE:
        raise BoundaryError(f"--trained {spec}: the name {BASE!r} is reserved for --base")
    return name, int(seed), path


# ----------------------------------------------------------------------------- per prompt

def prompt_frame(base: pd.DataFrame, runs: dict, regimes: pd.DataFrame | None,
                 ks, bins=rg.DEFAULT_BINS, names: dict | None = None, problems: dict | None = None,
                 skills=None) -> pd.DataFrame:
    """One row per (method, seed, prompt): counts, pass@k, and the base's values beside them.

    `runs` maps (method, seed) -> counts frame; the base enters as method 'base', seed 0.
    Every run must cover exactly the base's prompts (a transition needs both sides).
    `names` maps (method, seed) -> file name for error messages, `problems` prompt_id ->
    problem text (named beside an id in them), `skills` prompt_id -> skill label (column
    `skill`; UNLABELLED where it has none, 'all' everywhere without it).
    """
    names = names or {}
    base_ids = set(base["prompt_id"])
    frames = []
    for (method, seed), counts in [((BASE, 0), base), *runs.items()]:
        ids = set(counts["prompt_id"])
        where = names.get((method, seed), f"{method}:{seed}")
        if ids != base_ids:
            extra, missing = sorted(ids - base_ids), sorted(base_ids - ids)
            what = (f"{len(extra)} prompt_id(s) not in the base file (e.g. {named(extra[0], problems)})" if extra
                    else f"{len(missing)} base prompt_id(s) missing (e.g. {named(missing[0], problems)})")
            raise BoundaryError(f"{where}: {what}")
        optional = {c: np.nan for c in ("entropy", "unique_positives", "modal_share") if c not in counts}  # library callers
        if "modal_answer" not in counts:
            optional["modal_answer"] = None
        frames.append(counts.assign(method=method, seed=int(seed), **optional))
    f = pd.concat(frames, ignore_index=True)
    values = estimate(f, ks)  # full or sequential rows alike
    for j, k in enumerate(ks):
        f[pass_at_k_column(k)] = values[:, j]
    cols = ["prompt_id", "n", "c", "entropy", "unique_positives"] + [pass_at_k_column(k) for k in ks]
    b = f[(f["method"] == BASE)][cols].rename(columns={c: f"base_{c}" for c in cols[1:]})
    f = f.merge(b, on="prompt_id", how="left")
    if regimes is not None:
        r = regimes[["prompt_id", "p_base", "regime"]].assign(prompt_id=regimes["prompt_id"].astype(str))
        f = f.merge(r, on="prompt_id", how="left")
        f["stratum"] = rg.strata(f["p_base"], bins)
    else:
        f["p_base"], f["regime"], f["stratum"] = np.nan, ALL, ALL
    f["skill"] = ALL
    if skills is not None:
        labels = pd.Series(skills, dtype=object).astype(str)
        labels.index = labels.index.astype(str)
        f["skill"] = f["prompt_id"].astype(str).map(labels).fillna(UNLABELLED)
    return f


def check_regimes(base: pd.DataFrame, regimes: pd.DataFrame, where: str, problems: dict | None = None) -> None:
    missing = sorted(set(base["prompt_id"]) - set(regimes["prompt_id"].astype(str)))
    if missing:
        raise BoundaryError(f"{where}: no calibration for {len(missing)} prompt_id(s) of the base file "
                            f"(e.g. {named(missing[0], problems)})")


# ----------------------------------------------------------------------------- metrics

PRIORS = ("fit", "jeffreys")


def add_evidence(frame: pd.DataFrame, level: float = 0.95, prior: str = "fit") -> pd.DataFrame:
    """Per-prompt evidence beside the counts: a Beta-Binomial credible interval of p (prior
    fitted per run by marginal likelihood, or Jeffreys'), and for "lost" the one-sided Fisher
    exact p-value against the base's evaluation counts (lost_p), whether it is below 1 - level
    (lost_significant), the chance that a base-solved prompt shows 0 of n if nothing changed
    (lost_null, summed into the lost count that sampling alone produces: the Beta-Binomial
    predictive of 0 in n draws from the base's posterior of p), and the detection floor of a
    0/n prompt (lost_floor: p up to this is consistent with 0 of n at `level`)."""
    if prior not in PRIORS:
        raise BoundaryError(f"--prior {prior}: expected one of {', '.join(PRIORS)}")
    f = frame.copy()
    f["prior_a"], f["prior_b"] = 0.5, 0.5
    if prior == "fit":
        for _, idx in f.groupby(RUN_KEYS, sort=False).groups.items():
            a, b = fit_beta_binomial(f.loc[idx, "n"], f.loc[idx, "c"])
            f.loc[idx, "prior_a"], f.loc[idx, "prior_b"] = a, b
    keys = f[["n", "c", "prior_a", "prior_b"]]
    distinct = keys.drop_duplicates()  # a few hundred (n, c, prior) combinations, not every row
    lo, hi = credible_interval(distinct["n"], distinct["c"], distinct["prior_a"].to_numpy(),
                               distinct["prior_b"].to_numpy(), level)
    bounds = keys.merge(distinct.assign(p_low=lo, p_high=hi), on=list(keys.columns), how="left")
    f["p_low"], f["p_high"] = bounds["p_low"].to_numpy(), bounds["p_high"].to_numpy()
    trained = (f["method"] != BASE).to_numpy()
    base_solved = (f["base_c"] > 0).to_numpy() & trained
    lost = base_solved & (f["c"] == 0).to_numpy()
    f["lost_p"] = np.where(lost, lost_p_value(f["base_n"], f["base_c"], f["n"]), np.nan)
    f["lost_significant"] = lost & (f["lost_p"].to_numpy() < 1 - level)
    base_prior = f.loc[~trained, ["prior_a", "prior_b"]].iloc[0] if (~trained).any() else pd.Series([0.5, 0.5])
    f["lost_null"] = np.where(base_solved, zero_predictive(f["n"], f["base_n"], f["base_c"], *base_prior), 0.0)
    f["lost_floor"] = zero_upper_bound(f["n"], level)
    return f


PROMPT_COLUMNS = ["method", "seed", "prompt_id", "regime", "n", "c", "p_low", "p_high", "prior_a", "prior_b",
                  "base_n", "base_c", "cell", "lost_p", "lost_significant", "problem"]


def with_problems(table: pd.DataFrame, problems: dict | None) -> pd.DataFrame:
    """A per-prompt table with `problem` (the problem's text, cut by `snippet`; "" where the
    inputs carry none) beside its opaque prompt_id, as its last column."""
    problems = problems or {}
    text = {p: snippet(problems.get(p)) for p in table["prompt_id"].unique()}
    return table.assign(problem=table["prompt_id"].map(text).fillna(""))


def prompt_table(frame: pd.DataFrame, problems: dict | None = None) -> pd.DataFrame:
    """[prompts.csv] one row per (method, seed, prompt) with its evidence columns and problem."""
    f = frame.assign(cell=np.where(frame["method"] == BASE, pd.NA, cells(frame["base_c"], frame["c"])))
    return with_problems(f, problems)[PROMPT_COLUMNS].reset_index(drop=True)


def _with_all(frame: pd.DataFrame, group: str) -> pd.DataFrame:
    """The frame with every prompt also counted under group 'all'."""
    if (frame[group] == ALL).all():
        return frame
    return pd.concat([frame.assign(**{group: ALL}), frame], ignore_index=True)


def run_metrics(frame: pd.DataFrame, ks, group: str = "regime") -> pd.DataFrame:
    """Long table (method, seed, <group>, metric, k, value) of every per-run metric."""
    x = _with_all(frame, group)
    x = x.assign(solved=x["c"] > 0, base_solved=x["base_c"] > 0)
    x["lost"] = x["base_solved"] & ~x["solved"]
    x["gained"] = ~x["base_solved"] & x["solved"]
    spec = {}
    for k in ks:
        col = pass_at_k_column(k)
        x[f"delta_{k}"] = x[col] - x[f"base_{col}"]
        spec[f"passk@{k}"] = (col, "mean")
        spec[f"delta_passk@{k}"] = (f"delta_{k}", "mean")
    spec.update(n_prompts=("c", "size"), solved=("solved", "sum"), base_solved=("base_solved", "sum"),
                lost=("lost", "sum"), gained=("gained", "sum"), entropy=("entropy", "mean"),
                base_entropy=("base_entropy", "mean"), unique_positives=("unique_positives", "mean"),
                modal_share=("modal_share", "mean"))
    if "lost_significant" in x:  # add_evidence ran
        spec.update(lost_significant=("lost_significant", "sum"), lost_null=("lost_null", "sum"),
                    lost_floor=("lost_floor", "max"))
    agg = x.groupby(RUN_KEYS + [group], sort=False).agg(**spec)
    agg["entropy_retained"] = agg["entropy"] / agg["base_entropy"]
    agg["delta_cov"] = agg[f"delta_passk@{max(ks)}"]
    agg = agg.drop(columns="base_entropy")
    long = agg.reset_index().melt(id_vars=RUN_KEYS + [group], var_name="metric", value_name="value")
    parts = long["metric"].str.split("@", n=1, expand=True)
    long["metric"] = parts[0]
    long["k"] = pd.to_numeric(parts[1] if 1 in parts else None, errors="coerce").astype("Int64")
    long["value"] = long["value"].astype(float)
    return long[RUN_KEYS + [group, "metric", "k", "value"]]


def top_modal_answers(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run (method, seed): the answer that is the modal answer of the most prompts (`answer`,
    ties to the smallest text; None where no prompt has one), on how many prompts (`count`), of
    the run's `prompts`, and their share (NaN where the counts carry no modal answers: None,
    where "" is a prompt nobody answered). One constant answered to everything makes it 1."""
    code, runs = pd.factorize(pd.MultiIndex.from_frame(frame[RUN_KEYS]))
    measured = frame["modal_answer"].notna().to_numpy()
    top = modal_answers(code[measured], frame["modal_answer"].to_numpy()[measured]).reindex(range(len(runs)))
    out = pd.DataFrame(list(runs), columns=RUN_KEYS)
    out["prompts"] = np.bincount(code, minlength=len(runs))
    out["answer"] = pd.Series([a if isinstance(a, str) else None for a in top["modal_answer"]], dtype=object)
    out["count"] = top["modal_count"].fillna(0).to_numpy(np.int64)
    out["share"] = np.where(np.bincount(code, weights=measured, minlength=len(runs)) > 0,
                            out["count"] / out["prompts"], np.nan)
    return out


def transitions(frame: pd.DataFrame, group: str = "regime") -> pd.DataFrame:
    """Four-cell base/trained solved matrices per (method, seed, group), zero cells kept."""
    x = _with_all(frame[frame["method"] != BASE], group)
    x = x.assign(base_solved=x["base_c"] > 0, trained_solved=x["c"] > 0)
    keys = RUN_KEYS + [group]
    t = x.groupby(keys + ["base_solved", "trained_solved"], sort=False).size()
    runs = x[keys].drop_duplicates()
    cells = pd.DataFrame({"base_solved": [True, True, False, False], "trained_solved": [True, False, True, False]})
    full = runs.merge(cells, how="cross")
    out = full.merge(t.rename("count").reset_index(), on=list(full.columns), how="left")
    out["count"] = out["count"].fillna(0).astype(np.int64)
    return out


def _passk_wide(frame: pd.DataFrame, ks, group: str = "regime"):
    """Per-prompt pass@k series (prompts in sorted prompt_id order x (col, method, seed)), and
    each prompt's group label; labels None when there is no group split."""
    cols = [pass_at_k_column(k) for k in ks]
    wide = frame.pivot(index="prompt_id", columns=RUN_KEYS, values=cols)  # columns: (col, method, seed)
    groups = frame.drop_duplicates("prompt_id").set_index("prompt_id")[group].reindex(wide.index)
    return wide, groups, (groups.to_numpy() if (groups != ALL).any() else None)


def _bootstrap_rows(wide, groups, draws, level: float, group: str) -> pd.DataFrame:
    overall, per = draws
    base_of = np.array([wide.columns.get_loc((col, BASE, 0)) for col, _, _ in wide.columns])
    trained = np.array([method != BASE for _, method, _ in wide.columns])
    rows = []
    for g, d in [(ALL, overall), *per.items()]:
        sel = np.ones(len(groups), bool) if g == ALL else (groups == g).to_numpy()
        mean = wide.to_numpy()[sel].mean(axis=0)
        lo, hi = percentile_interval(d, level)
        dlo, dhi = percentile_interval(d - d[:, base_of], level)  # paired: same resamples
        for j, (col, method, s) in enumerate(wide.columns):
            k = int(col.rsplit("_", 1)[1])
            rows.append((method, s, g, "passk", k, mean[j], lo[j], hi[j]))
            if trained[j]:
                rows.append((method, s, g, "delta_passk", k, mean[j] - mean[base_of[j]], dlo[j], dhi[j]))
    out = pd.DataFrame(rows, columns=RUN_KEYS + [group, "metric", "k", "mean", "boot_low", "boot_high"])
    out["k"] = out["k"].astype("Int64")
    return out


def bootstrap_table(frame: pd.DataFrame, ks, resamples: int, seed: int, level: float = 0.95,
                    group: str = "regime") -> pd.DataFrame:
    """Prompt-bootstrap percentile intervals of passk and delta_passk per run and group.

    Prompts are resampled within groups (regimes), and every run shares each resample, so a
    run's delta_passk draw is its passk draw minus the base's on the same prompts."""
    wide, groups, labels = _passk_wide(frame, ks, group)
    return _bootstrap_rows(wide, groups, bootstrap_means(wide.to_numpy(), resamples, seed, labels), level, group)


def sensitivity(frame: pd.DataFrame, ks, grid, level: float = 0.95) -> pd.DataFrame:
    """Boundary findings re-derived under each nearby cutoff set: how many prompts are
    Boundary, and per method the seed summary of delta_cov, delta_passk at the smallest k,
    and lost prompts over them."""
    x = frame[frame["method"] != BASE]
    run_code, runs = pd.factorize(pd.MultiIndex.from_frame(x[RUN_KEYS]))
    k_lo, k_hi = min(ks), max(ks)
    quantities = {
        ("delta_cov", pd.NA): (x[pass_at_k_column(k_hi)] - x[f"base_{pass_at_k_column(k_hi)}"]).to_numpy(),
        ("delta_passk", k_lo): (x[pass_at_k_column(k_lo)] - x[f"base_{pass_at_k_column(k_lo)}"]).to_numpy(),
        ("lost", pd.NA): ((x["base_c"] > 0) & (x["c"] == 0)).to_numpy(float),
    }
    per_prompt = frame.drop_duplicates("prompt_id")[["prompt_id", "p_base"]]
    rows = []
    for i, th in enumerate(grid):
        ids = per_prompt.loc[rg.label(per_prompt["p_base"], th) == "Boundary", "prompt_id"]
        sel = x["prompt_id"].isin(ids).to_numpy()
        n_sel = np.bincount(run_code[sel], minlength=len(runs))
        for (metric, k), q in quantities.items():
            total = np.bincount(run_code[sel], weights=q[sel], minlength=len(runs))
            value = total if metric == "lost" else np.where(n_sel > 0, total / np.maximum(n_sel, 1), np.nan)
            for (method, seed), val in zip(runs, value):
                rows.append((i, th.easy, th.boundary, th.coverage_k, th.coverage_min, len(ids),
                             method, seed, metric, k, val))
    cols = ["variant", "easy", "boundary", "coverage_k", "coverage_min", "n_boundary"]
    long = pd.DataFrame(rows, columns=cols + ["method", "seed", "metric", "k", "value"])
    long["k"] = long["k"].astype("Int64")
    return summarize(long, cols + ["method", "metric", "k"], level=level)


def mask_metrics(masks: dict) -> pd.DataFrame:
    """Protected fraction, anchor/drop shares, mean anchor weight and flips per mask and epoch.

    protected = action != 'sharpen' (anchored or dropped); flip = action differs from the
    prompt's previous epoch (False at the first epoch). epoch <NA> rows pool all epochs;
    flip_rate there is flips over rows after the first epoch, G0 the median gate draw count
    and required_successes the fewest frozen-base successes of any sharpened row."""
    rows = []
    for name, m in masks.items():
        m = m.assign(protected=m["action"] != "sharpen", anchor=m["action"] == "anchor",
                     drop=m["action"] == "drop", flip=m["flip"].astype(bool))
        by = m.groupby("epoch").agg(protected_fraction=("protected", "mean"), anchor_fraction=("anchor", "mean"),
                                    drop_fraction=("drop", "mean"), mean_weight=("weight", "mean"),
                                    flips=("flip", "sum"), n_prompts=("prompt_id", "nunique"))
        later = m[m["epoch"] > m["epoch"].min()]
        pooled = pd.DataFrame(dict(protected_fraction=m["protected"].mean(), anchor_fraction=m["anchor"].mean(),
                                   drop_fraction=m["drop"].mean(), mean_weight=m["weight"].mean(),
                                   flips=m["flip"].sum(), n_prompts=m["prompt_id"].nunique(),
                                   flip_rate=later["flip"].mean() if len(later) else 0.0), index=[pd.NA])
        if {"successes", "G0"} <= set(m.columns):  # the gate as the mask shows it
            sharpened = m.loc[~m["protected"], "successes"]
            pooled["G0"] = float(m["G0"].median())
            pooled["required_successes"] = float(sharpened.min()) if len(sharpened) else np.nan
        both = pd.concat([by.assign(flip_rate=np.nan), pooled])
        both.index.name = "epoch"
        long = both.reset_index().melt(id_vars="epoch", var_name="metric", value_name="value")
        rows.append(long.assign(mask=name).dropna(subset=["value"]))
    if not rows:
        return pd.DataFrame(columns=["mask", "epoch", "metric", "value"])
    out = pd.concat(rows, ignore_index=True)
    out["epoch"] = out["epoch"].astype("Int64")
    out["value"] = out["value"].astype(float)
    return out[["mask", "epoch", "metric", "value"]]


MASK_COLUMNS = ("prompt_id", "epoch", "action", "weight", "flip")


def load_mask(path) -> pd.DataFrame:
    """A mask with its flips, for the masks table (training.gate.read_mask's rules)."""
    return read_mask(path, MASK_COLUMNS)


# ----------------------------------------------------------------------------- analysis

@dataclass
class Diagnosis:
    """Every table `diagnose` derives from one split's counts (csv names in brackets)."""

    ks: list
    regimes: pd.DataFrame | None   # [regimes.csv] prompt_id, p_base, regime (+ RELIABILITY where known)
    frame: pd.DataFrame            # per (method, seed, prompt), not written
    metrics: pd.DataFrame          # [metrics.csv] per seed: method, seed, regime, metric, k, value
    summary: pd.DataFrame          # [summary.csv] over seeds: method, metric, regime, k, mean, sd, ci
    transitions: pd.DataFrame      # [transitions.csv]
    bootstrap: pd.DataFrame        # [bootstrap.csv]
    strata: pd.DataFrame | None    # [strata.csv] summary by p_base stratum
    skills: pd.DataFrame | None    # [skills.csv] summary by skill label (prompts given one)
    group_metrics: dict            # per seed, as `metrics`, by "stratum" and by "skill" (those computed)
    sensitivity: pd.DataFrame | None  # [sensitivity.csv]
    pairs: pd.DataFrame | None = None  # [pairs.csv] seed-paired A - B
    masks: pd.DataFrame | None = None  # [masks.csv]
    attribution: pd.DataFrame | None = None  # [attribution.csv] Δpass@k and area by regime and cell
    crossover: pd.DataFrame | None = None    # [crossover.csv] k* with its interval
    curves: pd.DataFrame | None = None       # [curves.csv] base and trained pass@k at every k <= K
    prompts: pd.DataFrame | None = None      # [prompts.csv] per-prompt evidence
    level: float = REPORT["level"]
    base_draws: int = 1            # independent base evaluations pooled into the base's counts
    thresholds: rg.Thresholds | None = None
    bins: tuple = rg.DEFAULT_BINS
    problems: dict | None = None             # prompt_id -> problem text, where the inputs carry it
    regime_source: str = "frozen-base calibration"  # what the regime labels were computed from
    regime_notes: list | None = None         # regimes the calibration's n cannot populate (regimes.unpopulated)
    robust: pd.DataFrame | None = None       # [robust.csv] summary over the robust Boundary prompts (label_reliability.robust)

    @property
    def passk(self) -> pd.DataFrame:
        p = self.metrics[self.metrics["metric"] == "passk"]
        return p[["method", "seed", "regime", "k", "value"]].reset_index(drop=True)

    @property
    def top_answers(self) -> pd.DataFrame:
        return top_modal_answers(self.frame)

    def csv_tables(self) -> dict:
        out = {"passk": self.passk, "metrics": self.metrics, "summary": self.summary,
               "transitions": self.transitions, "bootstrap": self.bootstrap}
        if self.regimes is not None:
            cols = ["prompt_id", "p_base", "regime"] + [c for c in RELIABILITY if c in self.regimes]
            out["regimes"] = with_problems(self.regimes[cols], self.problems)
        for name in ("robust", "strata", "skills", "sensitivity", "pairs", "masks", "attribution", "crossover", "curves",
                     "prompts"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


DELTA_METRICS = ("delta_passk", "delta_cov")


def _base_passk_over_draws(frame: pd.DataFrame, draws: list, ks) -> pd.DataFrame:
    """The base's pass@k (its rows and every row's base_ column) as the mean over its draws of
    each draw's unbiased estimate, not the estimate from the pooled counts: both are unbiased,
    but against a policy evaluated at one draw's n the pooled one is smoother than the policy's
    (at k = n, a fraction against 0 or 1), and in simulation that skew put the prompt
    bootstrap's Δ interval above 0 in 9% of studies with nothing changed (1% with the mean;
    docs/reference/metrics.md). Counts (n, c; solved, lost) stay pooled."""
    f = frame.copy()
    is_base = (f["method"] == BASE).to_numpy()
    per_draw = [pd.DataFrame(estimate(d, ks), index=d["prompt_id"]) for d in draws]
    for j, k in enumerate(ks):
        col = pass_at_k_column(k)
        mean = pd.concat([d[j] for d in per_draw], axis=1).mean(axis=1)
        f.loc[is_base, col] = f.loc[is_base, "prompt_id"].map(mean).to_numpy()
        f[f"base_{col}"] = f["prompt_id"].map(mean).to_numpy()
    return f


def reference_draws(draws: list, regimes, ks, bins, group: str = "regime", skills=None) -> pd.DataFrame:
    """The base's value of every Δ metric per base draw (column `draw`): delta_passk@k is the
    draw's passk@k, delta_cov its passk at the largest k; per `group` (and `all`)."""
    rows = []
    for i, d in enumerate(draws):
        m = run_metrics(prompt_frame(d, {}, regimes, ks, bins, skills=skills), ks, group)
        p = m[m["metric"] == "passk"]
        rows += [p.assign(metric="delta_passk", draw=i),
                 p[p["k"] == max(ks)].assign(metric="delta_cov", k=pd.NA, draw=i)]
    out = pd.concat(rows, ignore_index=True)[[group, "metric", "k", "value", "draw"]]
    out["k"] = out["k"].astype("Int64")
    return out


def _with_base_noise(summary: pd.DataFrame, reference: pd.DataFrame | None, group: str, level: float):
    """Δ rows of trained methods with the base's noise in their interval (others as they are)."""
    if reference is None:
        return summary
    delta = (summary["method"] != BASE) & summary["metric"].isin(DELTA_METRICS)
    keys = ["metric", group, "k"]
    widened = with_reference_noise(summary[delta], reference, keys, level=level)
    rest = summary[~delta].assign(base_sd=np.nan, base_draws=0)
    return pd.concat([widened.set_index(summary.index[delta]), rest]).sort_index()


ONE_BASE_DRAW = ("one --base draw: the Δ intervals leave out the base's own sampling noise "
                 "(give --base twice: two independent evaluations)")


def prompt_labels(path, column: str) -> pd.Series:
    """{prompt_id: label} from a table of prompt_id and `column` (--clusters, --skills)."""
    table = read_table(path, ["prompt_id", column], ids=("prompt_id", column))
    ids = table["prompt_id"].astype(str)
    if ids.duplicated().any():
        raise BoundaryError(f"{path}: prompt_id {ids[ids.duplicated()].iloc[0]!r} is given twice")
    return table.set_index(ids)[column]


def cluster_labels(prompt_ids, clusters) -> np.ndarray | None:
    """One cluster id per prompt (in `prompt_ids` order) from a {prompt_id: cluster} mapping or
    Series; a prompt it lacks is its own cluster. None when there is no mapping."""
    if clusters is None:
        return None
    c = pd.Series(clusters, dtype=object)
    c.index = c.index.astype(str)
    ids = pd.Index(prompt_ids).astype(str)
    got = c.reindex(ids)
    own = "prompt:" + ids.to_series(index=ids)
    return got.where(got.notna(), own).astype(str).to_numpy()


def analyse(base: pd.DataFrame | list, runs: dict, regimes: pd.DataFrame | None = None, ks=DEFAULT_KS,
            resamples: int = REPORT["bootstrap"]["resamples"], boot_seed: int = REPORT["bootstrap"]["seed"],
            pairs=(), bins=rg.DEFAULT_BINS, masks: dict | None = None, names: dict | None = None,
            level: float = REPORT["level"], prior: str = "fit", attribution: bool = True,
            problems: dict | None = None, regime_source: str = "frozen-base calibration", clusters=None,
            skills=None) -> Diagnosis:
    """Diagnose trained runs against the base on one split (regimes None: no regime split).
    `base` is one counts frame or a list of independent draws (pooled; their spread widens
    every Δ's seed interval); `clusters` maps prompt_id -> cluster id for the bootstrap;
    `skills` maps prompt_id -> skill label for the per-skill summary (`Diagnosis.skills`).
    `problems` (prompt_id -> text) puts each prompt's problem beside its id in the per-prompt
    tables and error lines; `regime_source` says where the regime labels came from."""
    if not 0 < level < 1:
        raise BoundaryError(f"--level {level}: must be between 0 and 1 (e.g. 0.95)")
    draws = base if isinstance(base, list) else [base]
    base = pool_counts(draws)
    all_n = np.concatenate([horizon(base)] + [horizon(r) for r in runs.values()])  # a sequential row: its cap
    ks_ok = usable_ks(all_n, ks)
    if not ks_ok:
        raise BoundaryError(f"ks {list(ks)}: none is <= the smallest n ({int(all_n.min())})")
    if len(ks_ok) < len(ks):
        warn(f"ks {sorted(set(ks) - set(ks_ok))} exceed the smallest n ({int(all_n.min())}); dropped")
    if regimes is not None:  # a calibration may cover more prompts than were evaluated
        regimes = regimes.assign(prompt_id=regimes["prompt_id"].astype(str))
        regimes = regimes[regimes["prompt_id"].isin(set(base["prompt_id"]))].reset_index(drop=True)
    frame = prompt_frame(base, runs, regimes, ks_ok, bins, names, problems, skills)
    if len(draws) > 1:
        frame = _base_passk_over_draws(frame, draws, ks_ok)
    frame = add_evidence(frame, level, prior)
    metrics = run_metrics(frame, ks_ok)
    several = len(draws) > 1
    reference = reference_draws(draws, regimes, ks_ok, bins) if several else None
    summary = _with_base_noise(summarize(metrics, ["method", "metric", "regime", "k"], level=level),
                               reference, "regime", level)
    strata = sens = th = robust = None
    notes, group_metrics = [], {}
    if regimes is not None:
        th = rg.thresholds_of(regimes)
        notes = rg.unpopulated(regimes["n"], th) if "n" in regimes else []
        by_stratum = group_metrics["stratum"] = run_metrics(frame, ks_ok, group="stratum")
        strata = _with_base_noise(summarize(by_stratum, ["method", "metric", "stratum", "k"], level=level),
                                  reference_draws(draws, regimes, ks_ok, bins, "stratum") if several else None,
                                  "stratum", level)
        sens = sensitivity(frame, ks_ok, rg.sensitivity_grid(th), level)
        robust = _robust_boundary(frame, draws, regimes, ks_ok, bins, level, group_metrics) if "c" in regimes else None
    by_skill = None
    if skills is not None:
        group_metrics["skill"] = run_metrics(frame, ks_ok, group="skill")
        by_skill = _with_base_noise(summarize(group_metrics["skill"], ["method", "metric", "skill", "k"], level=level),
                                    reference_draws(draws, regimes, ks_ok, bins, "skill", skills) if several else None,
                                    "skill", level)
    pair_tables = []
    for a, b in pairs:
        p = paired(metrics, a, b, ["metric", "regime", "k"], level=level)
        pair_tables.append(p.assign(a=a, b=b))
    pair_df = (pd.concat(pair_tables, ignore_index=True)[["a", "b", "metric", "regime", "k", "mean", "sd",
                                                           "ci_low", "ci_high", "n_seeds"]]
               if pair_tables else None)
    # One pass of prompt resamples serves the pass@k intervals and the attribution.
    wide, groups, labels = _passk_wide(frame, ks_ok)
    blocks = [(wide.to_numpy(), labels is not None)]
    attr = Attribution(frame, ks_ok) if attribution and runs else None
    if attr is not None:
        assert list(attr.labels) == list(groups) and attr.P == len(wide)  # same prompt order
        blocks += attr.blocks
    boot = bootstrap_blocks(blocks, resamples, boot_seed, labels, clusters=cluster_labels(wide.index, clusters))
    attr_table, cross, curves = (attr.tables(boot[1:], resamples, boot_seed, level) if attr is not None
                                 else (None, None, None))
    return Diagnosis(
        ks=ks_ok, regimes=regimes, frame=frame, metrics=metrics, summary=summary,
        transitions=transitions(frame), bootstrap=_bootstrap_rows(wide, groups, boot[0], level, "regime"),
        strata=strata, skills=by_skill, group_metrics=group_metrics, sensitivity=sens, pairs=pair_df,
        masks=mask_metrics(masks) if masks else None, attribution=attr_table, crossover=cross, curves=curves,
        prompts=prompt_table(frame, problems), level=level, base_draws=len(draws), thresholds=th, bins=tuple(bins),
        problems=problems, regime_source=regime_source, regime_notes=notes, robust=robust)


def _robust_boundary(frame, draws, regimes, ks, bins, level, group_metrics) -> pd.DataFrame | None:
    """The Boundary metrics over the robust Boundary prompts alone (per seed into
    group_metrics["robust"], regime "Boundary"; summarised as `summary` is)."""
    strong = regimes[rl.robust(regimes)]
    if not len(strong):
        return None
    metrics = run_metrics(frame[frame["prompt_id"].isin(set(strong["prompt_id"]))], ks)
    metrics = group_metrics["robust"] = metrics[metrics["regime"] == "Boundary"].reset_index(drop=True)
    reference = None
    if len(draws) > 1:
        reference = reference_draws(draws, strong, ks, bins)
        reference = reference[reference["regime"] == "Boundary"]
    return _with_base_noise(summarize(metrics, ["method", "metric", "regime", "k"], level=level), reference,
                            "regime", level)


# ----------------------------------------------------------------------------- output

DIAGNOSE_EXAMPLE = """examples:
  boundary diagnose --base base_counts.parquet --trained grpo:0=grpo_counts.parquet --out diag
  boundary diagnose --base val/0.jsonl --trained grpo:0=val/500.jsonl --calibration cal.jsonl \\
                    --gold gold.jsonl --extractor last_number --out diag"""


def make_parser():
    from boundary.core.options import EDGES, FINITE, FRACTION, KS, NONNEGATIVE, POSITIVE, ArgumentParser, description

    ap = ArgumentParser(prog="boundary diagnose", description=description(__doc__), epilog=DIAGNOSE_EXAMPLE)
    ap.add_argument("--base", required=True, action="append",
                    help="base counts or samples, any --format (parquet, csv or jsonl); a verl dump folder's "
                         "step as DIR@step=N; given again: another independent draw of the base, pooled")
    ap.add_argument("--clusters", help="table of prompt_id, cluster: prompts that share structure, "
                                       "redrawn together by the bootstrap (default: each prompt alone)")
    ap.add_argument("--skills", help="table of prompt_id, skill: a label per prompt (a subject, a level); "
                                     "every metric is also summarised per skill (default: none)")
    ap.add_argument("--trained", action="append", required=True, metavar="NAME:SEED=PATH",
                    help="a trained policy's counts or samples, as method:seed=path (repeat for every "
                         "method and seed)")
    ap.add_argument("--calibration", help="independent base counts or per-sample calibration for regime labels "
                                          "(default: the labels come from --base itself)")
    ap.add_argument("--mask", action="append", default=[], metavar="NAME=PATH", help="a PBA-style mask parquet")
    ap.add_argument("--pair", nargs=2, metavar=("A", "B"), help="seed-paired gains A - B (e.g. pba grpo)")
    ap.add_argument("--labels", action="append", default=[], metavar="NAME=LABEL",
                    help="display name of a method in tables and figures")
    ap.add_argument("--ks", type=KS, default=",".join(map(str, DEFAULT_KS)),
                    help="the ks of pass@k; a k above a file's n is dropped, with a warning")
    th0 = rg.PAPER
    ap.add_argument("--easy", type=FRACTION, default=th0.easy, help="SolvedEasy: p_base above this")
    ap.add_argument("--boundary", type=FRACTION, default=th0.boundary,
                    help="Boundary: p_base below this, coverage above --coverage-min")
    ap.add_argument("--coverage-k", type=POSITIVE, default=th0.coverage_k,
                    help="coverage = 1 - (1 - p_base)^coverage_k")
    ap.add_argument("--coverage-min", type=FRACTION, default=th0.coverage_min,
                    help="OutOfReach: coverage at most this")
    ap.add_argument("--bins", type=EDGES, default=",".join(f"{b:g}" for b in rg.DEFAULT_BINS),
                    help="p_base strata edges")
    ap.add_argument("--resamples", type=POSITIVE, default=REPORT["bootstrap"]["resamples"],
                    help="prompt-bootstrap resamples")
    ap.add_argument("--seed", type=NONNEGATIVE, default=REPORT["bootstrap"]["seed"], help="bootstrap seed")
    ap.add_argument("--no-figures", action="store_true", help="skip figures and the HTML page (faster)")
    ap.add_argument("--out", required=True, help="output folder, replaced as a whole")
    tools = ap.add_argument_group("inputs from other tools (docs/how-to/other_tools_formats.md)")
    tools.add_argument("--format", default="auto", choices=("auto",) + readers.FORMATS,
                       help="format of every input file (default: detected per file)")
    tools.add_argument("--gold", help="gold answers (prompt_id and/or problem, answer): key prompts by it "
                                      "and re-grade every sample-level input with the project's verifier")
    tools.add_argument("--keep-scores", action="store_true", help="with --gold: key prompts only, keep the tools' verdicts")
    tools.add_argument("--extractor", default=VERIFY["extractor"],
                       help="answer extractor for re-grading (boxed, last_number)")
    tools.add_argument("--verify-timeout", type=POSITIVE, default=VERIFY["timeout"],
                       help="seconds per math-verify check")
    tools.add_argument("--verify-workers", type=POSITIVE, default=VERIFY["workers"],
                       help="math-verify worker processes")
    tools.add_argument("--reward-threshold", type=FINITE, default=0.5, help="reward/score above it is correct")
    tools.add_argument("--step", type=int, help="verl dump folder: the step to read (default: latest); "
                                                "one input's own: PATH@step=N")
    ev = ap.add_argument_group("uncertainty")
    ev.add_argument("--level", type=FRACTION, default=REPORT["level"], help="level of every interval and of the lost test")
    ev.add_argument("--prior", default="fit", choices=PRIORS,
                    help="per-prompt p intervals and the regime labels' reliability: Beta-Binomial prior "
                         "fitted per run (and to the calibration), or Jeffreys'")
    return ap


def main(argv=None) -> None:
    from boundary.analysis import figures, page, tables  # matplotlib only when the CLI draws

    ap = make_parser()
    args = ap.parse_args(argv)

    out = output_folder(args.out, OWNER)  # before the analysis: a bad --out fails at once
    for spec in args.trained:
        parse_run(spec)
    check_not_base(args.base, args.trained, args.step)
    ks = args.ks
    bins = args.bins
    th = rg.Thresholds(args.easy, args.boundary, args.coverage_k, args.coverage_min)
    grader = (readers.Grader(args.gold, args.extractor, args.verify_timeout, args.verify_workers,
                             regrade=not args.keep_scores) if args.gold else None)
    options = readers.Options(args.reward_threshold, args.step, grader, args.extractor, args.verify_timeout,
                              args.verify_workers)
    try:
        data, names = {}, {}
        for i, path in enumerate(args.base):
            data[(BASE, i)], names[(BASE, i)] = readers.read(path, args.format, options), path
        for spec in args.trained:
            name, seed, path = parse_run(spec)
            if (name, seed) in data:
                raise BoundaryError(f"--trained {spec}: {name}:{seed} given twice")
            data[(name, seed)] = readers.read(path, args.format, options)
            names[(name, seed)] = path
        if args.calibration:
            data[CALIBRATION] = readers.read(args.calibration, args.format, options)
            names[CALIBRATION] = args.calibration
    finally:
        if grader is not None:
            grader.close()
    data = dict(zip(data, readers.pair(list(data.values()), list(names.values()))))  # by problem where ids can't
    cal = data.pop(CALIBRATION).counts if args.calibration else None
    names.pop(CALIBRATION, None)
    runs = {key: d.counts for key, d in data.items() if key[0] != BASE}
    draws = [d.counts for key, d in data.items() if key[0] == BASE]
    base = pool_counts(draws)
    clusters = prompt_labels(args.clusters, "cluster") if args.clusters else None
    skills = prompt_labels(args.skills, "skill") if args.skills else None
    problems = {p: t for d in data.values() for p, t in d.problems.items()}
    if args.calibration:
        check_regimes(base, cal, args.calibration, problems)
        cal = cal[cal["prompt_id"].isin(set(base["prompt_id"]))]
        source = f"calibration {Path(args.calibration).name}"
    else:
        warn("no --calibration: regimes are labelled from the --base samples that also measure base pass@k, "
             "so they are not independent")
        cal = base
        source = (f"base evaluation {', '.join(Path(readers.input_path(b)[0]).name for b in args.base)}, "
                  "not independent (no --calibration)")
    rl.warn_unidentified(cal, args.calibration or ", ".join(args.base))
    regimes = rl.reliable_labels(rg.label_counts(cal, th, args.calibration or ", ".join(args.base)), th,
                                 None if args.prior == "fit" else (0.5, 0.5))
    masks = {}
    for spec in args.mask:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise BoundaryError(f"--mask {spec}: expected NAME=PATH")
        masks[name] = load_mask(path)
    labels = {}
    for spec in args.labels:
        name, sep, text = spec.partition("=")
        if not sep or not name:
            raise BoundaryError(f"--labels {spec}: expected NAME=LABEL")
        labels[name] = text
    methods = sorted({m for m, _ in runs})
    pairs = []
    if args.pair:
        if args.pair[0] == args.pair[1]:
            raise BoundaryError(f"--pair {args.pair[0]} {args.pair[1]}: two different methods, please")
        for m in args.pair:
            if m not in methods:
                raise BoundaryError(f"--pair {m}: not among the --trained names ({', '.join(methods)})")
        pairs = [tuple(args.pair)]
    diag = analyse(draws, runs, regimes, ks, args.resamples, args.seed, pairs, bins, masks, names, args.level,
                   args.prior, problems=problems, regime_source=source, clusters=clusters, skills=skills)
    if diag.base_draws == 1:
        warn(ONE_BASE_DRAW)

    with atomic_dir(out, OWNER) as tmp:  # --out holds exactly this run's files
        for name, table in diag.csv_tables().items():
            write_table(table, tmp / f"{name}.csv")
        view = tables.View.for_diagnose(methods, pair=tuple(args.pair) if args.pair else None)
        view.labels.update(labels)
        tables.write_diagnose_tables(diag, view, tmp / "tables")
        if not args.no_figures:
            figures.write_diagnose_figures(diag, view, tmp / "figures")
            page.write_page(diag, view, tmp / "figures", tmp / "report.html",
                            {key: d.samples for key, d in data.items() if d.samples is not None}, problems)
    print(f"diagnose: {len(runs)} run(s) against the base on {len(base)} prompts")
    print(verdict.results_table(verdict.outcomes(diag, view)))
    print(f"report: {out / 'report.html'}" if not args.no_figures else f"tables: {out / 'tables'} (no page: --no-figures)")
