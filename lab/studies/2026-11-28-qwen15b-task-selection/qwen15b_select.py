"""Issue 41's task selection: the pre-registered rule (lab/studies/2026-11-28-qwen15b-
preregistration.md, section 1's "The rule", measured as Amendment 2 says) applied to the three
selection runs (lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select_{gsm8k,math500,omni}.yaml). Run from the repository root:

    python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py [--candidates results/qwen15b/candidates]
        [--results results] [--out results/qwen15b/selection.csv]

Reads each run's results/RUN/rollouts/base_gate.parquet (the gate draws: one refresh epoch of 8
a train prompt) and results/RUN/regimes/regimes.parquet (labels of the adaptive calibration),
and from --candidates (qwen15b_candidates.py --subsample) the subsample files, each candidate's
whole diagnostic split and its near-copy list. MATH500 level >= 3 (`math500_l3`) is the MATH500
run's rows of level 3-5, by the subsample rows' `level`. For each of the four candidates:

- training reward: the gate draws' mean success, with a 95% Wilson interval over the draws
  (draws of one prompt are correlated, so this interval is narrower than one over prompts; the
  rule reads the point estimate);
- Boundary share: Boundary prompts over diagnostic prompts once near-copy Boundary prompts are
  dropped from both, with a 95% Wilson interval;
- mean completion length of the gate draws (tokens; the tie-break).

A candidate qualifies when its reward and its Boundary share are both at least 20%. Among the
qualifying, the rule picks "the one with the most Boundary prompts". The four subsamples differ
in size (128 diagnostic prompts, 93 or so for MATH500 level >= 3) and so do the splits the study
would use (500, 250, 185 and 500 diagnostic prompts), so the count is read as the expected
number of Boundary prompts in the candidate's whole diagnostic split: the share times that
split's size less its near-copies (`expected_boundary`). This is a reading of the rule (which
was written for whole splits, where the count is observed); the lead states it on the results
page. Ties go to the shorter mean completion. `rank` orders the qualifying candidates, so a
failed confirmation on the whole split (Amendment 2) takes the next one.

Writes the table (CSV) and prints it with a verdict line.

--confirm RUN reads Amendment 2's confirmation instead: the chosen candidate's whole held-out
split calibrated at n = 256 by the study's run (results/RUN/regimes/regimes.parquet, every prompt
of `{candidate}_held_out.jsonl`, near-copies already dropped); confirmed when its Boundary share
is at least 20%, else the table's next candidate by rank is the one to confirm.

    python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py --confirm qwen15b [--candidate NAME]

--pilot RUN reads Amendment 4's check before the pilot trains: the mean of results/RUN's gate
draws (every refresh epoch) is the model's training reward on the task at the run's cap; under
20%, the pilot's completions go to 1,024 tokens before anything trains. The rule reads the point
estimate; the Wilson interval over draws (which share prompts, so it is too narrow) is printed
beside it, with the share of draws cut at the cap.

    python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py --pilot qwen05b_pilot
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "workflow"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from qwen15b_candidates import rows  # noqa: E402

from boundary.analysis.stats import wilson  # noqa: E402
from boundary.core.artifacts import read_table, write_table  # noqa: E402
from boundary.core.errors import BoundaryError  # noqa: E402

# candidate: (its selection run, the candidate whose subsample files the run read)
CANDIDATES = {"gsm8k": ("qwen15b_select_gsm8k", "gsm8k"), "math500": ("qwen15b_select_math500", "math500"),
              "math500_l3": ("qwen15b_select_math500", "math500"), "omni_d5": ("qwen15b_select_omni", "omni_d5")}
MIN_REWARD = MIN_SHARE = 0.20
STUDY_CAP = 1024  # the 1.5B study's completion cap (lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml), the pilot's after Amendment 4
BOUNDARY = "Boundary"
COLUMNS = ["candidate", "run", "train_prompts", "gate_draws", "reward", "reward_lo", "reward_hi",
           "diagnostic_prompts", "near_copy_boundary", "boundary", "boundary_share", "share_lo", "share_hi",
           "split_prompts", "expected_boundary", "mean_completion_tokens", "qualifies", "rank"]


def jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise BoundaryError(f"{path}: no such file (python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py --subsample)")
    return rows(path)


def near_copy_ids(path: Path) -> set[str]:
    if not path.is_file():
        raise BoundaryError(f"{path}: no such file (python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py)")
    with open(path, newline="") as f:
        return {row["diagnostic_id"] for row in csv.DictReader(f)}


def only(ids: pd.Series, keep: set[str], what: Path) -> pd.Series:
    """Rows whose prompt is in `keep`; every prompt of `keep` must be there (a run of another
    subsample, or one stopped early, is refused in one line)."""
    missing = keep - set(ids)
    if missing:
        raise BoundaryError(f"{what}: {len(missing)} of the subsample's {len(keep)} prompts missing "
                            f"(e.g. {sorted(missing)[0]}): not this subsample's run")
    return ids.isin(keep)


def successes(gate: pd.DataFrame) -> tuple[int, int]:
    """The gate draws' correct count and their number: the training reward's two terms."""
    return int(gate["correct"].astype(bool).sum()), len(gate)


def measure(name: str, candidates: Path, results: Path) -> dict:
    """One candidate's row of the table."""
    run, files = CANDIDATES[name]
    train = jsonl(candidates / f"{files}_sel_train.jsonl")
    diagnostic = jsonl(candidates / f"{files}_sel_diagnostic.jsonl")
    if name == "math500_l3":
        train, diagnostic = ([r for r in rows if int(r["level"]) >= 3] for rows in (train, diagnostic))
    gate_path = results / run / "rollouts" / "base_gate.parquet"
    gate = read_table(gate_path, ["prompt_id", "epoch", "correct", "n_tokens"])
    if set(gate["epoch"]) != {0}:
        raise BoundaryError(f"{gate_path}: epochs {sorted(set(gate['epoch']))}; the selection reads one refresh "
                            "epoch (train.steps = gate.refresh_steps)")
    gate = gate[only(gate["prompt_id"].astype(str), {r["id"] for r in train}, gate_path)]
    regimes_path = results / run / "regimes" / "regimes.parquet"
    regimes = read_table(regimes_path, ["prompt_id", "regime"])
    regimes = regimes[only(regimes["prompt_id"].astype(str), {r["id"] for r in diagnostic}, regimes_path)]

    near = near_copy_ids(candidates / f"{name}_near_copies.csv")
    split_prompts = len(jsonl(candidates / f"{name}_diagnostic.jsonl")) - len(near)
    is_boundary = regimes["regime"].eq(BOUNDARY)
    dropped = int((is_boundary & regimes["prompt_id"].astype(str).isin(near)).sum())
    boundary, prompts = int(is_boundary.sum()) - dropped, len(regimes) - dropped
    correct, draws = successes(gate)
    reward, share = correct / draws, boundary / prompts
    (reward_lo, share_lo), (reward_hi, share_hi) = wilson([correct, boundary], [draws, prompts])
    return {"candidate": name, "run": run, "train_prompts": gate["prompt_id"].nunique(), "gate_draws": draws,
            "reward": reward, "reward_lo": reward_lo, "reward_hi": reward_hi, "diagnostic_prompts": prompts,
            "near_copy_boundary": dropped, "boundary": boundary, "boundary_share": share, "share_lo": share_lo,
            "share_hi": share_hi, "split_prompts": split_prompts, "expected_boundary": share * split_prompts,
            "mean_completion_tokens": float(gate["n_tokens"].mean()),
            "qualifies": bool(reward >= MIN_REWARD and share >= MIN_SHARE)}


