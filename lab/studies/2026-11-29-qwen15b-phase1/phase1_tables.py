"""Phase 1's tables (README.md), rebuilt from its committed inputs by the package's own analysis:
does GRPO lose Boundary coverage at 1.5B beyond what a fresh draw of the base "loses"?

Inputs (INPUTS, the layout the pipeline writes under results/qwen15b, merged from the holds):
  eval/diagnostic/base/seed{0..3}/counts.parquet     the base's 4 sequential first-success draws
  eval/diagnostic/{grpo_step50,grpo_step100,grpo}/seed{s}/counts.parquet
                                                     each seed's checkpoints at steps 50, 100, 150
  train/grpo/seed{s}/log.parquet                     the training logs (reward, entropy a step; kl_base_k1, kl_base_k3 every 10th)
  eval/diagnostic/{grpo_step30,grpo_full_step30}/seed0/counts.parquet, bridge/grpo_full/seed0/log.parquet
                                                     the bridge: both seed-0 runs at step 30 (bridge/bridge_table.py)
and the committed calibration's regimes (REGIMES: prompt_id, n, c, p_base, regime).

Tables (OUT/NAME.md and .csv; every statistic is a package function):
  checkpoint_rule   each checkpoint's training-reward rise (the mean over seeds of the last 20
                    logged steps' reward less the first 20's) and the primary checkpoint: the
                    first whose rise is at least 10 points, else the last (the rule not met)
  primary           Boundary Δpass@256 against the pooled base at the primary checkpoint, per
                    seed and pooled over seeds, with the nested prompt-bootstrap 95% interval
                    (attribution.Attribution through diagnose.analyse: prompts redrawn within
                    regimes, each prompt its own cluster, seeds redrawn on top); on every
                    Boundary prompt and on the robust stratum (c >= 3 calibration successes)
  lost_gained       lost and gained prompts by regime and seed (diagnose.run_metrics), totals over
                    the seeds, beside the base-draw null: the lost total of policies equal to the
                    base in simulated studies with the same draws (power.drop_studies at D = 0 on
                    the regime's calibrated success rates: seeds, 4 base draws, n = 256), its
                    median and 95th percentile
  phase2            the pre-registered criterion: Phase 2 runs iff GRPO's Boundary lost total
                    exceeds the null's 95th percentile and the pooled Boundary Δpass@256 < 0
  passk_curves      pass@k at every reported k, overall and on Boundary: the pooled base and each
                    checkpoint's seeds with prompt-bootstrap intervals (diagnose.bootstrap), and
                    each checkpoint's pooled Δ with the nested interval (attribution)
  trajectories      reward, entropy and KL to the base a logged step, per seed
  bridge            the full fine-tuning run against LoRA seed 0 at step 30 (bridge/bridge_table.py):
                    reward and entropy over steps 21-30, KL at 10/20/30, Δpass@1 with its interval
  bridge_boundary   exploratory: each step-30 policy's Boundary Δpass@256 and lost count beside the
                    one-seed null (bridge/bridge_table.py)
  stage_times       every job's wall time and peak memory (analysis.stage_times, from the
                    benchmark files; a training job stopped at a hold's end writes none: the
                    holds' consoles give those)

    python lab/studies/2026-11-29-qwen15b-phase1/phase1_tables.py [--inputs DIR] [--regimes FILE]
        [--out DIR] [--resamples 10000] [--sims 1000]
    python lab/studies/2026-11-29-qwen15b-phase1/phase1_tables.py --collect results/qwen15b
                                                      # the merged holds' files -> INPUTS (commit them)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "workflow"))
from boundary.analysis.diagnose import analyse, run_metrics  # noqa: E402
from boundary.analysis.label_reliability import ROBUST_SUCCESSES, robust  # noqa: E402
from boundary.analysis.power import drop_studies  # noqa: E402
from boundary.analysis.stage_times import read_benchmarks, stage_times_table  # noqa: E402
from boundary.analysis.tables import Table  # noqa: E402
from boundary.core.artifacts import read_table  # noqa: E402
from boundary.core.names import BASE  # noqa: E402

INPUTS = HERE / "inputs"
REGIMES = ROOT / "lab/studies/2026-11-28-qwen15b-task-selection/qwen15b/regimes/regimes.parquet"
OUT = HERE / "tables"
# The pre-registered design (Amendment 10; qwen15b_phase1.yaml)
CHECKPOINTS = {50: "grpo_step50", 100: "grpo_step100", 150: "grpo"}
SEEDS = (0, 1)
BASE_DRAWS = 4
N_EVAL = 256
K = 256
KS = (1, 4, 16, 64, 256)
RISE, WINDOW = 0.10, 20  # the checkpoint rule: the reward 10 points above its first 20 steps
KL = ("kl_base_k1", "kl_base_k3")  # train.log_base_kl's columns, every 10th step (Amendment 11)
REGIME_ORDER = ("SolvedEasy", "Reachable", "Boundary", "OutOfReach")
NOT_RUN = "not yet run"


def counts_path(inputs: Path, method: str, seed: int) -> Path:
    return inputs / "eval" / "diagnostic" / method / f"seed{seed}" / "counts.parquet"


def load(inputs: Path) -> dict:
    """What exists of the committed inputs: base draws, checkpoint counts, training logs."""
    base = [read_table(p) for i in range(BASE_DRAWS) if (p := counts_path(inputs, BASE, i)).exists()]
    runs = {(step, s): read_table(p) for step, method in CHECKPOINTS.items() for s in SEEDS
            if (p := counts_path(inputs, method, s)).exists()}
    logs = {s: read_table(p) for s in SEEDS if (p := inputs / "train" / "grpo" / f"seed{s}" / "log.parquet").exists()}
    return {"base": base, "runs": runs, "logs": logs}


def reward_rise(log: pd.DataFrame, step: int, window: int = WINDOW) -> float:
    """The training reward over the last `window` logged steps up to `step` less its first `window`."""
    r = log.sort_values("step")
    r = r[r["step"] <= step]["reward"].astype(float)
    if len(r) < window:
        return np.nan
    return float(r.tail(window).mean() - r.head(window).mean())


def checkpoint_rule(logs: dict) -> tuple[Table, int | None, bool]:
    """(table, primary step, whether the rule was met). The primary step is None until every
    seed's log is in."""
    name, caption = "checkpoint_rule", "The checkpoint rule: training reward's rise (last 20 logged steps less the first 20)"
    if len(logs) < len(SEEDS):
        return Table(name, caption, ["Note"], [[NOT_RUN]], pd.DataFrame({"note": [NOT_RUN]})), None, False
    rows, data, primary = [], [], None
    for step in CHECKPOINTS:
        rises = {s: reward_rise(logs[s], step) for s in SEEDS}
        mean = float(np.mean(list(rises.values())))
        met = bool(mean >= RISE - 1e-12)
        if met and primary is None:
            primary = step
        rows.append([str(step), *(f"{100 * rises[s]:+.1f}" for s in SEEDS), f"{100 * mean:+.1f}", "yes" if met else "no"])
        data.append({"step": step, **{f"rise_seed{s}": rises[s] for s in SEEDS}, "rise_mean": mean, "met": met})
    met = primary is not None
    primary = primary if met else max(CHECKPOINTS)
    notes = [f"Primary checkpoint: step {primary}" + ("" if met else
             f" (the rule was not met by step {max(CHECKPOINTS)}: the primary analysis is at the step cap)")]
    cols = ["Step", *(f"Seed {s} (points)" for s in SEEDS), "Mean (points)", f"≥ {100 * RISE:.0f} points"]
    return Table(name, caption, cols, rows, pd.DataFrame(data), notes), primary, met


