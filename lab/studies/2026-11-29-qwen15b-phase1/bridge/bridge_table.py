"""The bridge's table (the pre-registration's Amendment 11): the full fine-tuning run at seed 0
against the LoRA run of seed 0, both at step 30 of the same 150-step schedule.

Compared at step 30, as pre-registered: training reward and token entropy (each the mean of
logged steps 21-30), the KL to the base (k1 and k3, logged every 10th step) at steps 10, 20 and
30, and Δpass@1 on the held-out split from each step-30 policy's sequential block, against the
pooled base draws, with its prompt-bootstrap 95% interval (the package's `diagnose.analyse`, as
phase1_tables.py computes every Δ). A comparison of trajectories, not an endpoint.

Inputs (in Phase 1's inputs/ layout; `collect` copies the bridge's own from a merged results/qwen15b):
  train/grpo/seed0/log.parquet                          the LoRA run's training log
  eval/diagnostic/grpo_step30/seed0/counts.parquet      its step-30 snapshot's evaluation
  bridge/grpo_full/seed0/log.parquet                    the full fine-tuning run's log (its
                                                        checkpoint's trainer state, evaluate_snapshot.py)
  eval/diagnostic/grpo_full_step30/seed0/counts.parquet its step-30 snapshot's evaluation
  eval/diagnostic/base/seed{0..3}/counts.parquet        the base's draws, pooled
`boundary_table` (exploratory, not pre-registered): each step-30 policy's Boundary Δpass@256 and
lost count beside the one-seed base-draw null, by the primary analysis's own functions.
phase1_tables.py's own `collect` copies the counts (eval/diagnostic/*/seed*/counts.parquet) and the
LoRA log; `collect` here adds bridge/.

    python lab/studies/2026-11-29-qwen15b-phase1/bridge/bridge_table.py [--inputs DIR] [--regimes FILE]
        [--out DIR] [--resamples 10000] [--collect results/qwen15b]
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("phase1_tables", HERE.parent / "phase1_tables.py")
phase1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(phase1)  # the study's inputs, paths and Δ (diagnose.analyse through `diagnosis`)

from boundary.analysis.tables import Table  # noqa: E402
from boundary.core.artifacts import read_table  # noqa: E402
from boundary.core.names import BASE  # noqa: E402

STEP = 30  # Amendment 11's N
WINDOW = (21, 30)  # reward and entropy: the mean of these logged steps
KL_STEPS = (10, 20, 30)
KL = ("kl_base_k1", "kl_base_k3")
RUNS = {"full fine-tuning": ("grpo_full", "grpo_full_step30"), "LoRA": ("grpo", "grpo_step30")}


def log_path(inputs: Path, method: str) -> Path:
    if method == "grpo":
        return inputs / "train" / "grpo" / "seed0" / "log.parquet"
    return inputs / "bridge" / method / "seed0" / "log.parquet"


def load(inputs: Path) -> dict:
    """What exists of the bridge's inputs: each run's log and step-30 counts, the base draws."""
    got = {"base": [read_table(p) for i in range(phase1.BASE_DRAWS) if (p := phase1.counts_path(inputs, BASE, i)).exists()]}
    for who, (method, evaluated) in RUNS.items():
        log, counts = log_path(inputs, method), phase1.counts_path(inputs, evaluated, 0)
        got[who] = {"log": read_table(log) if log.exists() else None,
                    "counts": read_table(counts) if counts.exists() else None}
    return got


def trajectory(log: pd.DataFrame) -> dict:
    """Reward and entropy over logged steps 21-30, the KL at steps 10, 20, 30 (NaN: not logged),
    and the steps the log holds in the window (all 10, or the readout says how many)."""
    r = log.assign(step=log["step"].astype(int))
    window = r[r["step"].between(*WINDOW)]
    out = {"steps_in_window": int(window["step"].nunique()), "last_step": int(r["step"].max()),
           "reward": float(window["reward"].mean()) if len(window) else np.nan,
           "entropy": float(window["entropy"].mean()) if len(window) else np.nan}
    for k in KL:
        for s in KL_STEPS:
            at = r.loc[r["step"] == s, k] if k in r else pd.Series(dtype=float)
            out[f"{k}_step{s}"] = float(at.iloc[0]) if len(at) and pd.notna(at.iloc[0]) else np.nan
    return out


def diagnosis(loaded: dict, regimes: pd.DataFrame, resamples: int):
    """Both step-30 policies against the pooled base in one analysis (phase1's `diagnosis`), which
    both tables read; None until every base draw and some step-30 counts are in."""
    counts = {who: loaded[who]["counts"] for who in RUNS if loaded[who]["counts"] is not None}
    if not counts or len(loaded["base"]) < phase1.BASE_DRAWS:
        return None
    return phase1.diagnosis(loaded["base"], {(who, 0): c for who, c in counts.items()}, regimes, resamples)


def delta_pass1(diag) -> dict:
    """Each run's Δpass@1 against the pooled base on every held-out prompt, with its prompt
    bootstrap 95% interval (the attribution's `all` regime and cell)."""
    a = diag.attribution
    rows = a[(a["quantity"] == "delta_passk") & (a["k"] == 1) & (a["regime"] == "all") & (a["cell"] == "all")
             & (a["seed"] == 0)]
    return {r.method: (float(r.value), float(r.boot_low), float(r.boot_high)) for r in rows.itertuples()}


def bridge_table(loaded: dict, regimes: pd.DataFrame, resamples: int = 10_000, diag=None) -> Table:
    """`diag`: `diagnosis(loaded, ...)` when the caller has it (made here otherwise)."""
    name, caption = "bridge", f"The bridge: full fine-tuning against LoRA (seed 0) at step {STEP} of the same schedule"
    if any(loaded[who]["log"] is None for who in RUNS):
        return Table(name, caption, ["Note"], [[phase1.NOT_RUN]], pd.DataFrame({"note": [phase1.NOT_RUN]}))
    diag = diag if diag is not None else diagnosis(loaded, regimes, resamples)
    deltas = {} if diag is None else delta_pass1(diag)
    fmt = lambda v, scale=1.0, spec=".3f": "not logged" if pd.isna(v) else f"{scale * v:{spec}}"
    rows, data, notes = [], [], []
    for who in RUNS:
        t = trajectory(loaded[who]["log"])
        d = deltas.get(who)
        kl = [", ".join(fmt(t[f"{k}_step{s}"], spec=".5f") for s in KL_STEPS) for k in KL]
        rows.append([who, fmt(t["reward"]), fmt(t["entropy"]), *kl,
                     "not evaluated" if d is None else f"{100 * d[0]:+.1f} [{100 * d[1]:+.1f}, {100 * d[2]:+.1f}]"])
        data.append({"run": who, **t, **({} if d is None else {"delta_pass1": d[0], "delta_pass1_low": d[1],
                                                                "delta_pass1_high": d[2]})})
        if t["steps_in_window"] < WINDOW[1] - WINDOW[0] + 1:
            notes.append(f"{who}: {t['steps_in_window']} of steps {WINDOW[0]}-{WINDOW[1]} logged (the log ends at step "
                         f"{t['last_step']}).")
    notes.insert(0, f"Reward and entropy: means over logged steps {WINDOW[0]}-{WINDOW[1]}; KL to the base, k1 and k3 "
                 f"per token on the policy's own rollouts, at steps {', '.join(map(str, KL_STEPS))}; Δpass@1 (points) "
                 f"of each step-{STEP} policy's sequential block against the {phase1.BASE_DRAWS} pooled base draws, "
                 "95% prompt bootstrap. Both runs: lr at its peak by step 30 of the 150-step schedule (full fine-tuning "
                 "1e-6, LoRA 1e-5). A comparison of trajectories, not an endpoint.")
    cols = ["Run", f"Reward ({WINDOW[0]}-{WINDOW[1]})", f"Entropy ({WINDOW[0]}-{WINDOW[1]})",
            f"KL k1 (steps {', '.join(map(str, KL_STEPS))})", f"KL k3 (steps {', '.join(map(str, KL_STEPS))})",
            "Δpass@1 [95%]"]
    return Table(name, caption, cols, rows, pd.DataFrame(data), notes)


def boundary_table(loaded: dict, regimes: pd.DataFrame, resamples: int = 10_000, sims: int = 1000, diag=None) -> Table:
    """Exploratory, not pre-registered (Amendment 11 compares trajectories and Δpass@1 only): each
    step-30 policy's Boundary Δpass@256 against the pooled base with its prompt-bootstrap interval,
    and its Boundary lost and gained counts beside the one-seed base-draw null, by Phase 1's own
    functions (boundary_delta, run_metrics, lost_null). `diag` as in bridge_table."""
    name, caption = "bridge_boundary", (f"Exploratory: Boundary at step {STEP}, full fine-tuning and LoRA (seed 0), "
                                        "by the primary analysis's functions")
    counts = {who: loaded[who]["counts"] for who in RUNS if loaded[who]["counts"] is not None}
    if len(counts) < len(RUNS) or len(loaded["base"]) < phase1.BASE_DRAWS:
        return Table(name, caption, ["Note"], [[phase1.NOT_RUN]], pd.DataFrame({"note": [phase1.NOT_RUN]}))
    diag = diag if diag is not None else diagnosis(loaded, regimes, resamples)
    deltas, metrics = phase1.boundary_delta(diag, regimes), phase1.run_metrics(diag.frame, diag.ks)
    null = phase1.lost_null(regimes, "Boundary", 1, sims)
    med, p95 = float(np.median(null)), float(np.quantile(null, 0.95))
    rows, data = [], []
    for who in counts:
        d = deltas[(deltas["method"] == who) & (deltas["seed"] == 0)].iloc[0]
        m = metrics[(metrics["method"] == who) & (metrics["regime"] == "Boundary") & metrics["metric"].isin(["lost", "gained"])]
        m = m.set_index("metric")["value"]
        rows.append([who, f"{100 * d['value']:+.1f} [{100 * d['boot_low']:+.1f}, {100 * d['boot_high']:+.1f}]",
                     str(int(m["lost"])), str(int(m["gained"])), f"{med:.0f}", f"{p95:.0f}"])
        data.append({"run": who, "delta_passk": d["value"], "boot_low": d["boot_low"], "boot_high": d["boot_high"],
                     "lost": int(m["lost"]), "gained": int(m["gained"]), "null_median": med, "null_p95": p95,
                     "null_sims": len(null)})
    notes = [f"Not pre-registered: one seed at step {STEP}, read beside Phase 1's endpoint (GRPO with LoRA at step 150, "
             f"two seeds), never in place of it. Δpass@{phase1.K} in points with its 95% prompt bootstrap; the null: "
             f"the lost count of one policy equal to the base in {sims} simulated studies on the Boundary prompts' "
             f"calibrated rates ({phase1.BASE_DRAWS} base draws, n = {phase1.N_EVAL}; power.drop_studies, D = 0)."]
    cols = ["Run", f"Boundary Δpass@{phase1.K} [95%]", "Lost", "Gained", "Null lost: median", "Null lost: 95th pct"]
    return Table(name, caption, cols, rows, pd.DataFrame(data), notes)


def collect(results: Path, inputs: Path) -> list[Path]:
    """The bridge's own files from a merged results folder into inputs/bridge/: the full
    fine-tuning run's log and its evaluation's record (evaluate_snapshot.py)."""
    return phase1.collect(results, inputs, ("bridge/*/seed*/log.parquet", "bridge/*/seed*/evaluate_step*"))


def main(argv=None) -> None:
    from boundary.core.artifacts import write_table, write_text

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=Path, default=phase1.INPUTS)
    ap.add_argument("--regimes", type=Path, default=phase1.REGIMES)
    ap.add_argument("--out", type=Path, default=phase1.OUT)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--collect", type=Path, help="copy a merged results/qwen15b's bridge/ files into --inputs first")
    args = ap.parse_args(argv)
    if args.collect is not None:
        print(f"bridge_table: {len(collect(args.collect, args.inputs))} files of {args.collect} into {args.inputs}")
    regimes = read_table(args.regimes)
    regimes = regimes.assign(prompt_id=regimes["prompt_id"].astype(str))
    loaded = load(args.inputs)
    diag = diagnosis(loaded, regimes, args.resamples)
    args.out.mkdir(parents=True, exist_ok=True)
    for table in (bridge_table(loaded, regimes, args.resamples, diag), boundary_table(loaded, regimes, args.resamples, diag=diag)):
        write_text(table.md(), args.out / f"{table.name}.md")
        write_table(table.data, args.out / f"{table.name}.csv")
        print(table.md())


if __name__ == "__main__":
    main()