def select(table: pd.DataFrame) -> pd.DataFrame:
    """`rank` 1, 2, ... among the qualifying (most expected Boundary prompts, then the shorter mean
    completion); 0 for the others."""
    table = table.copy()
    ranked = table[table["qualifies"]].sort_values(["expected_boundary", "mean_completion_tokens"],
                                                   ascending=[False, True])
    table["rank"] = 0
    table.loc[ranked.index, "rank"] = range(1, len(ranked) + 1)
    return table


def verdict(table: pd.DataFrame) -> str:
    if not table["qualifies"].any():
        return (f"verdict: no candidate qualifies (training reward >= {MIN_REWARD:.0%} and Boundary share >= "
                f"{MIN_SHARE:.0%}): the study does not train on this model")
    best = table[table["rank"] == 1].iloc[0]
    others = ", ".join(table[table["rank"] > 1].sort_values("rank")["candidate"]) or "none"
    return (f"verdict: {best['candidate']} (expected {best['expected_boundary']:.0f} Boundary prompts of its "
            f"{best['split_prompts']} diagnostic prompts; share {best['boundary_share']:.3f} "
            f"[{best['share_lo']:.3f}, {best['share_hi']:.3f}], reward {best['reward']:.3f} "
            f"[{best['reward_lo']:.3f}, {best['reward_hi']:.3f}]); next if its whole split does not confirm: "
            f"{others}")