def diagnosis(base: list, runs: dict, regimes: pd.DataFrame, resamples: int):
    return analyse(base, runs, regimes, ks=list(KS), resamples=resamples)


def boundary_delta(diag, regimes: pd.DataFrame) -> pd.DataFrame:
    """Boundary Δpass@K per seed and pooled, with the nested bootstrap interval: the attribution's
    Boundary contribution (a sum over the regime's prompts over all prompts) over the Boundary
    share, i.e. the mean over Boundary prompts (the bootstrap redraws prompts within regimes, so
    the share is fixed and the interval scales with it)."""
    a = diag.attribution
    share = float(np.mean(diag.frame.drop_duplicates("prompt_id")["regime"] == "Boundary"))
    rows = a[(a["quantity"] == "delta_passk") & (a["k"] == K) & (a["regime"] == "Boundary") & (a["cell"] == "all")]
    out = rows[["method", "seed", "n_seeds", "value", "boot_low", "boot_high"]].copy()
    for col in ("value", "boot_low", "boot_high"):
        out[col] = out[col] / share
    return out.reset_index(drop=True)


def primary_table(base, runs, step, regimes, resamples) -> Table:
    name, caption = "primary", f"Primary endpoint: Boundary Δpass@{K} of GRPO against the pooled base (points)"
    at = {("grpo", s): c for (st, s), c in runs.items() if st == step}
    if step is None or len(base) < BASE_DRAWS or len(at) < len(SEEDS):
        return Table(name, caption, ["Note"], [[NOT_RUN]], pd.DataFrame({"note": [NOT_RUN]}))
    rows, data = [], []
    strong_ids = set(regimes.loc[robust(regimes), "prompt_id"].astype(str))
    for what, keep in (("all Boundary", None), (f"robust (c ≥ {ROBUST_SUCCESSES})", strong_ids)):
        if keep is None:
            b, r, reg = base, at, regimes
        else:
            b = [d[d["prompt_id"].astype(str).isin(keep)] for d in base]
            r = {key: c[c["prompt_id"].astype(str).isin(keep)] for key, c in at.items()}
            reg = regimes[regimes["prompt_id"].astype(str).isin(keep)]
        d = boundary_delta(diagnosis(b, r, reg, resamples), reg)
        prompts = int((reg["regime"] == "Boundary").sum())
        for _, x in d.iterrows():
            who = "pooled" if pd.isna(x["seed"]) else f"seed {int(x['seed'])}"
            rows.append([f"{what} ({prompts})", who, f"{100 * x['value']:+.1f}",
                         f"[{100 * x['boot_low']:+.1f}, {100 * x['boot_high']:+.1f}]"])
        data.append(d.assign(prompts=what, boundary_prompts=prompts, step=step))
    notes = [f"Step {step}; the base pooled over its {BASE_DRAWS} draws; 95% nested prompt bootstrap (each prompt "
             "its own cluster, seeds redrawn on top for the pooled row). The robust stratum is the narrower claim."]
    return Table(name, caption, ["Prompts", "Seeds", f"Δp@{K}", "95% interval"], rows, pd.concat(data), notes)


def lost_null(regimes: pd.DataFrame, regime: str, seeds: int, sims: int) -> np.ndarray:
    """Lost totals over `seeds` of policies equal to the base, one per simulated study (D = 0)."""
    r = regimes[regimes["regime"] == regime]
    p = (r["c"] / r["n"]).to_numpy(float)
    if len(p) < 2 or not p.any():  # all 0 (OutOfReach by its label): 0 lost whatever the base's draws solve
        return np.zeros(0)
    return drop_studies(p, 0, seeds=seeds, n_eval=N_EVAL, base_draws=BASE_DRAWS, k=K, sims=sims)[:, 3]


def lost_gained_table(base, runs, step, regimes, sims) -> tuple[Table, dict]:
    name, caption = "lost_gained", "Lost and gained prompts by regime and seed, beside the base-draw null"
    at = {("grpo", s): c for (st, s), c in runs.items() if st == step}
    if step is None or len(base) < BASE_DRAWS or len(at) < len(SEEDS):
        return Table(name, caption, ["Note"], [[NOT_RUN]], pd.DataFrame({"note": [NOT_RUN]})), {}
    diag = diagnosis(base, at, regimes, resamples=200)  # counts only: the bootstrap is not read here
    m = run_metrics(diag.frame, diag.ks)
    m = m[(m["method"] == "grpo") & m["metric"].isin(["lost", "gained", "base_solved"])]
    rows, data, boundary = [], [], {}
    for regime in [r for r in REGIME_ORDER if r in set(m["regime"])]:
        x = m[m["regime"] == regime].pivot(index="seed", columns="metric", values="value")
        null = lost_null(regimes, regime, len(SEEDS), sims)
        med, p95 = (float(np.median(null)), float(np.quantile(null, 0.95))) if len(null) else (np.nan, np.nan)
        lost, gained = int(x["lost"].sum()), int(x["gained"].sum())
        rows.append([regime, int((regimes["regime"] == regime).sum()),
                     f"{lost} ({', '.join(str(int(v)) for v in x['lost'])})",
                     f"{gained} ({', '.join(str(int(v)) for v in x['gained'])})",
                     f"{med:.0f}" if np.isfinite(med) else "n/a", f"{p95:.0f}" if np.isfinite(p95) else "n/a"])
        data.append({"regime": regime, "lost_total": lost, "gained_total": gained,
                     **{f"lost_seed{s}": int(x.loc[s, "lost"]) for s in x.index},
                     **{f"gained_seed{s}": int(x.loc[s, "gained"]) for s in x.index},
                     "null_median": med, "null_p95": p95, "null_sims": len(null)})
        if regime == "Boundary":
            boundary = data[-1]
    notes = [f"Step {step}. Totals over seeds {', '.join(map(str, SEEDS))} (each seed's count in brackets). Null: the "
             f"lost total of policies equal to the base over {len(SEEDS)} seeds in {sims} simulated studies on the "
             f"regime's calibrated success rates ({BASE_DRAWS} base draws, n = {N_EVAL}; power.drop_studies, D = 0). "
             "n/a: fewer than 2 prompts, or calibrated rates all 0 (OutOfReach by its label), on which no prompt "
             "can be lost, while the pooled base's own draws do solve some of them."]
    cols = ["Regime", "Prompts", "Lost: total (seeds)", "Gained: total (seeds)", "Null lost: median", "Null lost: 95th pct"]
    return Table(name, caption, cols, rows, pd.DataFrame(data), notes), boundary