def confirm(run: str, name: str | None, candidates: Path, results: Path, table: Path) -> str:
    """Amendment 2's confirmation line for candidate `name` (None: the table's rank 1), from the
    study run's regimes."""
    ranked = read_table(table, ["candidate", "rank"])
    if name is None:
        first = ranked.loc[ranked["rank"] == 1, "candidate"]
        if first.empty:
            raise BoundaryError(f"{table}: no candidate ranks first (none qualified)")
        name = str(first.iloc[0])
    held_out = {r["id"] for r in jsonl(candidates / f"{name}_held_out.jsonl")}
    path = results / run / "regimes" / "regimes.parquet"
    regimes = read_table(path, ["prompt_id", "regime"])
    ids = set(regimes["prompt_id"].astype(str))
    if ids != held_out:
        raise BoundaryError(f"{path}: its {len(ids)} prompts are not {name}'s held-out split of {len(held_out)}")
    boundary, prompts = int(regimes["regime"].eq(BOUNDARY).sum()), len(regimes)
    (lo,), (hi,) = wilson([boundary], [prompts])
    share = f"{boundary} of {prompts} Boundary ({boundary / prompts:.3f} [{lo:.3f}, {hi:.3f}])"
    if boundary / prompts >= MIN_SHARE:
        return f"confirmed: {name}'s held-out split has {share}, at least {MIN_SHARE:.0%}"
    rank = ranked.loc[ranked["candidate"] == name, "rank"]
    later = ranked[(ranked["rank"] > (int(rank.iloc[0]) if len(rank) else 0))].sort_values("rank")
    after = later["candidate"].iloc[0] if len(later) else None
    return (f"not confirmed: {name}'s held-out split has {share}, under {MIN_SHARE:.0%}; "
            + (f"confirm {after} next" if after else "no candidate is left: the study does not train on this model"))


def pilot(run: str, results: Path) -> str:
    """Amendment 4's line: the training reward of results/RUN's gate draws against MIN_REWARD; at
    the study's cap already (the draws cut at the cap are that long), Amendment 9's."""
    path = results / run / "rollouts" / "base_gate.parquet"
    gate = read_table(path, ["prompt_id", "correct", "finish_reason", "n_tokens"], nonempty=True)
    cut = gate["finish_reason"].eq("length")
    correct, draws = successes(gate)
    (lo,), (hi,) = wilson([correct], [draws])
    line = (f"{run}: training reward {correct / draws:.3f} [{lo:.3f}, {hi:.3f}] ({correct} of {draws} gate draws "
            f"of {gate['prompt_id'].nunique()} prompts; {cut.mean():.1%} cut at the cap)")
    if correct / draws >= MIN_REWARD:
        return f"{line}: at least {MIN_REWARD:.0%}, the pilot trains at its cap"
    if not cut.any() or gate.loc[cut, "n_tokens"].max() >= STUDY_CAP:
        return (f"{line}: under {MIN_REWARD:.0%} at the study's cap, so by Amendment 9 the pilot goes on at it, "
                "its page stating the reward under the bar first")
    return (f"{line}: under {MIN_REWARD:.0%}, so by Amendment 4 the pilot's completions go to {STUDY_CAP:,} tokens "
            "and its calibration and gate draws are made again at that cap, re-costed before any training")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", default="results/qwen15b/candidates")
    ap.add_argument("--results", default="results")
    ap.add_argument("--out", default="results/qwen15b/selection.csv")
    ap.add_argument("--confirm", metavar="RUN", help="read the confirmation of results/RUN instead (--out: the table)")
    ap.add_argument("--candidate", help="with --confirm: the candidate it confirms (default: the table's rank 1)")
    ap.add_argument("--pilot", metavar="RUN", help="read Amendment 4's training-reward check of results/RUN instead")
    args = ap.parse_args(argv)
    try:
        run(args)
    except BoundaryError as err:
        sys.exit(f"qwen15b_select: {err}")


def run(args) -> None:
    candidates, results = Path(args.candidates), Path(args.results)
    if args.pilot:
        print(pilot(args.pilot, results))
        return
    if args.confirm:
        print(confirm(args.confirm, args.candidate, candidates, results, Path(args.out)))
        return
    rows = [measure(name, candidates, results) for name in CANDIDATES]
    table = select(pd.DataFrame(rows, columns=COLUMNS[:-1]))
    write_table(table, args.out)
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.float_format", "{:.3f}".format):
        print(table.drop(columns="run").to_string(index=False))
    print(verdict(table))
    print(f"-> {args.out}")

if __name__ == "__main__":
    main()