def phase2_table(primary: Table, boundary: dict) -> Table:
    name, caption = "phase2", "The Phase 2 criterion (pre-registered, Amendment 10)"
    pooled = primary.data
    if not boundary or "value" not in pooled:
        return Table(name, caption, ["Note"], [[NOT_RUN]], pd.DataFrame({"note": [NOT_RUN]}))
    row = pooled[(pooled["prompts"] == "all Boundary") & pooled["seed"].isna()].iloc[0]
    lost_over = boundary["lost_total"] > boundary["null_p95"]
    negative = bool(row["value"] < 0)
    run = bool(lost_over and negative)
    rows = [[f"Boundary lost total {boundary['lost_total']} > null 95th percentile {boundary['null_p95']:.0f}",
             "yes" if lost_over else "no"],
            [f"pooled Boundary Δpass@{K} {100 * row['value']:+.1f} points < 0", "yes" if negative else "no"],
            ["Phase 2 (PBA and Random protection at seeds 0 and 1)", "run" if run else "not run"]]
    data = pd.DataFrame([{"lost_total": boundary["lost_total"], "null_p95": boundary["null_p95"],
                          "pooled_delta": row["value"], "lost_over_null": lost_over, "delta_negative": negative,
                          "phase2": run}])
    return Table(name, caption, ["Condition", "Met"], rows, data)


def passk_table(base, runs, regimes, resamples) -> Table:
    name, caption = "passk_curves", "pass@k of the pooled base and each checkpoint (95% intervals)"
    if len(base) < BASE_DRAWS or not runs:
        return Table(name, caption, ["Note"], [[NOT_RUN]], pd.DataFrame({"note": [NOT_RUN]}))
    named = {(CHECKPOINTS[step], s): c for (step, s), c in runs.items()}
    diag = diagnosis(base, named, regimes, resamples)
    b = diag.bootstrap
    b = b[(b["metric"] == "passk") & b["regime"].isin(["all", "Boundary"])]
    levels = b.assign(what="pass@k (prompt bootstrap)")
    a = diag.attribution
    a = a[(a["quantity"] == "delta_passk") & a["seed"].isna() & a["regime"].isin(["all", "Boundary"])
          & (a["cell"] == "all")]
    shares = {"all": 1.0, "Boundary": float(np.mean(diag.frame.drop_duplicates("prompt_id")["regime"] == "Boundary"))}
    deltas = a.assign(mean=a["value"] / a["regime"].map(shares), boot_low=a["boot_low"] / a["regime"].map(shares),
                      boot_high=a["boot_high"] / a["regime"].map(shares), what="Δpass@k pooled (nested bootstrap)")
    data = pd.concat([levels[["what", "method", "seed", "regime", "k", "mean", "boot_low", "boot_high"]],
                      deltas[["what", "method", "seed", "regime", "k", "mean", "boot_low", "boot_high"]]],
                     ignore_index=True)
    rows = [[r.what, r.method, "pooled" if pd.isna(r.seed) else str(int(r.seed)), r.regime, str(int(r.k)),
             f"{100 * r.mean:.1f}", f"[{100 * r.boot_low:.1f}, {100 * r.boot_high:.1f}]"]
            for r in data.itertuples()]
    return Table(name, caption, ["Quantity", "Policy", "Seed", "Prompts", "k", "Points", "95% interval"], rows, data)


def trajectories_table(logs: dict) -> Table:
    name, caption = "trajectories", "Training reward, token entropy and KL to the base, each logged step"
    if not logs:
        return Table(name, caption, ["Note"], [[NOT_RUN]], pd.DataFrame({"note": [NOT_RUN]}))
    data = pd.concat([log.assign(seed=s).reindex(columns=["seed", "step", "reward", "entropy", *KL])
                      for s, log in logs.items()], ignore_index=True)
    every = data[data["step"] % 10 == 0]  # the page shows every 10th step (the KL's); the CSV holds each
    fmt = lambda v, digits=3: "not logged" if pd.isna(v) else f"{v:.{digits}f}"
    # The KL to the base is of order 1e-4 to 1e-3 here: 5 decimals, or every row reads 0.000.
    rows = [[str(int(r.seed)), str(int(r.step)), fmt(r.reward), fmt(r.entropy), fmt(r.kl_base_k1, 5),
             fmt(r.kl_base_k3, 5)]
            for r in every.itertuples()]
    notes = ["KL to the base (train.log_base_kl) is not in these logs."] if data[list(KL)].isna().all().all() else []
    return Table(name, caption, ["Seed", "Step", "Reward", "Entropy", "KL k1", "KL k3"], rows, data, notes)


def bridge_module():
    """bridge/bridge_table.py (it reads this module's inputs and Δ; loaded here, not imported at
    the top, since it loads this file in turn)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bridge_table", HERE / "bridge" / "bridge_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stage_times(inputs: Path) -> Table:
    if not (inputs / "benchmarks").is_dir():
        return Table("stage_times", "Stage times", ["Note"], [[NOT_RUN]], pd.DataFrame({"note": [NOT_RUN]}))
    table = stage_times_table(read_benchmarks(inputs), "Phase 1 (qwen15b)")
    # A run resumed across holds is one job a hold, and each job writes the same benchmark file.
    table.notes.append("A training run that spans holds is one job a hold, and its benchmark file holds the "
                       "last job only (its start and its last steps); each hold's training minutes are on the page.")
    return table


def build(inputs: Path = INPUTS, regimes_path: Path = REGIMES, resamples: int = 10_000, sims: int = 1000) -> list[Table]:
    loaded, bridge = load(Path(inputs)), bridge_module()
    regimes = read_table(regimes_path)
    regimes = regimes.assign(prompt_id=regimes["prompt_id"].astype(str))
    rule, step, _ = checkpoint_rule(loaded["logs"])
    primary = primary_table(loaded["base"], loaded["runs"], step, regimes, resamples)
    lost, boundary = lost_gained_table(loaded["base"], loaded["runs"], step, regimes, sims)
    at30 = bridge.load(Path(inputs))
    diag30 = bridge.diagnosis(at30, regimes, resamples)  # one analysis of both step-30 policies, both bridge tables
    return [rule, primary, lost, phase2_table(primary, boundary),
            passk_table(loaded["base"], loaded["runs"], regimes, resamples), trajectories_table(loaded["logs"]),
            bridge.bridge_table(at30, regimes, resamples, diag30), bridge.boundary_table(at30, regimes, resamples, sims, diag30),
            stage_times(Path(inputs))]


def figures(tables: list[Table], out: Path) -> list[Path]:
    """passk.png (each checkpoint's pooled Δpass@k against the base, with its nested interval,
    overall and on Boundary) and trajectories.png (reward and entropy a step, faint, with their
    trailing 10-step means, and the KL to the base where logged, per seed), where their tables
    hold numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {t.name: t.data for t in tables}
    written = []
    curves = by.get("passk_curves")
    if curves is not None and "what" in curves:
        d = curves[curves["what"].str.startswith("Δ")]
        # A checkpoint pools the seeds evaluated so far: the legend names them.
        levels = curves[~curves["what"].str.startswith("Δ")]
        seeds = {m: sorted(levels.loc[levels["method"] == m, "seed"].astype(int).unique()) for m in CHECKPOINTS.values()}
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
        for ax, regime in zip(axes, ("all", "Boundary")):
            for method in CHECKPOINTS.values():
                x = d[(d["regime"] == regime) & (d["method"] == method)].sort_values("k")
                if len(x):
                    named = ", ".join(map(str, seeds[method]))
                    ax.plot(x["k"], 100 * x["mean"], marker="o",
                            label=f"{method} (seed{'s' if len(seeds[method]) > 1 else ''} {named})")
                    ax.fill_between(x["k"], 100 * x["boot_low"], 100 * x["boot_high"], alpha=0.2)
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{regime} prompts")
            ax.set_xlabel("k")
        axes[0].set_ylabel("Δpass@k vs pooled base (points)")
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        written.append(out / "passk.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    traj = by.get("trajectories")
    if traj is not None and "step" in traj:
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
        for ax, col in zip(axes, ("reward", "entropy", "kl_base_k3")):
            for i, (seed, x) in enumerate(traj.groupby("seed")):
                x = x.sort_values("step")
                color = f"C{i}"
                if col == "kl_base_k3":  # logged every 10th step: points, not a noisy line
                    k = x.dropna(subset=[col])
                    ax.plot(k["step"], k[col], marker="o", ms=3, color=color, label=f"seed {seed}")
                    continue
                ax.plot(x["step"], x[col], color=color, alpha=0.25, lw=0.8)
                ax.plot(x["step"], x[col].rolling(10, min_periods=10).mean(), color=color,
                        label=f"seed {seed} (10-step mean)")
            ax.set_xlabel("step")
            ax.set_title({"reward": "training reward", "entropy": "token entropy",
                          "kl_base_k3": "KL to the base (k3)"}[col])
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        written.append(out / "trajectories.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written


def write(tables: list[Table], out: Path) -> None:
    from boundary.core.artifacts import write_table, write_text

    out.mkdir(parents=True, exist_ok=True)
    for t in tables:
        write_text(t.md(), out / f"{t.name}.md")
        write_table(t.data, out / f"{t.name}.csv")
    figures(tables, out)


PATTERNS = ("eval/diagnostic/*/seed*/counts.parquet", "train/*/seed*/log.parquet", "benchmarks/**/*.tsv")


def collect(results: Path, inputs: Path, patterns: tuple = PATTERNS) -> list[Path]:
    """The committed inputs from a merged results folder: the diagnostic split's counts, the
    training logs and every job's benchmark file (stage times); nothing with problem text."""
    import shutil

    copied = []
    for pattern in patterns:
        for path in sorted(results.glob(pattern)):
            target = inputs / path.relative_to(results)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied.append(target)
    return copied


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=Path, default=INPUTS)
    ap.add_argument("--regimes", type=Path, default=REGIMES)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--sims", type=int, default=1000)
    ap.add_argument("--collect", type=Path, help="copy a merged results/qwen15b's inputs into --inputs, then build")
    args = ap.parse_args(argv)
    if args.collect is not None:
        copied = collect(args.collect, args.inputs) + bridge_module().collect(args.collect, args.inputs)
        print(f"phase1_tables: {len(copied)} files of {args.collect} into {args.inputs}")
    tables = build(args.inputs, args.regimes, args.resamples, args.sims)
    write(tables, args.out)
    for t in tables:
        print(t.md())


if __name__ == "__main__":
    main()
